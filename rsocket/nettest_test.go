package rsocket

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"
)

// Every net.Conn rule, as golang.org/x/net/nettest checks them.
func TestNetConn(t *testing.T) {
	leakCheck(t)
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		ch := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				c = nil
			}
			ch <- c
		}()
		c1, err = Dial("tcp", ln.Addr().String())
		c2 = <-ch
		if err != nil || c2 == nil {
			return nil, nil, nil, err
		}
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	})
}

// An ordinary net/http server and client, over rsockets.
func TestHTTP(t *testing.T) {
	leakCheck(t)
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	body := strings.Repeat("rsockets over iWARP. ", 20000)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("X-Got", string(rune('0'+len(in)%10)))
		io.WriteString(w, body)
	}))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d Dialer
		return d.DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	for i := range 5 { // the later ones reuse the connection
		resp, err := client.Post(srv.URL, "text/plain", strings.NewReader(strings.Repeat("x", 1000*i+7)))
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, string(rune('0'+(1000*i+7)%10)), resp.Header.Get("X-Got"))
		require.Equal(t, body, string(got))
	}
}
