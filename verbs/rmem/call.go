package rmem

import (
	"context"
	"fmt"
	"sync"

	"github.com/goiwarp/iwarp/verbs"
)

// call is one ReadAt or WriteAt in progress. Calls are pooled: a call
// goes back to the pool only once nothing refers to it (its slots are
// completed or quarantined, and no copy is under way).
type call struct {
	// mu is held by a goroutine other than the caller's while it copies to
	// or from p (the dispatcher for a Read's data, a grantor for a Write's),
	// so that the caller, leaving, waits for that copy to end. Lock order:
	// Buffer.mu, then call.mu.
	mu   sync.Mutex
	p    []byte
	off  int64
	read bool

	// Under Buffer.mu.
	next    int   // octets of p given to WRs so far
	pending int   // WRs granted and not completed
	err     error // why the call ends early
	queued  bool  // on Buffer.queue
	active  bool  // on Buffer.active
	links   [2]links

	wake chan struct{} // capacity 1: pending or err changed
}

// ReadAt reads len(p) octets of the remote buffer at off into p with RDMA
// Reads, and returns len(p), or 0 and an error (then p's contents are
// undefined). It returns when the data is in p, when ctx ends (the error
// wraps ctx.Err()), when the QP ends (a *QPError) or when the Buffer is
// closed (ErrClosed); p is never touched after it has returned.
func (b *Buffer) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return b.do(ctx, p, off, true)
}

// WriteAt writes p into the remote buffer at off with RDMA Writes, and
// returns len(p), or 0 and an error. It returns once every Write has
// completed: handed to TCP, as iWARP completes them, so the data reaches
// the peer's memory before anything this Buffer or the QP sends later (a
// Read of the same octets returns it), though the peer's program sees it
// only through a completion that orders it (see package verbs). On error
// the remote octets are undefined; p is never touched after WriteAt has
// returned.
func (b *Buffer) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	return b.do(ctx, p, off, false)
}

func (b *Buffer) do(ctx context.Context, p []byte, off int64, read bool) (int, error) {
	if off < 0 || off > b.size || int64(len(p)) > b.size-off {
		return 0, &RangeError{Off: off, Len: len(p), Size: b.size}
	}
	if read && b.ord == 0 {
		return 0, ErrNoReads
	}
	if err := ctx.Err(); err != nil {
		return 0, ctxErr(read, off, len(p), err)
	}
	c := b.calls.Get().(*call)
	c.p, c.off, c.read = p, off, read
	c.next, c.pending, c.err = 0, 0, nil
	b.mu.Lock()
	switch {
	case b.closed:
		c.err = ErrClosed
	case b.err != nil:
		c.err = b.err
	case len(p) > 0:
		b.active.push(c)
		c.active = true
		b.queue.push(c)
		c.queued = true
		b.grantLocked()
	}
	for c.err == nil && (c.next < len(p) || c.pending > 0) {
		b.mu.Unlock()
		select {
		case <-c.wake:
		case <-ctx.Done():
		}
		b.mu.Lock()
		if c.err == nil && (c.next < len(p) || c.pending > 0) && ctx.Err() != nil {
			c.err = ctxErr(read, off, len(p), ctx.Err())
		}
	}
	err := c.err
	b.detachLocked(c)
	b.mu.Unlock()
	c.mu.Lock() // a copy to or from p still under way ends first
	c.p = nil
	c.mu.Unlock()
	b.calls.Put(c)
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func ctxErr(read bool, off int64, n int, err error) error {
	op := "write"
	if read {
		op = "read"
	}
	return fmt.Errorf("rmem: %s of octets %d to %d: %w", op, off, off+int64(n), err)
}

// grantLocked gives free slots to the calls waiting, first come first
// served, one WR at a time: a call that wants more goes to the back of
// the queue. A Read also needs a Read credit (ORD); while the call at the
// head waits for one, the calls behind it wait too. Each grant is posted
// with mu released (and the call's mu held: it copies from p).
func (b *Buffer) grantLocked() {
	for !b.closed && b.err == nil && b.queue.head != nil && len(b.free) > 0 {
		c := b.queue.head
		if c.read && b.credits == 0 {
			return
		}
		i := b.free[len(b.free)-1]
		b.free = b.free[:len(b.free)-1]
		s := &b.slots[i]
		n := min(b.piece, len(c.p)-c.next)
		s.owner, s.busy, s.read, s.pOff, s.n = c, true, c.read, c.next, n
		s.gen++
		s.sgl[0].Length = uint32(n)
		c.next += n
		c.pending++
		b.busy++
		if c.read {
			b.credits--
		}
		b.queue.remove(c)
		if c.next < len(c.p) {
			b.queue.push(c)
		} else {
			c.queued = false
		}
		if b.onGrant != nil {
			b.onGrant(c)
		}
		wr := verbs.SendWR{ID: wrID(i, s.gen), Opcode: verbs.OpRDMAWrite, Flags: verbs.Signaled, SGL: s.sgl[:],
			RemoteAddr: b.remote.Addr + uint64(c.off) + uint64(s.pOff), RKey: b.remote.RKey}
		if c.read {
			wr.Opcode = verbs.OpRDMARead
		}
		gen, pOff := s.gen, s.pOff
		c.mu.Lock()
		b.mu.Unlock()
		if !c.read {
			copy(b.stg[int(i)*b.piece:int(i)*b.piece+n], c.p[pOff:pOff+n])
		}
		_, err := b.qp.PostSend(wr)
		c.mu.Unlock()
		b.mu.Lock()
		if err != nil && s.busy && s.gen == gen {
			// Not posted: no completion will come.
			if s.owner != nil {
				b.failLocked(s.owner, fmt.Errorf("rmem: posting a WR: %w", err))
			}
			b.releaseLocked(i)
		}
	}
}

// releaseLocked frees slot i, whose WR has completed (or was never
// posted).
func (b *Buffer) releaseLocked(i int32) {
	s := &b.slots[i]
	if s.read {
		b.credits++
	}
	if c := s.owner; c != nil {
		c.pending--
		if c.pending == 0 && c.next == len(c.p) {
			wake(c.wake)
		}
	}
	s.owner, s.busy = nil, false
	b.free = append(b.free, i)
	b.busy--
	b.checkDrainedLocked()
}

// failLocked ends c early with err (the first error wins).
func (b *Buffer) failLocked(c *call, err error) {
	if c.err == nil {
		c.err = err
	}
	wake(c.wake)
}

// dieLocked ends the Buffer's use: every call in progress fails with err,
// and so does every later one.
func (b *Buffer) dieLocked(err error) {
	if b.err == nil {
		b.err = err
	}
	for c := b.active.head; c != nil; c = c.links[linkActive].next {
		b.failLocked(c, b.err)
	}
}

// detachLocked takes c off the Buffer's lists as it returns. Its WRs still
// in flight keep their slots, quarantined (owner nil) until they complete.
func (b *Buffer) detachLocked(c *call) {
	if c.queued {
		b.queue.remove(c)
		c.queued = false
	}
	if c.active {
		b.active.remove(c)
		c.active = false
	}
	if c.pending > 0 {
		for i := range b.slots {
			if b.slots[i].owner == c {
				b.slots[i].owner = nil
			}
		}
		c.pending = 0
	}
}

// wrID makes a WR ID of a slot index and its generation, so that a stale
// or foreign completion is told apart.
func wrID(i int32, gen uint32) uint64 { return uint64(gen)<<32 | uint64(uint32(i)) }

// wake does a non-blocking send on a capacity-1 channel.
func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
