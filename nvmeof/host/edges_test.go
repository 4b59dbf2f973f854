package host

import (
	"io"
	"math"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// A target that answers a command twice ends the queue (the second answer
// is for a command not outstanding), and the host reads the slot's
// generation only after the answer's own check, so that the race detector
// has nothing to say: the slot may be taken again at once by the next
// command, whose submit writes that generation.
func TestHostDuplicateCompletion(t *testing.T) {
	checkRoutines(t)
	addr := newFakeTarget(t, func(f *fakeTarget, cmd nvme.Command) {
		f.answer(cmd.CID(), nvme.StatusSuccess)
		f.answer(cmd.CID(), nvme.StatusSuccess)
	})
	q := rawQueue(t, addr, 1, 1, 0)
	ctx := testCtx(t)
	var err error
	for range 100 {
		var i int
		if i, err = q.acquire(ctx); err != nil {
			break
		}
		nvme.NewAdmin(q.cmd(i), nvme.IOFlush, 0, 1, 0, 0)
		if _, err = q.run(ctx, i, 0, "Flush"); err != nil {
			break
		}
		q.releaseSlot(i)
	}
	require.ErrorIs(t, err, ErrQueueDead)
}

// io.ReaderAt and io.WriterAt misuse gets errors, never a panic or a
// command: an empty read past the end (its slice bound was negative), and
// a write at an offset so large that offset plus length wrapped past the
// range check (the host sent it, and the target answered LBA Out of Range).
func TestHostRangeEdges(t *testing.T) {
	_, ns := hostNS(t, 1<<20, Config{IOQueues: 1})
	n, err := ns.ReadAt(nil, ns.Size()+512)
	require.Zero(t, n)
	require.ErrorIs(t, err, io.EOF)
	n, err = ns.ReadAt(nil, ns.Size())
	require.Zero(t, n)
	require.NoError(t, err, "an empty read at the end")
	huge := int64(math.MaxInt64/512) * 512
	_, err = ns.WriteAt(make([]byte, 1024), huge)
	require.ErrorIs(t, err, ErrRange)
	_, err = ns.WriteAtFUA(testCtx(t), make([]byte, 1024), huge)
	require.ErrorIs(t, err, ErrRange)
	_, err = ns.ReadAt(make([]byte, 1024), huge)
	require.ErrorIs(t, err, io.EOF)
}

// The same through a MultipathNamespace, which hands them to a path's.
func TestMultipathRangeEdges(t *testing.T) {
	huge := int64(math.MaxInt64/512) * 512
	_, _, _, _, mn := mpathNS(t)
	n, err := mn.ReadAt(nil, mn.Size()+512)
	require.Zero(t, n)
	require.ErrorIs(t, err, io.EOF)
	_, err = mn.WriteAt(make([]byte, 1024), huge)
	require.ErrorIs(t, err, ErrRange)
}
