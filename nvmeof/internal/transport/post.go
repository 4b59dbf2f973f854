package transport

import (
	"errors"
	"runtime"
	"time"

	"github.com/goiwarp/iwarp/verbs"
)

// PostSend posts wrs, waiting while the send queue is full. verbs retires
// the slots of unsignaled sends only when its transmit loop runs dry, so
// under sustained traffic (a host serving 128 KiB RDMA Reads, a target
// writing them) the queue can look full with few WRs really outstanding;
// the wait is bounded (2 s), then the error stands. On an I/O queue this
// may run on the QP's receive goroutine (the target's queue.onRx), where the wait
// cannot retire an RDMA Read at the queue's head (its response is that
// goroutine's to read); the queue holds four WRs a command slot, of which
// a command uses at most three, so only a host that overruns its SQ while
// not reading its responses fills it, and its queue then ends.
func PostSend(qp *verbs.QP, wrs []verbs.SendWR) error {
	var deadline time.Time
	for spins := 0; ; spins++ {
		n, err := qp.PostSend(wrs...)
		if !errors.Is(err, verbs.ErrQueueFull) {
			return err
		}
		wrs = wrs[n:]
		switch {
		case spins < 64:
			runtime.Gosched()
		case deadline.IsZero():
			deadline = time.Now().Add(2 * time.Second)
		case time.Now().After(deadline):
			return err
		default:
			time.Sleep(50 * time.Microsecond)
		}
	}
}
