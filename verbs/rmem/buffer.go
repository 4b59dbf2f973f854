package rmem

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/goiwarp/iwarp/verbs"
)

// DefaultPieceSize is Config.PieceSize's default: 64 KiB WRs keep a
// connection busy without making small calls wait long behind large ones.
const DefaultPieceSize = 64 << 10

// MaxPieceSize is the largest WR iWARP carries (an RDMA Read's length is 32
// bits, and ibverbs' too).
const MaxPieceSize = 1<<31 - 1

// Config sizes a Buffer. The zero value takes the defaults.
type Config struct {
	// Depth bounds the WRs outstanding at once, all calls together; each
	// has a staging slot of PieceSize octets. Default: the QP's send queue
	// depth (QPCap.MaxSendWR), which is also its maximum, as is the send
	// CQ's capacity. Reads are further bounded by the negotiated ORD.
	Depth int
	// PieceSize is the most octets one WR moves: larger calls are split
	// (default DefaultPieceSize, at most MaxPieceSize).
	PieceSize int
}

// Buffer is a goroutine-safe handle on a peer's memory region, reached
// with RDMA Reads and Writes on a connected QP. Its methods may be called
// from any number of goroutines at once.
type Buffer struct {
	qp      *verbs.QP
	cq      *verbs.CQ
	remote  verbs.RemoteBuffer
	size    int64
	piece   int
	ord     int
	staging *verbs.MR
	stg     []byte // staging.Buf(), kept: Dereg drops the MR's

	mu         sync.Mutex
	slots      []slot
	free       []int32 // indexes of free slots
	credits    int     // Reads that may still be posted: ORD less the Reads in flight
	busy       int     // slots granted and not yet completed
	queue      list    // calls waiting for a slot, first come first served
	active     list    // calls in progress
	closed     bool
	err        error         // why the Buffer is dead (the QP or CQ failed); calls then fail at once
	drained    chan struct{} // closed once closed and busy == 0 (drainedSet)
	drainedSet bool
	onGrant    func(*call) // test hook, called with mu held
	calls      sync.Pool   // *call

	stop      context.CancelFunc // ends the dispatcher's wait
	done      chan struct{}      // the dispatcher has exited
	closing   chan struct{}      // Close has stopped the dispatcher: the watcher exits
	wg        sync.WaitGroup     // the dispatcher and the watcher
	closeOnce sync.Once
}

// slot is a staging slot and the WR that uses it. Its index and generation
// are the WR's ID.
type slot struct {
	owner *call // the call the WR moves data for; nil when free or quarantined
	busy  bool  // granted: its WR is being posted or is in flight
	read  bool
	gen   uint32
	pOff  int // the WR moves owner.p[pOff : pOff+n]
	n     int
	sgl   [1]verbs.SGE
}

// New returns a Buffer for the memory remote of the peer of qp, which must
// be connected (RTS). The Buffer takes over qp's send queue and send CQ
// until Close (see the package doc); it registers Depth × PieceSize octets
// of staging memory in qp's PD.
func New(qp *verbs.QP, remote verbs.RemoteBuffer, cfg Config) (*Buffer, error) {
	if st := qp.State(); st != verbs.StateRTS {
		return nil, fmt.Errorf("rmem: %w: a Buffer needs a connected QP, not one in %v", verbs.ErrQPState, st)
	}
	qc := qp.Config()
	cq := qc.SendCQ
	maxDepth := min(qc.Cap.MaxSendWR, cq.Cap())
	depth := cfg.Depth
	if depth == 0 {
		depth = maxDepth
	}
	if depth < 1 || depth > maxDepth {
		return nil, fmt.Errorf("rmem: %w: Depth %d (the QP's send queue takes %d, its send CQ %d)",
			verbs.ErrInvalidArg, cfg.Depth, qc.Cap.MaxSendWR, cq.Cap())
	}
	if remote.Len > math.MaxInt64 {
		return nil, fmt.Errorf("rmem: %w: a remote buffer of %d octets", verbs.ErrInvalidArg, remote.Len)
	}
	piece := cfg.PieceSize
	if piece == 0 {
		piece = DefaultPieceSize
	}
	if piece < 1 || piece > MaxPieceSize || piece > int(^uint(0)>>1)/depth {
		return nil, fmt.Errorf("rmem: %w: PieceSize %d (1 to %d, and Depth × PieceSize must fit an int)",
			verbs.ErrInvalidArg, cfg.PieceSize, MaxPieceSize)
	}
	mr, err := qp.PD().RegMR(make([]byte, depth*piece), verbs.LocalWrite)
	if err != nil {
		return nil, fmt.Errorf("rmem: registering %d octets of staging memory: %w", depth*piece, err)
	}
	b := &Buffer{
		qp: qp, cq: cq, remote: remote, size: int64(remote.Len), piece: piece, ord: int(qp.Params().ORD),
		staging: mr, stg: mr.Buf(),
		slots: make([]slot, depth), free: make([]int32, depth),
		drained: make(chan struct{}), done: make(chan struct{}), closing: make(chan struct{}),
	}
	b.credits = b.ord
	for i := range b.slots {
		b.free[i] = int32(depth - 1 - i)
		s := &b.slots[i]
		s.sgl[0] = mr.SGE(i*piece, 0)
	}
	b.queue.which, b.active.which = linkQueue, linkActive
	b.calls.New = func() any { return &call{wake: make(chan struct{}, 1)} }
	ctx, stop := context.WithCancel(context.Background())
	b.stop = stop
	b.wg.Go(func() { b.dispatch(ctx) })
	b.wg.Go(b.watch)
	return b, nil
}

// Size returns the remote buffer's length in octets.
func (b *Buffer) Size() int64 { return b.size }

// Stats are a Buffer's current state, for monitoring and tests.
type Stats struct {
	Depth, ORD, PieceSize int
	// InFlight counts the WRs posted (or being posted) and not completed;
	// Quarantined those of them whose calls have returned (cancelled or
	// failed), whose slots wait for their completions.
	InFlight, Quarantined int
	// Waiting counts the calls waiting for a slot.
	Waiting int
}

// Stats returns the Buffer's current state.
func (b *Buffer) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := Stats{Depth: len(b.slots), ORD: b.ord, PieceSize: b.piece, InFlight: b.busy, Waiting: b.queue.n}
	for i := range b.slots {
		if s := &b.slots[i]; s.busy && s.owner == nil {
			st.Quarantined++
		}
	}
	return st
}

// Close ends the calls in progress (they return ErrClosed), waits until
// every WR the Buffer posted has completed or the QP has ended, then stops
// the Buffer's goroutines and deregisters its staging memory. The QP stays
// open. Later calls return ErrClosed; Close is safe to call more than once.
func (b *Buffer) Close() error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		for c := b.active.head; c != nil; c = c.links[linkActive].next {
			b.failLocked(c, ErrClosed)
		}
		b.checkDrainedLocked()
	}
	b.mu.Unlock()
	select {
	case <-b.drained:
	case <-b.qp.Done(): // every WR has completed into the CQ: the dispatcher drains it
	case <-b.done: // the dispatcher stopped early (the QP or CQ failed)
	}
	b.closeOnce.Do(func() {
		b.stop()
		close(b.closing)
		b.wg.Wait()
		b.staging.Dereg()
	})
	<-b.done
	return nil
}

// checkDrainedLocked tells Close when the last WR of a closed Buffer has
// completed.
func (b *Buffer) checkDrainedLocked() {
	if b.closed && b.busy == 0 && !b.drainedSet {
		b.drainedSet = true
		close(b.drained)
	}
}
