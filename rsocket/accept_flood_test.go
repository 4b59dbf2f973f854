package rsocket

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/internal/flood"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

// stalledRequest is an MPA Request with well-formed rs_conn_data in
// peer-to-peer mode: a client that sends it and nothing more holds its
// start-up until the RTR's timeout.
func stalledRequest(t *testing.T) []byte {
	cd := connData{version: 1, flags: connFlagIOMap, credits: 8, targetSGL: sge{addr: 4096, key: 1, len: 2},
		dataBuf: sge{addr: 8192, key: 1, len: 1024}}
	f, err := mpa.BuildRequest(mpa.Config{}, cd.marshal())
	require.NoError(t, err)
	require.True(t, f.Enhanced, "peer-to-peer mode: the Listener waits for an RTR")
	b, err := f.Append(nil)
	require.NoError(t, err)
	return b
}

// echoServer accepts connections on ln and echoes each until it closes;
// the returned function closes ln and waits for the echoes to end.
func echoServer(ln *Listener) (stop func()) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { io.Copy(c, c) })
		}
	})
	return func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// A sustained flood of clients that send their MPA Request (rsockets'
// private data, peer-to-peer mode) and never their RTR does not lock the
// Listener out: with all its start-ups busy, a new request ends the
// oldest, so a legitimate client connects and gets its echo within a
// second or two all along.
func TestAcceptStallFlood(t *testing.T) {
	leakCheck(t)
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	stop := echoServer(ln)
	defer stop()

	f := flood.StartWith(ln.Addr().String(), 10*time.Millisecond, stalledRequest(t))
	defer f.Close()
	// Several times acceptBacklog stalled start-ups (a pause of a second
	// is not that on a slow machine).
	require.Eventually(t, func() bool { return f.Count() > 3*acceptBacklog }, time.Minute, time.Millisecond,
		"the flood's first %d stalled clients", 3*acceptBacklog)
	var d Dialer
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
		cancel()
		require.NoError(t, err, "dial %d, %d stalled clients", i, f.Count())
		_, err = c.Write([]byte("ping"))
		require.NoError(t, err)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, 4)
		_, err = io.ReadFull(c, got)
		took := time.Since(start)
		c.Close()
		require.NoError(t, err)
		require.Equal(t, "ping", string(got))
		t.Logf("dial %d and echo in %v, %d stalled clients so far", i, took, f.Count())
		// Behind stalled start-ups it would wait for their RequestTimeout
		// (5 s); at once, it took up to 0.14 s under -race beside two CPU
		// hogs.
		require.Less(t, took, 2*time.Second, "the legitimate client waited behind stalled ones")
		time.Sleep(300 * time.Millisecond)
	}
	require.Greater(t, f.Count(), 3*acceptBacklog, "the flood ran")
}
