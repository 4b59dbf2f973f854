package target

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/internal/transport"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/verbs"
)

// A target queue is one RDMA connection: the admin queue or an I/O queue
// of a controller. One goroutine (run) owns everything in it; other
// goroutines end it only by closing its QP, whose flushed receives then
// end the loop.
type queue struct {
	t    *Target
	cm   nvme.CMRequest
	port *Port // the listener it came through

	pd     *verbs.PD
	cq     *verbs.CQ
	qp     *verbs.QP
	recvMR *verbs.MR
	nrecv  int
	capsz  int // receive buffer: SQE + in-capsule data
	inCap  int // in-capsule data this queue accepts
	depth  int // SQ entries (HSQSIZE+1)

	wait waiting // its place among the queues without a controller (places.go)
	// The victim rule's signs of life (places.go): when the MPA start-up
	// ended (UnixNano, 0 before); a Fabrics Connect is being served.
	started    atomic.Int64
	connecting atomic.Bool

	// Owned by run. An I/O queue's receive handler (onRx), which serves
	// commands where they arrive, uses them too: whichever holds hold
	// (a one-slot semaphore that run can stop waiting for) has them.
	hold     chan struct{}
	failed   bool // onRx ended the queue (closeErr says why)
	runCtx   context.Context
	stop     context.CancelFunc // ends an I/O queue's run, which closes it
	runErr   error              // why an I/O queue's run ended, if not closeErr
	qid      uint16
	ctrl     *controller
	sqhd     uint16
	noSQFlow bool
	active   int // commands whose response is not yet posted
	slots    []slot
	free     []int
	bufs     []*verbs.MR // data buffers, registered on demand
	freeBufs [3][]int    // by size class (queue.class): small, mid, large
	nbufs    [3]int
	waitBuf  []int // slots waiting for a buffer, in arrival order
	curRecv  int   // receive buffer of the command being dispatched, -1 once reposted
	wcs      []verbs.WC
	wr       [2]verbs.SendWR
	sge      [1]verbs.SGE
	rsge     [1]verbs.SGE
	rwr      [1]verbs.RecvWR
	cqe      [nvme.CompletionSize]byte
	maxData  int
	closeErr error
	ended    chan struct{} // closed when run has torn the queue down

	// An admin queue's wake-up for events (events.go): kick cancels the
	// context of its wait for completions.
	kickMu     sync.Mutex
	kicked     bool
	kickCancel context.CancelFunc
}

// slot is a command in flight: its SQE, where its data is, and the
// data buffer it moves data by RDMA through, if any (buf >= 0). A slot is
// free once its response is posted; a buffer that an RDMA Write still
// reads goes back to the pool when the response Send after it completes,
// which may be much later (verbs retires sends when its transmit loop runs
// dry).
type slot struct {
	cmd  [nvme.CommandSize]byte
	req  request // the command as parsed
	data nvme.Data
	buf  int
	busy bool
}

// Bounds of the data buffer pools: verbs completes sends in batches of
// up to 1 MiB written (its completeEvery), so the small buffers in flight
// can be many more than the queue's depth; past the bound a command waits
// for a buffer to come back.
const (
	maxSmallBufs = 512 // beyond the slots
	maxMidBufs   = 16  // beyond the slots
	// Buffers above midBuf (MaxTransfer above 128 KiB) are bounded by
	// their octets: 16 of 1 MiB a queue.
	maxLargeOctets = 16 << 20
)

// connectWait is how long a queue's connection may stay without a
// Fabrics Connect (a variable for tests).
var connectWait = 10 * time.Second

// testBufLimit, if set, is the bound of each pool (tests).
var testBufLimit int

// Work request kinds, in the high half of a WR ID; the low half is the
// slot or receive buffer index.
const (
	wrRecv = 1 + iota
	wrRead
	wrResp
)

