package host

import (
	"context"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// After a clean Close, Err is ErrClosed; a controller that had failed
// before Close keeps its error.
func TestErrAfterClose(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	require.NoError(t, c.Err())
	require.NoError(t, c.Close())
	require.ErrorIs(t, c.Err(), ErrClosed)
	require.NotErrorIs(t, c.Err(), ErrQueueDead)

	d := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	d.Abort()
	<-d.admin.dead
	require.ErrorIs(t, d.Err(), ErrQueueDead)
	d.Close()
	require.ErrorIs(t, d.Err(), ErrQueueDead, "failed before Close")
	require.NotErrorIs(t, d.Err(), ErrClosed)
}

// An address without a port gets 4420, NVMe over Fabrics' port, for I/O
// and discovery controllers alike.
func TestDefaultPort(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1":      "192.0.2.1:4420",
		"192.0.2.1:4421": "192.0.2.1:4421",
		"target.example": "target.example:4420",
		"::1":            "[::1]:4420",
		"[::1]":          "[::1]:4420",
		"[::1]:8009":     "[::1]:8009",
		"fe80::1%eth0":   "[fe80::1%eth0]:4420",
	} {
		require.Equal(t, want, withDefaultPort(in), in)
	}

	checkRoutines(t)
	// A loopback address of its own, so that port 4420 is free.
	sub, err := target.NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespace(target.NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	tg, err := target.New(target.Config{Logf: t.Logf}, sub)
	require.NoError(t, err)
	defer tg.Close()
	const ip = "127.0.0.73"
	_, err = tg.Listen(context.Background(), "tcp", ip+":4420")
	require.NoError(t, err)
	c := connectHost(t, ip, testNQN, Config{IOQueues: 1})
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	_, err = ns.ReadAt(make([]byte, 512), 0)
	require.NoError(t, err)
	ents, err := Discover(testCtx(t), "tcp", ip, Config{})
	require.NoError(t, err)
	require.NotEmpty(t, ents)
	require.Equal(t, "4420", ents[0].TrSvcID)
	require.NoError(t, c.Close())
}
