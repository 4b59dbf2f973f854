package target

import (
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// A host that overruns an I/O queue's SQ (4 entries announced, 64 commands
// sent at once) gets an answer for each: the commands that fit are served,
// one beyond the SQ's entries outstanding gets Command Sequence Error, and
// the queue goes on (the target ended the connection, answering none).
func TestIOQueueOverrun(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, Config{})
	hostNQN := "nqn.2014-08.org.nvmexpress:uuid:0000000a-0000-4000-8000-000000000003"
	hostID := [16]byte{0xa, 3}
	admin := scriptedAdmin(t, addr, testNQN, hostNQN, hostID)
	st, _ := raw(t, admin, func(c nvme.Command, _ []byte) int {
		nvme.NewAdmin(c, nvme.AdminSetFeatures, 0, 0, nvme.FeatNumQueues, 0)
		return 0
	})
	require.Equal(t, nvme.StatusSuccess, st)
	const n = 64
	q := rawQueue(t, addr, 1, n, 4)
	st, _ = raw(t, q, func(c nvme.Command, d []byte) int {
		nvme.NewConnect(c, 0, 1, 3, 0)
		c.SGL().SetInCapsule(0, nvme.ConnectDataSize)
		nvme.ConnectData{HostID: hostID, CntlID: 1, SubNQN: testNQN, HostNQN: hostNQN}.Append(d[:0])
		return nvme.ConnectDataSize
	})
	require.Equal(t, nvme.StatusSuccess, st)

	var slots []int
	for range n {
		i, err := q.acquire(testCtx(t))
		require.NoError(t, err)
		c := q.cmd(i)
		nvme.NewRW(c, nvme.IORead, 0, 1, 0, 7)
		c.SGL().SetKeyed(q.slots[i].mr.Addr(), 4096, q.slots[i].mr.RKey(), false)
		slots = append(slots, i)
	}
	for _, i := range slots {
		require.NoError(t, q.submit(i, 0))
	}
	ok, cse := 0, 0
	for _, i := range slots {
		select {
		case <-q.slots[i].done:
		case <-q.dead:
			t.Fatalf("the queue ended with %d of %d commands answered (%d served): %v", ok+cse, n, ok, q.qp.Err())
		case <-time.After(10 * time.Second):
			t.Fatalf("command %d unanswered", i)
		}
		switch st := q.slots[i].st; st {
		case nvme.StatusSuccess:
			ok++
		case nvme.StatusCommandSequenceError | nvme.DNR:
			cse++
		default:
			t.Fatalf("command %d: status %#x", i, st)
		}
		q.releaseSlot(i)
	}
	t.Logf("%d served, %d Command Sequence Error", ok, cse)
	require.GreaterOrEqual(t, ok, 4, "the commands that fit")
	st, _ = raw(t, q, func(c nvme.Command, _ []byte) int {
		nvme.NewRW(c, nvme.IORead, 0, 1, 0, 7)
		c.SGL().SetKeyed(0, 4096, 0, false)
		return 0
	})
	require.Equal(t, nvme.StatusSuccess, st, "the queue goes on")
}