func (t *Target) newQueue(cm nvme.CMRequest) (*queue, error) {
	q := &queue{t: t, cm: cm, qid: cm.QID, depth: int(cm.HSQSize) + 1, curRecv: -1, maxData: t.cfg.MaxTransfer,
		ended: make(chan struct{}), hold: make(chan struct{}, 1)}
	// Receive buffers for the SQ's depth and as many again (at most 32
	// more), so that a host that overruns its queue gets a status, not
	// a Terminate for a Send with no buffer.
	q.nrecv = q.depth + min(q.depth, 32)
	q.inCap = t.cfg.InCapsuleData
	q.capsz = nvme.CommandSize + q.inCap
	nslots := q.nrecv
	q.slots = make([]slot, nslots)
	q.free = make([]int, 0, nslots)
	for i := nslots - 1; i >= 0; i-- {
		q.free = append(q.free, i)
	}
	q.pd = t.dev.AllocPD()
	nsend := 4*nslots + 16
	cq, err := t.dev.CreateCQ(nsend + q.nrecv + 8)
	if err != nil {
		return nil, err
	}
	q.cq = cq
	q.wcs = make([]verbs.WC, 32)
	q.qp, err = q.pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, IRD: -1,
		Cap: verbs.QPCap{MaxSendWR: nsend, MaxRecvWR: q.nrecv, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: nvme.CompletionSize}})
	if err != nil {
		return nil, err
	}
	q.recvMR, err = q.pd.RegMR(make([]byte, q.nrecv*q.capsz), verbs.LocalWrite)
	if err != nil {
		q.qp.Close()
		return nil, err
	}
	q.runCtx, q.stop = context.WithCancel(t.ctx)
	return q, nil
}

// release frees what newQueue took, for a queue that never ran.
func (q *queue) release() {
	q.stop()
	q.qp.Close()
	q.recvMR.Dereg()
}

func (q *queue) logf(format string, args ...any) {
	if q.t.cfg.Logf == nil {
		return
	}
	who := fmt.Sprintf("nvmeof: %v q%d", q.qp.RemoteAddr(), q.qid)
	if q.ctrl != nil {
		who += fmt.Sprintf(" ctrl %d", q.ctrl.id)
	}
	q.t.cfg.Logf(who+": "+format, args...)
}

// run accepts the connection and serves the queue until its connection
// ends, the controller goes, or the target closes.
func (q *queue) run(req *verbs.ConnRequest) {
	defer q.t.wg.Done()
	defer q.t.dropQueue(q)
	defer close(q.ended)
	defer q.teardown()
	for i := range q.nrecv {
		if !q.repost(i) {
			return
		}
	}
	// runCtx: an eviction (places.go) ends the wait for an RTR too.
	ctx, cancel := context.WithTimeout(q.runCtx, 30*time.Second)
	err := req.Accept(ctx, q.qp, nvme.CMReply{CRQSize: uint16(q.nrecv)}.Append(nil))
	cancel()
	if err != nil {
		req.Reject(nil) // what Accept refused before answering (a no-op after)
		if !q.evicted() {
			q.logf("accept: %v", err)
		}
		return
	}
	q.started.Store(time.Now().UnixNano())
	q.logf("connected (HSQSIZE %d, HRQSIZE %d)", q.cm.HSQSize, q.cm.HRQSize)
	// A connection holds its buffers from here: one that sends no Fabrics
	// Connect in connectWait is ended, so that idle connections cannot
	// pile up.
	admitted := time.Now()
	if q.qid != 0 {
		q.serveIO(admitted)
		return
	}
	for {
		if q.qid == 0 && q.ctrl != nil && q.takeKick() {
			if !q.deliver() {
				return
			}
			continue
		}
		ctx, cancel := q.t.ctx, context.CancelFunc(nil)
		switch {
		case q.ctrl == nil:
			// runCtx: an eviction stops it (the admin queue's only use).
			ctx, cancel = context.WithDeadline(q.runCtx, admitted.Add(connectWait))
		case q.qid == 0:
			ctx, cancel = q.kickable(q.t.ctx)
		}
		n, err := q.cq.PollWait(ctx, q.wcs)
		if cancel != nil {
			cancel()
		}
		if q.qid == 0 && q.ctrl != nil && errors.Is(err, context.Canceled) && q.t.ctx.Err() == nil {
			continue // kicked: deliver the events at the top (a CQ's own error ends the queue below)
		}
		if err != nil {
			switch {
			case q.t.ctx.Err() != nil:
			case q.ctrl == nil && ctx.Err() != nil:
				q.closeErr = fmt.Errorf("no Fabrics Connect in %v", connectWait)
			default:
				q.closeErr = err
			}
			return
		}
		for i := range n {
			if !q.complete(&q.wcs[i]) {
				return
			}
		}
	}
}

