package perf

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/goiwarp/iwarp/verbs"
)

// The operands of the atomic tests: perftest's ATOMIC_ADD_VALUE and
// ATOMIC_SWAP_VALUE (a compare-and-swap of 1 for 0 on a zeroed word never
// matches, so every one of them is a full round trip that changes nothing).
const (
	atomicAdd  = 1
	atomicSwap = 0
	idCheck    = idKind // the WR ID kind of checkAtomics' read-back
)

// checkAtomics reads each QP's target word back with a fetch-and-add of 0
// and compares it with what the run's atomics must have left there: one
// per WR for fetch-and-add (--perform_warm_up's too), still 0 for compare-and-swap. A test whose
// atomics were timed but did not happen fails here.
func (e *endpoint) checkAtomics(ctx context.Context) error {
	for _, q := range e.qps {
		wr := verbs.SendWR{ID: wrID(idCheck, q.i, 0), Opcode: verbs.OpAtomicFetchAdd, Flags: verbs.Signaled,
			SGL: []verbs.SGE{{Addr: q.mr.Addr(), Length: 8, LKey: q.mr.LKey()}}, RemoteAddr: q.remote.Addr, RKey: q.remote.RKey}
		if _, err := q.qp.PostSend(wr); err != nil {
			return qpFailure(q.qp, err)
		}
	}
	for seen := 0; seen < len(e.qps); {
		k := e.cq.Poll(e.wcs)
		if k == 0 {
			if err := e.cq.Wait(ctx); err != nil {
				return err
			}
			continue
		}
		for _, wc := range e.wcs[:k] {
			if err := e.check(&wc); err != nil {
				return err
			}
			if wc.ID&idKind != idCheck {
				continue
			}
			q := e.qps[idQP(wc.ID)]
			got := binary.NativeEndian.Uint64(q.local[:8])
			want := uint64(0)
			if e.p.Atomic == FetchAndAdd {
				want = (q.warmed + q.scnt) * atomicAdd
			}
			if got != want {
				return fmt.Errorf("QP %d: the target word reads %d after %d %v, want %d", q.i, got, q.warmed+q.scnt, e.p.Atomic, want)
			}
			seen++
		}
	}
	return nil
}
