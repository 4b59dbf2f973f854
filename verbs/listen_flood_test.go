package verbs

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/internal/flood"
	"github.com/stretchr/testify/require"
)

// A flood of silent peers must not lock legitimate ones out: a Listener
// keeps serving them within about a second while thousands of connections
// that send nothing hit the same port. Before eviction, 2 000 silent
// connections held a good client for 2 000 / maxHandshakes × RequestTimeout
// (35 s), and a sustained flood locked it out.

// floodBound is how long a legitimate Dial may take while a flood goes on:
// about a second, with room for a loaded machine under -race.
const floodBound = 2 * time.Second

// timedDial dials s from a fresh verbs client and returns how long the Dial
// took; it fails t unless the connection is up within floodBound.
func (s *stackSide) timedDial(t *testing.T) time.Duration {
	t.Helper()
	srv := s.newQP(t, 0, 0)
	cdev := openDev(DeviceAttr{})
	cpd := cdev.AllocPD()
	cq, err := cdev.CreateCQ(16)
	require.NoError(t, err)
	cqp, err := cpd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	require.NoError(t, err)
	defer cqp.Close()
	errc := s.acceptAsync(srv)
	ctx, cancel := context.WithTimeout(context.Background(), 3*floodBound)
	defer cancel()
	start := time.Now()
	err = cqp.Dial(ctx, "tcp", s.ln.Addr().String(), ConnConfig{})
	took := time.Since(start)
	require.NoError(t, err, "a legitimate Dial during the flood (after %v)", took)
	require.NoError(t, <-errc, "Accept")
	require.LessOrEqual(t, took, floodBound, "a legitimate Dial during the flood")
	require.NoError(t, cqp.Disconnect(ctx))
	waitDone(t, srv.qp, peerTimeout)
	srv.qp.Close()
	return took
}

// dialSilent opens n connections to addr that send nothing.
func dialSilent(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	cs := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	d := net.Dialer{Timeout: peerTimeout}
	for range n {
		c, err := d.Dial("tcp", addr)
		require.NoError(t, err, "silent connection %d", len(cs))
		cs = append(cs, c)
	}
	return cs
}

// 2 000 silent connections, then a legitimate client: served within the
// bound, and everything given back once the silent ones close.
func TestListenerFloodSilent(t *testing.T) {
	checkRoutines(t)
	s := newStackSide(t, ConnConfig{}) // RequestTimeout 5 s, as siw's
	base := openFDs(t)
	start := time.Now()
	cs := dialSilent(t, s.ln.Addr().String(), 2000)
	t.Logf("2000 silent connections in %v; %d start-ups in progress", time.Since(start).Round(time.Millisecond), s.ln.starts.len())
	took := s.timedDial(t)
	t.Logf("a legitimate Dial took %v", took.Round(time.Millisecond))
	require.LessOrEqual(t, s.ln.starts.len(), maxHandshakes)
	for _, c := range cs {
		c.Close()
	}
	ok := waitFor(peerTimeout, func() bool { return s.ln.starts.len() == 0 && openFDs(t) <= base+2 })
	require.True(t, ok, "%d start-ups, %d fds above the start", s.ln.starts.len(), openFDs(t)-base)
	s.wantServes(t)
}

// A sustained flood of new silent connections (500 a second where the
// machine keeps up, faster than maxHandshakes per RequestTimeout by far): a
// legitimate Dial every half second is served within the bound
// throughout, for at least 3 s and until the flood has filled the table of
// start-ups and turned it over. RequestTimeout is long so that the flood
// fills the table on a slow machine too (dialing beside two CPU hogs, it
// came at 38 a second, which a 5 s RequestTimeout drains faster than
// that), and evictions alone make room.
func TestListenerFloodSustained(t *testing.T) {
	checkRoutines(t)
	s := newStackSide(t, ConnConfig{RequestTimeout: time.Minute})
	base := openFDs(t)
	f := flood.Start(s.ln.Addr().String(), 2*time.Millisecond)
	defer f.Close()
	start := time.Now()
	var worst time.Duration
	dials := 0
	outran := func() bool { return s.ln.starts.high() == maxHandshakes && f.Count() > 2*maxHandshakes }
	for time.Since(start) < 3*time.Second || !outran() {
		require.Less(t, time.Since(start), time.Minute, "the flood never outran the start-ups in progress: %d connections, at most %d start-ups",
			f.Count(), s.ln.starts.high())
		time.Sleep(500 * time.Millisecond)
		worst = max(worst, s.timedDial(t))
		dials++
	}
	n := f.Count()
	f.Close()
	t.Logf("%d silent connections (%d failed) in %v; %d legitimate Dials, the slowest %v",
		n, f.Fails(), time.Since(start).Round(time.Millisecond), dials, worst.Round(time.Millisecond))
	ok := waitFor(peerTimeout, func() bool { return s.ln.starts.len() == 0 && openFDs(t) <= base+2 })
	require.True(t, ok, "%d start-ups, %d fds above the start", s.ln.starts.len(), openFDs(t)-base)
}

