package perf

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/mpa"
)

// A server busy with one client holds others' requests: passed on for that
// client's test (a perftest client's QPs come from its address, with no
// private data) or held for busyWait. One whose initiator closes is freed
// at once, as the Listener's own backlog does; it used to be held until the
// busy client's --exchange-timeout (15 s: 64 fds in the outside suite).

// openFDs returns the descriptors this process has open.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// waitUntil polls cond until it holds or d passes.
func waitUntil(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// bareRequest is an MPA Request without private data, as perftest's QPs
// send.
func bareRequest(t *testing.T) []byte {
	b, err := mpa.Frame{CRC: true, Rev: 1}.Append(nil)
	require.NoError(t, err)
	return b
}

func TestServerFreesDeadRequests(t *testing.T) {
	cases := []struct {
		name string
		busy func(a *attacker) // a client that holds the server, silent
	}{
		{"perftest client silent after the MPA start-up: passed on", func(a *attacker) { a.perftest() }},
		{"iwarp-perf client silent after its hello: held", func(a *attacker) { a.native(1) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkGoroutines(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := []string{"write_bw", "-n", "20"}
			s := startHostileServer(ctx, t, args, 10*time.Second)
			cp, _, err := Parse(append(args, "127.0.0.1"))
			require.NoError(t, err)
			a := newAttacker(t, ctx, s, cp)
			c.busy(a)

			base := openFDs(t)
			const n = 40 // within maxQueued: none refused at once
			conns := make([]net.Conn, n)
			for i := range conns {
				conns[i], err = net.Dial("tcp", s.addr())
				require.NoError(t, err)
				defer conns[i].Close()
				_, err = conns[i].Write(bareRequest(t))
				require.NoError(t, err)
			}
			// Held: nothing comes back (busyWait is a second).
			deadline := time.Now().Add(300 * time.Millisecond)
			for i, cn := range conns {
				cn.SetReadDeadline(deadline)
				_, err := cn.Read(make([]byte, 1))
				require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "client %d: %v", i, err)
			}
			t.Logf("%d requests held, %d fds above the start", n, openFDs(t)-base)
			for _, cn := range conns {
				cn.Close()
			}
			start := time.Now()
			// Well within busyWait, which frees the held ones in any case.
			ok := waitUntil(busyWait/2, func() bool { return openFDs(t) <= base })
			t.Logf("fds back %v after the clients closed", time.Since(start).Round(time.Millisecond))
			require.True(t, ok, "%d fds above the start %v after the clients closed", openFDs(t)-base, time.Since(start))
			cancel()
			<-s.code
		})
	}
}
