package target

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// queueFlood keeps opening queues that complete their MPA start-up with
// valid NVMe/RDMA CM private data and then never send a Fabrics Connect:
// each holds one of MaxQueues' places for connectWait unless evicted.
type queueFlood struct {
	dev    *verbs.Device
	addr   string
	mu     sync.Mutex
	open   []*verbs.QP
	dialed int // start-ups that the target accepted
	ended  int // of them, those the target ended
	failed int // start-ups refused (No Resources) or failed
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// startQueueFlood starts a flood of dialers, each opening one silent queue
// after another.
func startQueueFlood(t *testing.T, addr string, dialers int) *queueFlood {
	dev, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	f := &queueFlood{dev: dev, addr: addr, cancel: cancel}
	f.wg.Add(dialers)
	for range dialers {
		go f.run(ctx)
	}
	t.Cleanup(f.stop)
	return f
}

func (f *queueFlood) run(ctx context.Context) {
	defer f.wg.Done()
	pd := f.dev.AllocPD()
	for qid := uint16(0); ctx.Err() == nil; qid = (qid + 1) % 2 {
		f.reap()
		qp, err := silentQueue(ctx, pd, f.addr, qid)
		f.mu.Lock()
		if err != nil {
			f.failed++
		} else {
			f.dialed++
			f.open = append(f.open, qp)
		}
		f.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			time.Sleep(time.Millisecond) // refused: try again, not in a tight loop
		}
	}
}

// silentQueue opens a queue that completes its MPA start-up with valid
// NVMe/RDMA CM private data and sends nothing more.
func silentQueue(ctx context.Context, pd *verbs.PD, addr string, qid uint16) (*verbs.QP, error) {
	cq, err := pd.Device().CreateCQ(8)
	if err != nil {
		return nil, err
	}
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	cm := nvme.CMRequest{QID: qid, HRQSize: 32, HSQSize: 31}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := qp.Dial(ctx, "tcp", addr, verbs.ConnConfig{PrivateData: cm.Append(nil)}); err != nil {
		qp.Close()
		return nil, err
	}
	return qp, nil
}

// reap closes the flood's queues that the target ended.
func (f *queueFlood) reap() {
	f.mu.Lock()
	defer f.mu.Unlock()
	open := f.open[:0]
	for _, qp := range f.open {
		select {
		case <-qp.Done():
			qp.Close()
			f.ended++
		default:
			open = append(open, qp)
		}
	}
	clear(f.open[len(open):])
	f.open = open
}

// counts returns the flood's start-ups accepted, ended by the target and
// refused.
func (f *queueFlood) counts() (dialed, ended, failed int) {
	f.reap()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dialed, f.ended, f.failed
}

// stop ends the flood and closes its queues.
func (f *queueFlood) stop() {
	f.once.Do(func() {
		f.cancel()
		f.wg.Wait()
		f.mu.Lock()
		for _, qp := range f.open {
			qp.Close()
		}
		f.open = nil
		f.mu.Unlock()
		f.dev.Close()
	})
}

