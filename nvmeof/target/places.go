package target

import (
	"container/list"
	"errors"
	"time"
)

// The places of MaxQueues. A queue takes one from its RDMA CM request,
// before its Fabrics Connect, so that idle connections cannot pin memory
// beyond the bound; but a full target that refused every newcomer would
// let peers that never send a Connect hold it for connectWait each. So a
// newcomer evicts a queue still waiting for its Connect, as Linux's full
// SYN queue drops the oldest (and verbs.Listener its start-ups): only
// when every queue has a controller is it refused with No Resources.
//
// The victim is the oldest waiting queue that has been silent for
// connectGrace since its MPA start-up ended: no capsule of it waiting or
// being served. Failing that, the oldest one whose Connect is not being
// served (in admission order, whether its start-up has ended or not),
// then the oldest of all. A queue's first capsule can only be its
// Connect, which a legitimate host sends as soon as its start-up ends
// and which is served in microseconds. So under a flood of silent
// queues a legitimate one is evicted only if as many newer queues as
// there are places not connected come in between its CM request and its
// Connect (a round trip and our scheduling; 256 places at the defaults):
// the fairness is oldest first, as Linux's full SYN queue, and the
// grace protects the young while silent ones have outstayed it. A
// capsule only protects a queue while its Connect is served.
//
// A queue leaves the waiting list when its Connect binds it (bindQueue,
// under t.mu with the eviction, so that a queue is either connected or
// evicted, never both) or when it ends.

// connectGrace is how long a queue may be silent after its start-up
// before it is evicted ahead of older ones (verbs.Listener's silent
// start-ups have the same).
const connectGrace = 250 * time.Millisecond

// errEvicted ends a queue whose place a newer one took.
var errEvicted = errors.New("evicted for a newer queue (MaxQueues reached, no Fabrics Connect yet)")

// waiting is a queue's entry in t.waiting, the queues without a
// controller in admission order. Fields under t.mu.
type waiting struct {
	elem    *list.Element // nil once bound, evicted or dropped
	evicted bool
}

// makeRoom reports whether the target may take one more queue, evicting a
// waiting one if it must. t.mu is held.
func (t *Target) makeRoom() bool {
	if t.cfg.MaxQueues <= 0 || len(t.queues) < t.cfg.MaxQueues {
		return true
	}
	if t.waiting.Len() == 0 {
		return false // every queue is connected
	}
	v := t.victim()
	t.waiting.Remove(v.wait.elem)
	v.wait.elem = nil
	v.wait.evicted = true
	delete(t.queues, v) // its place is the newcomer's; t.wg still waits for it
	v.stop()            // ends its run, whatever it waits for: Accept, a Connect
	return true
}

// victim picks the waiting queue to evict, by the rule above. t.mu is
// held; t.waiting is not empty.
func (t *Target) victim() *queue {
	var first *queue
	now := time.Now().UnixNano()
	for e := t.waiting.Front(); e != nil; e = e.Next() {
		q := e.Value.(*queue)
		if q.connecting.Load() || q.cq.Len() > 0 {
			continue
		}
		if at := q.started.Load(); at != 0 && now-at >= int64(connectGrace) {
			return q
		}
		if first == nil {
			first = q
		}
	}
	if first != nil {
		return first
	}
	return t.waiting.Front().Value.(*queue)
}

// addQueue counts q in and starts its wait for a Connect; false if the
// target is closed or full of connected queues.
func (t *Target) addQueue(q *queue, p *Port) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || p.closed || !t.makeRoom() {
		return false
	}
	t.queues[q] = struct{}{}
	q.wait.elem = t.waiting.PushBack(q)
	t.wg.Add(1)
	return true
}

// bindQueue takes q out of the waiting list as its Connect succeeds; false
// if it was evicted (it is ending). t.mu is held.
func (t *Target) bindQueue(q *queue) bool {
	if q.wait.evicted {
		return false
	}
	if q.wait.elem != nil {
		t.waiting.Remove(q.wait.elem)
		q.wait.elem = nil
	}
	return true
}

// unbindQueue puts q back in the waiting list, first in line for
// eviction, when its Connect failed after bindQueue.
func (t *Target) unbindQueue(q *queue) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.queues[q]; ok && !q.wait.evicted && q.wait.elem == nil {
		q.wait.elem = t.waiting.PushFront(q)
	}
}

// dropQueue forgets a queue whose goroutine is ending.
func (t *Target) dropQueue(q *queue) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.queues, q)
	if q.wait.elem != nil {
		t.waiting.Remove(q.wait.elem)
		q.wait.elem = nil
	}
}

// evicted reports whether q's place went to a newer queue.
func (q *queue) evicted() bool {
	q.t.mu.Lock()
	defer q.t.mu.Unlock()
	return q.wait.evicted
}
