package target

import (
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// One host NQN gets MaxControllersPerHost controllers; the next Connect is
// Controller Busy without DNR (it may try again once one ends), other
// hosts are not affected, and the target goes on.
func TestLimitControllersPerHost(t *testing.T) {
	checkRoutines(t)
	tg, _, addr := newTestTarget(t, 1<<20, Config{MaxControllersPerHost: 2})
	same := host.Config{IOQueues: 1, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0000000a-0000-4000-8000-000000000001"}
	a := connectHost(t, addr, testNQN, same)
	b := connectHost(t, addr, nvme.DiscoveryNQN, same) // discovery controllers count too
	_, err := host.Connect(testCtx(t), "tcp", addr, testNQN, same)
	requireStatus(t, err, nvme.StatusConnectCtrlBusy)
	require.Len(t, tg.Controllers(), 2)
	other := connectHost(t, addr, testNQN, host.Config{IOQueues: 1})
	ns, err := other.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	_, err = ns.ReadAt(make([]byte, 4096), 0)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	c := connectHost(t, addr, testNQN, same)
	require.NoError(t, c.Err())
	require.NoError(t, a.Err())
}

// The target holds at most MaxQueues queues, those waiting for their
// Connect included: once all are connected, one more is refused at the
// RDMA CM (No Resources); a queue that ends makes room, and so does one
// still waiting for its Connect, which a newcomer evicts.
func TestLimitQueues(t *testing.T) {
	checkRoutines(t)
	tg, _, addr := newTestTarget(t, 1<<20, Config{MaxQueues: 3})
	a := connectHost(t, addr, testNQN, host.Config{IOQueues: 2}) // 3 queues
	_, err := host.Connect(testCtx(t), "tcp", addr, testNQN, host.Config{IOQueues: 1})
	require.Error(t, err)
	require.ErrorContains(t, err, "No Resources")
	t.Log(err)
	require.NoError(t, a.Close())
	require.Eventually(t, func() bool { return tg.queuesFull() == false }, 5*time.Second, 10*time.Millisecond)
	// Queues without a Connect count, but give way: two raw ones and
	// one more fill it; a host's two queues evict the raw ones.
	q1 := rawQueue(t, addr, 0, 16, 0)
	q2 := rawQueue(t, addr, 1, 16, 0)
	q3 := rawQueue(t, addr, 1, 16, 0)
	require.True(t, tg.queuesFull())
	c := connectHost(t, addr, testNQN, host.Config{IOQueues: 1})
	for i, q := range []*scriptedQueue{q1, q2} {
		select {
		case <-q.dead:
		case <-time.After(5 * time.Second):
			t.Fatalf("raw queue %d: not evicted", i+1)
		}
	}
	select {
	case <-q3.dead:
		t.Fatal("the newest raw queue was evicted, not the oldest")
	default:
	}
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	_, err = ns.ReadAt(make([]byte, 4096), 0)
	require.NoError(t, err)
}

// A controller's I/O queue beyond the Number of Queues it was granted is
// refused at its Connect (Invalid Parameters, the QID's offset).
func TestLimitIOQueuesGranted(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, Config{MaxIOQueues: 4})
	hostNQN := "nqn.2014-08.org.nvmexpress:uuid:0000000a-0000-4000-8000-000000000002"
	hostID := [16]byte{0xa, 2}
	admin := scriptedAdmin(t, addr, testNQN, hostNQN, hostID)
	st, res := raw(t, admin, func(c nvme.Command, _ []byte) int {
		nvme.NewAdmin(c, nvme.AdminSetFeatures, 0, 0, nvme.FeatNumQueues, 0) // one I/O queue
		return 0
	})
	require.Equal(t, nvme.StatusSuccess, st)
	require.EqualValues(t, 0, res&0xffff, "one granted")
	connectIO := func(qid uint16) (nvme.Status, uint64) {
		q := rawQueue(t, addr, qid, 16, 0)
		defer q.qp.Close()
		return raw(t, q, func(c nvme.Command, d []byte) int {
			nvme.NewConnect(c, 0, qid, 15, 0)
			c.SGL().SetInCapsule(0, nvme.ConnectDataSize)
			nvme.ConnectData{HostID: hostID, CntlID: 1, SubNQN: testNQN, HostNQN: hostNQN}.Append(d[:0])
			return nvme.ConnectDataSize
		})
	}
	st, res = connectIO(2)
	require.Equal(t, nvme.StatusConnectInvalidParm|nvme.DNR, st)
	require.EqualValues(t, 42, res, "the QID, in the SQE")
	st, _ = connectIO(1)
	require.Equal(t, nvme.StatusSuccess, st)
}

// queuesFull reports whether the target has MaxQueues queues.
func (t *Target) queuesFull() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cfg.MaxQueues > 0 && len(t.queues) >= t.cfg.MaxQueues
}
