package perf

import (
	"context"

	"github.com/goiwarp/iwarp/verbs"
)

// warmUp is perftest's --perform_warm_up for the Write, Read and atomic
// bandwidth tests: before the clock starts, each QP in turn posts tx-depth
// of the test's WRs (a post list's worth with -l), every one signaled, and
// waits for them all, so that the run starts with the regions, the queues
// and the connection's windows warm. The peer takes part unawares (its
// memory is written or read), so either side may be perftest.
func (r *bwRun) warmUp(ctx context.Context) error {
	e, p := r.e, r.e.p
	n := p.TxDepth
	if p.PostList > 1 {
		n = p.PostList
	}
	for _, q := range e.qps {
		wrs := q.batch[:min(n, len(q.batch))]
		for posted := 0; posted < n; {
			k := min(n-posted, len(wrs))
			for j := range wrs[:k] {
				wrs[j].ID = wrID(idCheck, q.i, 1)
				wrs[j].Flags = r.flags | verbs.Signaled
			}
			m, err := q.qp.PostSend(wrs[:k]...)
			if err != nil {
				return qpFailure(q.qp, err)
			}
			posted += m
		}
		q.warmed = uint64(n)
		for done := 0; done < n; {
			k, err := e.cq.PollWait(ctx, e.wcs)
			if err != nil {
				return err
			}
			for i := range e.wcs[:k] {
				if err := e.check(&e.wcs[i]); err != nil {
					return err
				}
			}
			done += k
		}
	}
	return nil
}
