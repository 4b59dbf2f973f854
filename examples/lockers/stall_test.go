package main

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

// A client that stalls its start-up (TLS done, its MPA Request in
// peer-to-peer mode sent, its RTR never) holds up no other: Alice, who
// comes after it, stores and reads her locker at once, and the server's
// close ends the stalled start-up without leaks.
func TestLockersStalledClient(t *testing.T) {
	certs := newTestCerts(t)
	addr := startServer(t, certs.server)
	ctx := testCtx(t)

	c, err := tls.Dial("tcp", addr, certs.client(t, "mallory"))
	require.NoError(t, err)
	defer c.Close()
	f, err := mpa.BuildRequest(mpa.Config{}, nil)
	require.NoError(t, err)
	require.True(t, f.Enhanced, "peer-to-peer mode: the server waits for an RTR")
	b, err := f.Append(nil)
	require.NoError(t, err)
	_, err = c.Write(b)
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // the server has the stalled request first

	alice := certs.client(t, "alice")
	start := time.Now()
	require.NoError(t, put(ctx, addr, alice, []byte("alice's secret")))
	got, err := get(ctx, addr, alice)
	took := time.Since(start)
	require.NoError(t, err)
	require.Equal(t, "alice's secret", string(got))
	t.Logf("put and get in %v", took)
	// Behind the stalled client Alice would wait for its RequestTimeout
	// (5 s); served at once, she took 0.26 s under -race beside two CPU
	// hogs.
	require.Less(t, took, 2500*time.Millisecond, "Alice waited behind the stalled client")
}
