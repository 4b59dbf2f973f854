package rsocket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/goiwarp/iwarp/verbs"
)

// acceptTimeout bounds one connection's start-up in Accept (our MPA Reply).
const acceptTimeout = 10 * time.Second

var defaultDevice struct {
	once sync.Once
	dev  *verbs.Device
	err  error
}

// device returns d, or the package's own Device, opened on first use.
func device(d *verbs.Device) (*verbs.Device, error) {
	if d != nil {
		return d, nil
	}
	defaultDevice.once.Do(func() { defaultDevice.dev, defaultDevice.err = verbs.Open(verbs.DeviceAttr{}) })
	return defaultDevice.dev, defaultDevice.err
}

// Dialer connects to rsockets listeners.
type Dialer struct {
	// Device owns the connections' QPs and memory; nil: one the package
	// opens on first use and keeps.
	Device *verbs.Device
	Options
	// Conn is the start-up and TCP configuration of the QP (MPA policy,
	// timeouts, socket options); its PrivateData is ours to set.
	Conn verbs.ConnConfig
}

// Dial connects to an rsockets listener at address (network "tcp",
// "tcp4" or "tcp6") with the default Dialer.
func Dial(network, address string) (*Conn, error) {
	var d Dialer
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to an rsockets listener: an iWARP connection whose
// MPA private data is rsockets' rs_conn_data each way, as rconnect does.
// ctx bounds the start-up.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (*Conn, error) {
	c, err := d.dial(ctx, network, address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "rsocket", Err: err}
	}
	return c, nil
}

func (d *Dialer) dial(ctx context.Context, network, address string) (*Conn, error) {
	dev, err := device(d.Device)
	if err != nil {
		return nil, err
	}
	c, err := newConn(dev, d.Options)
	if err != nil {
		return nil, err
	}
	cfg := d.Conn
	cfg.PrivateData = c.connData()
	if err := c.qp.Dial(ctx, network, address, cfg); err != nil {
		c.release()
		return nil, err
	}
	peer, err := parseConnData(c.qp.PeerPrivateData())
	if err != nil {
		c.qp.Abort()
		c.release()
		return nil, err
	}
	c.start(peer)
	return c, nil
}

// ListenConfig configures a Listener.
type ListenConfig struct {
	Device *verbs.Device // nil: the package's own, as Dialer's
	Options
	Conn verbs.ConnConfig // the Listener's start-up and TCP configuration
}

// Listen listens for rsockets connections on address with the default
// ListenConfig.
func Listen(network, address string) (*Listener, error) {
	var lc ListenConfig
	return lc.Listen(context.Background(), network, address)
}

// Listen listens for rsockets connections on address (network "tcp",
// "tcp4" or "tcp6").
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (*Listener, error) {
	if _, err := lc.Options.withDefaults(); err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rsocket", Err: err}
	}
	dev, err := device(lc.Device)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rsocket", Err: err}
	}
	ln, err := dev.Listen(ctx, network, address, lc.Conn)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rsocket", Err: err}
	}
	l := &Listener{ln: ln, dev: dev, opts: lc.Options, slots: make(chan struct{}, acceptBacklog),
		conns: make(chan *Conn), ended: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Go(l.serve)
	return l, nil
}

// Listener is an rsockets listener: a net.Listener whose connections are
// *Conn. Its methods may be called from several goroutines at once.
type Listener struct {
	ln     *verbs.Listener
	dev    *verbs.Device
	opts   Options
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{}  // start-ups under way, and Conns waiting for Accept
	starts startups       // the start-ups under way, oldest first
	conns  chan *Conn     // accepted Conns, to Accept
	ended  chan struct{}  // serve has stopped; err says why
	err    error          // set before ended is closed
	wg     sync.WaitGroup // serve and the start-ups
}

// acceptBacklog bounds the start-ups a Listener runs at once, and the
// Conns it holds for Accept: clients that stall their start-up hold no
// slot long, as a newer request ends the oldest start-up.
const acceptBacklog = 16

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Accept waits for the next connection and returns it as a net.Conn.
func (l *Listener) Accept() (net.Conn, error) { return l.AcceptRsocket() }

