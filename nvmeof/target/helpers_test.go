package target

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
)

const testNQN = "nqn.2024-01.io.goiwarp:test"

// checkRoutines fails the test if goroutines it started are still running
// when it ends (pion's CheckRoutines, as verbs' tests use).
func checkRoutines(t *testing.T) {
	t.Cleanup(test.CheckRoutines(t))
}

// newTestTarget starts a target with one subsystem of one RAM namespace
// of size octets on 127.0.0.1 and returns it with its address.
func newTestTarget(t *testing.T, size int64, cfg Config) (*Target, *Subsystem, string) {
	t.Helper()
	return newBackendTarget(t, NewMemBackend(size), cfg)
}

// newBackendTarget is newTestTarget with namespace 1 over b.
func newBackendTarget(t *testing.T, b Backend, cfg Config) (*Target, *Subsystem, string) {
	t.Helper()
	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespace(b, 512)
	require.NoError(t, err)
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	tg, err := New(cfg, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	addr, err := tg.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return tg, sub, addr.String()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func connectHost(t *testing.T, addr, nqn string, cfg host.Config) *host.Controller {
	t.Helper()
	c, err := host.Connect(testCtx(t), "tcp", addr, nqn, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
}

// serveNamespaces serves subsystem testNQN with a namespace of 1 MiB in
// memory for each configuration, on a port of its own (more with
// listenPorts), and returns the subsystem, its target and the port's
// address.
func serveNamespaces(t *testing.T, cfgs ...NamespaceConfig) (*Subsystem, *Target, string) {
	t.Helper()
	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	for _, cfg := range cfgs {
		_, err = sub.AddNamespaceConfig(NewMemBackend(1<<20), cfg)
		require.NoError(t, err)
	}
	tg, err := New(Config{Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	addr, err := tg.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return sub, tg, addr.String()
}

// listenPorts opens n ports of tg exposing sub, and returns them and
// their addresses.
func listenPorts(t *testing.T, tg *Target, sub *Subsystem, n int) ([]*Port, []string) {
	t.Helper()
	var ports []*Port
	var addrs []string
	for range n {
		p, err := tg.ListenPort(context.Background(), "tcp", "127.0.0.1:0", PortConfig{Subsystems: []string{sub.NQN}})
		require.NoError(t, err)
		ports, addrs = append(ports, p), append(addrs, p.Addr().String())
	}
	return ports, addrs
}

// hostNS connects a host with cfg to a new test target of size octets and
// opens namespace 1.
func hostNS(t *testing.T, size int64, cfg host.Config) (*host.Controller, *host.Namespace) {
	t.Helper()
	_, _, addr := newTestTarget(t, size, Config{})
	c := connectHost(t, addr, testNQN, cfg)
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	return c, ns
}

// aerProbe posts Asynchronous Event Requests on a host's admin queue by
// hand (the Go host's own watch keeps one of its own) and waits for their
// completions: post returns the request's number, noticed reports whether
// it completed within the time with a success and the event want. A
// request still held when the controller closes ends with it.
func aerProbe(t *testing.T, c *host.Controller, want uint64) (post func() int, noticed func(i int, within time.Duration) bool) {
	type result struct {
		res uint64
		err error
	}
	var done []chan result
	post = func() int {
		ch := make(chan result, 1)
		done = append(done, ch)
		go func() {
			res, err := c.AdminCommand(context.Background(), func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminAER, 0, 0, 0, 0) }, nil)
			ch <- result{res, err}
		}()
		return len(done) - 1
	}
	noticed = func(i int, within time.Duration) bool {
		t.Helper()
		select {
		case r := <-done[i]:
			require.NoError(t, r.err)
			require.EqualValues(t, want, r.res, "the event")
			return true
		case <-time.After(within):
			return false
		}
	}
	return post, noticed
}

// connectMultipath connects a Multipath of one I/O queue a path to addrs.
func connectMultipath(t *testing.T, addrs ...string) *host.Multipath {
	t.Helper()
	m, err := host.ConnectMultipath(testCtx(t), "tcp", addrs, testNQN, host.MultipathConfig{Config: host.Config{IOQueues: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}
