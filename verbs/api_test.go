package verbs

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/goiwarp/iwarp/tcpx"
	"github.com/stretchr/testify/require"
)

// The API's promises, one test each: what the library issue found sharp.

// A limit Open accepts works; one it cannot honour is refused there (it
// used to accept MaxSGE 8 and panic at the seventh SGE of a receive).
func TestOpenLimits(t *testing.T) {
	for _, a := range []DeviceAttr{{MaxSGE: maxSGE + 1}, {MaxSGE: -1}, {MaxIRD: mpa.MaxIRDORD + 1}, {MaxPrivData: 509}, {MaxMR: 1<<24 + 1}, {MaxQPWR: -5}} {
		_, err := Open(a)
		require.ErrorIs(t, err, ErrInvalidArg, "%+v", a)
	}
	checkRoutines(t)
	// The largest accepted SGE count, end to end.
	o := pairOpts{cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: maxSGE, MaxRecvSGE: maxSGE}}
	c, s := connect(t, o)
	src := c.regFilled(t, 6*10, 0, 1)
	dst := s.regMR(t, 6*10, LocalWrite)
	var ss, rs []SGE
	for i := range maxSGE {
		ss = append(ss, src.SGE(i*10, 10))
		rs = append(rs, dst.SGE((maxSGE-1-i)*10, 10))
	}
	_, err := s.qp.PostRecv(RecvWR{ID: 1, SGL: rs})
	require.NoError(t, err)
	_, err = c.qp.PostSend(SendWR{ID: 2, Opcode: OpSend, Flags: Signaled, SGL: ss})
	require.NoError(t, err)
	waitOK(t, c.scq, WCSend)
	require.Equal(t, uint32(60), waitOK(t, s.rcq, WCRecv).ByteLen)
	for i := range maxSGE {
		requireSame(t, src.Buf()[i*10:i*10+10], dst.Buf()[(maxSGE-1-i)*10:(maxSGE-i)*10])
	}
	_, err = s.qp.PostRecv(RecvWR{ID: 3, SGL: append(rs, dst.SGE(0, 1))})
	require.ErrorIs(t, err, ErrTooManySGE)
}

// A zero QPCap takes defaults, as a zero ConnConfig does.
func TestZeroQPCap(t *testing.T) {
	checkRoutines(t)
	d := openDev(DeviceAttr{})
	cq, err := d.CreateCQ(256)
	require.NoError(t, err)
	qp, err := d.AllocPD().CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq})
	require.NoError(t, err)
	defer qp.Close()
	require.Len(t, qp.sq, defaultQPWR)
	require.Len(t, qp.rq.ring, defaultQPWR)
}

// Device.Close closes what the device made and refuses more.
func TestDeviceClose(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	ln, err := s.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	require.NoError(t, s.dev.Close())
	require.NoError(t, s.dev.Close(), "twice")
	<-s.qp.Done()
	<-c.qp.Done()
	require.ErrorIs(t, c.qp.Err(), ErrDisconnected, "the device's QPs closed in order")
	_, err = ln.GetRequest(context.Background())
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.pd.CreateQP(QPConfig{SendCQ: s.scq, RecvCQ: s.rcq})
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.pd.RegMR(make([]byte, 8), LocalWrite)
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.ErrorIs(t, err, ErrClosed)
}

// Close is orderly (the peer sees an end of stream), Abort resets.
func TestCloseAndAbort(t *testing.T) {
	checkRoutines(t)
	for _, tc := range []struct {
		name string
		end  func(*QP) error
		peer error
	}{
		{"Close", (*QP).Close, ErrDisconnected},
		{"Abort", (*QP).Abort, ErrConnLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := connect(t, pairOpts{})
			exercise(t, c, s, 100)
			require.NoError(t, tc.end(s.qp))
			require.ErrorIs(t, s.qp.Err(), ErrDisconnected, "our own end")
			select {
			case <-c.qp.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the peer did not notice")
			}
			require.ErrorIs(t, c.qp.Err(), tc.peer)
			require.NoError(t, tc.end(s.qp), "again")
		})
	}
}

