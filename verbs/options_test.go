package verbs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

// exercise runs a Send, an RDMA Write and an RDMA Read of n octets each way
// the pair allows, checking the data.
func exercise(t *testing.T, c, s *side, n int) {
	t.Helper()
	src := c.regFilled(t, n, 0, uint64(n))
	rbuf := s.regMR(t, n, LocalWrite)
	_, err := s.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{rbuf.SGE(0, n)}})
	require.NoError(t, err)
	_, err = c.qp.PostSend(SendWR{ID: 1, Opcode: OpSend, Flags: Signaled, SGL: []SGE{src.SGE(0, n)}})
	require.NoError(t, err)
	waitOK(t, c.scq, WCSend)
	require.Equal(t, uint32(n), waitOK(t, s.rcq, WCRecv).ByteLen)
	requireSame(t, src.Buf()[:n], rbuf.Buf()[:n])

	wdst := s.regMR(t, n, LocalWrite|RemoteWrite|RemoteRead)
	_, err = c.qp.PostSend(SendWR{ID: 2, Opcode: OpRDMAWrite, SGL: []SGE{src.SGE(0, n)}, RemoteAddr: wdst.Addr(), RKey: wdst.RKey()})
	require.NoError(t, err)
	// An unsignaled Write followed by a Read of the same memory: the Read
	// sees the Write, since the responder serves it after placing the Write.
	back := c.regMR(t, n, LocalWrite)
	_, err = c.qp.PostSend(SendWR{ID: 3, Opcode: OpRDMARead, Flags: Signaled, SGL: []SGE{back.SGE(0, n)},
		RemoteAddr: wdst.Addr(), RKey: wdst.RKey()})
	require.NoError(t, err)
	waitOK(t, c.scq, WCRDMARead)
	requireSame(t, src.Buf()[:n], back.Buf()[:n])
}

func TestConnectionOptions(t *testing.T) {
	type tc struct {
		name           string
		client, server mpa.Config
	}
	var cases []tc
	for _, rev := range []uint8{1, 2} {
		for _, crc := range []mpa.CRCPolicy{mpa.CRCOn, mpa.CRCOff} {
			for _, mk := range []string{"none", "tx", "rx", "both"} {
				c := mpa.Config{Rev: rev, CRC: crc, IRD: 8, ORD: 8, MarkersRx: mk == "rx" || mk == "both"}
				s := mpa.Config{Rev: rev, CRC: crc, IRD: 8, ORD: 8, MarkersRx: mk == "tx" || mk == "both"}
				cases = append(cases, tc{fmt.Sprintf("rev%d/crc-%v/markers-%s", rev, crc, mk), c, s})
			}
		}
	}
	for _, rtr := range []mpa.RTR{mpa.RTRSend, mpa.RTRWrite, mpa.RTRRead} {
		c := mpa.Config{P2P: mpa.P2POn, RTRs: rtr, IRD: 8, ORD: 8}
		s := mpa.Config{P2P: mpa.P2POn, RTRs: mpa.RTRSend | mpa.RTRWrite | mpa.RTRRead, IRD: 8, ORD: 8}
		cases = append(cases, tc{"p2p/" + rtr.String(), c, s})
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			checkRoutines(t)
			c, s := connect(t, pairOpts{client: ConnConfig{MPA: k.client}, server: ConnConfig{MPA: k.server}})
			require.Equal(t, c.qp.params.CRC, s.qp.params.CRC)
			require.Equal(t, c.qp.params.MarkersTx, s.qp.params.MarkersRx)
			require.Equal(t, c.qp.params.MarkersRx, s.qp.params.MarkersTx)
			require.Equal(t, k.client.CRC == mpa.CRCOn, c.qp.params.CRC)
			require.Equal(t, k.client.MarkersRx, c.qp.params.MarkersRx)
			for _, n := range []int{1, 1000, 70000, 300000} {
				exercise(t, c, s, n)
			}
		})
	}
}

func TestRejectWithPrivateData(t *testing.T) {
	checkRoutines(t)
	c := newSide(t, pairOpts{})
	srv := newSide(t, pairOpts{})
	defer c.qp.Close()
	defer srv.qp.Close()
	ln, err := srv.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{})
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			if string(req.PrivateData) != "let me in" {
				req.Reject([]byte("wrong word"))
				return
			}
			req.Reject([]byte("go away"))
		}
	}()
	err = c.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{PrivateData: []byte("let me in")})
	require.ErrorIs(t, err, mpa.ErrRejected)
	var re *mpa.RejectError
	require.True(t, errors.As(err, &re))
	require.Equal(t, "go away", string(re.PrivateData))
	require.Equal(t, StateIdle, c.qp.State())
}

