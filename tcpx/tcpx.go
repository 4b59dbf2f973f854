package tcpx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// checkNetwork accepts the stream networks of package net.
func checkNetwork(network string) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
		return nil
	}
	return fmt.Errorf("tcpx: network %q is not tcp, tcp4 or tcp6", network)
}

// control returns a net.Dialer / net.ListenConfig Control function that sets
// the options of cfg that belong before the handshake.
func control(cfg *Config) func(network, address string, rc syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		return setSockopts(rc, cfg, true)
	}
}

// Dial connects to addr ("host:port", see net.Dial) over network "tcp",
// "tcp4" or "tcp6" with the options of cfg. Buffer sizes and
// TCP_USER_TIMEOUT are set before the SYN is sent; TCP_NODELAY, keep-alive
// and linger right after the connection is established. ctx bounds the connection
// attempt only.
//
// Dial sets the pre-SYN options on each socket it tries (a host name may
// resolve to several addresses).
func Dial(ctx context.Context, network, addr string, cfg Config) (*net.TCPConn, error) {
	if err := checkNetwork(network); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	laddr, _ := cfg.localAddr() // checked by validate
	d := net.Dialer{
		Control:   control(&cfg),
		KeepAlive: -1, // set by applyEstablished
	}
	if laddr != nil {
		d.LocalAddr = laddr // not a nil *TCPAddr in the interface
	}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	if err := applyEstablished(tc, &cfg); err != nil {
		tc.Close()
		return nil, err
	}
	return tc, nil
}

// Listener accepts TCP connections and applies a Config to each one.
// Its methods may be called from several goroutines at once.
type Listener struct {
	ln  *net.TCPListener
	cfg Config
}

// Listen announces addr on network "tcp", "tcp4" or "tcp6" (see net.Listen).
// Buffer sizes are set on the listening socket, so that accepted sockets
// inherit them from the start and their SYN-ACK carries the matching window
// scale; the other options are set on each accepted connection. ctx bounds
// the set-up only, not the life of the Listener.
func Listen(ctx context.Context, network, addr string, cfg Config) (*Listener, error) {
	if err := checkNetwork(network); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lc := net.ListenConfig{
		Control:   control(&cfg),
		KeepAlive: -1, // set in Accept
	}
	ln, err := lc.Listen(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &Listener{ln: ln.(*net.TCPListener), cfg: cfg}, nil
}

// Accept waits for the next connection and applies the Listener's Config to
// it. If the options cannot be set, Accept closes that connection and
// returns an error, but the Listener stays open; after Close, Accept returns
// an error that wraps net.ErrClosed.
func (l *Listener) Accept() (*net.TCPConn, error) {
	c, err := l.ln.AcceptTCP()
	if err != nil {
		return nil, err
	}
	// The buffer sizes came with the listening socket; the rest is set on
	// each accepted one.
	if err := setSockoptsConn(c, &l.cfg, false); err == nil {
		err = applyEstablished(c, &l.cfg)
	}
	if err != nil {
		raddr := c.RemoteAddr()
		c.Close()
		return nil, fmt.Errorf("tcpx: accept from %v: %w", raddr, err)
	}
	return c, nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops listening; a blocked Accept returns net.ErrClosed.
// Connections already accepted stay open.
func (l *Listener) Close() error { return l.ln.Close() }

// SetDeadline sets a deadline for Accept, as net.TCPListener.SetDeadline
// does. The zero time means none.
func (l *Listener) SetDeadline(t time.Time) error { return l.ln.SetDeadline(t) }

// Apply sets all options of cfg on a connection made elsewhere. The buffer
// sizes then come after the handshake and cannot change the window scale
// already agreed; prefer Dial and Listen where you can.
func Apply(c *net.TCPConn, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if err := setSockoptsConn(c, &cfg, true); err != nil {
		return err
	}
	return applyEstablished(c, &cfg)
}

// setSockoptsConn sets the options of cfg that setSockopts handles on an
// existing connection.
func setSockoptsConn(c *net.TCPConn, cfg *Config, buffers bool) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("tcpx: %w", err)
	}
	return setSockopts(rc, cfg, buffers)
}

