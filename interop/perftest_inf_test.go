//go:build interop

package interop

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/internal/perf"
	"github.com/goiwarp/iwarp/interop/siw"
)

// --run_infinitely (-D 1: a row a second) with Linux perftest in both
// roles. A run ends when its client is interrupted (SIGINT), here once it
// has printed two rows: how long that takes depends on the emulated
// guest's start-up and the host's load, so the client is stopped by its
// rows, not by a clock (a run with load 9 got one row in 4 s, and the
// guest's client three in 8 s). Our client then sends the end-of-test
// exchange, as perftest's does since 6.x: perftest 6.06's server takes the
// exchange, shows our report of the whole run (later perftests print
// "Client closed connection") and exits 0. perftest 6.06's client has no
// handler for SIGINT and dies of it (exit 130, no exchange): our servers
// end with it, as the peer ended the run, and exit 0. The side that posts
// prints a row a second; ours are positive.
func TestPerftestRunInfinitely(t *testing.T) {
	tests := []string{"write_bw", "read_bw"} // -R takes no infinite send_bw (see Params.finish)
	var fwds []siw.Forward
	ports := make([]int, len(tests))
	var script strings.Builder
	for i, tc := range tests {
		gp := 7301 + i
		hp, err := siw.FreePort()
		require.NoError(t, err)
		fwds = append(fwds, siw.Forward{Host: hp, Guest: gp})
		fmt.Fprintf(&script, "( timeout 600 ib_%s -R -d siw0 -F -p %d --run_infinitely -D 1 -s 4096 > /tmp/s.%d 2>&1; rc=$?\n"+
			"  sed 's/^/%d: /' /tmp/s.%d; echo; echo \"SERVER %d rc=$rc\" ) &\n", tc, gp, i, i, i, i)
		p, err := siw.FreePort()
		require.NoError(t, err)
		ports[i] = p
	}
	for i := range tests {
		fmt.Fprintf(&script, "waitport %d 120 || exit 1\n", 7301+i)
	}
	script.WriteString("echo LISTENING\n")
	for i, tc := range tests {
		// The client runs in the foreground (a background job of this
		// shell would ignore SIGINT) and a watcher sends it SIGINT once
		// its output holds two rows, or after 120 s without them; it
		// leaves a client that ended by itself alone.
		fmt.Fprintf(&script, "waitfile go.%[1]d 300 || exit 1\n: > /tmp/c.%[1]d\n"+
			"( n=0; while [ \"$(grep -c '^ *4096 ' /tmp/c.%[1]d)\" -lt 2 ] && [ $n -lt 1200 ]; do\n"+
			"    [ -s /tmp/c.%[1]d.pid ] && ! kill -0 $(cat /tmp/c.%[1]d.pid) 2>/dev/null && exit 0\n"+
			"    sleep 0.1; n=$((n+1)); done\n"+
			"  kill -INT $(cat /tmp/c.%[1]d.pid) ) & w=$!\n"+
			"sh -c 'echo $$ > /tmp/c.%[1]d.pid; exec timeout 300 ib_%[2]s -R -d siw0 -F -p %[3]d --run_infinitely -D 1 -s 4096 10.0.2.2' > /tmp/c.%[1]d 2>&1; rc=$?\n"+
			"wait $w\nsed 's/^/%[4]d: /' /tmp/c.%[1]d; echo; echo \"CLIENT %[1]d rc=$rc\"\n", i, tc, ports[i], 10+i)
	}
	script.WriteString("wait\n")
	vm := ptVM(t, script.String(), fwds...)
	ptWait(t, vm, "LISTENING", 3*time.Minute)

	for i, tc := range tests {
		t.Run("client/"+tc, func(t *testing.T) {
			// Interrupted (ctx cancelled, as by SIGINT) at its second row;
			// a run without two rows in 2 minutes ends there and fails.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := []string{tc, "-R", "--run_infinitely", "-D", "1", "-s", "4096", "-p", strconv.Itoa(fwds[i].Host), "127.0.0.1"}
			code, out, errs := ptOursUntilRows(ctx, args, 2)
			t.Logf("iwarp-perf %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
			l := ptWait(t, vm, fmt.Sprintf("SERVER %d ", i), time.Minute)
			t.Logf("perftest's server (%s):\n%s", l, strings.Join(ptGuestLines(vm, i), "\n"))
			require.Equal(t, 0, code, "our client: %s", errs)
			require.Equal(t, fmt.Sprintf("SERVER %d rc=0", i), l, "perftest's server took the end of the run")
			rows, err := ptRows(strings.Split(out, "\n"))
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(rows), 2)
			sum := 0.0
			for _, r := range rows {
				require.Equal(t, 4096.0, r[0])
				require.Positive(t, r[3], "BW average")
				sum += r[1]
			}
			if theirs, err := ptRows(ptGuestLines(vm, i)); err == nil {
				// 6.06 shows our report of the whole run: at least the
				// rows' iterations.
				require.Len(t, theirs, 1)
				require.GreaterOrEqual(t, theirs[0][1], sum, "perftest's server shows the whole run")
			} else {
				require.Contains(t, strings.Join(ptGuestLines(vm, i), "\n"), "Client closed connection")
			}
		})
	}
	for i, tc := range tests {
		t.Run("server/"+tc, func(t *testing.T) {
			// Beyond the guest's 120 s for two rows.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			args := []string{tc, "-R", "--run_infinitely", "-D", "1", "-s", "4096", "-p", strconv.Itoa(ports[i])}
			done := ptServe(t, ctx, args, ports[i])
			require.NoError(t, vm.Signal(fmt.Sprintf("go.%d", i)))
			var r ptResult
			select {
			case r = <-done:
			case <-ctx.Done():
				t.Fatalf("our server did not end with perftest's client: %v", ctx.Err())
			}
			t.Logf("iwarp-perf %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.out, r.errs)
			l := ptWait(t, vm, fmt.Sprintf("CLIENT %d ", i), time.Minute)
			lines := ptGuestLines(vm, 10+i)
			t.Logf("perftest's client (%s):\n%s", l, strings.Join(lines, "\n"))
			require.Equal(t, 0, r.code, "our server: %s", r.errs)
			require.Contains(t, r.out, "The peer ended the run")
			require.Contains(t, []string{fmt.Sprintf("CLIENT %d rc=0", i), fmt.Sprintf("CLIENT %d rc=130", i)}, l,
				"perftest's client: stopped by SIGINT, with a handler (0) or without (130)")
			rows, err := ptRows(lines)
			require.NoError(t, err, "perftest's client's rows")
			require.GreaterOrEqual(t, len(rows), 2, "a row a second until the second row")
		})
	}
}

// ptOursUntilRows runs iwarp-perf with args as ptOurs does, and cancels
// its context (an interrupt) once it has printed rows results rows.
func ptOursUntilRows(ctx context.Context, args []string, rows int) (int, string, string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &rowWatch{rows: rows, reached: cancel}
	var errb bytes.Buffer
	code := perf.MainContext(ctx, args, out, &errb)
	return code, out.String(), errb.String()
}

// rowWatch is iwarp-perf's stdout: it keeps what is written and calls
// reached once the complete lines hold rows results rows.
type rowWatch struct {
	mu      sync.Mutex
	b       strings.Builder
	rows    int
	reached func()
}

func (w *rowWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	s := w.b.String()
	if r, err := ptRows(strings.Split(s[:strings.LastIndexByte(s, '\n')+1], "\n")); err == nil && len(r) >= w.rows {
		w.reached()
	}
	return len(p), nil
}

func (w *rowWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
