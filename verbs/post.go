package verbs

import (
	"fmt"
	"sync"
)

const maxSGE = 6

// sqe is a send queue entry: a copy of the WR with its gather list resolved
// to slices of registered memory at post time.
type sqe struct {
	id       uint64
	op       SendOpcode
	signaled bool
	fence    bool
	solicit  bool
	raddr    uint64
	rkey     uint32
	invKey   uint32
	segs     [maxSGE][]byte
	nseg     int
	length   int
	sinkKey  uint32 // RDMA Read: the sink's STag and tagged offset
	sinkTO   uint64
	inline   []byte // this slot's inline buffer
	regMR    *MR    // opRegMR
	regBuf   []byte
	regAcc   Access
	regSTag  uint32
	imm      uint64 // RFC 7306 Immediate Data
	atomic   atomicArgs

	// Completion state, guarded by qp.sqMu.
	done   bool
	status WCStatus
}

func (e *sqe) payload() [][]byte { return e.segs[:e.nseg] }

// wcOp maps a send opcode to its completion opcode.
func (o SendOpcode) wcOp() WCOpcode {
	switch o {
	case OpRDMAWrite:
		return WCRDMAWrite
	case OpRDMARead:
		return WCRDMARead
	case OpLocalInv:
		return WCLocalInv
	case opRegMR:
		return WCRegMR
	case OpRDMAWriteWithImm:
		return WCRDMAWrite
	case OpImmediate:
		return WCSend
	case OpAtomicFetchAdd:
		return WCAtomicFetchAdd
	case OpAtomicCmpSwap:
		return WCAtomicCmpSwap
	}
	return WCSend
}

// maxMsg is the largest message iWARP carries: RDMA Read sizes are 32 bits,
// and ibverbs lengths too.
const maxMsg = 1<<31 - 1

// PostSend posts work requests to the send queue, in order, and returns how
// many it posted. It stops at the first WR it cannot post and returns an
// error that says why; the WRs before it are posted. On a QP in ERROR every
// WR completes at once with WRFlushErr (so that a drain works as in ibverbs).
// The WRs and their gather lists may be reused when PostSend returns; the
// memory they point to only after the completion.
func (qp *QP) PostSend(wrs ...SendWR) (int, error) {
	st := qp.State()
	if st == StateIdle {
		return 0, fmt.Errorf("%w: PostSend on a QP in %s", ErrQPState, st)
	}
	n, small, err := qp.enqueue(wrs)
	if n > 0 || err == ErrQueueFull {
		qp.txInline(small)
	}
	return n, err
}

// enqueue copies wrs into the SQ. small reports a lone small WR on an idle
// queue, which PostSend may transmit itself.
func (qp *QP) enqueue(wrs []SendWR) (n int, small bool, err error) {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	idle := qp.sqNext == qp.sqTail
	for i := range wrs {
		wr := &wrs[i]
		if qp.sqFlushed {
			qp.sendCQ.push(WC{ID: wr.ID, Status: WRFlushErr, Opcode: wr.Opcode.wcOp(), QP: qp})
			continue
		}
		if qp.sqTail-qp.sqHead == uint64(len(qp.sq)) {
			return i, false, ErrQueueFull
		}
		e := &qp.sq[qp.sqTail%uint64(len(qp.sq))]
		if err := qp.fill(e, wr); err != nil {
			return i, false, err
		}
		qp.sqTail++
	}
	small = idle && len(wrs) == 1 && !qp.sqFlushed && qp.sq[(qp.sqTail-1)%uint64(len(qp.sq))].length <= inlineTxMax
	return len(wrs), small, nil
}

