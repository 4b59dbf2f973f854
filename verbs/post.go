package verbs

import (
	"fmt"
	"sync"
)

const maxSGE = 6

// sqe is a send queue entry: a copy of the WR with its gather list resolved
// to slices of registered memory at post time. It holds what every WR
// needs (48 octets); its gather list is a window of qp.sqSegs, and the
// arguments of fast registration, atomics and Immediate Data are in
// qp.sqExt, so that an idle QP's ring costs little.
type sqe struct {
	id                       uint64
	raddr                    uint64
	sinkTO                   uint64 // RDMA Read: the sink's tagged offset
	length                   uint32 // at most maxMsg
	rkey                     uint32
	invKey                   uint32
	sinkKey                  uint32 // RDMA Read: the sink's STag; atomic: its result buffer's
	nseg                     uint8  // elements of the gather list in use
	op                       SendOpcode
	signaled, fence, solicit bool

	// Completion state, guarded by qp.sqMu.
	done   bool
	status WCStatus
}

// sqeExt holds the arguments of the WRs few applications post, one per SQ
// slot; the array is allocated the first time a QP posts one.
type sqeExt struct {
	imm     uint64 // RFC 7306 Immediate Data
	atomic  atomicArgs
	regMR   *MR // opRegMR
	regBuf  []byte
	regAcc  Access
	regSTag uint32 // the STag PostRegMR returned
}

// sqSlot returns the gather list window of SQ index idx (its full capacity,
// MaxSendSGE elements).
func (qp *QP) sqSlot(idx uint64) [][]byte {
	n := uint64(qp.cfg.Cap.MaxSendSGE)
	i := idx % uint64(len(qp.sq)) * n
	return qp.sqSegs[i : i+n : i+n]
}

// payload returns the gather list of e, SQ index idx.
func (qp *QP) payload(e *sqe, idx uint64) [][]byte { return qp.sqSlot(idx)[:e.nseg] }

// sqExtOf returns the sqeExt of SQ index idx, allocating the array on first
// use. Called with sqMu held by the poster, before it publishes the entry
// (sqPub); the transmit loop, which takes the entry later through nextSQ,
// sees the array.
func (qp *QP) sqExtOf(idx uint64) *sqeExt {
	if qp.sqExt == nil {
		qp.sqExt = make([]sqeExt, len(qp.sq))
	}
	return qp.sqExtAt(idx)
}

// sqExtAt returns the sqeExt of SQ index idx, whose WR uses one: the
// array exists.
func (qp *QP) sqExtAt(idx uint64) *sqeExt { return &qp.sqExt[idx%uint64(len(qp.sq))] }

// inlineBuf returns the inline data buffer of SQ index idx, allocating the
// ring's on first use (sqMu held): a QP that posts no inline data has none.
func (qp *QP) inlineBuf(idx uint64) []byte {
	n := qp.cfg.Cap.MaxInline
	if qp.sqInline == nil {
		qp.sqInline = make([]byte, n*len(qp.sq))
	}
	i := int(idx%uint64(len(qp.sq))) * n
	return qp.sqInline[i : i+n : i+n]
}

// responded reports an opcode whose data the peer sends back (a Read or an
// atomic): on our side of the wire it is only a request.
func (o SendOpcode) responded() bool {
	return o == OpRDMARead || o == OpAtomicFetchAdd || o == OpAtomicCmpSwap
}

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

// sqPubEvery: a poster publishes its WRs to the transmit loop (sqPub) every
// sqPubEvery of them and at the end of a post, so that the loop may start
// on a long batch of posts before its end without taking each WR from
// under the poster (their entries share cache lines).
const sqPubEvery = 16

// PostSend posts work requests to the send queue, in order, and returns how
// many it posted. It stops at the first WR it cannot post and returns an
// error that says why; the WRs before it are posted. On a QP in ERROR every
// WR completes at once with WRFlushErr (so that a drain works as in ibverbs).
// Reads and atomics beyond the negotiated ORD are posted and wait their
// turn (QPConfig.ORD). The WRs and their gather lists may be reused when
// PostSend returns; the memory they point to only after the completion.
func (qp *QP) PostSend(wrs ...SendWR) (int, error) {
	st := qp.State()
	if st == StateIdle {
		return 0, fmt.Errorf("%w: PostSend on a QP in %s", ErrQPState, st)
	}
	n, wire, idle, err := qp.enqueue(wrs)
	if n > 0 || err == ErrQueueFull {
		qp.txInline(wire, idle, err == ErrQueueFull)
	}
	return n, err
}