// A responder that cannot meet the initiator's ORD rejects, and the Reject
// tells the initiator the responder's IRD and ORD (RFC 6581 section 9.1) so
// that it can retry with what the responder offers.
func TestRejectCarriesResponderIRDORD(t *testing.T) {
	checkRoutines(t)
	srv := newSide(t, pairOpts{ird: 4, ord: 2})
	defer srv.qp.Close()
	ln, err := srv.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", ConnConfig{MPA: mpa.Config{StrictIRD: true}})
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	accepted := make(chan error, 2)
	go func() {
		for range 2 {
			req, err := ln.GetRequest(ctx)
			if err == nil {
				err = req.Accept(ctx, srv.qp, nil)
			}
			accepted <- err
		}
	}()
	c := newSide(t, pairOpts{ird: 64, ord: 64})
	defer c.qp.Close()
	err = c.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{})
	var re *mpa.RejectError
	require.ErrorAs(t, err, &re)
	require.NotNil(t, re.Responder)
	require.ErrorIs(t, <-accepted, mpa.ErrInsufficientIRD)
	// A echoed: our Request offered peer-to-peer mode (P2PAuto).
	require.Equal(t, mpa.IRDORD{IRD: 4, ORD: 2, P2P: true}, *re.Responder)

	// Retrying with what the responder offers connects.
	c2 := newSide(t, pairOpts{ird: int(re.Responder.ORD), ord: int(re.Responder.IRD)})
	defer c2.qp.Close()
	err = c2.qp.Dial(ctx, "tcp", ln.Addr().String(), ConnConfig{})
	require.NoError(t, err)
	require.NoError(t, <-accepted)
}

func TestPrivateDataExchange(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{clientPD: []byte("hello from client"), serverPD: []byte("hello from server")})
	require.Equal(t, "hello from client", string(s.peerPD))
	require.Equal(t, "hello from server", string(c.peerPD))
}

// The start-up timeouts bound the start-up only: a connection that idles
// longer than them afterwards keeps working.
func TestStartupDeadlinesDoNotOutliveStartup(t *testing.T) {
	checkRoutines(t)
	// Short, and still far more than the start-up itself takes on a
	// loaded machine, which must beat it.
	short := 500 * time.Millisecond
	c, s := connect(t, pairOpts{
		client: ConnConfig{ReplyTimeout: short},
		server: ConnConfig{RequestTimeout: short},
	})
	time.Sleep(3 * short)
	exercise(t, c, s, 100)
	exercise(t, s, c, 100)
}

func TestFirstFPDUDelay(t *testing.T) {
	checkRoutines(t)
	start := time.Now()
	c, s := connect(t, pairOpts{client: ConnConfig{FirstFPDUDelay: 100 * time.Millisecond}})
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	exercise(t, c, s, 10)
}

// A QP created with negative IRD/ORD advertises MPA IRD/ORD 0/0 (what
// perftest sends for tests without Reads), and a Read Request to it is
// answered with a Terminate: it serves none. (Without peer-to-peer mode: a
// Read RTR takes one ORD credit, as in siw.)
func TestZeroIRDORD(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{ird: -1, ord: -1, client: ConnConfig{MPA: mpa.Config{P2P: mpa.P2POff}}})
	require.Zero(t, c.qp.Params().IRD)
	require.Zero(t, c.qp.Params().ORD)
	require.Zero(t, s.qp.Params().IRD)
	// Sends and Writes work; a Read cannot be issued at all.
	src := c.regFilled(t, 100, 0, 9)
	dst := s.regMR(t, 100, LocalWrite|RemoteWrite|RemoteRead)
	_, err := c.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMAWrite, Flags: Signaled, SGL: []SGE{src.SGE(0, 100)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	require.NoError(t, err)
	waitOK(t, c.scq, WCRDMAWrite)
	sink := c.regMR(t, 100, LocalWrite)
	_, err = c.qp.PostSend(SendWR{ID: 2, Opcode: OpRDMARead, SGL: []SGE{sink.SGE(0, 100)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	require.ErrorIs(t, err, ErrInvalidArg)
}

// Close gives the QP's slot back once, and a closed QP does not connect.
func TestCloseIdleQP(t *testing.T) {
	checkRoutines(t)
	d := openDev(DeviceAttr{MaxQP: 1})
	pd := d.AllocPD()
	cq, err := d.CreateCQ(8)
	require.NoError(t, err)
	cfg := QPConfig{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}}
	qp, err := pd.CreateQP(cfg)
	require.NoError(t, err)
	_, err = pd.CreateQP(cfg)
	require.ErrorIs(t, err, ErrResources)
	require.NoError(t, qp.Close())
	require.NoError(t, qp.Close())
	err = qp.Dial(context.Background(), "tcp", "127.0.0.1:1", ConnConfig{})
	require.ErrorIs(t, err, ErrClosed)
	qp2, err := pd.CreateQP(cfg)
	require.NoError(t, err, "the closed QP's slot is free again, once")
	qp2.Close()
}