// PostRegMR posts a fast registration (IBV_WR_REG_MR): when the WRs before
// it have been carried out, buf becomes the memory of mr (from PD.AllocMR)
// with the given access, under the STag it returns. The STag is known at
// once, as ibverbs' key chosen before posting (ibv_inc_rkey): a request
// posted after this WR on the same QP may carry it to the peer, since the
// QP carries out its WRs in order, so the registration is in force before
// the peer can see the request. From then on the region's previous STag
// reaches nothing (a peer's Write or Read with it gets a Terminate), and
// LKey and RKey return the new one. The STag differs from the current one
// and from that of the registration posted just before on mr; its key is
// drawn at random, like RegMR's. The WR completes with opcode WCRegMR;
// LocProtErr if the registration was refused (then the previous binding
// stays). (It is a method of its own rather than a SendWR field so that
// SendWRs, which the SQ copies, hold no memory of their own and cost no
// allocation to post.)
func (qp *QP) PostRegMR(id uint64, flags SendFlags, mr *MR, buf []byte, access Access) (stag uint32, err error) {
	if mr == nil || !mr.fast || len(buf) == 0 {
		return 0, fmt.Errorf("%w: PostRegMR needs an MR from AllocMR and a buffer", ErrInvalidArg)
	}
	if err := checkAccess(access); err != nil {
		return 0, err // the rules RegMR enforces
	}
	if qp.State() == StateIdle {
		return 0, fmt.Errorf("%w: PostRegMR on a QP in %s", ErrQPState, qp.State())
	}
	qp.sqMu.Lock()
	switch {
	case qp.sqFlushed:
		stag = mr.nextSTag() // never bound: the WR is flushed
		qp.sendCQ.push(WC{ID: id, Status: WRFlushErr, Opcode: WCRegMR, QP: qp})
	case qp.sqTail-qp.sqHead == uint64(len(qp.sq)):
		qp.sqMu.Unlock()
		return 0, ErrQueueFull
	default:
		stag = mr.nextSTag()
		e := &qp.sq[qp.sqTail%uint64(len(qp.sq))]
		*e = sqe{id: id, op: opRegMR, inline: e.inline, signaled: qp.cfg.SigAll || flags&Signaled != 0,
			fence: flags&Fence != 0, regMR: mr, regBuf: buf, regAcc: access, regSTag: stag}
		qp.sqTail++
	}
	qp.sqMu.Unlock()
	wake(qp.wake)
	return stag, nil
}

// fill validates wr and copies it into e.
func (qp *QP) fill(e *sqe, wr *SendWR) error {
	inl := e.inline
	*e = sqe{id: wr.ID, op: wr.Opcode, raddr: wr.RemoteAddr, rkey: wr.RKey, invKey: wr.InvalidateRKey, inline: inl,
		signaled: qp.cfg.SigAll || wr.Flags&Signaled != 0, fence: wr.Flags&Fence != 0, solicit: wr.Flags&Solicited != 0}
	switch wr.Opcode {
	case OpRDMAWriteWithImm, OpImmediate, OpAtomicFetchAdd, OpAtomicCmpSwap:
		if !qp.ext {
			return fmt.Errorf("%w: %v", ErrNotOptedIn, wr.Opcode)
		}
	}
	e.imm = wr.ImmData
	switch wr.Opcode {
	case OpImmediate:
		return nil
	case OpAtomicFetchAdd, OpAtomicCmpSwap:
		if qp.ord == 0 {
			return fmt.Errorf("%w: the connection negotiated ORD 0: no atomics", ErrInvalidArg)
		}
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return fmt.Errorf("%w: an atomic takes one 8-octet SGE for the original value", ErrInvalidArg)
		}
		if wr.RemoteAddr%8 != 0 {
			return fmt.Errorf("%w: atomic target %#x not 64-bit aligned", ErrInvalidArg, wr.RemoteAddr)
		}
		b, err := qp.pd.localSlice(wr.SGL[0], LocalWrite)
		if err != nil {
			return err
		}
		e.segs[0], e.nseg, e.length = b, 1, 8
		e.atomic = atomicArgs{add: wr.CompareAdd, swap: wr.Swap, cmpMask: wr.CompareMask, swapMask: wr.SwapMask, addMask: wr.AddMask}
		return nil
	case OpSend, OpSendWithInv, OpRDMAWrite, OpRDMAWriteWithImm:
		if wr.Flags&Inline != 0 {
			if len(wr.InlineData) > len(e.inline) {
				return fmt.Errorf("%w: %d octets", ErrInlineTooLarge, len(wr.InlineData))
			}
			n := copy(e.inline, wr.InlineData)
			e.segs[0], e.nseg, e.length = e.inline[:n], 1, n
			return nil
		}
		if len(wr.SGL) > qp.cfg.Cap.MaxSendSGE {
			return fmt.Errorf("%w: %d SGEs, QP allows %d", ErrTooManySGE, len(wr.SGL), qp.cfg.Cap.MaxSendSGE)
		}
		for _, sge := range wr.SGL {
			b, err := qp.pd.localSlice(sge, 0)
			if err != nil {
				return err
			}
			if len(b) > 0 {
				e.segs[e.nseg] = b
				e.nseg++
			}
			e.length += len(b)
		}
	case OpRDMARead:
		if qp.ord == 0 {
			return fmt.Errorf("%w: the connection negotiated ORD 0: no RDMA Reads", ErrInvalidArg)
		}
		// iWARP Read sinks are a single tagged buffer (siw SIW_MAX_SGE_RD).
		if len(wr.SGL) != 1 {
			return fmt.Errorf("%w: RDMA Read takes exactly 1 sink SGE, got %d", ErrTooManySGE, len(wr.SGL))
		}
		b, err := qp.pd.localSlice(wr.SGL[0], LocalWrite)
		if err != nil {
			return err
		}
		e.segs[0], e.nseg, e.length = b, 1, len(b)
		e.sinkKey, e.sinkTO = wr.SGL[0].LKey, wr.SGL[0].Addr
	case OpLocalInv:
	default: // opRegMR goes through PostRegMR

		return fmt.Errorf("%w: opcode %v", ErrInvalidArg, wr.Opcode)
	}
	if e.length > maxMsg {
		return fmt.Errorf("%w: message of %d octets", ErrInvalidArg, e.length)
	}
	return nil
}

