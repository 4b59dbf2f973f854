package verbs

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// The Listener's queue of requests read but not yet taken (Backlog,
// BacklogTimeout). An outside suite found it unbounded in time: with the
// application not calling GetRequest, 330 Requests whose clients closed
// after 1 s left the server holding 331 fds 8 s later, and a further
// Request got no Reply.

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

func (s *stackSide) queued() int {
	s.ln.mu.Lock()
	defer s.ln.mu.Unlock()
	return len(s.ln.queue)
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func goodRequest() []byte { return mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(8, 8)) }

// Dead requests give their place and their fd back at once.
func TestBacklogDeadRequests(t *testing.T) {
	checkRoutines(t)
	s := newStackSide(t, ConnConfig{})
	base := openFDs(t)
	const n = 330
	cs := make([]*net.TCPConn, n)
	for i := range cs {
		cs[i] = rawConnect(t, s.ln.Addr().String())
		rawWrite(t, cs[i], goodRequest())
	}
	require.True(t, waitFor(10*time.Second, func() bool { return s.queued() == n }), "queued: %d of %d", s.queued(), n)
	t.Logf("%d requests queued, %d fds above the start", n, openFDs(t)-base)
	for _, c := range cs {
		c.Close()
	}
	start := time.Now()
	ok := waitFor(5*time.Second, func() bool { return s.queued() == 0 && openFDs(t) <= base })
	t.Logf("queue emptied and fds back %v after the clients closed", time.Since(start).Round(time.Millisecond))
	require.True(t, ok, "%d queued, %d fds above the start", s.queued(), openFDs(t)-base)
	// Nothing dead is handed to the application; a live one is.
	s.wantNoRequest(t)
	s.wantServes(t)
}

// One more than Backlog gets a Reject at once; a place freed is taken
// again.
func TestBacklogFull(t *testing.T) {
	checkRoutines(t)
	s := newStackSide(t, ConnConfig{Backlog: 4, RequestTimeout: startupSlow})
	var cs []*net.TCPConn
	for range 4 {
		c := rawConnect(t, s.ln.Addr().String())
		rawWrite(t, c, goodRequest())
		cs = append(cs, c)
	}
	require.True(t, waitFor(5*time.Second, func() bool { return s.queued() == 4 }))
	extra := rawConnect(t, s.ln.Addr().String())
	rawWrite(t, extra, goodRequest())
	// A Reject with our IRD/ORD (what a QP of the device would take) and
	// no private data, then the close.
	requireOctets(t, mpaFrame(repKey, flagR|flagH, 2, 4, irdord(128, 128)), readStartupFrame(t, extra), "the Reject past the backlog")
	wantPlainClose(t, waitClose(extra, atOnce), false)
	// Taking one frees a place.
	r := s.getRequest(t)
	require.NoError(t, r.Reject(nil))
	again := rawConnect(t, s.ln.Addr().String())
	rawWrite(t, again, goodRequest())
	require.True(t, waitFor(5*time.Second, func() bool { return s.queued() == 4 }))
	for _, c := range cs {
		c.Close()
	}
	again.Close()
	require.True(t, waitFor(5*time.Second, func() bool { return s.queued() == 0 }))
}

// A request nobody takes within BacklogTimeout is closed, without a Reply.
func TestBacklogTimeout(t *testing.T) {
	checkRoutines(t)
	const wait = 200 * time.Millisecond
	s := newStackSide(t, ConnConfig{BacklogTimeout: wait})
	c := rawConnect(t, s.ln.Addr().String())
	start := time.Now()
	rawWrite(t, c, goodRequest())
	o := waitClose(c, 5*time.Second)
	took := time.Since(start)
	wantPlainClose(t, o, false)
	t.Logf("closed %v after its Request", took.Round(time.Millisecond))
	require.GreaterOrEqual(t, took, wait)
	require.Zero(t, s.queued())
	s.wantNoRequest(t)
}

// A request taken just before its deadline is the application's: the
// watch's deadline does not outlive it.
func TestBacklogTakenRequestKeepsWorking(t *testing.T) {
	checkRoutines(t)
	const wait = 300 * time.Millisecond
	s := newStackSide(t, ConnConfig{BacklogTimeout: wait})
	q := s.newQP(t, 0, 0)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
		defer cancel()
		req, err := s.ln.GetRequest(ctx)
		if err == nil {
			time.Sleep(2 * wait) // the application takes its time to answer
			err = req.Accept(ctx, q.qp, nil)
		}
		errc <- err
	}()
	p := dialPeer(t, s.ln.Addr().String(), mpa.Config{IRD: 8, ORD: 8})
	require.NoError(t, <-errc)
	rb := regGuarded(t, s.pd, 16, LocalWrite)
	_, err := q.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{rb.mr.SGE(0, 16)}})
	require.NoError(t, err)
	time.Sleep(2 * wait) // past the watch's deadline, had it stayed
	p.send(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("alive")))
	require.Equal(t, Success, waitWC(t, q.rcq).Status)
	require.Equal(t, "alive", string(rb.region()[:5]))
	require.Equal(t, StateRTS, q.qp.State())
}

// Listener.Close drops queued requests and returns with no goroutine left.
func TestBacklogClose(t *testing.T) {
	checkRoutines(t)
	dev := openDev(DeviceAttr{})
	ln, err := dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	var cs []*net.TCPConn
	for range 8 {
		c := rawConnect(t, ln.Addr().String())
		rawWrite(t, c, goodRequest())
		cs = append(cs, c)
	}
	require.True(t, waitFor(5*time.Second, func() bool { ln.mu.Lock(); defer ln.mu.Unlock(); return len(ln.queue) == 8 }))
	require.NoError(t, ln.Close())
	for _, c := range cs {
		wantPlainClose(t, waitClose(c, 5*time.Second), false)
	}
	_, err = ln.GetRequest(context.Background())
	require.ErrorIs(t, err, ErrClosed)
}