// serveIO serves an I/O queue. Its commands are served where they
// arrive, on the QP's receive goroutine (onRx), which saves a goroutine
// hand-off a command (the NVMe/RDMA round trip of a 4 KiB read has four
// without it, against TCP's two). This goroutine takes the rest: the
// transmit side's completions (Sends and Writes done, whose buffers go
// back), and any that arrive while it holds the queue; and it ends the
// queue when the connection fails, onRx or stop ends it. A command stuck
// in its Backend (a hung network file system) holds the receive
// goroutine, which QP.Close waits for: the queue is closed here, never by
// the controller's goroutines (stop), so that nothing else waits for it.
func (q *queue) serveIO(admitted time.Time) {
	q.qp.SetRxHandler(q.onRx)
	defer q.qp.SetRxHandler(nil)
	for {
		select {
		case q.hold <- struct{}{}:
		case <-q.runCtx.Done():
			return
		}
		ok := !q.failed && q.pollAll()
		connected := q.ctrl != nil
		<-q.hold
		if !ok {
			return
		}
		// Looked at here, under hold, each time: onRx serves the Connect,
		// whose completion run never sees.
		if !connected && !time.Now().Before(admitted.Add(connectWait)) {
			q.runErr = fmt.Errorf("no Fabrics Connect in %v", connectWait)
			return
		}
		ctx, cancel := q.runCtx, context.CancelFunc(nil)
		if !connected {
			ctx, cancel = context.WithDeadline(q.runCtx, admitted.Add(connectWait))
		}
		err := q.cq.Wait(ctx)
		if cancel != nil {
			cancel()
		}
		switch {
		case err == nil:
		case q.runCtx.Err() != nil: // stopped: by onRx (closeErr says why), the controller, an eviction or the target
			return
		case !connected && ctx.Err() != nil: // the deadline: looked at again above
		default:
			q.runErr = err
			return
		}
	}
}

// onRx serves what the FPDU just received completed (SetRxHandler): a
// command, or the data of a write. While run holds the queue it waits, up
// to holdWait: the receive goroutine then reads no further FPDU, so that a
// command's receive buffer is posted again before the next command can
// need one, and a host that sends more commands than its SQ holds gets
// each answered rather than a Terminate for a Send that found no buffer.
// The wait is bounded because run may itself wait for this goroutine (a
// response that finds the send queue full behind an RDMA Read whose
// response is still to be read); past it, run polls what arrived. It may
// not close the QP: a failure stops run, which ends the queue.
func (q *queue) onRx() {
	if !q.takeHold() {
		return
	}
	if !q.failed && !q.pollAll() {
		q.failed = true
		q.stop()
	}
	<-q.hold
}

// holdWait bounds how long the receive goroutine waits for run to let go
// of the queue.
const holdWait = 10 * time.Millisecond

// takeHold takes the queue for the receive goroutine, waiting up to
// holdWait while run has it (it holds it for microseconds at a time).
func (q *queue) takeHold() bool {
	select {
	case q.hold <- struct{}{}:
		return true
	default:
	}
	var end time.Time
	for {
		runtime.Gosched()
		select {
		case q.hold <- struct{}{}:
			return true
		case <-q.runCtx.Done():
			return false
		default:
		}
		if end.IsZero() {
			end = time.Now().Add(holdWait)
		} else if time.Now().After(end) {
			return false
		}
	}
}

// end ends the queue from another goroutine without waiting for it: an
// I/O queue's run closes it; an admin queue, which serves commands on run
// alone, is closed here.
func (q *queue) end() {
	if q.qid != 0 {
		q.stop()
		return
	}
	q.qp.Close()
}

