package rsocket

import (
	"context"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// rs_conn_data as rsocket.c lays it out: big-endian, 40 octets.
func TestConnDataLayout(t *testing.T) {
	b := connData{version: 1, flags: connFlagIOMap, credits: 384,
		targetSGL: sge{addr: 0x0102030405060708, key: 0x11223344, len: 2},
		dataBuf:   sge{addr: 0xa1a2a3a4a5a6a7a8, key: 0x55667788, len: 65536}}.marshal()
	want := []byte{1, 2, 0x01, 0x80, 0, 0, 0, 0,
		1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 2,
		0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0x55, 0x66, 0x77, 0x88, 0, 1, 0, 0}
	require.Equal(t, want, b)
	c, err := parseConnData(b)
	require.NoError(t, err)
	require.Equal(t, uint16(384), c.credits)
	require.Equal(t, uint64(0xa1a2a3a4a5a6a7a8), c.dataBuf.addr)

	for name, p := range map[string][]byte{
		"short":      b[:39],
		"version 2":  append([]byte{2}, b[1:]...),
		"big-endian": append([]byte{1, connFlagNet | connFlagIOMap}, b[2:]...),
		"no credits": append(append([]byte{}, b[:2]...), append([]byte{0, 0}, b[4:]...)...),
	} {
		_, err := parseConnData(p)
		require.Error(t, err, name)
	}
	_, err = parseConnData(append([]byte{1, connFlagNet}, b[2:]...))
	require.ErrorIs(t, err, ErrByteOrder)
}

// A reader gives credits and ring only once the writer has run out of
// them: one small message read sends nothing back.
func TestNoUpdateWhileThePeerHasRoom(t *testing.T) {
	leakCheck(t)
	c1, c2 := pair(t, Options{Credits: 8})
	buf := make([]byte, 10)
	for i := range 3 {
		_, err := c1.Write(buf)
		require.NoError(t, err)
		_, err = io.ReadFull(c2, buf)
		require.NoError(t, err, "message %d", i)
	}
	time.Sleep(50 * time.Millisecond)
	c1.mu.Lock()
	comp, second := c1.sseqComp, c1.target[1]
	c1.mu.Unlock()
	require.Equal(t, uint16(8), comp, "no credit update: the writer has 5 credits left")
	require.Zero(t, second.len, "the second half of the ring not offered yet")
	// Using up the credits brings the update.
	for range 5 {
		_, err := c1.Write(buf)
		require.NoError(t, err)
	}
	_, err := io.ReadFull(c2, make([]byte, 50))
	require.NoError(t, err)
	c1.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err = c1.Write(buf)
	require.NoError(t, err, "credits given back")
}

// rawPeer dials ln as a raw verbs peer with a well-formed rs_conn_data
// (8 credits, a 1 KiB buffer) and its receives posted.
func rawPeer(t *testing.T, ln *Listener) (*verbs.QP, *verbs.MR) {
	dev, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(16)
	require.NoError(t, err)
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, SigAll: true, IRD: 1, ORD: 1})
	require.NoError(t, err)
	t.Cleanup(func() { qp.Close() })
	mr, err := pd.RegMR(make([]byte, 4096), verbs.LocalWrite|verbs.RemoteWrite)
	require.NoError(t, err)
	for range 8 {
		_, err := qp.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{mr.SGE(0, 4)}})
		require.NoError(t, err)
	}
	cd := connData{version: 1, credits: 8, targetSGL: sge{addr: mr.Addr(), key: mr.RKey(), len: 2},
		dataBuf: sge{addr: mr.Addr() + 64, key: mr.RKey(), len: 1024}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, qp.Dial(ctx, "tcp", ln.Addr().String(), verbs.ConnConfig{PrivateData: cd.marshal()}))
	return qp, mr
}

// acceptRead accepts one connection and reads up to n octets from it.
func acceptRead(ln *Listener, n int) chan error {
	errc := make(chan error, 1)
	go func() {
		c, err := ln.AcceptRsocket()
		if err == nil {
			_, err = io.ReadFull(c, make([]byte, n))
			c.Close()
		}
		errc <- err
	}()
	return errc
}

func sendMsg(t *testing.T, qp *verbs.QP, m uint32) {
	var msg [4]byte
	binary.LittleEndian.PutUint32(msg[:], m)
	_, err := qp.PostSend(verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: msg[:]})
	require.NoError(t, err)
}

// A peer that claims to have written more than the ring it was given is
// cut off with ErrProtocol; the Conn's Read says so.
func TestPeerOverrunsRing(t *testing.T) {
	leakCheck(t)
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	errc := acceptRead(ln, 100)
	qp, _ := rawPeer(t, ln)
	sendMsg(t, qp, msgSet(opData, 1<<20)) // 1 MiB into a 128 KiB half
	select {
	case err := <-errc:
		require.ErrorIs(t, err, ErrProtocol)
		t.Logf("the Conn's Read: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no error from the Conn")
	}
	<-qp.Done()
	require.Error(t, qp.Err(), "the connection is reset")
}

// rsocket.c's keep-alive over iWARP is a zero-length RDMA Write to STag 0
// (tcp_svc_send_keepalive): it names no buffer, and the stream goes on.
func TestPeerKeepalive(t *testing.T) {
	leakCheck(t)
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	errc := acceptRead(ln, 5)
	qp, mr := rawPeer(t, ln)
	_, err = qp.PostSend(verbs.SendWR{Opcode: verbs.OpRDMAWrite}) // RKey 0, RemoteAddr 0, no data
	require.NoError(t, err)
	// Then 5 octets of data the rsockets way: into the Conn's ring (its
	// rs_conn_data's data_buf), then RS_OP_DATA.
	peer, err := parseConnData(qp.PeerPrivateData())
	require.NoError(t, err)
	copy(mr.Buf()[2048:], "hello")
	_, err = qp.PostSend(verbs.SendWR{Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{mr.SGE(2048, 5)},
		RemoteAddr: peer.dataBuf.addr, RKey: peer.dataBuf.key})
	require.NoError(t, err)
	sendMsg(t, qp, msgSet(opData, 5))
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("no data")
	}
	<-qp.Done() // the Conn closed after its read
	require.ErrorIs(t, qp.Err(), verbs.ErrDisconnected, "an orderly end, no Terminate")
}

// A client that does not speak rsockets (no rs_conn_data, or another
// version) is rejected in MPA; the Listener goes on accepting.
func TestListenerRejectsOthers(t *testing.T) {
	leakCheck(t)
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan *Conn, 1)
	go func() {
		c, err := ln.AcceptRsocket()
		if err != nil {
			c = nil
		}
		accepted <- c
	}()
	dev, err := verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	defer dev.Close()
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(4)
	require.NoError(t, err)
	bad := connData{version: 2, credits: 8, targetSGL: sge{len: 2}, dataBuf: sge{len: 1024}}.marshal()
	for _, pd2 := range [][]byte{nil, []byte("not rsockets"), bad} {
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = qp.Dial(ctx, "tcp", ln.Addr().String(), verbs.ConnConfig{PrivateData: pd2})
		cancel()
		require.ErrorIs(t, err, mpa.ErrRejected, "private data %q", pd2)
		qp.Close()
	}
	c, err := Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	s := <-accepted
	require.NotNil(t, s)
	defer s.Close()
	_, err = c.Write([]byte("ok"))
	require.NoError(t, err)
	_, err = io.ReadFull(s, make([]byte, 2))
	require.NoError(t, err)
}
