package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/internal/transport"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/verbs"
)

// ErrQueueDead is the error of a command on a host queue whose connection
// has ended; errors.Is finds it in what Controller methods return.
var ErrQueueDead = errors.New("nvmeof: queue connection ended")

// ErrClosed is the error of a command started once Controller.Close has
// begun; commands already in flight then finish first.
var ErrClosed = errors.New("nvmeof: controller closed")

// A host queue is one RDMA connection to a controller: commands go out as
// Sends of inline capsules (so a capsule's buffer is free at once), data
// moves through per-slot buffers registered for the target's RDMA Read and
// Write, and responses arrive in receive buffers that the QP's receive
// goroutine (onRx, its SetRxHandler) hands to the waiting command. The
// queue's own goroutine (watch) ends it when the QP fails.
type queue struct {
	qid     uint16
	depth   int
	sqsize  int // SQ entries announced (HSQSIZE+1, Connect's SQSIZE+1): depth, unless a test says otherwise
	inCap   int // in-capsule data this queue sends
	maxData int

	dev    *verbs.Device
	pd     *verbs.PD
	cq     *verbs.CQ
	qp     *verbs.QP
	respMR *verbs.MR
	resp   []byte // respMR's memory (as hslot.buf)
	nrecv  int
	slots  []slot
	free   chan int

	dead    chan struct{}
	errOnce sync.Once
	err     error
	stop    context.CancelFunc
	wg      sync.WaitGroup
	closed  sync.Once

	gate    sync.Mutex    // closing, held, idle
	closing bool          // drain began: no new commands
	held    int           // slots taken and not yet given back
	idle    chan struct{} // closed when held drops to zero while closing

	pmu   sync.Mutex // slot states and posting receives
	rxMu  sync.Mutex // rxwcs: the receive handler, or the watcher at the end
	rxwcs []verbs.WC
	rsge  [1]verbs.SGE
	rwr   [1]verbs.RecvWR
	inval []verbs.SGE

	timeout   time.Duration // a command unanswered this long ends the queue (Config.IOTimeout); 0: never
	onTimeout func(error)   // the controller's reset, called by watch with the queue's error
}

// slot is one command in flight. Its CID is gen<<8 | index.
type slot struct {
	gen     uint8
	capsule []byte
	buf     []byte // mr's memory, kept here: a queue closed under a finishing command deregisters mr
	mr      *verbs.MR
	wr      [1]verbs.SendWR
	done    chan struct{}
	res     uint64
	st      nvme.Status
	inCap   int // in-capsule data sent with the command, for a retry
	flags   verbs.WCFlags
	invKey  uint32
	waiting bool // set by the submitter, cleared by the poller under pmu

	// Under pmu: abandoned marks a command whose caller gave up (its ctx
	// ended) while it was outstanding: its slot goes back to the free
	// list when its response comes, not before, as the target may still
	// write into its buffer. standing marks an Asynchronous Event
	// Request, outstanding for as long as the controller has nothing to
	// say: no timeout applies. sent is when it was sent (monotonic).
	abandoned bool
	standing  bool
	sent      time.Duration
}

// queueConfig sizes a host queue.
type queueConfig struct {
	qid     uint16
	depth   int // 2 .. 256
	inCap   int
	maxData int
	conn    verbs.ConnConfig
	network string
	addr    string
	sqsize  int // tests: announce this many SQ entries instead of depth

	timeout   time.Duration
	onTimeout func(error)
}

