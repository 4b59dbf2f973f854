package verbs

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/goiwarp/iwarp/tcpx"
)

// defaultResponseTimeout is ConnConfig.ResponseTimeout's default: long
// enough for any peer that is running, short enough that a stopped one
// does not hold a program for good (Linux's NVMe host gives a command 30 s
// too).
const defaultResponseTimeout = 30 * time.Second

// ErrResponseTimeout: RDMA Reads or atomics of ours were outstanding and
// the peer sent nothing for ConnConfig.ResponseTimeout. The QP's error Is
// ErrConnLost too; the oldest of those WRs completes with RetryExcErr.
var ErrResponseTimeout = errors.New("verbs: response timeout: the peer sent nothing while RDMA Reads or atomics awaited their responses")

// respWatch ends a QP whose peer stays silent while our Reads or atomics
// await responses (ConnConfig.ResponseTimeout). It is a timer, not a
// goroutine, and looks every quarter of the timeout: the data path pays
// nothing for it.
type respWatch struct {
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
	limit   time.Duration
	since   time.Time // when the current silence with responses owed began; zero: none owed
	seen    uint64    // the FPDUs received at the last look
	octets  uint64    // TCP's octets received at the last look
}

// startRespWatch arms the watch of a QP that may have Reads outstanding.
func (qp *QP) startRespWatch(limit time.Duration) {
	w := &qp.resp
	if limit <= 0 || qp.ord == 0 {
		return
	}
	w.mu.Lock()
	w.limit = limit
	w.stopped = false
	w.t = time.AfterFunc(limit/4, qp.respLook)
	w.mu.Unlock()
}

// stopRespWatch stops the watch for good; a look under way finds it stopped.
func (qp *QP) stopRespWatch() {
	w := &qp.resp
	w.mu.Lock()
	w.stopped = true
	if w.t != nil {
		w.t.Stop()
	}
	w.mu.Unlock()
}

// respLook is the timer's function. The peer is alive if an FPDU or any
// octet of the stream arrived since the last look (TCP's count also moves
// while an FPDU is read slowly, or while the receive loop runs a handler);
// the clock runs only while a Read or atomic is on the wire.
func (qp *QP) respLook() {
	w := &qp.resp
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	now := time.Now()
	seen, octets := qp.rxSeen.Load(), w.octets
	if tc, ok := qp.conn.(*net.TCPConn); ok {
		if s, err := tcpx.Info(tc); err == nil {
			octets = s.BytesReceived
		}
	}
	alive := seen != w.seen || octets != w.octets
	w.seen, w.octets = seen, octets
	switch n := qp.ordq.ops(); {
	case n == 0:
		w.since = time.Time{}
	case alive || w.since.IsZero():
		w.since = now
	case now.Sub(w.since) >= w.limit:
		w.stopped = true
		err := &lostError{fmt.Errorf("%w (ConnConfig.ResponseTimeout %v, %d outstanding)", ErrResponseTimeout, w.limit, n)}
		if qp.setError(err) {
			abort(qp.conn) // the peer may be stopped, not gone: it finds a reset when it runs again
		}
		return
	}
	w.t.Reset(w.limit / 4)
}