// AcceptRsocket waits for the next connection (raccept). The Listener
// answers each connection request with rs_conn_data of its own, several at
// once, and rejects those that do not speak rsockets (one bad or stalled
// client never stops it).
func (l *Listener) AcceptRsocket() (*Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.ended:
		return nil, &net.OpError{Op: "accept", Net: "rsocket", Addr: l.Addr(), Err: l.err}
	}
}

// serve takes the connection requests and runs their start-ups, each on
// its own goroutine, until Close. A request that finds every slot taken
// by start-ups ends the oldest of them (listen_startups.go); one that
// finds them all taken by Conns waiting for Accept waits for Accept.
func (l *Listener) serve() {
	defer close(l.ended)
	for {
		held := l.trySlot()
		if !held && l.starts.len() == 0 {
			if !l.waitSlot() {
				l.err = net.ErrClosed
				return
			}
			held = true
		}
		req, err := l.ln.GetRequest(l.ctx)
		if err != nil {
			if held {
				<-l.slots
			}
			if l.ctx.Err() != nil || errors.Is(err, verbs.ErrClosed) {
				err = net.ErrClosed
			}
			l.err = err
			return
		}
		if !held && !l.trySlot() && !l.evictForSlot() {
			req.Reject(nil)
			l.err = net.ErrClosed
			return
		}
		s, ctx := l.starts.add(l.ctx)
		l.wg.Go(func() {
			defer func() { <-l.slots }()
			c, err := l.accept(ctx, req)
			l.starts.done(s)
			if err != nil {
				return
			}
			select {
			case l.conns <- c:
			case <-l.ctx.Done():
				c.Close()
			}
		})
	}
}

// trySlot takes a slot if one is free.
func (l *Listener) trySlot() bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// evictWait is how long evictForSlot waits for an evicted start-up's slot
// before it ends the next: one that had just finished keeps its slot for
// its Conn until Accept.
const evictWait = 100 * time.Millisecond

// evictForSlot takes a slot by ending the oldest start-up, whose slot
// comes back once its goroutine has aborted its QP, and the next while
// that does not happen and start-ups remain; then it waits for Accept to
// free one. False once the Listener is closing.
func (l *Listener) evictForSlot() bool {
	for l.starts.evict() {
		t := time.NewTimer(evictWait)
		select {
		case l.slots <- struct{}{}:
			t.Stop()
			return true
		case <-l.ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	return l.waitSlot()
}

// waitSlot waits for a slot; false once the Listener is closing.
func (l *Listener) waitSlot() bool {
	select {
	case l.slots <- struct{}{}:
		return true
	case <-l.ctx.Done():
		return false
	}
}

// accept runs one start-up; ctx ends it early (Close, or a newer request
// evicting it).
func (l *Listener) accept(ctx context.Context, req *verbs.ConnRequest) (*Conn, error) {
	peer, err := parseConnData(req.PrivateData)
	if err != nil {
		req.Reject(nil) // rs_accept's rdma_reject
		return nil, err
	}
	c, err := newConn(l.dev, l.opts)
	if err != nil {
		req.Reject(nil)
		return nil, err
	}
	if ctx.Err() != nil { // evicted, or closing, before our Reply
		req.Reject(nil)
		c.release()
		return nil, context.Cause(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, acceptTimeout)
	defer cancel()
	if err := req.Accept(ctx, c.qp, c.connData()); err != nil {
		req.Reject(nil)
		c.release()
		return nil, fmt.Errorf("accepting %v: %w", req.RemoteAddr(), err)
	}
	c.start(peer)
	return c, nil
}

// Close stops the listener; Accept returns net.ErrClosed. Start-ups under
// way end, and their connections are closed; connections Accept returned
// stay open.
func (l *Listener) Close() error {
	l.cancel()
	err := l.ln.Close()
	l.wg.Wait()
	return err
}