func dialQueue(ctx context.Context, dev *verbs.Device, cfg queueConfig) (*queue, error) {
	q := &queue{qid: cfg.qid, depth: cfg.depth, sqsize: cfg.depth, inCap: cfg.inCap, maxData: cfg.maxData, dev: dev,
		dead: make(chan struct{}), free: make(chan int, cfg.depth),
		timeout: cfg.timeout, onTimeout: cfg.onTimeout}
	q.nrecv = cfg.depth
	q.rxwcs = make([]verbs.WC, 32)
	if cfg.sqsize > 0 {
		q.sqsize = cfg.sqsize
	}
	q.pd = dev.AllocPD()
	var err error
	if q.cq, err = dev.CreateCQ(2*cfg.depth + q.nrecv + 8); err != nil {
		return nil, err
	}
	q.qp, err = q.pd.CreateQP(verbs.QPConfig{SendCQ: q.cq, RecvCQ: q.cq, ORD: -1,
		Cap: verbs.QPCap{MaxSendWR: 4*cfg.depth + 16, MaxRecvWR: q.nrecv, MaxSendSGE: 1, MaxRecvSGE: 1,
			MaxInline: nvme.CommandSize + cfg.inCap}})
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*queue, error) {
		q.qp.Close()
		q.release()
		return nil, err
	}
	q.resp = make([]byte, q.nrecv*nvme.CompletionSize)
	if q.respMR, err = q.pd.RegMR(q.resp, verbs.LocalWrite); err != nil {
		return fail(err)
	}
	q.slots = make([]slot, cfg.depth)
	capsules := make([]byte, cfg.depth*(nvme.CommandSize+cfg.inCap))
	for i := range q.slots {
		s := &q.slots[i]
		s.capsule = capsules[i*(nvme.CommandSize+cfg.inCap) : (i+1)*(nvme.CommandSize+cfg.inCap)]
		s.done = make(chan struct{}, 1)
		s.buf = make([]byte, max(cfg.maxData, nvme.ConnectDataSize))
		if s.mr, err = q.pd.RegMR(s.buf, verbs.LocalWrite|verbs.RemoteWrite|verbs.RemoteRead); err != nil {
			return fail(err)
		}
		q.free <- i
	}
	for i := range q.nrecv {
		if err := q.repost(i); err != nil {
			return fail(err)
		}
	}
	conn := cfg.conn
	conn.PrivateData = nvme.CMRequest{QID: cfg.qid, HRQSize: uint16(q.nrecv), HSQSize: uint16(q.sqsize - 1)}.Append(nil)
	q.qp.SetRxHandler(q.onRx)
	if err := q.qp.Dial(ctx, cfg.network, cfg.addr, conn); err != nil {
		return fail(fmt.Errorf("nvmeof: connecting queue %d to %s: %w%s", cfg.qid, cfg.addr, err, rejectReason(err)))
	}
	if _, err := nvme.ParseCMReply(q.qp.PeerPrivateData()); err != nil {
		return fail(inQueue(cfg.qid, err))
	}
	pctx, cancel := context.WithCancel(context.Background())
	q.stop = cancel
	q.wg.Add(1)
	go q.watch(pctx)
	q.onRx() // what came before the watcher
	return q, nil
}

// release deregisters the queue's memory.
func (q *queue) release() {
	if q.respMR != nil {
		q.respMR.Dereg()
	}
	for i := range q.slots {
		if q.slots[i].mr != nil {
			q.slots[i].mr.Dereg()
		}
	}
}

// close ends the connection (in order if ctx allows) and the poller.
func (q *queue) close(ctx context.Context, orderly bool) {
	q.closed.Do(func() { q.doClose(ctx, orderly) })
}

func (q *queue) doClose(ctx context.Context, orderly bool) {
	if orderly {
		if err := q.qp.Disconnect(ctx); err != nil {
			q.qp.Close()
		}
	} else {
		q.qp.Close()
	}
	q.fail(ErrQueueDead)
	q.stop()
	q.wg.Wait()
	q.release()
}

// fail marks the queue dead with err (the first one wins) and wakes every
// waiting command.
func (q *queue) fail(err error) {
	q.errOnce.Do(func() {
		q.err = err
		close(q.dead)
	})
}

func (q *queue) repost(i int) error {
	q.rsge[0] = q.respMR.SGE(i*nvme.CompletionSize, nvme.CompletionSize)
	q.rwr[0] = verbs.RecvWR{ID: uint64(i), SGL: q.rsge[:]}
	_, err := q.qp.PostRecv(q.rwr[:]...)
	return err
}

