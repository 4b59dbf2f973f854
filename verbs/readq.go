package verbs

import (
	"sync"
	"sync/atomic"
)

// readJob is an RDMA Read (or RFC 7306 atomic) in flight: on the ORD queue one of ours awaiting
// its response (buf is the sink), on the IRD queue one of the peer's that we
// answer (buf is the source).
type readJob struct {
	sqIdx uint64 // ORD: the Read's SQ index
	buf   []byte
	to    uint64 // sink tagged offset
	orig  uint64 // IRD: the atomic's original value to return
	stag  uint32 // sink STag
	size  uint32
	reqID uint32 // atomic: Request Identifier
	rtr   bool   // the zero-length Read of a peer-to-peer start-up: no WR to complete

	// RFC 7306 atomics share the Read queues (and so the IRD and ORD).
	atomic bool
}

// readChunk is how many readJobs a readQueue allocates at a time.
const readChunk = 8

// readQueue is a FIFO of readJobs between the two loops of a QP. Its room
// (the IRD or ORD, up to 16383) is allocated a chunk at a time as the queue
// first reaches into it, and an empty queue starts over at slot 0, so that
// a QP holds only as many slots as it has had Reads outstanding at once.
// Chunks never move: a slot stays where front found it until pop.
type readQueue struct {
	mu     sync.Mutex
	chunks []*[readChunk]readJob
	size   int // room: at most this many jobs
	head   int
	n      int
	// count mirrors n for readers that take no lock: the transmit loop
	// asks whether a Read waits once per message it sends, too often to
	// take a lock for a Write-only stream.
	count atomic.Int32
}

// init sizes the queue for a connection. It takes mu, which the loops do
// not need yet, for QP.Stats, which reads the queue (ops) at any time.
func (q *readQueue) init(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.size = max(n, 1)
	q.chunks = make([]*[readChunk]readJob, (q.size+readChunk-1)/readChunk)
	q.head, q.n = 0, 0
	q.count.Store(0)
}

// at returns slot i, allocating its chunk on first use (mu held).
func (q *readQueue) at(i int) *readJob {
	c := q.chunks[i/readChunk]
	if c == nil {
		c = new([readChunk]readJob)
		q.chunks[i/readChunk] = c
	}
	return &c[i%readChunk]
}

// len returns how many jobs are queued. The push and pop that changed it
// happen before (a push is followed by a wake-up of whoever pops).
func (q *readQueue) len() int { return int(q.count.Load()) }

// ops returns how many queued jobs are operations a WR posted: all but a
// peer-to-peer start-up's Read RTR, which, when queued, is the oldest.
func (q *readQueue) ops() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.n
	if n > 0 && q.at(q.head).rtr {
		n--
	}
	return n
}

// push appends j; the callers keep within the queue's room (IRD/ORD checks).
func (q *readQueue) push(j readJob) {
	q.mu.Lock()
	*q.at((q.head + q.n) % q.size) = j
	q.n++
	q.count.Store(int32(q.n))
	q.mu.Unlock()
}

// front returns the oldest job, or nil. The slot stays valid until pop.
func (q *readQueue) front() *readJob {
	if q.count.Load() == 0 {
		return nil
	}
	return q.frontLocked()
}

func (q *readQueue) frontLocked() *readJob {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return nil
	}
	return q.at(q.head)
}

func (q *readQueue) pop() {
	q.mu.Lock()
	*q.at(q.head) = readJob{}
	q.head = (q.head + 1) % q.size
	q.n--
	if q.n == 0 {
		q.head = 0
	}
	q.count.Store(int32(q.n))
	q.mu.Unlock()
}

func (q *readQueue) clear() {
	q.mu.Lock()
	for _, c := range q.chunks {
		if c != nil {
			*c = [readChunk]readJob{}
		}
	}
	q.head, q.n = 0, 0
	q.count.Store(0)
	q.mu.Unlock()
}
