package host

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/nvmeof/internal/transport"
	"github.com/goiwarp/iwarp/nvmeof/target"
)

// AskCRC on either side turns CRCs on for every queue; the side that asked
// sends FPDUs of at most transport.CRCMaxFPDU (1440) octets. Data crosses intact at sizes
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
			_, _, addr := newTestTarget(t, 8<<20, target.Config{AskCRC: c.target})
			h := connectHost(t, addr, testNQN, Config{AskCRC: c.host, IOQueues: 1})
			for _, q := range append([]*queue{h.admin}, h.io...) {
				require.True(t, q.qp.Params().CRC, "CRCs on")
				if c.hostFPDUsCapped {
					require.Equal(t, mpa.MULPDU(transport.CRCMaxFPDU, false), q.qp.MULPDU())
				} else {
					require.Greater(t, q.qp.MULPDU(), transport.CRCMaxFPDU, "the host's FPDUs as large as the segment")
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
