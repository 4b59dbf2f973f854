package perf

import (
	"context"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/internal/flood"
	"github.com/stretchr/testify/require"
)

// A flood of silent connections must not lock a legitimate client out of
// the server: with 2 000 of them it waited 2 000 / 256 × --exchange-timeout
// for its MPA Reply, and a sustained flood locked it out.

// floodBound is how long a legitimate client's connect may take while the
// flood goes on: about a second, with room for a loaded machine.
const floodBound = 2 * time.Second

func TestServerFlood(t *testing.T) {
	checkGoroutines(t)
	base := openFDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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

	silent := flood.Start(s.addr(), 0) // as fast as it dials
	// How fast the flood dials is the machine's speed, not the server's:
	// the bound only stops a flood that makes no progress.
	require.Eventually(t, func() bool { return silent.Count() >= 2000 }, 2*time.Minute, time.Millisecond)
	silent.StopDialing()
	t.Logf("2000 silent connections; a legitimate client connected in %v", connect().Round(time.Millisecond))

	f := flood.Start(s.addr(), 2*time.Millisecond)

	var worst time.Duration
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		time.Sleep(300 * time.Millisecond)
		worst = max(worst, connect())
	}
	t.Logf("a sustained flood (%d new silent connections in %v): the slowest legitimate connect %v",
		f.Count(), time.Since(start).Round(time.Millisecond), worst.Round(time.Millisecond))
	f.Close()
	silent.Close()
	cancel()
	<-s.code
	a.dev.Close()
	require.True(t, waitUntil(5*time.Second, func() bool { return openFDs(t) <= base }), "%d fds above the start", openFDs(t)-base)
}
