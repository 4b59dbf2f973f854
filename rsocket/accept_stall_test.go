package rsocket

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

// A client that sends its MPA Request (with well-formed rs_conn_data) and
// then never its RTR keeps only its own start-up waiting: another client
// is accepted at once, and Close ends the stalled start-up without leaks.
func TestAcceptNotHeldByStalledClient(t *testing.T) {
	leakCheck(t)
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan *Conn, 2)
	go func() {
		for {
			c, err := ln.AcceptRsocket()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()

	stalled, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer stalled.Close()
	cd := connData{version: 1, flags: connFlagIOMap, credits: 8, targetSGL: sge{addr: 4096, key: 1, len: 2},
		dataBuf: sge{addr: 8192, key: 1, len: 1024}}
	f, err := mpa.BuildRequest(mpa.Config{}, cd.marshal())
	require.NoError(t, err)
	req, err := f.Append(nil)
	require.NoError(t, err)
	_, err = stalled.Write(req)
	require.NoError(t, err)
	// The Listener has answered the stalled request and waits for its RTR
	// (a pause here did not ensure that on a loaded machine, and the good
	// client then came first and proved nothing).
	require.Eventually(t, func() bool { return ln.starts.len() == 1 }, 5*time.Second, time.Millisecond,
		"the stalled start-up under way")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var d Dialer
	start := time.Now()
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	require.NoError(t, err, "a good client waited behind the stalled one")
	defer c.Close()
	select {
	case a := <-accepted:
		require.NotNil(t, a)
		defer a.Close()
	case <-time.After(3 * time.Second):
		t.Fatal("the good client was not accepted")
	}
	t.Logf("accepted in %v", time.Since(start))
}
