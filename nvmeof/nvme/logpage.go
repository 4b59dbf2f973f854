package nvme

import (
	"encoding/binary"
	"errors"
	"strings"
)

// Log page identifiers.
const (
	LogError     = 0x01
	LogSMART     = 0x02
	LogFirmware  = 0x03
	LogDiscovery = 0x70
)

// Sizes of the fixed logs.
const (
	ErrorLogEntrySize = 64
	SMARTLogSize      = 512
	FirmwareLogSize   = 512
	DiscHeaderSize    = 1024
	DiscEntrySize     = 1024
	// MaxDiscRecords bounds the discovery log a host reads (4 MiB): a
	// target's record count is not a reason to allocate without end.
	MaxDiscRecords = 4096
)

// Discovery log entry constants (NVMe-oF 1.1 figure 32).
const (
	TrTypeRDMA      = 1
	AdrFamIPv4      = 1
	AdrFamIPv6      = 2
	SubTypeDisc     = 1 // a referral to a discovery subsystem
	SubTypeNVM      = 2
	SubTypeCurrDisc = 3 // the discovery subsystem the log came from (TP 8014)
	TReqNotSpecific = 0
	rdmaQPTypeRC    = 1
	rdmaPrTypeNone  = 1
	rdmaCMSRDMACM   = 1
)

// DiscoveryEntry is one record of the discovery log page.
type DiscoveryEntry struct {
	TrType, AdrFam, SubType, TReq uint8
	PortID, CntlID, ASQSZ         uint16
	TrSvcID, TrAddr, SubNQN       string
}

// AppendDiscoveryLog appends the whole discovery log page: the 1024-octet
// header (GENCTR, NUMREC, RECFMT 0) and the entries.
func AppendDiscoveryLog(b []byte, genctr uint64, ents []DiscoveryEntry) []byte {
	start := len(b)
	b = append(b, make([]byte, DiscHeaderSize+DiscEntrySize*len(ents))...)
	p := b[start:]
	binary.LittleEndian.PutUint64(p[0:], genctr)
	binary.LittleEndian.PutUint64(p[8:], uint64(len(ents)))
	for i, e := range ents {
		q := p[DiscHeaderSize+i*DiscEntrySize:]
		q[0], q[1], q[2], q[3] = e.TrType, e.AdrFam, e.SubType, e.TReq
		binary.LittleEndian.PutUint16(q[4:], e.PortID)
		binary.LittleEndian.PutUint16(q[6:], e.CntlID)
		binary.LittleEndian.PutUint16(q[8:], e.ASQSZ)
		PutASCII(q[32:64], e.TrSvcID)
		copy(q[256:512], e.SubNQN)
		PutASCII(q[512:768], e.TrAddr)
		// TSAS for RDMA: QP type, provider type, CM service.
		q[768], q[769], q[770] = rdmaQPTypeRC, rdmaPrTypeNone, rdmaCMSRDMACM
	}
	return b
}

// ParseDiscoveryLog decodes a discovery log page: the generation counter,
// the record count from the header, and the entries that b holds.
func ParseDiscoveryLog(b []byte) (genctr, numrec uint64, ents []DiscoveryEntry, err error) {
	if len(b) < DiscHeaderSize {
		return 0, 0, nil, errors.New("nvmeof: discovery log shorter than its header")
	}
	genctr = binary.LittleEndian.Uint64(b[0:])
	numrec = binary.LittleEndian.Uint64(b[8:])
	for i := uint64(0); i < numrec; i++ {
		off := DiscHeaderSize + i*DiscEntrySize
		if off+DiscEntrySize > uint64(len(b)) {
			break
		}
		q := b[off : off+DiscEntrySize]
		ents = append(ents, DiscoveryEntry{
			TrType: q[0], AdrFam: q[1], SubType: q[2], TReq: q[3],
			PortID: binary.LittleEndian.Uint16(q[4:]), CntlID: binary.LittleEndian.Uint16(q[6:]),
			ASQSZ:   binary.LittleEndian.Uint16(q[8:]),
			TrSvcID: strings.TrimRight(cstring(q[32:64]), " "), SubNQN: cstring(q[256:512]),
			TrAddr: strings.TrimRight(cstring(q[512:768]), " "),
		})
	}
	return genctr, numrec, ents, nil
}

// SMARTCounters are what the SMART / Health log reports.
type SMARTCounters struct {
	ReadBytes, WriteBytes uint64
	Reads, Writes         uint64 // commands
}

// AppendSMARTLog appends the 512-octet SMART / Health Information log.
func AppendSMARTLog(b []byte, c SMARTCounters, powerOnHours uint64) []byte {
	start := len(b)
	b = append(b, make([]byte, SMARTLogSize)...)
	p := b[start:]
	binary.LittleEndian.PutUint16(p[1:], 300) // composite temperature, Kelvin
	p[3] = 100                                // available spare, %
	p[4] = 10                                 // available spare threshold
	// Data units are thousands of 512-octet units, rounded up.
	binary.LittleEndian.PutUint64(p[32:], (c.ReadBytes+511999)/512000)
	binary.LittleEndian.PutUint64(p[48:], (c.WriteBytes+511999)/512000)
	binary.LittleEndian.PutUint64(p[64:], c.Reads)
	binary.LittleEndian.PutUint64(p[80:], c.Writes)
	binary.LittleEndian.PutUint64(p[128:], powerOnHours)
	return b
}

// Log pages of namespace changes, ANA and reservations.
const (
	LogChangedNS  = 0x04 // Changed Namespace List
	LogANA        = 0x0c // Asymmetric Namespace Access
	LogResvNotice = 0x80 // Reservation Notification
	// MaxChangedNS is how many NSIDs the Changed Namespace List holds
	// (4 KiB); past that it holds NSIDAll alone.
	MaxChangedNS = 1024
)
