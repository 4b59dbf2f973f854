package verbs

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// Error-path tests with a scripted raw peer (rawpeer_test.go): the peer
// sends a malformed or forbidden FPDU, and each test checks
//
//   - the exact Terminate message the stack sends back, then its half-close;
//   - the QP's state (ERROR) and qp.Err(), a *TerminateError with Remote
//     false, the cause on the wire and the local error behind it;
//   - that outstanding work requests complete with WRFlushErr: an RDMA Read
//     the peer never answers and a fenced Send held behind it, and the
//     receives posted before the error;
//   - that no octet of the stack's memory changed where it must not: every
//     region is registered between guard octets, and regions the bad FPDU
//     targets must be entirely untouched;
//   - that the listener still serves a good connection afterwards;
//   - that no goroutine is left behind.
//
// The expected error for each case comes from RFC 5041 section 7 (DDP
// checks and codes), RFC 5040 sections 4.8 and 7 (Terminate format, RDMAP
// checks and codes) and RFC 5044 section 8 (MPA codes); where the RFCs leave
// the choice open, the comment says whose choice the test follows.
//
// This file is the harness; the scenarios are in scripted_*_test.go by
// class: placement, read, header, mpa, terminate.

// scenarioOpts configure one error scenario.
type scenarioOpts struct {
	server   ConnConfig  // the stack's listener configuration
	peer     *mpa.Config // the raw peer's start-up policy; nil: Rev 2, CRC, IRD = ORD = 8
	ird, ord int         // the stack QP's IRD and ORD limits (0: device maximum)
	recvs    int         // receives posted before the error (IDs 1..recvs)
	recvLen  int         // octets each (default 64)
	noRead   bool        // no RDMA Read (and fenced Send) outstanding at the error
}

// scenario is a stack QP connected to a raw peer, with memory to aim at and
// work outstanding.
type scenario struct {
	st         *stackSide
	q          *stackQP
	p          *rawPeer
	dst        *guarded // RemoteWrite|RemoteRead region, the usual target
	sink       *guarded // the outstanding Read's sink
	rbuf       *guarded // the receive buffers
	recvs      int
	recvLen    int
	read       bool
	readStatus WCStatus          // how the outstanding Read completes (Success: flushed)
	readReq    rdmap.ReadRequest // the stack's outstanding Read Request, as the peer got it

	regions  []*guarded
	names    []string
	mayPlace map[*guarded]bool // written by a legal or half-legal FPDU: check guards only
}

const (
	readWRID   = 101
	fencedWRID = 102
)

func startScenario(t *testing.T, o scenarioOpts) *scenario {
	t.Helper()
	s := &scenario{recvs: o.recvs, recvLen: o.recvLen, mayPlace: map[*guarded]bool{}}
	if s.recvLen == 0 {
		s.recvLen = 64
	}
	s.st = newStackSide(t, o.server)
	s.q = s.st.newQP(t, o.ird, o.ord)
	s.dst = s.region(t, "target region", s.st.pd, 4096, LocalWrite|RemoteWrite|RemoteRead)
	if o.recvs > 0 {
		s.rbuf = s.region(t, "receive buffers", s.st.pd, o.recvs*s.recvLen, LocalWrite)
		for i := 0; i < o.recvs; i++ {
			_, err := s.q.qp.PostRecv(RecvWR{ID: uint64(i + 1), SGL: []SGE{s.rbuf.mr.SGE(i*s.recvLen, s.recvLen)}})
			require.NoError(t, err)
		}
	}
	pc := mpa.Config{IRD: 8, ORD: 8}
	if o.peer != nil {
		pc = *o.peer
	}
	s.p = s.st.acceptPeer(t, s.q, pc)
	if !o.noRead {
		s.read = true
		s.sink = s.region(t, "Read sink", s.st.pd, 32, LocalWrite)
		sink := s.sink
		_, err := s.q.qp.PostSend(
			SendWR{ID: readWRID, Opcode: OpRDMARead, Flags: Signaled, SGL: []SGE{sink.mr.SGE(0, 32)},
				RemoteAddr: 0x1000, RKey: 0x1234},
			SendWR{ID: fencedWRID, Opcode: OpSend, Flags: Signaled | Fence | Inline, InlineData: []byte("fenced")})
		require.NoError(t, err)
		s.readReq = bytes.Clone(s.p.wantReadRequest(t, 1))
		require.Equal(t, sink.mr.RKey(), s.readReq.SinkSTag())
		require.Equal(t, uint32(32), s.readReq.Size())
	}
	return s
}

