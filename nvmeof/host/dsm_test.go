package host

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// Linux's host (since 5.19) sends Dataset Management with a buffer of 256
// ranges (4 KiB) whatever the number of ranges it fills, so that no device
// reads past them: the target takes the NR+1 ranges it was told of and
// ignores the rest, as nvmet does (nvmet_check_data_len_lte), in the
// capsule and by RDMA Read alike. A buffer shorter than the ranges is
// still refused. Found by the kernel's ext4 with online discard
// (interop's TestNVMeKernelHostFilesystem): every discard failed with Data
// SGL Length Invalid.
func TestDSMLongerBuffer(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	io := c.io[0]
	pattern := bytes.Repeat([]byte{0xa5}, 1<<20)
	// dsm builds a Deallocate of blocks [slba, slba+8) with a buffer of
	// size octets, whose unused ranges name the rest of the namespace.
	dsm := func(slba uint64, size int, inCap bool) func(nvme.Command, []byte) int {
		return func(cmd nvme.Command, d []byte) int {
			nvme.NewAdmin(cmd, nvme.IODSM, 0, 1, 0, 1<<2) // NR 0: one range
			buf := d[:size]
			if !inCap { // the buffer of the slot raw took
				for j := range io.slots {
					if &io.slots[j].capsule[0] == &cmd[0] {
						buf = io.slots[j].buf[:size]
					}
				}
			}
			clear(buf)
			for i := 0; i+nvme.DSMRangeSize <= size; i += nvme.DSMRangeSize {
				binary.LittleEndian.PutUint32(buf[i+4:], 2048)
				binary.LittleEndian.PutUint64(buf[i+8:], 0)
			}
			binary.LittleEndian.PutUint32(buf[4:], 8)
			binary.LittleEndian.PutUint64(buf[8:], slba)
			if inCap {
				cmd.SGL().SetInCapsule(0, uint32(size))
				return size
			}
			cmd.SGL().SetKeyed(0, uint32(size), 0, false)
			return 0
		}
	}
	for _, tc := range []struct {
		name  string
		slba  uint64
		size  int
		inCap bool
	}{
		{"4 KiB in the capsule", 8, 4096, true},
		{"4 KiB by RDMA Read", 24, 4096, false},
		{"one range and a pad, in the capsule", 40, 2 * nvme.DSMRangeSize, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ns.WriteAt(pattern, 0)
			require.NoError(t, err)
			st, _ := raw(t, io, dsm(tc.slba, tc.size, tc.inCap))
			require.Equal(t, nvme.StatusSuccess, st)
			got := make([]byte, 1<<20)
			_, err = ns.ReadAt(got, 0)
			require.NoError(t, err)
			want := bytes.Clone(pattern)
			clear(want[tc.slba*512 : (tc.slba+8)*512])
			require.Equal(t, want, got, "only the one range deallocated")
		})
	}
	t.Run("shorter than the ranges", func(t *testing.T) {
		st, _ := raw(t, io, func(cmd nvme.Command, d []byte) int {
			nvme.NewAdmin(cmd, nvme.IODSM, 0, 1, 1, 1<<2) // NR 1: two ranges
			clear(d[:nvme.DSMRangeSize])
			cmd.SGL().SetInCapsule(0, nvme.DSMRangeSize)
			return nvme.DSMRangeSize
		})
		require.Equal(t, nvme.StatusSGLInvalidData|nvme.DNR, st)
	})
	t.Run("Set Features with data it ignores", func(t *testing.T) {
		st, _ := raw(t, c.admin, func(cmd nvme.Command, d []byte) int {
			nvme.NewAdmin(cmd, nvme.AdminSetFeatures, 0, 0, nvme.FeatKATO, 30000)
			cmd.SGL().SetKeyed(0, 512, 0, false)
			return 0
		})
		require.Equal(t, nvme.StatusSuccess, st)
	})
}