// enqueue copies wrs into the SQ. wire is how many payload octets they put
// on the wire (a Read or an atomic only its request), and idle whether the
// queue was idle, for PostSend to judge whether it may transmit them
// itself.
func (qp *QP) enqueue(wrs []SendWR) (n, wire int, idle bool, err error) {
	qp.sqMu.Lock()
	defer func() {
		qp.sqPub.Store(qp.sqTail)
		qp.sqMu.Unlock()
	}()
	// Whether the transmit side has taken all matters only to a post that
	// may go out inline (txSend): when something arrived since the
	// transmit side last ran. Otherwise the loop is woken anyway, and
	// sqNext, which the loop stores as it takes WRs, is not read here (its
	// line would move to this core and back for each post).
	idle = qp.rxSeen.Load() != qp.txRxSeen.Load() && qp.sqNext.Load() == qp.sqTail
	for i := range wrs {
		wr := &wrs[i]
		if qp.sqFlushed {
			qp.sendCQ.push(WC{ID: wr.ID, Status: WRFlushErr, Opcode: wr.Opcode.wcOp(), QP: qp})
			continue
		}
		if qp.sqFull() {
			return i, wire, false, ErrQueueFull
		}
		if err := qp.fill(qp.sqTail, wr); err != nil {
			clear(qp.sqSlot(qp.sqTail)) // what fill put there before it refused the WR
			return i, wire, false, err
		}
		e := &qp.sq[qp.sqTail%uint64(len(qp.sq))]
		if !e.op.responded() {
			wire += int(e.length)
		}
		if segs := qp.sqSlot(qp.sqTail); int(e.nseg) < len(segs) {
			clear(segs[e.nseg:]) // what an earlier WR left there (retireLocked clears only an empty SQ)
		}
		qp.sqTail++
		if qp.sqTail%sqPubEvery == 0 {
			qp.sqPub.Store(qp.sqTail)
		}
	}
	return len(wrs), wire, idle && !qp.sqFlushed, nil
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
	case qp.sqFull():
		qp.sqMu.Unlock()
		return 0, ErrQueueFull
	default:
		stag = mr.nextSTag()
		qp.sq[qp.sqTail%uint64(len(qp.sq))] = sqe{id: id, op: opRegMR,
			signaled: qp.cfg.SigAll || flags&Signaled != 0, fence: flags&Fence != 0}
		*qp.sqExtOf(qp.sqTail) = sqeExt{regMR: mr, regBuf: buf, regAcc: access, regSTag: stag}
		clear(qp.sqSlot(qp.sqTail)) // no gather list: drop what an earlier WR left (retireLocked clears only an empty SQ)
		qp.sqTail++
		qp.sqPub.Store(qp.sqTail)
	}
	qp.sqMu.Unlock()
	wake(qp.wake)
	return stag, nil
}

// sqFull reports whether the SQ is full, reading sqHead, which the
// transmit side writes, only when the head last seen says so. Called with
// sqMu held.
func (qp *QP) sqFull() bool {
	if qp.sqTail-qp.sqHeadSeen < uint64(len(qp.sq)) {
		return false
	}
	qp.sqHeadSeen = qp.sqHead
	return qp.sqTail-qp.sqHeadSeen == uint64(len(qp.sq))
}