// Disconnect waits for the peer, and when ctx ends first it resets and
// says why with ctx's error.
func TestDisconnectContext(t *testing.T) {
	checkRoutines(t)
	st := newStackSide(t, ConnConfig{})
	q := st.newQP(t, 0, 0)
	p := answerDial(t, q.qp, ConnConfig{}, mpa.Config{IRD: 8, ORD: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := q.qp.Disconnect(ctx) // the raw peer never closes its side
	require.ErrorIs(t, err, context.DeadlineExceeded)
	p.wantClosed(t) // our FIN came first
	_, err = p.conn.Read(make([]byte, 1))
	require.Error(t, err)

	// A Disconnect the peer answers returns nil.
	c, s := connect(t, pairOpts{})
	go func() {
		<-s.qp.Done()
		s.qp.Close()
	}()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	require.NoError(t, c.qp.Disconnect(ctx2))
	require.ErrorIs(t, c.qp.Err(), ErrDisconnected)
}

// Accept in peer-to-peer mode waits for the RTR as long as ctx lets it.
func TestAcceptContext(t *testing.T) {
	checkRoutines(t)
	st := newStackSide(t, ConnConfig{RequestTimeout: time.Minute})
	q := st.newQP(t, 0, 0)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		r, err := st.ln.GetRequest(ctx)
		if err == nil {
			err = r.Accept(ctx, q.qp, nil)
		}
		errc <- err
	}()
	p := dialPeer(t, st.ln.Addr().String(), mpa.Config{P2P: mpa.P2POn, RTRs: mpa.RTRWrite, IRD: 8, ORD: 8})
	require.True(t, p.params.P2P)
	err := <-errc // no RTR sent
	require.ErrorIs(t, err, context.DeadlineExceeded)
	p.close()
}

// PollWait returns completions, or waits for the first; several waiters
// all wake while completions are queued.
func TestPollWait(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	var wcs [4]WC
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := s.rcq.PollWait(ctx, wcs[:])
	require.ErrorIs(t, err, context.DeadlineExceeded, "nothing to complete")

	const waiters = 3
	rb := s.regMR(t, 16*waiters, LocalWrite)
	for i := range waiters {
		_, err := s.qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{rb.SGE(16*i, 16)}})
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	got := make(chan int, waiters)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var one [1]WC
			n, err := s.rcq.PollWait(ctx, one[:])
			if err == nil {
				got <- n
			}
		}()
	}
	time.Sleep(20 * time.Millisecond) // all three waiting (not a correctness condition)
	for i := range waiters {
		_, err := c.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpSend, Flags: Inline, InlineData: []byte("x")})
		require.NoError(t, err)
	}
	wg.Wait()
	close(got)
	total := 0
	for n := range got {
		total += n
	}
	require.Equal(t, waiters, total, "each waiter got one completion")
	_, err = s.rcq.PollWait(context.Background(), nil)
	require.ErrorIs(t, err, ErrInvalidArg)
}

// Stats counts what the QP sent and received, and says how it ended.
func TestQPStats(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	before := c.qp.Stats()
	exercise(t, c, s, 3000)
	cs, ss := c.qp.Stats(), s.qp.Stats()
	require.Greater(t, cs.FPDUsSent, before.FPDUsSent)
	require.GreaterOrEqual(t, ss.FPDUsReceived, cs.FPDUsSent-before.FPDUsSent, "every FPDU the client sent arrived")
	// The receive side publishes its count before a completion and when it
	// waits for the socket: once all is in, the count is exact, that of a
	// last RDMA Write (which completes nothing on this side) included.
	src, wdst := c.regMR(t, 3000, LocalWrite), s.regMR(t, 3000, LocalWrite|RemoteWrite)
	_, err := c.qp.PostSend(SendWR{ID: 9, Opcode: OpRDMAWrite, SGL: []SGE{src.SGE(0, 3000)}, RemoteAddr: wdst.Addr(), RKey: wdst.RKey()})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.qp.Stats().FPDUsReceived == c.qp.Stats().FPDUsSent }, 5*time.Second, time.Millisecond,
		"received %d, sent %d", s.qp.Stats().FPDUsReceived, c.qp.Stats().FPDUsSent)
	require.Greater(t, cs.OctetsSent, uint64(2*3000), "a Send and a Write of 3000 octets")
	require.NoError(t, cs.TCPErr)
	require.NotZero(t, cs.TCP.BytesAcked)
	require.Zero(t, cs.TerminatesSent+cs.TerminatesReceived)

	// A Terminate: the raw peer writes to an STag it was never given.
	st := newStackSide(t, ConnConfig{})
	q := st.newQP(t, 0, 0)
	p := answerDial(t, q.qp, ConnConfig{}, mpa.Config{IRD: 8, ORD: 8})
	u := writeULPDU(0xdead00, 0, []byte("x"))
	p.send(t, u)
	p.wantTerminate(t, rdmapTermOrDDP(u))
	p.close()
	<-q.qp.Done()
	qs := q.qp.Stats()
	require.Equal(t, 1, qs.TerminatesSent)
	require.NotNil(t, qs.Terminate)
	require.Equal(t, rdmap.LayerDDP, qs.Terminate.Terminate.Layer)
	require.Error(t, qs.TCPErr, "closed")
}

func rdmapTermOrDDP(u []byte) rdmap.Terminate { return ddpTerm(1, 0, u) }

// The flag types say what they hold.
func TestFlagStrings(t *testing.T) {
	require.Equal(t, "SIGNALED|INLINE", (Signaled | Inline).String())
	require.Equal(t, "0", SendFlags(0).String())
	require.Equal(t, "WITH_INV|WITH_IMM", (WithInv | WithImm).String())
	require.Equal(t, "FENCE|0x80", (Fence | 0x80).String())
	require.Equal(t, "LocalWrite|RemoteRead", (LocalWrite | RemoteRead).String())
}

