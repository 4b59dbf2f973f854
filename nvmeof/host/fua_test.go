package host

import (
	"bytes"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// A Write with Force Unit Access (Namespace.WriteAtFUA, and Linux's
// journal commits) reaches the backend as WriteAtFUA, or as WriteAt and
// Flush on a backend without it; a plain Write as WriteAt alone. The
// volatile write cache is on (Get Features 06h reads 1, as nvmet's); a
// host that turns it off gets every write durable, and Write Zeroes and
// Deallocate flushed, until it turns it on again.
func TestWriteFUA(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	be := &fuaBackend{MemBackend: target.NewMemBackend(1 << 20)}
	_, _, addr := newBackendTarget(t, be, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	ns, err := c.Namespace(ctx, 1)
	require.NoError(t, err)
	counts := func() [3]int64 {
		return [3]int64{be.plain.Swap(0), be.fua.Swap(0), be.flushes.Swap(0)}
	}
	p := bytes.Repeat([]byte{7}, 8192)

	vwc, err := c.GetFeatures(ctx, nvme.FeatVWC)
	require.NoError(t, err)
	require.Equal(t, uint32(1), vwc, "the volatile write cache is on")
	_, err = ns.WriteAt(p, 0)
	require.NoError(t, err)
	require.Equal(t, [3]int64{1, 0, 0}, counts(), "a plain write: WriteAt")
	_, err = ns.WriteAtFUA(ctx, p, 8192)
	require.NoError(t, err)
	require.Equal(t, [3]int64{0, 1, 0}, counts(), "a FUA write: WriteAtFUA")
	got := make([]byte, 16384)
	_, err = ns.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{7}, 16384), got)
	require.ErrorIs(t, func() error { _, err := ns.WriteAtFUA(ctx, p, ns.Size()-4096); return err }(), ErrRange)
	// Write Zeroes with FUA (the cache on) is flushed; without, not.
	require.NoError(t, ns.WriteZeroes(ctx, 0, 4096))
	require.Equal(t, [3]int64{0, 0, 0}, counts(), "Write Zeroes")
	_, err = c.io[0].adminCmd(ctx, func(cmd nvme.Command) {
		nvme.NewRW(cmd, nvme.IOWriteZeroes, 0, 1, 0, 7)
		cmd.SetCDW(12, cmd.CDW(12)|nvme.RWFUA)
		cmd.SGL().SetKeyed(0, 0, 0, false)
	}, 0, "Write Zeroes, FUA", nil)
	require.NoError(t, err)
	require.Equal(t, [3]int64{0, 0, 1}, counts(), "Write Zeroes with FUA: flushed")

	// Turning the cache off flushes what it holds; a flush that fails
	// leaves it on.
	be.failFlush.Store(true)
	_, err = c.SetFeatures(ctx, nvme.FeatVWC, 0)
	requireStatus(t, err, nvme.StatusWriteFault|nvme.DNR)
	be.failFlush.Store(false)
	vwc, err = c.GetFeatures(ctx, nvme.FeatVWC)
	require.NoError(t, err)
	require.Equal(t, uint32(1), vwc, "still on after the failed flush")
	counts()
	_, err = c.SetFeatures(ctx, nvme.FeatVWC, 0)
	require.NoError(t, err)
	require.Equal(t, [3]int64{0, 0, 1}, counts(), "turning the cache off flushed it")
	_, err = c.SetFeatures(ctx, nvme.FeatVWC, 0)
	require.NoError(t, err)
	require.Equal(t, [3]int64{0, 0, 0}, counts(), "off already: nothing to flush")
	vwc, err = c.GetFeatures(ctx, nvme.FeatVWC)
	require.NoError(t, err)
	require.Equal(t, uint32(0), vwc, "turned off")
	_, err = ns.WriteAt(p, 0)
	require.NoError(t, err)
	require.Equal(t, [3]int64{0, 1, 0}, counts(), "the cache off: every write durable")
	require.NoError(t, ns.WriteZeroes(ctx, 0, 4096))
	require.NoError(t, ns.Deallocate(ctx, 4096, 4096))
	require.Equal(t, [3]int64{0, 0, 2}, counts(), "the cache off: Write Zeroes and Deallocate flushed")
	_, err = c.SetFeatures(ctx, nvme.FeatVWC, 1)
	require.NoError(t, err)
	_, err = ns.WriteAt(p, 0)
	require.NoError(t, err)
	require.NoError(t, ns.WriteZeroes(ctx, 0, 4096))
	require.Equal(t, [3]int64{1, 0, 0}, counts(), "on again")

	// Through Multipath, with the one path.
	m := connectMultipath(t, addr)
	mn, err := m.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = mn.WriteAtFUA(ctx, p, 0)
	require.NoError(t, err)
	require.Equal(t, [3]int64{0, 1, 0}, counts(), "Multipath's FUA write")
}
