package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
)

// logRecorder keeps a target's and the reload's log lines, in order.
type logRecorder struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) logf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.lines = append(r.lines, s)
	r.mu.Unlock()
	r.t.Log(s)
}

// index is the position of the first line containing s, or -1.
func (r *logRecorder) index(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, l := range r.lines {
		if strings.Contains(l, s) {
			return i
		}
	}
	return -1
}

// A reload that moves a namespace to another group and changes the
// states: the group it moves to is made accessible before the move, and
// the group it leaves inaccessible after, so that the namespace is never
// inaccessible on every path on the way. A port moved to an address that
// cannot be listened on stays where it was.
func TestReloadANAOrderAndMoveBack(t *testing.T) {
	t.Cleanup(test.CheckRoutines(t))
	dir := t.TempDir()
	d1 := filepath.Join(dir, "d1.img")
	require.NoError(t, os.WriteFile(d1, make([]byte, 1<<20), 0o644))
	const nqn = "nqn.2024-01.io.goiwarp:order"
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := filepath.Join(dir, "config.json")
	write := func(addr string, ana map[int]string, group int) {
		writePortsConfig(t, cfg, []portJSON{{1, addr, []string{nqn}, ana}}, subJSON(nqn, 1, nil, nsJSONGroup(1, d1, group)))
	}
	load := func() *plan {
		t.Helper()
		p, err := loadConfig(cfg)
		require.NoError(t, err)
		return p
	}
	rec := &logRecorder{t: t}
	tg, err := target.New(target.Config{Logf: rec.logf})
	require.NoError(t, err)
	s := &served{t: tg, logf: rec.logf}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer func() {
		tg.Close()
		s.close()
	}()
	write(addr, map[int]string{1: "optimized"}, 1)
	require.NoError(t, s.apply(ctx, load()))
	require.NoError(t, s.listen(ctx, load().ports))

	write(addr, map[int]string{1: "inaccessible", 4: "optimized"}, 4)
	require.NoError(t, s.apply(ctx, load()))
	up, moved, down := rec.index("port 1: ANA group 4 optimized"), rec.index("namespace 1 is in ANA group 4"), rec.index("port 1: ANA group 1 inaccessible")
	require.True(t, up >= 0 && moved > up && down > moved, "group 4 up (%d), then the move (%d), then group 1 down (%d)", up, moved, down)
	c, err := host.Connect(ctx, "tcp", addr, nqn, host.Config{IOQueues: 1})
	require.NoError(t, err)
	n, err := c.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = n.WriteAt(make([]byte, 4096), 0)
	require.NoError(t, err, "namespace 1 is reachable in group 4")
	require.NoError(t, c.Close())

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	write(busy.Addr().String(), map[int]string{1: "inaccessible", 4: "optimized"}, 4)
	err = s.apply(ctx, load())
	require.ErrorContains(t, err, "stays on "+addr)
	c, err = host.Connect(ctx, "tcp", addr, nqn, host.Config{IOQueues: 1})
	require.NoError(t, err, "the port is back on its address")
	require.NoError(t, c.Close())
}