// fill validates wr and copies it into the SQ slot of index idx. A WR it
// refuses may leave the slot's gather list set (enqueue clears it); the
// slot is not posted.
func (qp *QP) fill(idx uint64, wr *SendWR) error {
	e := &qp.sq[idx%uint64(len(qp.sq))]
	// Field by field into the slot: a composite literal is built on the
	// stack and copied in with 16-octet loads, which cannot take their
	// data from the narrower stores that built it and so wait for every
	// store before them to reach the cache, the last WR's included, whose
	// lines the transmit loop on another core may hold
	// (docs/measurements.md).
	*e = sqe{}
	e.id, e.op, e.raddr, e.rkey, e.invKey = wr.ID, wr.Opcode, wr.RemoteAddr, wr.RKey, wr.InvalidateRKey
	e.signaled = qp.cfg.SigAll || wr.Flags&Signaled != 0
	e.fence, e.solicit = wr.Flags&Fence != 0, wr.Flags&Solicited != 0
	switch wr.Opcode {
	case OpRDMAWriteWithImm, OpImmediate, OpAtomicFetchAdd, OpAtomicCmpSwap:
		if !qp.ext {
			return fmt.Errorf("%w: %v", ErrNotOptedIn, wr.Opcode)
		}
		*qp.sqExtOf(idx) = sqeExt{imm: wr.ImmData}
	}
	segs := qp.sqSlot(idx)
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
		b, err := qp.sqStags.localSlice(qp.pd, wr.SGL[0], LocalWrite)
		if err != nil {
			return err
		}
		segs[0], e.nseg, e.length = b, 1, 8
		e.sinkKey = wr.SGL[0].LKey // its result's, checked again when the response lands (actAtomicDone)
		qp.sqExtOf(idx).atomic = atomicArgs{add: wr.CompareAdd, swap: wr.Swap, cmpMask: wr.CompareMask, swapMask: wr.SwapMask, addMask: wr.AddMask}
		return nil
	case OpSend, OpSendWithInv, OpRDMAWrite, OpRDMAWriteWithImm:
		if wr.Flags&Inline != 0 {
			return qp.fillInline(idx, wr, segs, e)
		}
		if len(wr.SGL) > len(segs) {
			return fmt.Errorf("%w: %d SGEs, QP allows %d", ErrTooManySGE, len(wr.SGL), len(segs))
		}
		total := 0
		for _, sge := range wr.SGL {
			if sge.Length == 0 {
				continue // as ibverbs providers: an empty element's key is not looked at
			}
			b, err := qp.sqStags.localSlice(qp.pd, sge, 0)
			if err != nil {
				return err
			}
			if len(b) > 0 {
				segs[e.nseg] = b
				e.nseg++
			}
			total += len(b)
		}
		if total > maxMsg {
			return fmt.Errorf("%w: message of %d octets", ErrInvalidArg, total)
		}
		e.length = uint32(total)
	case OpRDMARead:
		if qp.ord == 0 {
			return fmt.Errorf("%w: the connection negotiated ORD 0: no RDMA Reads", ErrInvalidArg)
		}
		// iWARP Read sinks are a single tagged buffer (siw SIW_MAX_SGE_RD).
		switch {
		case len(wr.SGL) == 0:
			return fmt.Errorf("%w: RDMA Read takes exactly 1 sink SGE, got none", ErrInvalidArg)
		case len(wr.SGL) > 1:
			return fmt.Errorf("%w: RDMA Read takes exactly 1 sink SGE, got %d", ErrTooManySGE, len(wr.SGL))
		}
		b, err := qp.sqStags.localSlice(qp.pd, wr.SGL[0], LocalWrite)
		if err != nil {
			return err
		}
		if len(b) > maxMsg {
			return fmt.Errorf("%w: message of %d octets", ErrInvalidArg, len(b))
		}
		segs[0], e.nseg, e.length = b, 1, uint32(len(b))
		e.sinkKey, e.sinkTO = wr.SGL[0].LKey, wr.SGL[0].Addr
	case OpLocalInv:
	default: // opRegMR goes through PostRegMR

		return fmt.Errorf("%w: opcode %v", ErrInvalidArg, wr.Opcode)
	}
	return nil
}

// rqe is a posted receive in a ring; its gather list is the ring's
// segs[i*maxSGE:][:nseg] for slot i.
type rqe struct {
	id   uint64
	nseg int
}

// recvBuf is a receive the receive loop has taken off its queue: a copy of
// the gather list, since the ring slot is reused as soon as it is popped.
// Only segs[:nseg] is the receive's; release clears them.
type recvBuf struct {
	id    uint64
	segs  [maxSGE][]byte
	keys  [maxSGE]uint32 // the lkeys segs were resolved through
	mrs   [maxSGE]*MR    // their regions, looked up at the message's first segment (rxSend)
	nseg  int
	total int
}

// release drops the receive's references to its buffers.
func (b *recvBuf) release() {
	clear(b.segs[:b.nseg])
	clear(b.mrs[:b.nseg])
	b.nseg, b.total = 0, 0
}

// recvQueue is a ring of posted receives, for a QP's RQ or an SRQ.
type recvQueue struct {
	mu         sync.Mutex
	ring       []rqe
	segs       [][]byte // gather lists: maxSGE per slot
	keys       []uint32 // the lkey each element was resolved through, for the receive loop's check (MR.live)
	head, tail uint64
	maxSGE     int
	flushed    bool
	destroyed  bool      // an SRQ's, Destroy'd
	stags      stagCache // under mu

	// An SRQ's low watermark (SRQ.ArmLimit): limitCh, when armed, is
	// closed once fewer than limit receives are posted.
	limit   int
	limitCh chan struct{}
}

func (q *recvQueue) init(n, maxSGE int) {
	q.ring, q.segs, q.keys, q.maxSGE = make([]rqe, n), make([][]byte, n*maxSGE), make([]uint32, n*maxSGE), maxSGE
}

