package rsocket

import (
	"container/list"
	"context"
	"errors"
	"sync"
)

// A Listener's start-ups under way: requests answered with our MPA Reply
// whose connection has not come up (in peer-to-peer mode, the initiator's
// RTR has not come). They share acceptBacklog slots with the Conns waiting
// for Accept, but a full table does not stop accepting, which would let
// clients that stall their start-up hold the port for RequestTimeout
// each: a new request ends the oldest start-up, as verbs.Listener's full
// table of start-ups (and Linux's full SYN queue) drops the oldest. A
// legitimate start-up lasts one round trip, so it is ended only if
// acceptBacklog requests come during it.

// errEvicted ends a start-up to make room for a newer request.
var errEvicted = errors.New("rsocket: start-up ended for a newer request (all start-ups busy)")

// startup is one start-up under way.
type startup struct {
	cancel context.CancelCauseFunc
	elem   *list.Element
}

// startups is the table of start-ups under way, oldest first.
type startups struct {
	mu    sync.Mutex
	order list.List // of *startup
}

// add enters a start-up and returns it with its context, which evict
// ends.
func (t *startups) add(parent context.Context) (*startup, context.Context) {
	ctx, cancel := context.WithCancelCause(parent)
	s := &startup{cancel: cancel}
	t.mu.Lock()
	s.elem = t.order.PushBack(s)
	t.mu.Unlock()
	return s, ctx
}

// done takes s out of the table once its start-up has ended.
func (t *startups) done(s *startup) {
	t.mu.Lock()
	if s.elem != nil {
		t.order.Remove(s.elem)
		s.elem = nil
	}
	t.mu.Unlock()
	s.cancel(nil)
}

// evict ends the oldest start-up; false if there is none.
func (t *startups) evict() bool {
	t.mu.Lock()
	e := t.order.Front()
	if e == nil {
		t.mu.Unlock()
		return false
	}
	s := e.Value.(*startup)
	t.order.Remove(e)
	s.elem = nil
	t.mu.Unlock()
	s.cancel(errEvicted)
	return true
}

// len returns the start-ups under way.
func (t *startups) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.order.Len()
}
