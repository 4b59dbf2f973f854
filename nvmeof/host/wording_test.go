package host

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// An NSID with no active namespace is said to be so, with a typed error
// (its all-zero Identify data once gave "namespace block size outside 512
// octets .. 64 KiB"), and so is one outside the controller's range.
func TestNamespaceInactive(t *testing.T) {
	checkRoutines(t)
	c, _ := hostNS(t, 1<<20, Config{IOQueues: 1})
	ctx := testCtx(t)
	_, err := c.Namespace(ctx, 99)
	require.ErrorIs(t, err, ErrNoNamespace)
	require.ErrorContains(t, err, "namespace 99 is inactive")
	_, err = c.Namespace(ctx, 0xfffffffe)
	require.ErrorIs(t, err, ErrNoNamespace)
	requireStatus(t, err, nvme.StatusInvalidNamespace|nvme.DNR)
	_, err = c.Namespace(ctx, 1)
	require.NoError(t, err)
}

// A Connect to a subsystem the target does not have names the NQN, on the
// host's side and in the target's log.
func TestConnectWrongNQN(t *testing.T) {
	checkRoutines(t)
	var mu sync.Mutex
	var logs []string
	_, _, addr := newTestTarget(t, 1<<20, target.Config{Logf: func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, f)
		t.Logf(f, a...)
	}})
	const wrong = "nqn.2024-01.io.goiwarp:no-such-subsystem"
	_, err := Connect(testCtx(t), "tcp", addr, wrong, Config{})
	requireStatus(t, err, nvme.StatusConnectInvalidParm|nvme.DNR)
	require.ErrorContains(t, err, `no subsystem "`+wrong+`"`)
	require.ErrorContains(t, err, addr)
	t.Log(err)
	mu.Lock()
	defer mu.Unlock()
	require.True(t, slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, "no subsystem") }), "the target logs it")
}

// A target that stops (its connections open, nothing answered) ends the
// host's controller when Keep Alive goes unanswered for KATO, and says so:
// "keep-alive expired", not "a command timed out", and not the
// DeadlineExceeded of a caller's context.
func TestKeepAliveExpiredWording(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	p, via := newFreezeProxy(t, addr)
	c := connectHost(t, via, testNQN, Config{IOQueues: 1, KATO: 400 * time.Millisecond})
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	p.freeze()
	start := time.Now()
	_, err = ns.ReadAt(make([]byte, 4096), 0)
	took := time.Since(start)
	require.ErrorIs(t, err, ErrKeepAliveExpired)
	require.ErrorIs(t, err, ErrQueueDead)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "keep-alive expired")
	require.NotContains(t, err.Error(), "timed out")
	require.Less(t, took, 5*time.Second)
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	require.ErrorIs(t, c.Err(), ErrKeepAliveExpired)
	p.thaw()
}

// A queue's error carries the package's prefix once ("nvmeof: queue 0:
// nvmeof: …" was seen): a target whose CM reply is too short.
func TestQueueErrorPrefixOnce(t *testing.T) {
	checkRoutines(t)
	dev, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	defer dev.Close()
	ln, err := dev.Listen(context.Background(), "tcp", "127.0.0.1:0", verbs.ConnConfig{})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, err := ln.GetRequest(context.Background())
		if err != nil {
			return
		}
		cq, _ := dev.CreateCQ(16)
		qp, err := dev.AllocPD().CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		if err != nil {
			return
		}
		defer qp.Close()
		if req.Accept(context.Background(), qp, []byte{1, 2}) == nil {
			<-qp.Done()
		}
	}()
	_, err = Connect(testCtx(t), "tcp", ln.Addr().String(), testNQN, Config{})
	require.Error(t, err)
	t.Log(err)
	require.Equal(t, 1, strings.Count(err.Error(), "nvmeof:"), "%v", err)
	require.Contains(t, err.Error(), "nvmeof: queue 0: ")
	ln.Close()
	<-done
}
