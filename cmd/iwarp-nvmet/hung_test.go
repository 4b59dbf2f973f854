package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
)

// gatedBackend is a file backend whose next write, once armed, waits for
// release: a backend on a hung network file system.
type gatedBackend struct {
	backend
	armed            atomic.Bool
	entered, release chan struct{}
	closed           atomic.Bool
}

func (g *gatedBackend) WriteAt(p []byte, off int64) (int, error) {
	if g.armed.CompareAndSwap(true, false) {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.backend.WriteAt(p, off)
}

func (g *gatedBackend) Close() error {
	g.closed.Store(true)
	return g.backend.Close()
}

// A reload that removes a namespace, then the whole subsystem, while a
// write is stuck in its backend: the reload goes on after removeWait
// instead of hanging (and with it SIGTERM's handling), the namespace is
// gone from the hosts' view at once, and the backend is closed once the
// stuck write is done, not before.
func TestReloadHungBackend(t *testing.T) {
	t.Cleanup(test.CheckRoutines(t))
	dir := t.TempDir()
	gated := map[string]*gatedBackend{}
	open := openBackend
	t.Cleanup(func() { openBackend = open })
	openBackend = func(path string) (backend, error) {
		b, err := open(path)
		if err != nil {
			return nil, err
		}
		g := &gatedBackend{backend: b, entered: make(chan struct{}), release: make(chan struct{})}
		gated[filepath.Base(path)] = g
		return g, nil
	}
	wait := removeWait
	t.Cleanup(func() { removeWait = wait })
	removeWait = 100 * time.Millisecond

	d1, d2 := filepath.Join(dir, "d1.img"), filepath.Join(dir, "d2.img")
	for _, d := range []string{d1, d2} {
		require.NoError(t, os.WriteFile(d, make([]byte, 1<<20), 0o644))
	}
	const nqn = "nqn.2024-01.io.goiwarp:hung"
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := filepath.Join(dir, "config.json")
	load := func() *plan {
		t.Helper()
		p, err := loadConfig(cfg)
		require.NoError(t, err)
		return p
	}
	reloadConfig(t, cfg, addr, subJSON(nqn, 1, nil, nsJSON(1, 1, d1, ""), nsJSON(2, 1, d2, "")))
	tg, err := target.New(target.Config{Logf: t.Logf})
	require.NoError(t, err)
	s := &served{t: tg, logf: t.Logf}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, s.apply(ctx, load()))
	require.NoError(t, s.listen(ctx, load().ports))
	defer func() {
		tg.Close()
		s.close()
	}()
	c, err := host.Connect(ctx, "tcp", addr, nqn, host.Config{IOQueues: 1})
	require.NoError(t, err)
	defer c.Close()
	stuck := func(id uint32, g *gatedBackend) chan error {
		h, err := c.Namespace(ctx, id)
		require.NoError(t, err)
		g.armed.Store(true)
		wrote := make(chan error, 1)
		go func() { _, err := h.WriteAt(make([]byte, 4096), 0); wrote <- err }()
		<-g.entered
		return wrote
	}
	closedSoon := func(g *gatedBackend) bool {
		return g.closed.Load() || func() bool { time.Sleep(50 * time.Millisecond); return g.closed.Load() }()
	}

	g2 := gated["d2.img"]
	wrote2 := stuck(2, g2)
	reloadConfig(t, cfg, addr, subJSON(nqn, 1, nil, nsJSON(1, 1, d1, ""), nsJSON(2, 0, d2, "")))
	start := time.Now()
	require.NoError(t, s.apply(ctx, load()), "the reload goes on")
	require.Less(t, time.Since(start), 5*time.Second)
	require.Equal(t, []uint32{1}, active(t, ctx, c), "namespace 2 is gone at once")
	require.False(t, closedSoon(g2), "closed under a stuck write")
	close(g2.release)
	require.NoError(t, <-wrote2)
	require.Eventually(t, g2.closed.Load, 10*time.Second, 5*time.Millisecond, "closed once the write was done")

	g1 := gated["d1.img"]
	wrote1 := stuck(1, g1)
	reloadConfigLinks(t, cfg, addr, nil)
	start = time.Now()
	require.NoError(t, s.apply(ctx, load()))
	require.Less(t, time.Since(start), 5*time.Second)
	require.Empty(t, s.subs)
	require.False(t, closedSoon(g1), "closed under a stuck write")
	close(g1.release)
	<-wrote1 // the host lost its queue with the subsystem: either outcome
	require.Eventually(t, g1.closed.Load, 10*time.Second, 5*time.Millisecond, "closed once the write was done")
}