// onRx runs on the QP's receive goroutine after each FPDU (SetRxHandler):
// it hands the responses on the CQ to their commands right there, which
// saves a goroutine hand-off per command. It may not close the QP: a
// protocol error marks the queue dead, and the watcher closes it.
func (q *queue) onRx() {
	q.rxMu.Lock()
	defer q.rxMu.Unlock()
	for {
		n := q.cq.Poll(q.rxwcs)
		for i := range n {
			if err := q.response(&q.rxwcs[i]); err != nil {
				q.fail(err)
				return
			}
		}
		if n < len(q.rxwcs) {
			return
		}
	}
}

// watch ends the queue when its QP fails (handing out the responses that
// arrived before), a protocol error marked it dead or a command went
// unanswered for the queue's timeout, and stops when ctx ends.
func (q *queue) watch(ctx context.Context) {
	defer q.wg.Done()
	var tick <-chan time.Time
	if q.timeout > 0 {
		t := time.NewTicker(min(max(q.timeout/8, 10*time.Millisecond), time.Second))
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-q.qp.Done():
			q.onRx()
			err := q.qp.Err()
			if err == nil {
				err = errors.New("connection ended")
			}
			q.fail(fmt.Errorf("%w: queue %d: %w", ErrQueueDead, q.qid, err))
			return
		case <-q.dead:
			q.qp.Close()
			return
		case <-ctx.Done():
			return
		case <-tick:
			if err := q.overdue(); err != nil {
				if q.onTimeout != nil {
					q.onTimeout(err) // the admin queue first: Err says it once a command does
				}
				q.fail(err)
				q.qp.Close()
				return
			}
		}
	}
}

// overdue returns the error of the queue's oldest command outstanding for
// longer than its timeout, if there is one.
func (q *queue) overdue() error {
	now := sinceStart()
	q.pmu.Lock()
	defer q.pmu.Unlock()
	for i := range q.slots {
		s := &q.slots[i]
		if s.waiting && !s.standing && now-s.sent > q.timeout &&
			!(q.qid == 0 && nvme.Command(s.capsule).Opcode() == nvme.AdminAER) { // AdminCommand's own AER stands too
			return &endedError{cause: ErrCommandTimeout,
				msg: fmt.Sprintf("queue %d: command %#x unanswered for %v (Config.IOTimeout); the controller's queues end", q.qid,
					nvme.Command(s.capsule).CID(), q.timeout)}
		}
	}
	return nil
}

// start is the origin of the queues' monotonic clock.
var start = time.Now()

func sinceStart() time.Duration { return time.Since(start) }

// response takes one completion: a CQE for a waiting command.
func (q *queue) response(wc *verbs.WC) error {
	if wc.Status != verbs.Success {
		qerr := q.qp.Err()
		if qerr == nil {
			qerr = fmt.Errorf("%v", wc.Status)
		}
		return fmt.Errorf("%w: queue %d: %w", ErrQueueDead, q.qid, qerr)
	}
	if wc.Opcode != verbs.WCRecv {
		return nil
	}
	ri := int(wc.ID)
	cqe, ok := nvme.ParseCompletion(q.resp[ri*nvme.CompletionSize : (ri+1)*nvme.CompletionSize][:wc.ByteLen])
	if !ok {
		return fmt.Errorf("%w: queue %d: a response of %d octets", ErrQueueDead, q.qid, wc.ByteLen)
	}
	cid := cqe.CID()
	res, st := cqe.Result(), cqe.Status()
	q.pmu.Lock()
	defer q.pmu.Unlock()
	if err := q.repost(ri); err != nil {
		return err
	}
	idx := int(cid & 0xff)
	// waiting first: submit writes gen before it takes pmu, so gen may be
	// read only once waiting (set under pmu after it) says the write is
	// done. A stale or repeated response finds the slot not waiting.
	if idx >= len(q.slots) || !q.slots[idx].waiting || q.slots[idx].gen != uint8(cid>>8) {
		return fmt.Errorf("%w: queue %d: a response for command %#x, which is not outstanding", ErrQueueDead, q.qid, cid)
	}
	s := &q.slots[idx]
	s.waiting = false
	if s.abandoned {
		// Its caller is gone: the slot is free now that the target is
		// done with its buffer (its data moved before its response).
		s.abandoned, s.standing = false, false
		q.free <- idx
		return nil
	}
	s.res, s.st, s.flags, s.invKey = res, st, wc.Flags, wc.InvalidatedRKey
	s.done <- struct{}{}
	return nil
}

