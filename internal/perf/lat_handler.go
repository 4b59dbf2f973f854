package perf

import (
	"iter"
	"sync"
	"time"
)

// latTick is how often drive resumes the loop itself: for the deadline of
// a -D run, a cancelled context, and the rare wait that no arrival ends (a
// send queue still full of WRs whose completions the transmit goroutine
// has yet to queue). Not more often: a timer that fires every millisecond
// keeps both processes' schedulers and sysmon waking, which cost write_lat
// over veth 22 µs against 15 µs at 10 ms.
const latTick = 10 * time.Millisecond

// drive runs a latency loop as a coroutine that the QP's receive handler
// resumes after each FPDU (verbs.QP.SetRxHandler): the loop's next post
// goes out on the receive goroutine, as soon as what it waited for has
// landed, with no hand-off to the application's goroutine. That hand-off
// (a goroutine wake-up) costs about as much as the rest of a loopback
// round trip. The loop must wait only through l.pause.
func (l *latRun) drive(loop func() error) error {
	var (
		mu       sync.Mutex // serialises next and stop: handler, ticker, cleanup
		finished bool
		err      error
		done     = make(chan struct{})
	)
	next, stop := iter.Pull(func(yield func(struct{}) bool) {
		l.yield = yield
		err = loop()
		l.yield = nil
	})
	resume := func() {
		mu.Lock()
		defer mu.Unlock()
		if finished {
			return
		}
		if _, ok := next(); !ok {
			finished = true
			close(done)
		}
	}
	qp := l.q.qp
	qp.SetRxHandler(resume)
	defer func() {
		qp.SetRxHandler(nil)
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			stop() // the loop's pause returns false
			finished = true
		}
	}()
	resume()
	t := time.NewTicker(latTick)
	defer t.Stop()
	for {
		select {
		case <-done:
			return err
		case <-t.C:
			resume()
		}
	}
}
