package perf

import (
	"context"
	"errors"

	"github.com/goiwarp/iwarp/verbs"
)

// runInfinite runs a --run_infinitely test, as perftest's
// run_iter_bw_infinitely: one size with no end, a row every period
// (Params.Duration) from what completed in it. The client runs until it is
// interrupted, then sends its report of the whole run, as perftest's
// client does after SIGINT; the server runs until that report comes (or
// the connection ends). Either way the run is over, not failed, and the
// client's CPU line covers all of it.
func runInfinite(ctx context.Context, p *Params, pr *printer, e *endpoint, x Exchange, sender, receiver, client bool) ([]Report, error) {
	if px, ok := x.(*perftestExchange); ok {
		px.plan() // one measurement
	}
	if err := x.Sync(ctx); err != nil {
		return nil, err
	}
	var rows []Report
	e.onPeriod = func(r Report) error {
		rows = append(rows, r)
		if err := pr.row(r); err != nil {
			return &localError{err}
		}
		return nil
	}
	// The exchange at the end runs after an interrupt has ended ctx.
	endCtx, endCancel := context.WithTimeout(context.WithoutCancel(ctx), p.exchangeTimeout())
	defer endCancel()
	var total Report
	var cost cpuCost
	var err error
	peerEnd := false
	if client {
		total, cost, err = measureCPU(p, func() (Report, error) { return e.runBW(ctx, p.Size, sender, receiver, nil) })
		if err == nil {
			_, err = x.Report(endCtx, total)
		}
	} else {
		// The measurement on its own goroutine, until the client's report.
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		type result struct {
			r    Report
			cost cpuCost
			err  error
		}
		done := make(chan result, 1)
		go func() {
			r, c, err := measureCPU(p, func() (Report, error) { return e.runBW(runCtx, p.Size, sender, receiver, nil) })
			done <- result{r, c, err}
		}()
		_, err = x.Report(ctx, Report{Kind: kindBW, Size: p.Size})
		peerEnd = err == nil
		stop()
		res := <-done
		total, cost = res.r, res.cost
		if err == nil && res.err != nil && !errors.Is(res.err, context.Canceled) {
			err = res.err
		}
	}
	// A connection that ends is the peer's end too; an interrupt ours.
	ended := func(err error) bool {
		return errors.Is(err, verbs.ErrDisconnected) || errors.Is(err, verbs.ErrConnLost)
	}
	switch {
	case err == nil:
	case e.peerEnded() || ended(err) || ended(context.Cause(ctx)):
		peerEnd, err = true, nil
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled):
		err = nil
	}
	if err != nil {
		return rows, err
	}
	pr.printf("%s", resultLine)
	if peerEnd {
		pr.printf(" The peer ended the run.\n")
	}
	if sender && total.Iters > 0 {
		pr.printf("%s\n", cpuLine(cost, p.Loopback))
	}
	return rows, nil
}

// peerEnded reports whether a connection of the test ended because the
// peer closed or dropped it.
func (e *endpoint) peerEnded() bool {
	for _, q := range e.qps {
		if err := q.qp.Err(); errors.Is(err, verbs.ErrDisconnected) || errors.Is(err, verbs.ErrConnLost) {
			return true
		}
	}
	return false
}
