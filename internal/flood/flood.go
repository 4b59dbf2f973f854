// Package flood is a test tool: a flood of TCP connections that send
// nothing, or send their first message and then nothing, the attacks a
// listener's start-up must survive (SECURITY.md, "Start-ups in
// progress"). The flood tests of verbs, rsocket, iwarp-perf and
// iwarp-nvmet time a legitimate connect while one runs.
package flood

import (
	"net"
	"sync"
	"time"
)

// Silent opens connections to an address that send nothing, one every
// gap (0: as fast as it dials), until StopDialing; Close closes them.
type Silent struct {
	mu    sync.Mutex
	conns []net.Conn
	fails int
	first []byte // what each connection sends before it falls silent
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// Start starts a flood of silent connections to addr.
func Start(addr string, gap time.Duration) *Silent { return StartWith(addr, gap, nil) }

// StartWith starts a flood of connections to addr that each send first,
// then nothing: start-ups that stall after their first message (an MPA
// Request whose RTR never comes).
func StartWith(addr string, gap time.Duration, first []byte) *Silent {
	f := &Silent{first: first, stop: make(chan struct{}), done: make(chan struct{})}
	go f.run(addr, gap)
	return f
}

func (f *Silent) run(addr string, gap time.Duration) {
	defer close(f.done)
	d := net.Dialer{Timeout: time.Second}
	for {
		c, err := d.Dial("tcp", addr)
		if err == nil && len(f.first) > 0 {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err = c.Write(f.first); err != nil {
				c.Close()
			}
		}
		f.mu.Lock()
		if err != nil {
			f.fails++
		} else {
			f.conns = append(f.conns, c)
		}
		f.mu.Unlock()
		if gap <= 0 {
			select {
			case <-f.stop:
				return
			default:
			}
			continue
		}
		t := time.NewTimer(gap)
		select {
		case <-f.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Count returns the connections open; Fails the dials that failed.
func (f *Silent) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

// Fails returns how many dials failed.
func (f *Silent) Fails() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fails
}

// StopDialing stops the flood and waits for its goroutine; the
// connections stay open.
func (f *Silent) StopDialing() {
	f.once.Do(func() { close(f.stop) })
	<-f.done
}

// Close stops the flood and closes its connections.
func (f *Silent) Close() {
	f.StopDialing()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}