// region registers n octets between guards and has finish check them.
func (s *scenario) region(t *testing.T, name string, pd *PD, n int, acc Access) *guarded {
	t.Helper()
	g := regGuarded(t, pd, n, acc)
	s.regions = append(s.regions, g)
	s.names = append(s.names, name)
	return g
}

// wantTerminate reads the Terminate for want and checks everything that
// follows from it. recv are the statuses of the posted receives, in order;
// the ones not given must be WRFlushErr.
func (s *scenario) wantTerminate(t *testing.T, want rdmap.Terminate, recv ...WCStatus) {
	t.Helper()
	s.p.wantTerminate(t, want)
	s.finishLocal(t, want, recv...)
}

// finishLocal checks the rest after the stack sent the Terminate for want.
func (s *scenario) finishLocal(t *testing.T, want rdmap.Terminate, recv ...WCStatus) {
	t.Helper()
	s.p.wantClosed(t) // the stack half-closes after its Terminate
	s.p.close()
	qp := s.q.qp
	waitDone(t, qp, peerTimeout)
	te := termErr(t, qp)
	require.False(t, te.Remote, "qp.Err() = %v: a Terminate we sent", te)
	require.Equal(t, want.Cause(), te.Terminate.Cause(), "qp.Err() = %v", te)
	require.Equal(t, want, te.Terminate, "qp.Err().Terminate")
	require.Error(t, te.Err, "the local error behind the Terminate")
	require.Equal(t, want.Cause(), rdmap.CauseOf(te.Err), "cause of %v", te.Err)
	s.checkAfter(t, recv)
}

// wantRemoteTerminate checks the outcome of a Terminate the peer sent: the
// stack answers with nothing but the end of its stream.
func (s *scenario) wantRemoteTerminate(t *testing.T, want rdmap.Terminate) {
	t.Helper()
	s.p.wantClosed(t)
	s.p.close()
	qp := s.q.qp
	waitDone(t, qp, peerTimeout)
	te := termErr(t, qp)
	require.True(t, te.Remote, "qp.Err() = %v: the peer's Terminate", te)
	require.Equal(t, want, te.Terminate, "decoded Terminate")
	s.readStatus = readBlame(want)
	s.checkAfter(t, nil)
}

// checkAfter checks completions, memory, later posts and the listener.
func (s *scenario) checkAfter(t *testing.T, recv []WCStatus) {
	t.Helper()
	qp := s.q.qp
	var wantS, gotS []string
	if s.read {
		st := s.readStatus
		if st == Success {
			st = WRFlushErr
		}
		wantS = append(wantS, wcString(readWRID, WCRDMARead, st), wcString(fencedWRID, WCSend, WRFlushErr))
	}
	for _, wc := range drainWC(s.q.scq) {
		gotS = append(gotS, wcString(wc.ID, wc.Opcode, wc.Status))
	}
	require.Equal(t, wantS, gotS, "send completions")
	var wantR, gotR []string
	for i := 0; i < s.recvs; i++ {
		st := WRFlushErr
		if i < len(recv) {
			st = recv[i]
		}
		wantR = append(wantR, wcString(uint64(i+1), WCRecv, st))
	}
	for _, wc := range drainWC(s.q.rcq) {
		gotR = append(gotR, wcString(wc.ID, wc.Opcode, wc.Status))
	}
	require.Equal(t, wantR, gotR, "receive completions")

	for i, g := range s.regions {
		if s.mayPlace[g] {
			g.requireGuards(t, s.names[i])
		} else {
			g.requireUntouched(t, s.names[i])
		}
	}

	// In ERROR, new work requests flush at once (ibverbs drain semantics).
	_, err := qp.PostSend(SendWR{ID: 200, Opcode: OpSend, Flags: Signaled | Inline, InlineData: []byte("late")})
	require.NoError(t, err)
	require.Equal(t, wcString(200, WCSend, WRFlushErr), wcOf(waitWC(t, s.q.scq)))
	_, err = qp.PostRecv(RecvWR{ID: 201})
	require.NoError(t, err)
	require.Equal(t, wcString(201, WCRecv, WRFlushErr), wcOf(waitWC(t, s.q.rcq)))

	s.st.wantServes(t)
}

func wcString(id uint64, op WCOpcode, st WCStatus) string { return fmt.Sprintf("%d %v %v", id, op, st) }
func wcOf(wc WC) string                                   { return wcString(wc.ID, wc.Opcode, wc.Status) }

var payload16 = []byte("0123456789abcdef")

func writeULPDUOp(op rdmap.Opcode, stag uint32, to uint64) []byte {
	return ddp.AppendTagged(nil, true, rdmap.Ctrl(op), stag, to)
}

func wcStrings(wcs []WC) []string {
	var s []string
	for _, wc := range wcs {
		s = append(s, wcOf(wc))
	}
	return s
}