// The victim is the oldest silent start-up; failing that (every one has
// sent something, or is younger than silentGrace) the oldest of all.
func TestStartupsVictim(t *testing.T) {
	var tab startups
	tab.max = 3
	now := time.Now()
	conns := make([]*net.TCPConn, 5)
	for i := range conns {
		conns[i] = &net.TCPConn{}
	}
	// Oldest first: 0 has sent, 1 is silent, 2 is silent but young.
	s0, _ := tab.add(conns[0], now.Add(-3*time.Second))
	s0.got.Store(1)
	tab.add(conns[1], now.Add(-2*time.Second))
	tab.add(conns[2], now.Add(-silentGrace/2))
	_, ev := tab.add(conns[3], now)
	require.Same(t, conns[1], ev, "the oldest silent one goes first")
	// Left: 0 (sent), 2 and 3 silent but young: the oldest goes.
	_, ev = tab.add(conns[4], now)
	require.Same(t, conns[0], ev, "no silent one is old enough: the oldest")
	require.Equal(t, 3, tab.len())
}

// A request the application has taken but not answered stays watched: its
// initiator closing ends its Context (ErrInitiatorGone) at once, so a queue
// above the Listener can free it; Reject then gives the fd back.
func TestTakenRequestGone(t *testing.T) {
	checkRoutines(t)
	s := newStackSide(t, ConnConfig{})
	base := openFDs(t)
	c := rawConnect(t, s.ln.Addr().String())
	rawWrite(t, c, goodRequest())
	r := s.getRequest(t)
	select {
	case <-r.Context().Done():
		t.Fatal("the Context ended while the initiator waits")
	case <-time.After(100 * time.Millisecond):
	}
	start := time.Now()
	c.Close()
	select {
	case <-r.Context().Done():
	case <-time.After(peerTimeout):
		t.Fatal("the initiator closed; the Context did not end")
	}
	t.Logf("the Context ended %v after the close", time.Since(start).Round(time.Microsecond))
	require.ErrorIs(t, context.Cause(r.Context()), ErrInitiatorGone)
	r.Reject(nil)
	require.True(t, waitFor(peerTimeout, func() bool { return openFDs(t) <= base }), "%d fds above the start", openFDs(t)-base)
	s.wantServes(t)
}

// Answering ends the Context without ErrInitiatorGone; so does closing the
// Listener (ErrClosed), which also ends the watch of a request taken and
// never answered.
func TestTakenRequestContext(t *testing.T) {
	checkRoutines(t)
	s := newStackSide(t, ConnConfig{})
	c := rawConnect(t, s.ln.Addr().String())
	rawWrite(t, c, goodRequest())
	r := s.getRequest(t)
	q := s.newQP(t, 4, 4)
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	require.NoError(t, r.Accept(ctx, q.qp, nil))
	require.ErrorIs(t, context.Cause(r.Context()), context.Canceled)

	c2 := rawConnect(t, s.ln.Addr().String())
	rawWrite(t, c2, goodRequest())
	r2 := s.getRequest(t)
	s.ln.Close()
	select {
	case <-r2.Context().Done():
	case <-time.After(peerTimeout):
		t.Fatal("the Listener closed; the Context did not end")
	}
	require.ErrorIs(t, context.Cause(r2.Context()), ErrClosed)
	require.NoError(t, r2.Reject(nil), "a request taken is still the application's to answer")
}

// Octets waiting unread count as progress: on a loaded machine the
// start-up's goroutine may not have run yet.
func TestStartupsVictimPending(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	sc, err := ln.Accept()
	require.NoError(t, err)
	defer sc.Close()
	_, err = c.Write([]byte{1})
	require.NoError(t, err)
	require.True(t, waitFor(time.Second, func() bool { return pending(sc.(*net.TCPConn)) }))

	var tab startups
	tab.max = 2
	now := time.Now()
	silent := &net.TCPConn{}
	tab.add(sc.(*net.TCPConn), now.Add(-2*time.Second)) // unread octet
	tab.add(silent, now.Add(-time.Second))
	_, ev := tab.add(&net.TCPConn{}, now)
	require.Same(t, silent, ev, "the one with an octet waiting is not silent")
}
