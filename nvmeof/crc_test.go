package nvmeof

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/verbs"
)

// The CRC policy and framing AskCRC resolves to.
func TestCRCConn(t *testing.T) {
	for _, c := range []struct {
		name string
		in   verbs.ConnConfig
		ask  bool
		want verbs.ConnConfig
	}{
		{"off: use CRCs only if the peer asks", verbs.ConnConfig{}, false, verbs.ConnConfig{MPA: mpa.Config{CRC: mpa.CRCOff}}},
		{"off keeps a stricter policy", verbs.ConnConfig{MPA: mpa.Config{CRC: mpa.CRCStrict}}, false,
			verbs.ConnConfig{MPA: mpa.Config{CRC: mpa.CRCStrict}}},
		{"on: FPDUs capped, one per segment", verbs.ConnConfig{}, true,
			verbs.ConnConfig{MaxFPDU: CRCMaxFPDU, SegmentPerFPDU: true}},
		{"on with the caller's FPDU size", verbs.ConnConfig{MaxFPDU: 9000}, true, verbs.ConnConfig{MaxFPDU: 9000}},
		{"on, required", verbs.ConnConfig{MPA: mpa.Config{CRC: mpa.CRCRequired}}, true,
			verbs.ConnConfig{MPA: mpa.Config{CRC: mpa.CRCRequired}, MaxFPDU: CRCMaxFPDU, SegmentPerFPDU: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := crcConn(c.in, c.ask)
			require.Equal(t, c.want.MPA.CRC, got.MPA.CRC)
			require.Equal(t, c.want.MaxFPDU, got.MaxFPDU)
			require.Equal(t, c.want.SegmentPerFPDU, got.SegmentPerFPDU)
		})
	}
}

// AskCRC on either side turns CRCs on for every queue; the side that asked
// sends FPDUs of at most CRCMaxFPDU octets. Data crosses intact at sizes
// that take one FPDU and many (reads are the target's RDMA Writes, writes
// above the capsule its RDMA Reads of the host's memory).
func TestAskCRC(t *testing.T) {
	for _, c := range []struct {
		name            string
		target, host    bool
		hostFPDUsCapped bool
	}{
		{"target asks", true, false, false},
		{"host asks", false, true, true},
		{"both ask", true, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkRoutines(t)
			_, _, addr := newTestTarget(t, 8<<20, TargetConfig{AskCRC: c.target})
			h := connectHost(t, addr, testNQN, HostConfig{AskCRC: c.host, IOQueues: 1})
			for _, q := range append([]*hqueue{h.admin}, h.io...) {
				require.True(t, q.qp.Params().CRC, "CRCs on")
				if c.hostFPDUsCapped {
					require.Equal(t, mpa.MULPDU(CRCMaxFPDU, false), q.qp.MULPDU())
				} else {
					require.Greater(t, q.qp.MULPDU(), CRCMaxFPDU, "the host's FPDUs as large as the segment")
				}
			}
			ns, err := h.Namespace(testCtx(t), 1)
			require.NoError(t, err)
			for _, n := range []int{512, 8192, 128 << 10, 1 << 20} {
				w := make([]byte, n)
				fill(w, uint64(n)+7)
				_, err := ns.WriteAt(w, int64(n))
				require.NoError(t, err, "write %d", n)
				r := make([]byte, n)
				_, err = ns.ReadAt(r, int64(n))
				require.NoError(t, err, "read %d", n)
				require.True(t, bytes.Equal(w, r), "read back %d octets differ", n)
			}
		})
	}
}
