package perf

import (
	"sync"
	"time"
)

// latTick is how often drive steps the loop itself: for the deadline of
// a -D run, a cancelled context, and the rare wait that no arrival ends (a
// send queue still full of WRs whose completions the transmit goroutine
// has yet to queue). Not more often: a timer that fires every millisecond
// keeps both processes' schedulers and sysmon waking, which slows every
// round trip (docs/measurements.md).
const latTick = 10 * time.Millisecond

// drive runs a latency loop from the QP's receive handler
// (verbs.QP.SetRxHandler), which steps it after each FPDU: the loop's next
// post goes out on the receive goroutine as soon as what it waited for has
// landed, with no hand-off to the application's goroutine. That hand-off
// (a goroutine wake-up) costs about as much as the rest of a loopback
// round trip.
func (s *latLoop) drive() error {
	var (
		mu       sync.Mutex // serialises the steps: handler, ticker, return
		finished bool
		err      error
		done     = make(chan struct{})
	)
	resume := func(tick bool) {
		mu.Lock()
		if !finished {
			if tick {
				s.tick()
			}
			var d bool
			if d, _, err = s.step(); d {
				finished = true
				close(done)
			}
		}
		mu.Unlock()
	}
	qp := s.q.qp
	qp.SetRxHandler(func() { resume(false) })
	defer func() {
		qp.SetRxHandler(nil)
		mu.Lock()
		finished = true
		mu.Unlock()
	}()
	resume(false)
	t := time.NewTicker(latTick)
	defer t.Stop()
	for {
		select {
		case <-done:
			return err
		case <-t.C:
			if e := s.ctx.Err(); e != nil {
				return e
			}
			resume(true)
		}
	}
}