// tryAcquire takes a free slot if there is one; a draining queue has
// none (ErrClosed).
func (q *queue) tryAcquire() (int, bool, error) {
	select {
	case i := <-q.free:
		if !q.take(i, false) {
			return 0, false, ErrClosed
		}
		return i, true, nil
	default:
		return 0, false, nil
	}
}

// acquire takes a free slot, waiting for one. A ctx already done sends
// nothing: its command would end the queue when it found ctx done.
func (q *queue) acquire(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var i int
	select {
	case i = <-q.free:
	default:
		select {
		case i = <-q.free:
		case <-q.dead:
			if q.draining() {
				return 0, ErrClosed
			}
			return 0, q.err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if !q.take(i, closing(ctx)) {
		return 0, ErrClosed
	}
	return i, nil
}

// closingKey marks the context of a command Controller.Close sends itself
// (CC.SHN, Keep Alive while it drains), which a draining queue still takes.
type closingKey struct{}

func closing(ctx context.Context) bool { return ctx.Value(closingKey{}) != nil }

// closeOwnCtx is the context of such a command, bounded by d.
func closeOwnCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithValue(context.Background(), closingKey{}, true), d)
}

// take counts slot i as held, unless the queue is draining and the command
// is not Close's own: the slot then goes back.
func (q *queue) take(i int, own bool) bool {
	q.gate.Lock()
	ok := !q.closing || own
	if ok {
		q.held++
	}
	q.gate.Unlock()
	if !ok {
		q.free <- i
	}
	return ok
}

// releaseSlot gives a slot back.
func (q *queue) releaseSlot(i int) {
	q.unhold()
	q.free <- i
}

// unhold counts one slot fewer as held, and wakes a drain at zero.
func (q *queue) unhold() {
	q.gate.Lock()
	q.held--
	if q.held == 0 && q.idle != nil {
		close(q.idle)
		q.idle = nil
	}
	q.gate.Unlock()
}

func (q *queue) draining() bool {
	q.gate.Lock()
	defer q.gate.Unlock()
	return q.closing
}

// refuse makes new commands fail with ErrClosed.
func (q *queue) refuse() {
	q.gate.Lock()
	q.closing = true
	q.gate.Unlock()
}

// drain refuses new commands (ErrClosed) and waits until those in flight
// have finished and their callers gave their slots back, the queue died or
// ctx ended.
func (q *queue) drain(ctx context.Context) error {
	q.gate.Lock()
	q.closing = true
	if q.held > 0 && q.idle == nil {
		q.idle = make(chan struct{})
	}
	idle := q.idle
	q.gate.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-q.dead:
		return q.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// submit sends slot i's command: the SQE already in its capsule, with
// inCap octets of in-capsule data after it. If it cannot, the slot is
// given back and the queue ended.
func (q *queue) submit(i int, inCap int) error {
	s := &q.slots[i]
	s.gen++
	s.inCap = inCap
	nvme.Command(s.capsule).SetCID(uint16(s.gen)<<8 | uint16(i))
	q.pmu.Lock()
	s.waiting = true
	s.sent = sinceStart()
	q.pmu.Unlock()
	s.wr[0] = verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: s.capsule[:nvme.CommandSize+inCap]}
	if err := transport.PostSend(q.qp, s.wr[:]); err != nil {
		q.pmu.Lock()
		s.waiting = false
		q.pmu.Unlock()
		// Nothing went out: the slot is free again, and a queue whose
		// send queue stayed full for seconds is of no use.
		q.releaseSlot(i)
		q.fail(fmt.Errorf("%w: queue %d: %w", ErrQueueDead, q.qid, err))
		return fmt.Errorf("%w: %w", ErrQueueDead, err)
	}
	return nil
}