// PostRegMR keeps RegMR's rule: remote write needs local write.
func TestPostRegMRAccessRule(t *testing.T) {
	checkRoutines(t)
	c, _ := connect(t, pairOpts{})
	mr, err := c.pd.AllocMR()
	require.NoError(t, err)
	_, err = c.qp.PostRegMR(1, Signaled, mr, make([]byte, 64), RemoteWrite)
	require.ErrorIs(t, err, ErrInvalidArg)
	_, err = c.pd.RegMR(make([]byte, 64), RemoteWrite)
	require.ErrorIs(t, err, ErrInvalidArg)
	_, err = c.qp.PostRegMR(2, Signaled, mr, make([]byte, 64), LocalWrite|RemoteWrite)
	require.NoError(t, err)
	require.Equal(t, Success, waitOK(t, c.scq, WCRegMR).Status)
}

// DialContext makes Dial's connection; its error is Dial's.
func TestDialContextHook(t *testing.T) {
	checkRoutines(t)
	var dialled *net.TCPConn
	hook := func(ctx context.Context, network, addr string) (*net.TCPConn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		dialled = c.(*net.TCPConn)
		return dialled, nil
	}
	c, _ := connect(t, pairOpts{client: ConnConfig{DialContext: hook}})
	require.NotNil(t, dialled)
	require.Equal(t, dialled.LocalAddr().String(), c.qp.LocalAddr().String())

	q := newSide(t, pairOpts{})
	defer q.qp.Close()
	boom := errors.New("no route today")
	err := q.qp.Dial(context.Background(), "tcp", "127.0.0.1:1", ConnConfig{
		DialContext: func(context.Context, string, string) (*net.TCPConn, error) { return nil, boom }})
	require.ErrorIs(t, err, boom)
}

// TCP.LocalAddr is the source address of Dial's connection (rdma_cm's
// src_addr): the listener's request comes from it, and the connection
// moves data.
func TestDialFromLocalAddr(t *testing.T) {
	checkRoutines(t)
	var from net.Addr
	o := pairOpts{client: ConnConfig{TCP: tcpx.Config{LocalAddr: "127.0.0.2"}}}
	c, s := connect(t, o)
	from = s.qp.RemoteAddr()
	require.Equal(t, "127.0.0.2", from.(*net.TCPAddr).IP.String())
	require.Equal(t, c.qp.LocalAddr().String(), from.String())
	src := c.regFilled(t, 4096, LocalWrite, 7)
	dst := s.regMR(t, 4096, LocalWrite|RemoteWrite)
	_, err := c.qp.PostSend(SendWR{Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{src.SGE(0, 4096)},
		RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	require.NoError(t, err)
	waitOK(t, c.scq, WCRDMAWrite) // handed to TCP: not yet placed
	require.Eventually(t, func() bool { return dst.Placed() == 1 }, 5*time.Second, time.Millisecond)
	requireSame(t, src.Buf(), dst.Buf())

	q := newSide(t, pairOpts{})
	defer q.qp.Close()
	err = q.qp.Dial(context.Background(), "tcp", "127.0.0.1:1", ConnConfig{TCP: tcpx.Config{LocalAddr: "no.such.host"}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "LocalAddr")
}

// Polling memory for a peer's Write through MR.Placed is race-clean: run
// under -race, this test fails if the ordering is missing.
func TestPlacedOrdersWrites(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	const n = 20
	dst := s.regMR(t, 8, LocalWrite|RemoteWrite)
	for i := 1; i <= n; i++ {
		before := dst.Placed()
		_, err := c.qp.PostSend(SendWR{ID: uint64(i), Opcode: OpRDMAWrite, Flags: Inline,
			InlineData: []byte{byte(i), 0, 0, 0, 0, 0, 0, byte(i)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
		require.NoError(t, err)
		deadline := time.Now().Add(5 * time.Second)
		for dst.Placed() == before {
			require.True(t, time.Now().Before(deadline), "Write %d never placed", i)
		}
		b := dst.Buf()
		require.Equal(t, byte(i), b[0])
		require.Equal(t, byte(i), b[7])
	}
}

// A RemoteBuffer goes out in rping's 16 octets and comes back the same;
// a short one is refused.
func TestRemoteBuffer(t *testing.T) {
	b := RemoteBuffer{Addr: 1<<56 + 2<<48 + 3<<40 + 4, RKey: 0x0a0b0c0d, Len: 0x01020304}
	w := b.Append([]byte{0xff})
	require.Equal(t, []byte{0xff, 1, 2, 3, 0, 0, 0, 0, 4, 0x0a, 0x0b, 0x0c, 0x0d, 1, 2, 3, 4}, w)
	got, err := ParseRemoteBuffer(w[1:])
	require.NoError(t, err)
	require.Equal(t, b, got)
	for i := range RemoteBufferLen {
		_, err := ParseRemoteBuffer(w[1 : 1+i])
		require.ErrorIs(t, err, ErrInvalidArg)
	}
	mr, err := openDev(DeviceAttr{}).AllocPD().RegMR(make([]byte, 100), LocalWrite)
	require.NoError(t, err)
	require.Equal(t, RemoteBuffer{Addr: mr.Addr(), RKey: mr.RKey(), Len: 100}, mr.RemoteBuffer())
}
