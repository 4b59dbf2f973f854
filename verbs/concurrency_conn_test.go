package verbs

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The concurrency contract for connecting and ending (package doc,
// "Concurrency"): Dial and Accept one at a time, Listener and ConnRequest
// from several goroutines, the QP's getters at any time, Device.Close
// while everything else runs.

// Every getter of a QP from two goroutines, before Dial, while it connects,
// carries data and ends: State never goes back, once RTS it has its
// addresses, MULPDU and the peer's private data, once Err is set it stays
// set, and Done closes only in ERROR.
func TestConcurrentGettersLifetime(t *testing.T) {
	checkRoutines(t)
	for range 8 { // the getters meet start's window in some rounds
		gettersLifetime(t)
	}
}

func gettersLifetime(t *testing.T) {
	c, s := newSide(t, pairOpts{}), newSide(t, pairOpts{})
	ln, err := s.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stop := make(chan struct{})
	fails := make(chan string, 8)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last, errSeen := StateIdle, false
			for {
				select {
				case <-stop:
					return
				default:
				}
				st := c.qp.State()
				if st < last {
					fails <- "State went from " + last.String() + " to " + st.String()
				}
				last = st
				e := c.qp.Err()
				if errSeen && e == nil {
					fails <- "Err unset again"
				}
				errSeen = errSeen || e != nil
				select {
				case <-c.qp.Done():
					if c.qp.State() != StateError {
						fails <- "Done closed in " + c.qp.State().String()
					}
				default:
				}
				m, pd, la, ra := c.qp.MULPDU(), c.qp.PeerPrivateData(), c.qp.LocalAddr(), c.qp.RemoteAddr()
				if st == StateRTS && (m == 0 || string(pd) != "hello" || la == nil || ra == nil || c.qp.Params().IRD == 0) {
					fails <- "RTS without what connecting filled in"
				}
				_, _ = c.qp.TCPInfo()
				_, _, _, _ = c.qp.Stats(), c.qp.Config(), c.qp.PD(), c.qp.TLS()
			}
		}()
	}
	go func() {
		if req, err := ln.GetRequest(ctx); err == nil {
			req.Accept(ctx, s.qp, []byte("hello"))
		}
	}()
	time.Sleep(time.Millisecond)
	require.NoError(t, c.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{}))
	barrier(t, s, c)
	require.NoError(t, c.qp.Disconnect(ctx))
	waitDone(t, c.qp, peerTimeout)
	time.Sleep(time.Millisecond)
	close(stop)
	wg.Wait()
	close(fails)
	for f := range fails {
		t.Fatal(f)
	}
	require.ErrorIs(t, c.qp.Err(), ErrDisconnected)
	s.qp.Close()
}