// pollAll takes the completions on the CQ; false ends the queue.
func (q *queue) pollAll() bool {
	for {
		n := q.cq.Poll(q.wcs)
		for i := range n {
			if !q.complete(&q.wcs[i]) {
				return false
			}
		}
		if n < len(q.wcs) {
			return true
		}
	}
}

// teardown ends the queue: its connection, its part in the controller
// (the whole controller for an admin queue), its memory.
func (q *queue) teardown() {
	q.stop()
	q.qp.Close()
	// The receive goroutine is done with onRx now.
	q.hold <- struct{}{}
	why := q.closeErr
	if q.ctrl == nil && q.evicted() {
		why = errEvicted
	}
	if why == nil {
		why = q.runErr
	}
	if why == nil {
		why = q.qp.Err()
	}
	if q.ctrl != nil {
		q.ctrl.queueGone(q, why)
	}
	if why != nil && !errors.Is(why, verbs.ErrDisconnected) && q.t.ctx.Err() == nil {
		q.logf("connection ended: %v", why)
	} else {
		q.logf("disconnected")
	}
	q.recvMR.Dereg()
	for _, mr := range q.bufs {
		mr.Dereg()
	}
}

// complete handles one work completion; false ends the queue.
func (q *queue) complete(wc *verbs.WC) bool {
	kind, idx := wc.ID>>32, int(uint32(wc.ID))
	if wc.Status != verbs.Success {
		if wc.Status != verbs.WRFlushErr {
			q.closeErr = fmt.Errorf("%v completed with %v (QP: %v)", wc.Opcode, wc.Status, q.qp.Err())
		}
		return false
	}
	switch kind {
	case wrRecv:
		return q.command(idx, int(wc.ByteLen))
	case wrRead:
		s := &q.slots[idx]
		return q.exec(idx, q.bufs[s.buf].Buf()[:s.data.Len])
	case wrResp:
		return q.putBuf(idx)
	}
	return true
}

func (q *queue) recvBuf(i int) []byte { return q.recvMR.Buf()[i*q.capsz : (i+1)*q.capsz] }

// repost gives receive buffer i back to the QP.
func (q *queue) repost(i int) bool {
	q.rsge[0] = q.recvMR.SGE(i*q.capsz, q.capsz)
	q.rwr[0] = verbs.RecvWR{ID: wrRecv<<32 | uint64(i), SGL: q.rsge[:]}
	if _, err := q.qp.PostRecv(q.rwr[:]...); err != nil {
		q.closeErr = fmt.Errorf("posting a receive: %w", err)
		return false
	}
	return true
}

// releaseRecv reposts the current command's receive buffer, once its
// capsule is no longer needed and before anything the host may answer
// with a new command.
func (q *queue) releaseRecv() bool {
	if q.curRecv < 0 {
		return true
	}
	i := q.curRecv
	q.curRecv = -1
	return q.repost(i)
}

// command takes a command capsule of n octets from receive buffer ri.
func (q *queue) command(ri, n int) bool {
	buf := q.recvBuf(ri)[:n]
	cmd, ok := nvme.ParseCommand(buf)
	if !ok {
		// Without an SQE there is no CID to answer: the NVMe/RDMA
		// binding has no way but to end the queue.
		q.closeErr = fmt.Errorf("a capsule of %d octets, shorter than an SQE", n)
		return false
	}
	q.curRecv = ri
	if q.ctrl == nil && cmd.IsFabrics() && cmd.FCType() == nvme.FabricsConnect {
		q.connecting.Store(true)
	}
	if q.ctrl != nil {
		q.ctrl.touch()
	}
	if !q.noSQFlow {
		q.sqhd++
		if int(q.sqhd) >= q.depth {
			q.sqhd = 0
		}
	}
	if q.active >= q.depth || len(q.free) == 0 {
		// The host submitted more commands than its SQ holds. The spec
		// leaves this to the host; we answer instead of failing the
		// connection.
		q.logf("SQ overflow: command %d beyond %d outstanding", cmd.CID(), q.depth)
		return q.respondCID(cmd.CID(), 0, nvme.StatusCommandSequenceError|nvme.DNR)
	}
	idx := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	s := &q.slots[idx]
	s.busy = true
	copy(s.cmd[:], cmd)
	s.data = nvme.Data{}
	s.buf = -1
	q.active++
	ok = q.dispatch(idx, buf[nvme.CommandSize:])
	if ok {
		ok = q.releaseRecv()
	}
	return ok
}

