package perf

// tcp_bw and tcp_lat: the same measurements over plain TCP sockets, the
// baseline the iWARP numbers are judged against. The writer's Write
// returning plays the part of a send completion (the data is handed to
// TCP, as an iWARP Send or Write completes).
//
// Their control runs over the first TCP connection: frames of a 4-octet
// big-endian length, a kind octet and JSON. The client's first frame ('H')
// carries the session and the symmetric parameters, the server answers
// with an empty 'H' or an 'X' carrying what differs. Every size then has
// its own data connections (so that end of stream ends a measurement),
// each opened with a 16-octet header: "IWPT", the session and the index.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/goiwarp/iwarp/tcpx"
)

const tcpMagic = "IWPT"

// tcpCtl is the control connection of a TCP test.
type tcpCtl struct {
	conn    net.Conn
	r       *bufio.Reader
	session uint64
}

func (c *tcpCtl) send(ctx context.Context, kind byte, payload []byte) error {
	defer context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Now()) })()
	b := make([]byte, 5+len(payload))
	binary.BigEndian.PutUint32(b, uint32(1+len(payload)))
	b[4] = kind
	copy(b[5:], payload)
	_, err := c.conn.Write(b)
	return err
}

func (c *tcpCtl) recv(ctx context.Context) (byte, []byte, error) {
	defer context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Now()) })()
	var h [4]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("the peer closed the connection")
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n == 0 || n > 1<<20 {
		return 0, nil, fmt.Errorf("protocol error: control frame of %d octets", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return 0, nil, err
	}
	return b[0], b[1:], nil
}

// tcpSide is one side of a TCP test.
type tcpSide struct {
	p    *Params
	ctl  *tcpCtl
	ln   *tcpListener // server
	addr string       // client: the server
}

func dialTCPSide(ctx context.Context, p *Params, addr string) (*tcpSide, error) {
	dctx, cancel := step(ctx, p.exchangeTimeout(), "connecting")
	conn, err := tcpx.Dial(dctx, "tcp", addr, p.tcpConfig(true))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, causeOf(dctx, err))
	}
	c := &tcpCtl{conn: conn, r: bufio.NewReader(conn), session: randSession()}
	b, _ := json.Marshal(hello{Session: c.session, Params: p.symmetric()})
	hctx, cancel := step(ctx, p.exchangeTimeout(), "the server's answer")
	defer cancel()
	if err := c.send(hctx, 'H', b); err != nil {
		conn.Close()
		return nil, causeOf(hctx, err)
	}
	k, pl, err := c.recv(hctx)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: %w", addr, causeOf(hctx, err))
	}
	if k == 'X' {
		conn.Close()
		return nil, fmt.Errorf("server refused the test: %s", pl)
	}
	if k != 'H' {
		conn.Close()
		return nil, fmt.Errorf("%s is not an iwarp-perf server", addr)
	}
	c.conn.SetDeadline(time.Time{})
	return &tcpSide{p: p, ctl: c, addr: addr}, nil
}

// tcpListener is a tcp_* server's listener, with the control connections
// of clients that came while a run accepted its data connections: held for
// the next run, rather than read as data connections and reset.
type tcpListener struct {
	*tcpx.Listener
	held []heldConn
}

// heldConn is a held control connection and what was read from it.
type heldConn struct {
	conn *net.TCPConn
	read []byte
}

// maxHeld bounds the clients held at once; more are closed.
const maxHeld = 8

func (l *tcpListener) closeHeld() {
	for _, h := range l.held {
		h.conn.Close()
	}
	l.held = nil
}

// acceptTCPSide takes the next client's control connection (one held
// first) and checks its hello; a client that sends none, or other
// parameters, is refused (a *ClientError).
func acceptTCPSide(ctx context.Context, p *Params, ln *tcpListener) (*tcpSide, error) {
	var conn *net.TCPConn
	var r io.Reader
	if len(ln.held) > 0 {
		h := ln.held[0]
		ln.held = ln.held[1:]
		conn, r = h.conn, io.MultiReader(bytes.NewReader(h.read), h.conn)
	} else {
		var err error
		if conn, err = acceptCtx(ctx, ln.Listener); err != nil {
			return nil, err
		}
		r = conn
	}
	refuse := func(err error) (*tcpSide, error) {
		conn.Close()
		return nil, &ClientError{Addr: conn.RemoteAddr(), Err: err}
	}
	c := &tcpCtl{conn: conn, r: bufio.NewReader(r)}
	hctx, cancel := step(ctx, p.exchangeTimeout(), "hello")
	defer cancel()
	k, pl, err := c.recv(hctx)
	if err != nil {
		return refuse(causeOf(hctx, err))
	}
	var h hello
	if k != 'H' || json.Unmarshal(pl, &h) != nil {
		return refuse(errors.New("not an iwarp-perf hello"))
	}
	if d := p.symmetric().mismatch(h.Params); d != "" {
		c.send(hctx, 'X', []byte(d))
		return refuse(fmt.Errorf("different parameters: %s", d))
	}
	c.session = h.Session
	if err := c.send(hctx, 'H', nil); err != nil {
		return refuse(causeOf(hctx, err))
	}
	c.conn.SetDeadline(time.Time{})
	return &tcpSide{p: p, ctl: c, ln: ln}, nil
}

