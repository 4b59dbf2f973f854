package verbs

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/goiwarp/iwarp/tcpx"
)

// A connection request is watched from the moment it is read until it is
// answered: an initiator that closes, resets or sends anything (it may not
// before our Reply) has made it dead. In the Listener's queue a dead request
// is closed and gives its place back at once; once the application has
// taken it, its Context ends (cause ErrInitiatorGone), so that whatever
// queue the application keeps above the Listener can do the same.

// ErrInitiatorGone is the cause of a ConnRequest's Context ending because
// its initiator closed, reset or sent octets before our Reply: the request
// is dead, and Reject (which closes its socket) is all that is left to do.
var ErrInitiatorGone = errors.New("verbs: the initiator of the connection request has gone")

// Context returns a context that ends once the request is dead (cause
// ErrInitiatorGone), answered (Accept or Reject), or its Listener closed
// (ErrClosed) before it was answered. An application that holds requests
// before answering them (a queue of its own, a server busy with another
// client) frees the dead ones with it, for instance with context.AfterFunc.
func (r *ConnRequest) Context() context.Context { return r.ctx }

// watch holds a request from the handshake on. Queued, it ends at
// activity or at BacklogTimeout, and the request leaves the queue, closed;
// taken (GetRequest), it ends at activity (the Context ends), at Accept or
// Reject, or when the Listener closes.
func (l *Listener) watch(r *ConnRequest) {
	defer close(r.watched)
	for {
		err := tcpx.AwaitReadable(r.conn) // activity, a deadline, or an interruption
		l.mu.Lock()
		if !r.taken {
			for i, q := range l.queue {
				if q == r {
					l.queue = append(l.queue[:i], l.queue[i+1:]...)
					break
				}
			}
			l.mu.Unlock()
			r.conn.Close()
			r.cancel(ErrInitiatorGone)
			return
		}
		stopped := false
		select {
		case <-l.stop:
			stopped = true
		default:
		}
		if r.ending || stopped {
			delete(l.taken, r)
			l.mu.Unlock()
			if stopped {
				r.cancel(ErrClosed)
			}
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// BacklogTimeout fired as GetRequest took the request; its
			// deadline is gone now.
			l.mu.Unlock()
			continue
		}
		delete(l.taken, r)
		l.mu.Unlock()
		r.cancel(ErrInitiatorGone)
		return
	}
}

// take hands r to the application: the watch goes on, without the
// Backlog's deadline. l.mu is held.
func (l *Listener) take(r *ConnRequest) {
	r.taken = true
	l.taken[r] = struct{}{}
	r.conn.SetDeadline(time.Time{})
}

// endWatch ends the watch of a request about to be answered, which then
// owns the socket's reads; its Context ends.
func (r *ConnRequest) endWatch() {
	r.l.mu.Lock()
	r.ending = true
	r.l.mu.Unlock()
	r.conn.SetReadDeadline(time.Now())
	<-r.watched
	r.conn.SetReadDeadline(time.Time{})
	r.cancel(context.Canceled)
}
