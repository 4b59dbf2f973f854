package perf

// The server's side of hostile peers. iWARP has no authentication (TLS
// with client certificates, --tls-ca, adds one): anyone who reaches the
// port can complete the MPA start-up and then do anything
// or nothing. A server serves one client at a time (the QPs, the memory and
// the table are one test's), so that one client must not be able to keep it
// from the next:
//
//   - Every wait on the peer is bounded by --exchange-timeout: each step of
//     the set-up (a control message, each test QP's connection request) by
//     a deadline, and the test itself, Syncs and Reports included, by a
//     watchdog that ends the run when nothing has moved on any of its
//     connections for that long (watchProgress).
//   - The run ends at once when its control QP fails (a Terminate, a close).
//   - A client that fails is dropped: the error goes to the log
//     (Params.Log) and the server waits for the next client, until --runs
//     runs have completed.
//   - One goroutine (router) takes every connection request as it comes:
//     while a client is served, only requests of its test are passed on;
//     another client's is held for busyWait, in case the test ends, and
//     then refused as busy rather than left waiting for a Reply. A request
//     whose initiator closes while the router holds it, either way, is
//     closed and freed at once (its Context ends).
//   - What a peer sends never sizes our memory beyond --max-region (see
//     Params.regionBytes).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/goiwarp/iwarp/tcpx"
	"github.com/goiwarp/iwarp/verbs"
)

// RequestSource is where an exchange takes its connection requests from: a
// verbs.Listener, or the server's router.
type RequestSource interface {
	GetRequest(ctx context.Context) (*verbs.ConnRequest, error)
}

// TimeoutError is a wait on the peer that --exchange-timeout ended. It
// wraps context.DeadlineExceeded.
type TimeoutError struct {
	What  string        // what we waited for
	After time.Duration // the timeout
}

func (e *TimeoutError) Error() string {
	msg := fmt.Sprintf("nothing from the peer for %v (--exchange-timeout)", e.After)
	if e.What != "" {
		msg = e.What + ": " + msg
	}
	return msg
}

func (e *TimeoutError) Unwrap() error { return context.DeadlineExceeded }

// ClientError is a client the server dropped or refused, and why.
type ClientError struct {
	Addr net.Addr
	Err  error
}

func (e *ClientError) Error() string { return fmt.Sprintf("client %v: %v", e.Addr, e.Err) }
func (e *ClientError) Unwrap() error { return e.Err }

// localError marks a failure of this side's own (output, resources), which
// ends a server rather than only the client's run.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// step returns ctx with the deadline of one step of the exchange.
func step(ctx context.Context, d time.Duration, what string) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, &TimeoutError{What: what, After: d})
}

// causeOf returns why ctx ended in place of err, when ctx ended for a reason
// of ours (a step's deadline, the watchdog, the control QP's failure) and
// not because its parent did.
func causeOf(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	c := context.Cause(ctx)
	if c == nil || c == context.Canceled || c == context.DeadlineExceeded {
		return err
	}
	return c
}

// router takes every connection request from the listener as it comes.
// Idle, it queues them all for GetRequest. While a client is served
// (serving), it queues only those claim accepts, the QPs of that client's
// test; another client's request is held for busyWait, in case the test
// ends meanwhile (a client that follows the last one at once), and then
// refused as busy.
type router struct {
	ln    *verbs.Listener
	ready chan struct{} // a request was queued (capacity 1)
	done  chan struct{} // the loop is over: the listener closed

	mu    sync.Mutex
	queue []*verbs.ConnRequest          // passed on, for GetRequest
	held  []heldRequest                 // another client's, while one is served; oldest first
	timer *time.Timer                   // refuses the held requests whose time is up
	claim func(*verbs.ConnRequest) bool // nil: idle
	err   error                         // the listener's, once done
	// unwatch stops, for each request queued or held, the callback that
	// frees it once its initiator has gone.
	unwatch map[*verbs.ConnRequest]func() bool
}

