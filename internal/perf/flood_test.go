package perf

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A flood of silent connections must not lock a legitimate client out of
// the server: with 2 000 of them it waited 2 000 / 256 × --exchange-timeout
// for its MPA Reply, and a sustained flood locked it out.

// floodBound is how long a legitimate client's connect may take while the
// flood goes on: about a second, with room for a loaded machine.
const floodBound = 2 * time.Second

// silentFlood opens connections that send nothing, one every gap, until
// end, which closes them all.
type silentFlood struct {
	mu    sync.Mutex
	conns []net.Conn
	stop  chan struct{}
	done  chan struct{}
}

func startFlood(addr string, gap time.Duration) *silentFlood {
	f := &silentFlood{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		tk := time.NewTicker(gap)
		defer tk.Stop()
		d := net.Dialer{Timeout: time.Second}
		for {
			select {
			case <-f.stop:
				return
			case <-tk.C:
			}
			if c, err := d.Dial("tcp", addr); err == nil {
				f.mu.Lock()
				f.conns = append(f.conns, c)
				f.mu.Unlock()
			}
		}
	}()
	return f
}

func (f *silentFlood) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

// stopDialing stops the flood; its connections stay open.
func (f *silentFlood) stopDialing() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	<-f.done
}

func (f *silentFlood) end() {
	f.stopDialing()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

func TestServerFlood(t *testing.T) {
	checkGoroutines(t)
	base := openFDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := []string{"write_bw", "-n", "20"}
	s := startHostileServer(ctx, t, args, 15*time.Second) // --exchange-timeout's default
	cp, _, err := Parse(append(args, "127.0.0.1"))
	require.NoError(t, err)
	a := newAttacker(t, ctx, s, cp)
	connect := func() time.Duration {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 3*floodBound)
		defer ccancel()
		start := time.Now()
		x, err := DialExchange(cctx, a.dev, s.addr(), a.cfg, a.p)
		took := time.Since(start)
		require.NoError(t, err, "a legitimate client during the flood (after %v)", took)
		x.Close()
		require.LessOrEqual(t, took, floodBound, "a legitimate client's connect during the flood")
		s.waitDrop(t, "") // the server is free for the next
		return took
	}

	silent := startFlood(s.addr(), time.Microsecond) // as fast as it dials
	require.Eventually(t, func() bool { return silent.count() >= 2000 }, 20*time.Second, time.Millisecond)
	silent.stopDialing()
	t.Logf("2000 silent connections; a legitimate client connected in %v", connect().Round(time.Millisecond))

	f := startFlood(s.addr(), 2*time.Millisecond)

	var worst time.Duration
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		time.Sleep(300 * time.Millisecond)
		worst = max(worst, connect())
	}
	t.Logf("a sustained flood (%d new silent connections in %v): the slowest legitimate connect %v",
		f.count(), time.Since(start).Round(time.Millisecond), worst.Round(time.Millisecond))
	f.end()
	silent.end()
	cancel()
	<-s.code
	a.dev.Close()
	require.True(t, waitUntil(5*time.Second, func() bool { return openFDs(t) <= base }), "%d fds above the start", openFDs(t)-base)
}
