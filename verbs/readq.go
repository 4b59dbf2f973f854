package verbs

import "sync"

// readJob is an RDMA Read (or RFC 7306 atomic) in flight: on the ORD queue one of ours awaiting
// its response (buf is the sink), on the IRD queue one of the peer's that we
// answer (buf is the source).
type readJob struct {
	sqIdx uint64 // ORD: the Read's SQ index
	buf   []byte
	stag  uint32 // sink STag and tagged offset
	to    uint64
	size  uint32
	rtr   bool // the zero-length Read of a peer-to-peer start-up: no WR to complete

	// RFC 7306 atomics share the Read queues (and so the IRD and ORD).
	atomic bool
	reqID  uint32 // Request Identifier
	orig   uint64 // IRD: the original value to return
}

// readQueue is a FIFO of readJobs between the two loops of a QP.
type readQueue struct {
	mu   sync.Mutex
	ring []readJob
	head int
	n    int
}

func (q *readQueue) init(n int) { q.ring = make([]readJob, max(n, 1)) }

func (q *readQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// push appends j; the callers keep within the ring's size (IRD/ORD checks).
func (q *readQueue) push(j readJob) {
	q.mu.Lock()
	q.ring[(q.head+q.n)%len(q.ring)] = j
	q.n++
	q.mu.Unlock()
}

// front returns the oldest job, or nil. The slot stays valid until pop.
func (q *readQueue) front() *readJob {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return nil
	}
	return &q.ring[q.head]
}

func (q *readQueue) pop() {
	q.mu.Lock()
	q.ring[q.head] = readJob{}
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	q.mu.Unlock()
}

func (q *readQueue) clear() {
	q.mu.Lock()
	clear(q.ring)
	q.head, q.n = 0, 0
	q.mu.Unlock()
}