// applyEstablished sets the options that package net offers portably. They
// are set after the handshake because package net sets TCP_NODELAY and
// keep-alive on every new connection itself.
func applyEstablished(c *net.TCPConn, cfg *Config) error {
	if err := c.SetNoDelay(!cfg.Nagle); err != nil {
		return fmt.Errorf("tcpx: TCP_NODELAY: %w", err)
	}
	if cfg.NoKeepAlive {
		if err := c.SetKeepAlive(false); err != nil {
			return fmt.Errorf("tcpx: keep-alive off: %w", err)
		}
	} else {
		ka := cfg.KeepAlive
		ka.Enable = true
		if err := c.SetKeepAliveConfig(ka); err != nil {
			return fmt.Errorf("tcpx: keep-alive: %w", err)
		}
	}
	if cfg.AbortOnClose {
		if err := c.SetLinger(0); err != nil {
			return fmt.Errorf("tcpx: SO_LINGER: %w", err)
		}
	}
	return nil
}

// Abort closes c abortively: SO_LINGER is set to zero, so the kernel discards
// unsent data and sends an RST instead of a FIN, and the peer's next Read
// fails with ECONNRESET. verbs.QP.Abort uses it. c is
// closed even if setting SO_LINGER fails.
func Abort(c *net.TCPConn) error {
	lerr := c.SetLinger(0)
	if lerr != nil {
		lerr = fmt.Errorf("tcpx: abort: SO_LINGER: %w", lerr)
	}
	return errors.Join(lerr, c.Close())
}

// EMSS returns the effective MSS of a connected c (TCP_MAXSEG, the kernel's
// current segment size): the payload octets that fit in one TCP segment after
// the IP and TCP headers and the TCP options in use, such as timestamps. MPA
// sizes its FPDUs to it.
//
// It changes during a connection, so re-read it when sizing matters: path MTU
// discovery can shrink it, and Linux keeps it at most half the largest window
// the peer has advertised. The second rule matters only where the MSS is
// huge: on loopback (MTU 65536) EMSS starts near 32 KiB and grows to 65483
// octets (IPv4) or 65464 (IPv6) once the windows have opened.
func EMSS(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("tcpx: %w", err)
	}
	return emss(rc)
}

// Buffered returns the octets that have arrived on c and are not read yet
// (SIOCINQ); it does not wait and ignores c's deadlines.
func Buffered(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("tcpx: %w", err)
	}
	return buffered(rc)
}

// Unsent returns the octets written to c that TCP has not sent yet
// (SIOCOUTQNSD): held back by the peer's window, congestion control or
// corking. It does not wait.
func Unsent(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("tcpx: %w", err)
	}
	return unsent(rc)
}

// Reset reports whether c's connection was reset or timed out while c is
// still open: the kernel's TCP state is CLOSE. The reset's error
// (ECONNRESET, ETIMEDOUT) goes only to the first read or write that meets
// it; later reads see end of stream, and Reset tells that apart from the
// peer's orderly close (state CLOSE-WAIT). It is false where TCP_INFO is
// not available.
func Reset(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	return stateClosed(rc)
}

// PendingError returns c's pending socket error (SO_ERROR), and clears it:
// the ECONNRESET or ETIMEDOUT of a connection Reset reports closed, when no
// read or write has taken it yet, as after the peer's FIN (a read then
// sees end of stream first). It is nil when none is pending, and where the
// platform cannot tell.
func PendingError(c *net.TCPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	return pendingError(rc)
}

// Info returns the kernel's TCP_INFO statistics for c.
func Info(c *net.TCPConn) (Stats, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return Stats{}, fmt.Errorf("tcpx: %w", err)
	}
	return info(rc)
}

// AwaitReadable blocks until c has something to read — data, the peer's FIN
// or a pending error — or c's read deadline passes (then it returns the
// deadline's error), and consumes nothing. A connection manager uses it to
// notice, at no cost, that a connection it holds for later has died.
func AwaitReadable(c *net.TCPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("tcpx: %w", err)
	}
	var perr error
	if err := rc.Read(func(fd uintptr) bool {
		var ready bool
		ready, perr = readable(fd)
		return ready || perr != nil
	}); err != nil {
		return err
	}
	return perr
}