// keySlot is slot's for the lkeys.
func (q *recvQueue) keySlot(i uint64) []uint32 {
	k := i % uint64(len(q.ring)) * uint64(q.maxSGE)
	return q.keys[k : k+uint64(q.maxSGE) : k+uint64(q.maxSGE)]
}

// slot returns the gather list window of ring index i.
func (q *recvQueue) slot(i uint64) [][]byte {
	k := i % uint64(len(q.ring)) * uint64(q.maxSGE)
	return q.segs[k : k+uint64(q.maxSGE) : k+uint64(q.maxSGE)]
}

// post resolves and queues wrs; WRs posted to a flushed queue complete at
// once on flushCQ (nil for an SRQ, whose WRs outlive any one QP).
func (q *recvQueue) post(pd *PD, wrs []RecvWR, flushCQ *CQ, qp *QP) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return 0, fmt.Errorf("%w: SRQ destroyed", ErrClosed)
	}
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
		if len(wr.SGL) > q.maxSGE {
			return i, fmt.Errorf("%w: %d SGEs, queue allows %d", ErrTooManySGE, len(wr.SGL), q.maxSGE)
		}
		segs, keys := q.slot(q.tail), q.keySlot(q.tail)
		n := 0
		for _, sge := range wr.SGL {
			if sge.Length == 0 {
				continue
			}
			b, err := q.stags.localSlice(pd, sge, LocalWrite)
			if err != nil {
				clear(segs)
				return i, err
			}
			if len(b) > 0 {
				segs[n], keys[n] = b, sge.LKey
				n++
			}
		}
		q.ring[q.tail%uint64(len(q.ring))] = rqe{id: wr.ID, nseg: n}
		q.tail++
	}
	return len(wrs), nil
}

// pop takes the oldest posted receive; ok is false when none is posted.
func (q *recvQueue) pop(dst *recvBuf) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == q.tail || q.flushed {
		return false
	}
	e := q.ring[q.head%uint64(len(q.ring))]
	segs := q.slot(q.head)[:e.nseg] // the slot's other elements are nil
	dst.id, dst.nseg, dst.total = e.id, e.nseg, 0
	for i, s := range segs {
		dst.segs[i] = s
		dst.total += len(s)
	}
	copy(dst.keys[:e.nseg], q.keySlot(q.head))
	clear(segs)
	q.head++
	q.checkLimit()
	return true
}

// drain marks the queue flushed and calls fn with the ID of each WR still
// posted, in order.
func (q *recvQueue) drain(fn func(id uint64)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.flushed = true
	q.stags = stagCache{} // as the QP's (flushAll)
	for ; q.head != q.tail; q.head++ {
		fn(q.ring[q.head%uint64(len(q.ring))].id)
		clear(q.slot(q.head))
	}
}

// fillInline copies an Inline WR's data into its slot's inline buffer: the
// InlineData, or, as ibverbs' IBV_SEND_INLINE, what its SGL names (one or
// the other), so that the caller may reuse the memory at once.
func (qp *QP) fillInline(idx uint64, wr *SendWR, segs [][]byte, e *sqe) error {
	if len(wr.InlineData) > 0 && len(wr.SGL) > 0 {
		return fmt.Errorf("%w: an Inline WR with both InlineData and an SGL", ErrInvalidArg)
	}
	if len(wr.SGL) > qp.cfg.Cap.MaxSendSGE {
		return fmt.Errorf("%w: %d SGEs, QP allows %d", ErrTooManySGE, len(wr.SGL), qp.cfg.Cap.MaxSendSGE)
	}
	n := len(wr.InlineData)
	for _, sge := range wr.SGL {
		n += int(sge.Length)
	}
	if n > qp.cfg.Cap.MaxInline {
		return fmt.Errorf("%w: %d octets", ErrInlineTooLarge, n)
	}
	b := qp.inlineBuf(idx)
	n = copy(b, wr.InlineData)
	for _, sge := range wr.SGL {
		if sge.Length == 0 {
			continue
		}
		src, err := qp.sqStags.localSlice(qp.pd, sge, 0)
		if err != nil {
			return err
		}
		n += copy(b[n:], src)
	}
	segs[0], e.nseg, e.length = b[:n], 1, uint32(n)
	return nil
}

// PostRecv posts receive buffers. Unlike PostSend it works on an IDLE QP, so
// that buffers can be posted before the peer's first Send arrives (iWARP
// has no receiver-not-ready retry: a Send that finds no buffer is fatal).
func (qp *QP) PostRecv(wrs ...RecvWR) (int, error) {
	if qp.srq != nil {
		return 0, fmt.Errorf("%w: QP uses an SRQ", ErrInvalidArg)
	}
	return qp.rq.post(qp.pd, wrs, qp.recvCQ, qp)
}
