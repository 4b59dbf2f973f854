package verbs

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"
)

// A connection over IPv6 (::1) does what one over IPv4 does: the
// connection manager's private data both ways, an RDMA Write, an RDMA Read
// and a Send, and the QP's addresses are IPv6 ones.
func TestIPv6(t *testing.T) {
	if !nettest.SupportsIPv6() {
		t.Skip("IPv6 is not available on this machine (no ::1 to listen on)")
	}
	checkRoutines(t)
	client, server := newSide(t, pairOpts{}), newSide(t, pairOpts{})
	defer client.dev.Close()
	defer server.dev.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := server.dev.Listen(ctx, "tcp6", "[::1]:0", ConnConfig{})
	require.NoError(t, err)
	defer ln.Close()
	mem := make([]byte, 4096)
	mr, err := server.pd.RegMR(mem, LocalWrite|RemoteWrite|RemoteRead)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			if string(req.PrivateData) != "hello" {
				req.Reject(nil)
				errc <- fmt.Errorf("private data %q", req.PrivateData)
				return
			}
			err = req.Accept(ctx, server.qp, mr.RemoteBuffer().Append(nil))
		}
		errc <- err
	}()
	require.NoError(t, client.qp.Dial(ctx, "tcp6", ln.Addr().String(), ConnConfig{PrivateData: []byte("hello")}))
	require.NoError(t, <-errc)
	for _, a := range []net.Addr{client.qp.LocalAddr(), client.qp.RemoteAddr(), server.qp.LocalAddr(), server.qp.RemoteAddr()} {
		ip := a.(*net.TCPAddr).IP
		require.True(t, ip.Equal(net.IPv6loopback), "%v", a)
	}
	rb, err := ParseRemoteBuffer(client.qp.PeerPrivateData())
	require.NoError(t, err)

	buf := make([]byte, 4096)
	cmr, err := client.pd.RegMR(buf, LocalWrite)
	require.NoError(t, err)
	copy(buf, "written over IPv6")
	_, err = client.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{cmr.SGE(0, 17)},
		RemoteAddr: rb.Addr, RKey: rb.RKey})
	require.NoError(t, err)
	waitOK(t, client.scq, WCRDMAWrite)
	clear(buf)
	_, err = client.qp.PostSend(SendWR{ID: 2, Opcode: OpRDMARead, Flags: Signaled, SGL: []SGE{cmr.SGE(0, 17)},
		RemoteAddr: rb.Addr, RKey: rb.RKey})
	require.NoError(t, err)
	waitOK(t, client.scq, WCRDMARead)
	require.Equal(t, "written over IPv6", string(buf[:17]))

	rbuf := make([]byte, 64)
	rmr, err := server.pd.RegMR(rbuf, LocalWrite)
	require.NoError(t, err)
	_, err = server.qp.PostRecv(RecvWR{ID: 3, SGL: []SGE{rmr.SGE(0, 64)}})
	require.NoError(t, err)
	_, err = client.qp.PostSend(SendWR{ID: 4, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("sent")})
	require.NoError(t, err)
	waitOK(t, client.scq, WCSend)
	wc := waitOK(t, server.rcq, WCRecv)
	require.Equal(t, "sent", string(rbuf[:wc.ByteLen]))
	// The Send after the Write orders it: the server sees the data now.
	require.Equal(t, "written over IPv6", string(mem[:17]))
}