type heldRequest struct {
	req *verbs.ConnRequest
	at  time.Time
}

// maxQueued bounds the requests the router holds, passed on or held;
// beyond it they are refused. A client dials its QPs one after the other.
const maxQueued = 64

// busyWait is how long a busy server holds another client's request before
// it refuses it.
const busyWait = time.Second

var (
	busyReject  = []byte(rejectPrefix + "busy: this server runs one test at a time; try again when it is over")
	staleReject = []byte(rejectPrefix + "the test this QP was for is over")
)

func newRouter(ln *verbs.Listener) *router {
	r := &router{ln: ln, ready: make(chan struct{}, 1), done: make(chan struct{}),
		unwatch: make(map[*verbs.ConnRequest]func() bool)}
	go r.loop()
	return r
}

func (r *router) loop() {
	defer close(r.done)
	for {
		req, err := r.ln.GetRequest(context.Background())
		if err != nil {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		full := len(r.queue)+len(r.held) >= maxQueued
		switch {
		case full:
		case r.claim == nil || r.claim(req):
			r.queue = append(r.queue, req)
			r.watch(req)
			r.mu.Unlock()
			r.signal()
			continue
		case !bytes.HasPrefix(req.PrivateData, []byte(qpPrefix)):
			r.hold(heldRequest{req, time.Now()})
			r.watch(req)
			r.mu.Unlock()
			continue
		}
		r.mu.Unlock()
		refuseOther(req)
	}
}

func (r *router) signal() {
	select {
	case r.ready <- struct{}{}:
	default:
	}
}

// watch frees req once its initiator has gone, if the router still has it
// then. r.mu is held.
func (r *router) watch(req *verbs.ConnRequest) {
	ctx := req.Context()
	r.unwatch[req] = context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), verbs.ErrInitiatorGone) { // not the listener's close: r.close refuses those
			r.forget(req)
		}
	})
}

// release stops watching req, which leaves the router. r.mu is held.
func (r *router) release(req *verbs.ConnRequest) {
	if stop, ok := r.unwatch[req]; ok {
		stop()
		delete(r.unwatch, req)
	}
}

// forget drops req from the queue or the held requests, and closes it.
func (r *router) forget(req *verbs.ConnRequest) {
	r.mu.Lock()
	if _, ok := r.unwatch[req]; !ok {
		r.mu.Unlock()
		return // passed on or answered meanwhile
	}
	delete(r.unwatch, req)
	r.queue = slices.DeleteFunc(r.queue, func(q *verbs.ConnRequest) bool { return q == req })
	r.held = slices.DeleteFunc(r.held, func(h heldRequest) bool { return h.req == req })
	r.mu.Unlock()
	req.Reject(nil) // closes the socket; the initiator is gone
}

// hold holds h until the test ends or its time is up. r.mu is held.
func (r *router) hold(h heldRequest) {
	r.held = append(r.held, h)
	if r.timer == nil {
		r.timer = time.AfterFunc(time.Until(h.at.Add(busyWait)), r.expire)
	}
}

// expire refuses the held requests whose time is up.
func (r *router) expire() {
	r.mu.Lock()
	now := time.Now()
	n := 0
	for n < len(r.held) && !now.Before(r.held[n].at.Add(busyWait)) {
		n++
	}
	late := append([]heldRequest(nil), r.held[:n]...)
	r.held = r.held[n:]
	for _, h := range late {
		r.release(h.req)
	}
	r.timer = nil
	if len(r.held) > 0 {
		r.timer = time.AfterFunc(time.Until(r.held[0].at.Add(busyWait)), r.expire)
	}
	r.mu.Unlock()
	for _, h := range late {
		h.req.Reject(busyReject)
	}
}