// wait waits for slot i's response. A command whose queue died may still
// hold its slot's buffer: the slot is then never given back. A command
// whose ctx ends first is abandoned (ctx's error): its slot is given back
// when its response comes, and the queue goes on for other commands.
// Either way the caller no longer owns the slot.
func (q *queue) wait(ctx context.Context, i int) error {
	s := &q.slots[i]
	select {
	case <-s.done:
		return nil
	default:
	}
	select {
	case <-s.done:
		return nil
	case <-q.dead:
		return q.err
	case <-ctx.Done():
		if q.abandon(i) {
			return ctx.Err()
		}
		<-s.done // answered meanwhile
		return nil
	}
}

// abandon gives up slot i's outstanding command, unless its response has
// come (false). The slot no longer counts as held: Close need not wait
// for a command nobody waits for.
func (q *queue) abandon(i int) bool {
	s := &q.slots[i]
	q.pmu.Lock()
	if !s.waiting {
		q.pmu.Unlock()
		return false
	}
	s.abandoned = true
	standing := s.standing
	q.pmu.Unlock()
	if !standing {
		q.unhold()
	}
	return true
}

// run sends slot i's command and waits for its status; the slot is
// released unless keep (the caller then reads its buffer and releases it).
func (q *queue) run(ctx context.Context, i, inCap int, op string) (uint64, error) {
	if err := q.submit(i, inCap); err != nil {
		return 0, err
	}
	if err := q.wait(ctx, i); err != nil {
		return 0, err
	}
	s := &q.slots[i]
	if !s.st.OK() {
		return s.res, &nvme.StatusError{Op: op, Status: s.st, Result: s.res}
	}
	return s.res, nil
}

// cmd returns slot i's SQE, zeroed.
func (q *queue) cmd(i int) nvme.Command {
	c := nvme.Command(q.slots[i].capsule[:nvme.CommandSize])
	clear(c)
	return c
}

// keyed points the command's SGL at n octets of slot i's buffer.
func (q *queue) keyed(i int, c nvme.Command, n int) {
	mr := q.slots[i].mr
	c.SGL().SetKeyed(mr.Addr(), uint32(n), mr.RKey(), false)
}

// adminCmd runs a command without host data or with data to the host (n
// octets into the slot's buffer, which the caller copies out with get).
func (q *queue) adminCmd(ctx context.Context, fill func(nvme.Command), n int, op string, get func([]byte)) (uint64, error) {
	i, err := q.acquire(ctx)
	if err != nil {
		return 0, err
	}
	c := q.cmd(i)
	fill(c)
	q.keyed(i, c, n)
	res, err := q.run(ctx, i, 0, op)
	if err == nil && get != nil {
		get(q.slots[i].buf[:n])
	}
	if err == nil || isStatus(err) {
		q.releaseSlot(i)
	}
	return res, err
}

// standingCmd runs a command that stays outstanding until the controller
// has something to say (an Asynchronous Event Request): as adminCmd, but
// its slot does not count as held, so that Close's drain does not wait
// for it; the queue's end wakes it.
func (q *queue) standingCmd(ctx context.Context, fill func(nvme.Command), op string) (uint64, error) {
	i, err := q.acquire(ctx)
	if err != nil {
		return 0, err
	}
	q.unhold()
	q.pmu.Lock()
	q.slots[i].standing = true
	q.pmu.Unlock()
	fill(q.cmd(i))
	res, err := q.run(ctx, i, 0, op)
	if err == nil || isStatus(err) {
		q.pmu.Lock()
		q.slots[i].standing = false
		q.pmu.Unlock()
		q.free <- i // not held: no count to give back
	}
	return res, err
}

func isStatus(err error) bool {
	var se *nvme.StatusError
	return errors.As(err, &se)
}
