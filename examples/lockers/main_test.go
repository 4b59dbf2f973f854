package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/internal/pki"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
)

type testCerts struct {
	ca     *pki.CA
	server *tls.Config
}

func newTestCerts(t *testing.T) *testCerts {
	ca, err := pki.NewCA("lockers test CA")
	require.NoError(t, err)
	srv, err := ca.Issue(pki.Options{CommonName: "server", Hosts: []string{"127.0.0.1"}})
	require.NoError(t, err)
	return &testCerts{ca: ca, server: &tls.Config{Certificates: []tls.Certificate{srv},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}}
}

// client is a client configuration for cn ("" for none).
func (c *testCerts) client(t *testing.T, cn string) *tls.Config {
	cfg := &tls.Config{RootCAs: c.ca.Pool()}
	if cn != "" {
		cert, err := c.ca.Issue(pki.Options{CommonName: cn, Client: true})
		require.NoError(t, err)
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// startServer runs the server until the test ends and returns its address.
func startServer(t *testing.T, tc *tls.Config) string {
	t.Cleanup(test.CheckRoutines(t))
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, "127.0.0.1:0", tc, func(a net.Addr) { addr <- a }) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case a := <-addr:
		return a.String()
	case err := <-done:
		t.Fatal(err)
	}
	return ""
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Each identity has its own locker, which keeps what it put across
// connections.
func TestLockersPerIdentity(t *testing.T) {
	certs := newTestCerts(t)
	addr := startServer(t, certs.server)
	ctx := testCtx(t)
	alice, bob := certs.client(t, "alice"), certs.client(t, "bob")
	require.NoError(t, put(ctx, addr, alice, []byte("alice's secret")))
	require.NoError(t, put(ctx, addr, bob, []byte("bob's note")))
	got, err := get(ctx, addr, alice)
	require.NoError(t, err)
	require.Equal(t, "alice's secret", string(got))
	got, err = get(ctx, addr, bob)
	require.NoError(t, err)
	require.Equal(t, "bob's note", string(got))
	// A new certificate for the same name is the same tenant.
	got, err = get(ctx, addr, certs.client(t, "alice"))
	require.NoError(t, err)
	require.Equal(t, "alice's secret", string(got))
}

// Bob, who learnt where Alice's locker is and its STag, can neither read
// nor write it: his QP is in his PD, the locker in hers. The stack ends
// his connection with a Terminate, and Alice's locker is unchanged.
func TestLockersIsolation(t *testing.T) {
	certs := newTestCerts(t)
	addr := startServer(t, certs.server)
	ctx := testCtx(t)
	alice := certs.client(t, "alice")
	require.NoError(t, put(ctx, addr, alice, []byte("alice's secret")))
	a, err := dial(ctx, addr, alice)
	require.NoError(t, err)
	lk := a.lk
	require.NoError(t, a.close())

	for _, op := range []verbs.SendOpcode{verbs.OpRDMARead, verbs.OpRDMAWrite} {
		b, err := dial(ctx, addr, certs.client(t, "bob"))
		require.NoError(t, err)
		require.NotEqual(t, lk.rkey, b.lk.rkey, "bob has a locker of his own")
		copy(b.buf.Buf(), "\x00\x00\x00\x05bob!!")
		err = b.do(ctx, op, 9, lk.addr, lk.rkey)
		if err == nil { // a Write completes once sent; the Terminate follows
			<-b.qp.Done()
			err = b.qp.Err()
		}
		var te *verbs.TerminateError
		require.True(t, errors.As(err, &te), "%v: %v", op, err)
		require.True(t, te.Remote, "the server's stack refused it")
		t.Logf("%v: %v", op, err)
		require.ErrorContains(t, err, "STag not associated with", "the STag is of another PD (RFC 5040, 5041)")
		b.dev.Close()
	}
	got, err := get(ctx, addr, alice)
	require.NoError(t, err)
	require.Equal(t, "alice's secret", string(got))
}

// Without a certificate the CA signed, or without TLS, there is no
// connection and no tenant.
func TestLockersRefused(t *testing.T) {
	certs := newTestCerts(t)
	addr := startServer(t, certs.server)
	ctx := testCtx(t)
	_, err := get(ctx, addr, certs.client(t, ""))
	require.ErrorContains(t, err, "tls: certificate required")

	dev, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	defer dev.Close()
	cq, err := dev.CreateCQ(1)
	require.NoError(t, err)
	qp, err := dev.AllocPD().CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
	require.NoError(t, err)
	err = qp.Dial(ctx, "tcp", addr, verbs.ConnConfig{})
	require.ErrorIs(t, err, mpa.ErrRejected)
	require.ErrorContains(t, err, "TLS required")
}