// GetRequest returns the next request passed on.
func (r *router) GetRequest(ctx context.Context) (*verbs.ConnRequest, error) {
	for {
		r.mu.Lock()
		if len(r.queue) > 0 {
			req := r.queue[0]
			r.queue = r.queue[1:]
			r.release(req)
			r.mu.Unlock()
			return req, nil
		}
		err := r.err
		r.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-r.ready:
		case <-r.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// serving passes on from now only the requests claim accepts; those already
// queued that it does not are held (another client's) or refused.
func (r *router) serving(claim func(*verbs.ConnRequest) bool) {
	r.mu.Lock()
	r.claim = claim
	var refuse []*verbs.ConnRequest
	keep := r.queue[:0]
	for _, q := range r.queue {
		switch {
		case claim(q):
			keep = append(keep, q)
		case bytes.HasPrefix(q.PrivateData, []byte(qpPrefix)):
			r.release(q)
			refuse = append(refuse, q)
		default:
			r.hold(heldRequest{q, time.Now()})
		}
	}
	r.queue = keep
	r.mu.Unlock()
	for _, q := range refuse {
		refuseOther(q)
	}
}

// refuseOther refuses a request that is not for the test in progress: a
// stray QP's as such, any other (another client's) as busy.
func refuseOther(req *verbs.ConnRequest) {
	if bytes.HasPrefix(req.PrivateData, []byte(qpPrefix)) {
		req.Reject([]byte(rejectPrefix + "not a QP of the test in progress"))
		return
	}
	req.Reject(busyReject)
}

// serving tells src, if it is the server's router, which requests belong
// to the client being accepted.
func serving(src RequestSource, claim func(*verbs.ConnRequest) bool) {
	if r, ok := src.(*router); ok {
		r.serving(claim)
	}
}

// idle passes every request on again, once a client's test is over: the
// held ones first, in their order; what is still queued was that test's
// and is refused.
func (r *router) idle() {
	r.mu.Lock()
	if r.claim == nil {
		r.mu.Unlock()
		return
	}
	r.claim = nil
	stale := r.queue
	r.queue = nil
	for _, q := range stale {
		r.release(q)
	}
	for _, h := range r.held {
		r.queue = append(r.queue, h.req)
	}
	r.held = nil
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	passed := len(r.queue) > 0
	r.mu.Unlock()
	if passed {
		r.signal()
	}
	for _, q := range stale {
		q.Reject(staleReject)
	}
}

// close closes the listener, waits for the loop and refuses what is left.
func (r *router) close() {
	r.ln.Close()
	<-r.done
	r.mu.Lock()
	stale, held := r.queue, r.held
	r.queue, r.held = nil, nil
	for req, stop := range r.unwatch {
		stop()
		delete(r.unwatch, req)
	}
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.mu.Unlock()
	for _, q := range stale {
		q.Reject(staleReject)
	}
	for _, h := range held {
		h.req.Reject(busyReject)
	}
}

// peered is an exchange that knows its peer's address.
type peered interface{ peer() net.Addr }

// serveRDMA serves clients one at a time on ln (serveLoop).
func serveRDMA(ctx context.Context, p *Params, pr *printer, dev *verbs.Device, ln *verbs.Listener, keep bool) ([]Report, error) {
	r := newRouter(ln)
	defer r.close()
	return serveLoop(ctx, p, pr, keep, func() ([]Report, error) { return serveClient(ctx, p, pr, dev, r) })
}

// serveLoop serves clients one at a time, each with one call of serve,
// until p.Runs runs have completed (0: until ctx ends). With keep, a
// client that fails is logged to p.Log and dropped, and the server waits
// for the next; without (the server of --loopback), the first client's
// run is the server's.
func serveLoop(ctx context.Context, p *Params, pr *printer, keep bool, serve func() ([]Report, error)) ([]Report, error) {
	runs := 0
	for {
		rows, err := serve()
		if err == nil {
			runs++
			if !keep || p.Runs > 0 && runs >= p.Runs {
				return rows, nil
			}
			pr.waiting()
			continue
		}
		if !keep || ctx.Err() != nil || !dropped(err) {
			return rows, err
		}
		logf(p, "iwarp-perf: %v; dropped, waiting for the next client\n", err)
		pr.waiting()
	}
}

// dropped reports whether err ends only the client's run.
func dropped(err error) bool {
	var ce *ClientError
	var le *localError
	return errors.As(err, &ce) && !errors.As(err, &le)
}

// serveClient opens the exchange with the next client and runs its test.
func serveClient(ctx context.Context, p *Params, pr *printer, dev *verbs.Device, r *router) ([]Report, error) {
	defer r.idle() // AcceptExchange has it serve the client it accepts
	x, err := AcceptExchange(ctx, r, dev, p)
	if err != nil {
		return nil, err
	}
	defer x.Close()
	var addr net.Addr
	if c, ok := x.(peered); ok {
		addr = c.peer()
	}
	// Once the test is over, the next client may come: it waits while this
	// one's QPs close, rather than being refused as busy.
	rows, err := runRDMAOver(ctx, p, pr, dev, x, false, r.idle)
	if err != nil && ctx.Err() == nil {
		err = &ClientError{Addr: addr, Err: err}
	}
	return rows, err
}

// logf writes to the server's log.
func logf(p *Params, format string, a ...any) {
	if p.Log != nil {
		fmt.Fprintf(p.Log, format, a...)
	}
}

// watchProgress cancels a run (with a TimeoutError) once nothing has moved
// on any of conns for d: no octet received from the peer and none of ours
// acknowledged by it, as the kernel counts them (TCP_INFO). Every wait of a
// test (Syncs, Reports, and the measurement: a passive side waits for the
// peer's Report while its Writes or Reads keep the octets moving) is bound
// by it without knowing how long the peer's measurement takes. Where
// TCP_INFO is not available it does nothing. stop ends it.
func watchProgress(ctx context.Context, cancel context.CancelCauseFunc, d time.Duration, what string, tcs []tcpInfoer) (stop func()) {
	if d <= 0 || len(tcs) == 0 {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(max(d/4, time.Millisecond))
		defer tick.Stop()
		last, ok := moved(tcs)
		if !ok {
			return
		}
		since := time.Now()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case now := <-tick.C:
				n, _ := moved(tcs)
				if n != last {
					last, since = n, now
				} else if now.Sub(since) >= d {
					cancel(&TimeoutError{What: what, After: d})
					return
				}
			}
		}
	}()
	return func() {
		close(quit)
		wg.Wait()
	}
}