// rqe is a posted receive buffer.
type rqe struct {
	id    uint64
	segs  [maxSGE][]byte
	nseg  int
	total int
}

// recvQueue is a ring of posted receives, for a QP's RQ or an SRQ.
type recvQueue struct {
	mu         sync.Mutex
	ring       []rqe
	head, tail uint64
	maxSGE     int
	flushed    bool
}

func (q *recvQueue) init(n int) { q.ring = make([]rqe, n) }

// post resolves and queues wrs; WRs posted to a flushed queue complete at
// once on flushCQ (nil for an SRQ, whose WRs outlive any one QP).
func (q *recvQueue) post(pd *PD, maxSGE int, wrs []RecvWR, flushCQ *CQ, qp *QP) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range wrs {
		wr := &wrs[i]
		if q.flushed {
			if flushCQ != nil {
				flushCQ.push(WC{ID: wr.ID, Status: WRFlushErr, Opcode: WCRecv, QP: qp})
			}
			continue
		}
		if q.tail-q.head == uint64(len(q.ring)) {
			return i, ErrQueueFull
		}
		if len(wr.SGL) > maxSGE {
			return i, fmt.Errorf("%w: %d SGEs, queue allows %d", ErrTooManySGE, len(wr.SGL), maxSGE)
		}
		e := &q.ring[q.tail%uint64(len(q.ring))]
		*e = rqe{id: wr.ID}
		for _, sge := range wr.SGL {
			b, err := pd.localSlice(sge, LocalWrite)
			if err != nil {
				return i, err
			}
			if len(b) > 0 {
				e.segs[e.nseg] = b
				e.nseg++
			}
			e.total += len(b)
		}
		q.tail++
	}
	return len(wrs), nil
}

// pop takes the oldest posted receive; ok is false when none is posted.
func (q *recvQueue) pop(dst *rqe) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == q.tail || q.flushed {
		return false
	}
	i := q.head % uint64(len(q.ring))
	*dst = q.ring[i]
	q.ring[i] = rqe{}
	q.head++
	return true
}

// drain marks the queue flushed and calls fn with the ID of each WR still
// posted, in order.
func (q *recvQueue) drain(fn func(id uint64)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.flushed = true
	for ; q.head != q.tail; q.head++ {
		i := q.head % uint64(len(q.ring))
		fn(q.ring[i].id)
		q.ring[i] = rqe{}
	}
}

// PostRecv posts receive buffers. Unlike PostSend it works on an IDLE QP, so
// that buffers can be posted before the peer's first Send arrives (iWARP
// has no receiver-not-ready retry: a Send that finds no buffer is fatal).
func (qp *QP) PostRecv(wrs ...RecvWR) (int, error) {
	if qp.srq != nil {
		return 0, fmt.Errorf("%w: QP uses an SRQ", ErrInvalidArg)
	}
	return qp.rq.post(qp.pd, qp.cfg.Cap.MaxRecvSGE, wrs, qp.recvCQ, qp)
}

// SRQ is a shared receive queue: QPs created with it take their receive
// buffers from it.
type SRQ struct {
	pd *PD
	q  recvQueue
}

// CreateSRQ creates a shared receive queue with room for maxWR receives of
// up to maxSGE elements each.
func (pd *PD) CreateSRQ(maxWR, maxSGE int) (*SRQ, error) {
	if maxWR <= 0 || maxWR > pd.dev.attr.MaxQPWR || maxSGE <= 0 || maxSGE > pd.dev.attr.MaxSGE {
		return nil, fmt.Errorf("%w: SRQ %d WRs × %d SGEs", ErrInvalidArg, maxWR, maxSGE)
	}
	s := &SRQ{pd: pd}
	s.q.init(maxWR)
	s.q.maxSGE = maxSGE
	return s, nil
}

// PostRecv posts receive buffers to the SRQ.
func (s *SRQ) PostRecv(wrs ...RecvWR) (int, error) {
	return s.q.post(s.pd, s.q.maxSGE, wrs, nil, nil)
}