// fdCount is the number of open file descriptors of this process.
func fdCount(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// floodConnectBound is how long a legitimate host's connect (an admin
// queue, Connect, Identify, an I/O queue and its Connect) and one write
// may take while the flood goes on, with room for a loaded machine.
const floodConnectBound = 1500 * time.Millisecond

// Queues that never send their Fabrics Connect must not lock hosts out:
// with MaxQueues full of them, a newcomer evicts the oldest, so that a
// flood of them, which would otherwise hold every place for connectWait
// (10 s), cannot keep a legitimate host from connecting within a second.
// Connected queues are never evicted; once all places are connected
// queues, a newcomer is refused with No Resources.
func TestLimitQueuesFlood(t *testing.T) {
	checkRoutines(t)
	fds := fdCount(t)
	const maxQueues = 16
	tg, _, addr := newTestTarget(t, 1<<20, Config{MaxQueues: maxQueues, Logf: func(string, ...any) {}})
	f := startQueueFlood(t, addr, 1)
	floodStart := time.Now()
	require.Eventually(t, func() bool {
		d, _, failed := f.counts()
		return d+failed >= 2*maxQueues
	}, time.Minute, time.Millisecond, "the flood's first %d queues", 2*maxQueues)

	block := bytes.Repeat([]byte("legitimate host "), 512/16)
	var ctrls []*host.Controller
	var nss []*host.Namespace
	var worstConnect, worst time.Duration
	connect := func(i, ioQueues int) {
		t.Helper()
		start := time.Now()
		c, err := host.Connect(testCtx(t), "tcp", addr, testNQN, host.Config{IOQueues: ioQueues})
		took := time.Since(start)
		require.NoError(t, err, "host %d's connect (after %v)", i, took)
		t.Cleanup(func() { c.Close() })
		ns, err := c.Namespace(testCtx(t), 1)
		require.NoError(t, err)
		_, err = ns.WriteAt(block, int64(i)*512)
		require.NoError(t, err)
		worstConnect, worst = max(worstConnect, took), max(worst, time.Since(start))
		ctrls, nss = append(ctrls, c), append(nss, ns)
	}
	for i := range 3 {
		connect(i, 1)
		require.LessOrEqual(t, worst, floodConnectBound, "host %d's connect and write during the flood", i)
	}
	// The flood goes on past many times MaxQueues: the hosts' six queues
	// stay, only the flood's places turn over. (How fast it dials is the
	// machine's speed: the bound only stops a flood that makes no
	// progress.)
	d0, _, _ := f.counts()
	require.Eventually(t, func() bool {
		d, _, _ := f.counts()
		return d >= d0+4*maxQueues
	}, time.Minute, time.Millisecond, "the flood goes on")
	for i, ns := range nss {
		got := make([]byte, len(block))
		_, err := ns.ReadAt(got, int64(i)*512)
		require.NoError(t, err, "host %d's I/O after the flood went on", i)
		require.Equal(t, block, got)
		require.NoError(t, ctrls[i].Err())
	}
	dialed, ended, failed := f.counts()
	t.Logf("flood: %d silent queues admitted in %v, %d of them evicted, %d refused; the slowest host connect %v, with a write %v",
		dialed, time.Since(floodStart).Round(time.Millisecond), ended, failed, worstConnect.Round(time.Millisecond), worst.Round(time.Millisecond))
	require.Greater(t, ended, 4*maxQueues, "the flood's queues are evicted, not timed out")

	// Once every place is a connected queue, a newcomer is refused: a
	// host, or a queue that would wait for its Connect.
	f.stop()
	connect(3, 7) // eight queues
	connect(4, 1) // the last two places
	require.True(t, tg.queuesFull())
	_, err := host.Connect(testCtx(t), "tcp", addr, testNQN, host.Config{IOQueues: 1})
	require.ErrorContains(t, err, "No Resources", "all %d queues connected", maxQueues)
	dev, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	defer dev.Close()
	_, err = silentQueue(testCtx(t), dev.AllocPD(), addr, 1)
	var re *mpa.RejectError
	require.ErrorAs(t, err, &re, "a silent queue when all %d are connected", maxQueues)
	rj, err := nvme.ParseCMReject(re.PrivateData)
	require.NoError(t, err)
	require.EqualValues(t, nvme.CMRejectNoResources, rj.Status)
	for i, ns := range nss {
		_, err := ns.ReadAt(make([]byte, 512), int64(i)*512)
		require.NoError(t, err, "host %d's I/O at the end", i)
	}

	for _, c := range ctrls {
		require.NoError(t, c.Close())
	}
	tg.Close()
	require.Eventually(t, func() bool { return fdCount(t) <= fds }, 10*time.Second, 10*time.Millisecond,
		"fds back: %d above the start", fdCount(t)-fds)
}