// longerData reports whether cmd's SGL may describe more data than the
// command uses, as nvmet's nvmet_check_data_len_lte allows: Dataset
// Management, for which Linux's host sends a buffer of 256 ranges (4 KiB)
// whatever the number of ranges it fills, so that no device reads past
// it; Set Features, whose data nvmet ignores; and the reservation
// commands that carry keys, for which Linux's host sends its whole
// structure (Release: 16 octets for the 8 of CRKEY), as nvmet reads only
// the keys.
func (q *queue) longerData(cmd nvme.Command) bool {
	if cmd.IsFabrics() {
		return false
	}
	if q.qid == 0 {
		return cmd.Opcode() == nvme.AdminSetFeatures
	}
	switch cmd.Opcode() {
	case nvme.IODSM, nvme.IOResvRegister, nvme.IOResvAcquire, nvme.IOResvRelease:
		return true
	}
	return false
}

// Data directions.
const (
	dirNone = iota
	dirIn   // host to controller
	dirOut  // controller to host
)

// dispatch checks the command, fetches its data and executes it.
func (q *queue) dispatch(idx int, inCap []byte) bool {
	s := &q.slots[idx]
	cmd := nvme.Command(s.cmd[:])
	// No fused commands, and data only by SGL (PSDT 01b), which the
	// RDMA transport requires: as Linux's nvmet.
	if f := cmd.Flags(); f&3 != 0 || f&0xc0 != nvme.FlagSGL {
		return q.respond(idx, 0, nvme.StatusInvalidField|nvme.DNR, nil)
	}
	if q.qid != 0 && q.ctrl != nil && q.ctrl.ended.Load() {
		// Its controller ended and this queue is ending (queue.end):
		// the host learns it from the connection, not from a status
		// that would fail the command where another path could take it.
		q.closeErr = errors.New("its controller has ended")
		return false
	}
	r := &s.req
	*r = request{cmd: cmd, idx: idx}
	if st := q.parse(r); !st.OK() {
		return q.respond(idx, 0, st, nil)
	}
	dir, need := r.dir, r.need
	d, st := nvme.ParseData(cmd, len(inCap), q.inCap)
	if !st.OK() {
		return q.respond(idx, 0, st, nil)
	}
	switch {
	case dir == dirOut && d.InCap:
		// In-capsule data only goes from host to controller.
		return q.respond(idx, 0, nvme.StatusInvalidField|nvme.DNR, nil)
	case need > q.maxData:
		return q.respond(idx, 0, nvme.StatusInvalidField|nvme.DNR, nil) // beyond MDTS
	case int(d.Len) < need, int(d.Len) > need && !q.longerData(cmd):
		return q.respond(idx, 0, nvme.StatusSGLInvalidData|nvme.DNR, nil)
	}
	// What moves is need octets: a longer SGL's tail is not read. Its key
	// is still the host's to have invalidated with the response.
	d.Inval = d.Inval && d.Len > 0
	d.Len = uint32(need)
	s.data = d
	if dir == dirIn && need > 0 && d.InCap {
		return q.exec(idx, inCap[d.Addr:d.Addr+uint64(d.Len)])
	}
	return q.transfer(idx)
}

