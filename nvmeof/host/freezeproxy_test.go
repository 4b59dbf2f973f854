package host

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// freezeProxy forwards TCP connections to a target, and can stop
// forwarding while keeping them open: a target process stopped (SIGSTOP)
// whose kernel still holds its connections.
type freezeProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	frozen chan struct{} // closed while forwarding; replaced by freeze
	conns  []net.Conn
	wg     sync.WaitGroup
}

// newFreezeProxy proxies to addr and returns the proxy's address.
func newFreezeProxy(t *testing.T, addr string) (*freezeProxy, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &freezeProxy{ln: ln, frozen: make(chan struct{})}
	close(p.frozen)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, d)
			p.mu.Unlock()
			p.wg.Add(2)
			go p.pipe(d, c)
			go p.pipe(c, d)
		}
	}()
	t.Cleanup(p.close)
	return p, ln.Addr().String()
}

func (p *freezeProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		gate := p.frozen
		p.mu.Unlock()
		<-gate
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err == io.EOF {
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
			}
			return
		}
	}
}

// freeze stops forwarding; thaw resumes it.
func (p *freezeProxy) freeze() {
	p.mu.Lock()
	p.frozen = make(chan struct{})
	p.mu.Unlock()
}

func (p *freezeProxy) thaw() {
	p.mu.Lock()
	select {
	case <-p.frozen:
	default:
		close(p.frozen)
	}
	p.mu.Unlock()
}

func (p *freezeProxy) close() {
	p.ln.Close()
	p.thaw()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