// acceptCtx accepts a connection on ln until ctx ends.
func acceptCtx(ctx context.Context, ln *tcpx.Listener) (*net.TCPConn, error) {
	ln.SetDeadline(time.Time{}) // an earlier wait may have left one
	stop := context.AfterFunc(ctx, func() { ln.SetDeadline(time.Now()) })
	defer stop()
	c, err := ln.Accept()
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return c, err
}

func (s *tcpSide) close() { s.ctl.conn.Close() }

// connect opens the data connections for one measurement.
func (s *tcpSide) connect(ctx context.Context) ([]*net.TCPConn, error) {
	n := s.p.QPs
	conns := make([]*net.TCPConn, n)
	fail := func(err error) ([]*net.TCPConn, error) {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	var hdr [16]byte
	t := s.p.exchangeTimeout()
	if s.addr != "" {
		cfg := s.p.tcpConfig(true)
		for i := range conns {
			dctx, cancel := context.WithTimeout(ctx, t)
			c, err := tcpx.Dial(dctx, "tcp", s.addr, cfg)
			cancel()
			if err != nil {
				return fail(err)
			}
			conns[i] = c
			copy(hdr[:], tcpMagic)
			binary.BigEndian.PutUint64(hdr[4:], s.ctl.session)
			binary.BigEndian.PutUint32(hdr[12:], uint32(i))
			if _, err := c.Write(hdr[:]); err != nil {
				return fail(err)
			}
		}
		return conns, nil
	}
	for left := n; left > 0; {
		sctx, cancel := step(ctx, t, fmt.Sprintf("waiting for the client's connection %d of %d", n-left, n))
		c, err := acceptCtx(sctx, s.ln.Listener)
		cancel()
		if err != nil {
			return fail(causeOf(sctx, err))
		}
		c.SetReadDeadline(time.Now().Add(t))
		_, err = io.ReadFull(c, hdr[:])
		c.SetReadDeadline(time.Time{})
		i := int(binary.BigEndian.Uint32(hdr[12:]))
		if err == nil && string(hdr[:4]) != tcpMagic && hdr[4] == 'H' && len(s.ln.held) < maxHeld {
			// The next client's hello: its turn comes after this run.
			s.ln.held = append(s.ln.held, heldConn{c, bytes.Clone(hdr[:])})
			continue
		}
		if err != nil || string(hdr[:4]) != tcpMagic || binary.BigEndian.Uint64(hdr[4:]) != s.ctl.session ||
			i >= n || conns[i] != nil {
			c.Close()
			continue
		}
		conns[i] = c
		left--
	}
	return conns, nil
}

// writer is one connection's sending side of tcp_bw.
type writer struct {
	tposted []int64
	comps   []completion
	first   int64
	last    int64
	count   uint64
	sampled uint64
	err     error
}

// runTCPBW measures one size: each connection's writer writes size-octet
// buffers (n of them, or for the duration), then half-closes; the
// receiving side reads until end of stream.
func (s *tcpSide) runTCPBW(ctx context.Context, conns []*net.TCPConn, size int, sender, receiver bool, prog *progress) (Report, error) {
	p := s.p
	dur := p.Duration > 0
	m := p.margin()
	tSample, tEnd, tStop := int64(m), int64(p.Duration-m), int64(p.Duration)
	peak := p.peak()
	stop := context.AfterFunc(ctx, func() {
		for _, c := range conns {
			c.SetDeadline(time.Now())
		}
	})
	defer stop()
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	ws := make([]writer, len(conns))
	rerr := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		if sender {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := &ws[i]
				buf := make([]byte, size)
				var fl *floor
				if p.Floor {
					fl = newFloor(p, c, size)
				}
				if peak {
					w.tposted = make([]int64, 0, p.Iters)
					w.comps = make([]completion, 0, p.Iters)
				}
				w.first = now()
				for k := 0; dur || k < p.Iters; k++ {
					t := now()
					if dur && t >= tStop {
						break
					}
					if peak {
						w.tposted = append(w.tposted, t)
					}
					if fl != nil {
						fl.sent(buf)
					}
					if _, err := c.Write(buf); err != nil {
						w.err = err
						return
					}
					t = now()
					w.count++
					w.last = t
					if peak {
						w.comps = append(w.comps, completion{idx: k, t: t})
					}
					if dur && t >= tSample && t < tEnd {
						w.sampled++
					}
					prog.add(1, size)
				}
				w.err = c.CloseWrite()
			}()
		}
		if receiver {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, max(size, 256<<10))
				var fl *floor
				if p.Floor {
					fl = newFloor(p, c, size)
				}
				for {
					n, err := c.Read(buf)
					if fl != nil {
						fl.received(buf[:n])
					}
					if err == io.EOF {
						return
					}
					if err != nil {
						rerr[i] = err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	for i := range conns {
		if err := errors.Join(ws[i].err, rerr[i]); err != nil {
			if ctx.Err() != nil {
				return Report{}, ctx.Err()
			}
			return Report{}, fmt.Errorf("connection %d: %w", i, err)
		}
	}
	if !sender {
		return Report{Kind: kindBW, Size: size}, nil
	}
	if dur {
		var n uint64
		for _, w := range ws {
			n += w.sampled
		}
		return bwDurReport(size, n, time.Duration(tEnd-tSample)), nil
	}
	if peak {
		// All connections as one stream of messages, in time order.
		var tp []int64
		var ct []int64
		for _, w := range ws {
			tp = append(tp, w.tposted...)
			for _, c := range w.comps {
				ct = append(ct, c.t)
			}
		}
		slices.Sort(tp)
		slices.Sort(ct)
		comps := make([]completion, len(ct))
		for i, t := range ct {
			comps[i] = completion{idx: i, t: t}
		}
		return bwReport(size, p.Iters*len(conns), tp, comps, true), nil
	}
	first, last := int64(math.MaxInt64), int64(0)
	for _, w := range ws {
		first, last = min(first, w.first), max(last, w.last)
	}
	return bwReport(size, p.Iters*len(conns), []int64{first}, []completion{{t: last}}, false), nil
}

// runTCPLat is a ping-pong of size octets on the first connection; the
// client writes first.
func (s *tcpSide) runTCPLat(ctx context.Context, conns []*net.TCPConn, size int, client bool, prog *progress) (Report, error) {
	p := s.p
	c := conns[0]
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	dur := p.Duration > 0
	m := p.margin()
	tSample, tEnd, tStop := int64(m), int64(p.Duration-m), int64(p.Duration)
	buf := make([]byte, size)
	var tposted []int64
	var sampled uint64
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	fail := func(err error) (Report, error) {
		if ctx.Err() != nil {
			return Report{}, ctx.Err()
		}
		return Report{}, err
	}
	for k := 0; dur || k < p.Iters; k++ {
		if !client || k > 0 {
			if _, err := io.ReadFull(c, buf); err != nil {
				if err == io.EOF && dur {
					break // the client's duration is over
				}
				return fail(err)
			}
		}
		t := now()
		if dur && t >= tStop {
			break
		}
		if dur && t >= tSample && t < tEnd {
			sampled++
		}
		if !dur {
			tposted = append(tposted, t)
		}
		prog.add(1, size)
		if _, err := c.Write(buf); err != nil {
			return fail(err)
		}
	}
	if client && !dur {
		if _, err := io.ReadFull(c, buf); err != nil { // the server's last reply
			return fail(err)
		}
	}
	c.CloseWrite()
	if dur {
		// Drain what the peer still sends until it closes too.
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		io.Copy(io.Discard, c)
		return latDurReport(size, sampled, time.Duration(tEnd-tSample), 2), nil
	}
	return latReport(size, tposted, 2).withSamples(p, tposted, 2), nil
}

func (s *tcpSide) tcpStats(conns []*net.TCPConn) []string {
	var out []string
	for i, c := range conns {
		if st, err := tcpx.Info(c); err == nil {
			cc := ""
			if name, err := tcpx.CongestionControl(c); err == nil {
				cc = ", cc " + name
			}
			out = append(out, fmtTCPStats(fmt.Sprintf("conn %d", i), st)+fmt.Sprintf("%s, %v -> %v", cc, c.LocalAddr(), c.RemoteAddr()))
		}
	}
	return out
}