// transfer takes a data buffer for the command in slot idx, fetches the
// host's data into it by RDMA Read or executes the command; without a
// buffer to spare the command waits for one (resumed by putBuf).
func (q *queue) transfer(idx int) bool {
	s := &q.slots[idx]
	d, dir, need := s.data, s.req.dir, s.req.need
	if need > 0 {
		switch mr, wait := q.slotMR(idx, need); {
		case wait:
			q.waitBuf = append(q.waitBuf, idx)
			return q.releaseRecv()
		case mr == nil:
			return q.respond(idx, 0, nvme.StatusInternalError, nil)
		}
	}
	if dir == dirIn && need > 0 {
		mr := q.bufs[s.buf]
		if !q.releaseRecv() {
			return false
		}
		q.sge[0] = mr.SGE(0, int(d.Len))
		q.wr[0] = verbs.SendWR{ID: wrRead<<32 | uint64(idx), Opcode: verbs.OpRDMARead, Flags: verbs.Signaled,
			SGL: q.sge[:], RemoteAddr: d.Addr, RKey: d.Key}
		if err := transport.PostSend(q.qp, q.wr[:1]); err != nil {
			q.closeErr = fmt.Errorf("posting an RDMA Read: %w", err)
			return false
		}
		return true
	}
	return q.exec(idx, nil)
}

// smallBuf is the size of the small data buffers, for 4 KiB I/O and the
// admin commands' data; midBuf that of the mid ones (or MaxTransfer if
// less), for the rest up to 128 KiB, so that a MaxTransfer of 1 MiB does
// not give every 16 KiB command a buffer of 1 MiB.
const (
	smallBuf = 8 << 10
	midBuf   = 128 << 10
)

// class returns the size class of an n-octet buffer, and its size.
func (q *queue) class(n int) (int, int) {
	switch {
	case n <= smallBuf:
		return 0, smallBuf
	case n <= midBuf || q.maxData <= midBuf:
		return 1, min(q.maxData, midBuf)
	}
	return 2, q.maxData
}

// putBuf returns buffer i to its pool, and resumes a command that waits
// for one.
func (q *queue) putBuf(i int) bool {
	c, _ := q.class(q.bufs[i].Len())
	q.freeBufs[c] = append(q.freeBufs[c], i)
	for len(q.waitBuf) > 0 {
		idx := q.waitBuf[0]
		s := &q.slots[idx]
		if wc, _ := q.class(s.req.need); len(q.freeBufs[wc]) == 0 {
			return true // the first in line waits for the other size
		}
		q.waitBuf = q.waitBuf[1:]
		if !q.transfer(idx) {
			return false
		}
	}
	return true
}

// slotMR returns slot idx's data buffer for n octets, taking one from the
// pool of its size (or registering a new one). wait says the pool is at
// its bound: try again when a buffer comes back. The pools grow to the
// number of responses whose Sends have not completed yet, which verbs may
// report late (its transmit loop retires sends in batches), and are reused
// from then on.
func (q *queue) slotMR(idx, n int) (mr *verbs.MR, wait bool) {
	s := &q.slots[idx]
	if s.buf >= 0 {
		return q.bufs[s.buf], false
	}
	c, size := q.class(n)
	if k := len(q.freeBufs[c]); k > 0 {
		s.buf = q.freeBufs[c][k-1]
		q.freeBufs[c] = q.freeBufs[c][:k-1]
		return q.bufs[s.buf], false
	}
	limit := [3]int{len(q.slots) + maxSmallBufs, len(q.slots) + maxMidBufs, max(2, maxLargeOctets/q.maxData)}[c]
	if testBufLimit > 0 {
		limit = testBufLimit
	}
	if q.nbufs[c] >= limit {
		return nil, true
	}
	mr, err := q.pd.RegMR(make([]byte, size), verbs.LocalWrite)
	if err != nil {
		q.logf("registering a data buffer: %v", err)
		return nil, false
	}
	q.nbufs[c]++
	s.buf = len(q.bufs)
	q.bufs = append(q.bufs, mr)
	return mr, false
}

