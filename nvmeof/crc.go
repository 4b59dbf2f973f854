package nvmeof

import (
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/verbs"
)

// CRCMaxFPDU is the FPDU size AskCRC caps FPDUs at, unless
// ConnConfig.MaxFPDU is set: 1440 octets, the TCP segments QEMU's user-mode
// network (slirp) hands a guest, which is also at most one segment on any
// Ethernet path (EMSS 1448 or 1460).
//
// Why: Linux siw (6.1, since "RDMA/siw: Always consume all skbuf data in
// sk_data_ready() upcall", 2022) mis-reads an FPDU's CRC when its trailer
// (pad and CRC) arrives split across two socket buffers: siw_get_trailer
// copies each piece to the start of the trailer buffer, so it compares a
// CRC assembled from the wrong octets, reports "siw: crc error" and sends
// a Terminate (LLP, MPA, CRC error) for an FPDU whose CRC is good on the
// wire (a siw.ko with the copy made at the offset already filled ran the
// same traffic clean). With CRCs off siw ignores the trailer, so nothing
// shows. siw's own FPDUs are one TCP segment each, so two siw never meet
// it; ours are as large as the EMSS (32 KiB on this loopback), and a path that
// re-segments the stream (QEMU's user network: 1440-octet segments, a
// 65535-octet window) puts receive-buffer boundaries inside trailers. An
// FPDU that fits one such segment and is handed to TCP alone
// (ConnConfig.SegmentPerFPDU, which AskCRC also sets) arrives in one
// segment, which the receiver's coalescing (GRO) never splits, on a path
// that keeps our segments. QEMU's user network does not: it reads what has
// piled up in its socket and cuts it into 1440-octet segments from
// wherever it starts, so after a short FPDU the cuts fall inside FPDUs
// again. So this lowers the rate, it does not remove it: through QEMU's
// user network 16 MiB runs of the kernel's NVMe host against our target
// failed every time with 32 KiB FPDUs and never in 7 runs with 1440;
// perftest's read_bw client (300 MiB) failed with 32 KiB and with 1440
// and passed twice with 1440 one per segment; our host against the
// kernel's target failed 1 of 4 runs even so. interop/nvmeof_test.go and
// interop/README.md have the evidence.
const CRCMaxFPDU = 1440

// crcConn returns the iWARP configuration of a queue: without askCRC the
// MPA CRC policy is mpa.CRCOff (CRCs only if the peer asks, as siw and
// Linux's nvme-rdma); with it, CRCs are asked for and, unless the caller
// sized FPDUs itself, FPDUs are at most CRCMaxFPDU octets, one per TCP
// segment.
func crcConn(cc verbs.ConnConfig, askCRC bool) verbs.ConnConfig {
	if !askCRC {
		if cc.MPA.CRC == mpa.CRCOn {
			cc.MPA.CRC = mpa.CRCOff
		}
		return cc
	}
	if cc.MaxFPDU == 0 {
		cc.MaxFPDU = CRCMaxFPDU
		cc.SegmentPerFPDU = true
	}
	return cc
}