// tcpInfoer is what watchProgress reads: a verbs.QP, or a tcpConn.
type tcpInfoer interface {
	TCPInfo() (tcpx.Stats, error)
}

// tcpConn gives a plain TCP connection (tcp_bw, tcp_lat) a TCPInfo.
type tcpConn struct{ c net.Conn }

func (t tcpConn) TCPInfo() (tcpx.Stats, error) {
	tc, ok := t.c.(*net.TCPConn)
	if !ok {
		return tcpx.Stats{}, errors.New("not a TCP connection")
	}
	return tcpx.Info(tc)
}

// moved sums the octets received on conns and acknowledged by the peer;
// ok is false when TCP_INFO told nothing.
func moved(conns []tcpInfoer) (n uint64, ok bool) {
	for _, c := range conns {
		s, err := c.TCPInfo()
		if err != nil {
			continue
		}
		n += s.BytesReceived + s.BytesAcked
		ok = true
	}
	return n, ok
}

// watchQP cancels ctx with qp's failure as soon as qp stops: the run of a
// control QP that failed is over.
func watchQP(ctx context.Context, cancel context.CancelCauseFunc, qp *verbs.QP, what string) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-qp.Done():
			cancel(qpFailure(qp, errors.New(what)))
		case <-quit:
		case <-ctx.Done():
		}
	}()
	return func() {
		close(quit)
		wg.Wait()
	}
}