// exec runs a command whose data (in) is here: its executor, chosen by
// parse, with r.out the buffer for its data to the host.
func (q *queue) exec(idx int, in []byte) bool {
	s := &q.slots[idx]
	r := &s.req
	r.in = in
	if r.dir == dirOut && s.buf >= 0 {
		r.out = q.bufs[s.buf].Buf()[:r.need]
	}
	c := q.ctrl
	change := changes(r.cmd.Opcode())
	if q.qid != 0 && c != nil && !c.enter(change) {
		// As dispatch: the host learns of the end from the connection.
		q.closeErr = errors.New("its controller has ended")
		return false
	}
	var res uint64
	var st nvme.Status
	if r.nvm {
		res, st = execIO(q, r)
	} else {
		res, st = r.execute(q, r)
	}
	if q.qid != 0 && c != nil {
		c.leave(change)
	}
	var out []byte
	if st.OK() {
		out = r.out
	}
	held := r.held
	*r = request{} // its data and namespace are no longer the slot's to keep
	if held {
		return q.releaseRecv()
	}
	return q.respond(idx, res, st, out)
}

// respond sends the command's data (out, by RDMA Write) and its
// completion, with Send with Invalidate when the host's SGL asked for it.
func (q *queue) respond(idx int, res uint64, st nvme.Status, out []byte) bool {
	if !q.releaseRecv() {
		return false
	}
	if q.ctrl == nil {
		q.connecting.Store(false) // refused, the queue is evictable again
	}
	s := &q.slots[idx]
	cmd := nvme.Command(s.cmd[:])
	wrs := q.wr[:0]
	signal := false
	if st.OK() && len(out) > 0 {
		mr := q.bufs[s.buf]
		q.sge[0] = verbs.SGE{Addr: mr.Addr(), Length: uint32(len(out)), LKey: mr.LKey()}
		wrs = append(wrs, verbs.SendWR{Opcode: verbs.OpRDMAWrite, SGL: q.sge[:], RemoteAddr: s.data.Addr, RKey: s.data.Key})
		signal = true // the buffer is the Write's until the Send after it completes
	}
	send := verbs.SendWR{ID: wrResp<<32 | uint64(s.buf), Opcode: verbs.OpSend, Flags: verbs.Inline,
		InlineData: q.completion(res, cmd.CID(), st)}
	if s.data.Inval {
		send.Opcode, send.InvalidateRKey = verbs.OpSendWithInv, s.data.Key
	}
	if signal {
		send.Flags |= verbs.Signaled
	}
	wrs = append(wrs, send)
	q.active--
	if err := transport.PostSend(q.qp, wrs); err != nil {
		q.closeErr = fmt.Errorf("posting a response: %w", err)
		return false
	}
	buf := s.buf
	s.buf = -1
	s.busy = false
	q.free = append(q.free, idx)
	if !signal && buf >= 0 {
		return q.putBuf(buf)
	}
	return true
}

// respondCID answers a command that has no slot.
func (q *queue) respondCID(cid uint16, res uint64, st nvme.Status) bool {
	if !q.releaseRecv() {
		return false
	}
	q.wr[0] = verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: q.completion(res, cid, st)}
	if err := transport.PostSend(q.qp, q.wr[:1]); err != nil {
		q.closeErr = fmt.Errorf("posting a response: %w", err)
		return false
	}
	return true
}

func (q *queue) completion(res uint64, cid uint16, st nvme.Status) []byte {
	sqhd := q.sqhd
	if q.noSQFlow {
		sqhd = 0xffff
	}
	return nvme.AppendCompletion(q.cqe[:0], res, sqhd, q.qid, cid, st)
}

// request is a command as parse found it, as Linux's nvmet_req: what
// executes it, where its data goes and, for an I/O command, the namespace
// it was checked against; then, once its data is here, that data.
type request struct {
	cmd       nvme.Command
	idx       int        // its slot
	execute   executor   // chosen by parse
	nvm       bool       // an NVM command set command: execIO's checks first
	dir, need int        // its data's direction and length
	ns        *Namespace // an I/O command's, as parsed
	in        []byte     // data from the host
	out       []byte     // the buffer for data to the host: need octets
	held      bool       // set by execute: it stays outstanding (an AER)
}

// executor executes a parsed command whose data is here: its result and
// status; data for the host goes into r.out, which is sent if the
// status is Success.
type executor func(q *queue, r *request) (res uint64, st nvme.Status)
