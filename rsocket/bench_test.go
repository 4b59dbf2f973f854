package rsocket

import (
	"io"
	"net"
	"testing"
)

// The net.Conn against plain TCP over loopback, in the same run: compare
// the ratios, not the numbers (the machine is shared and noisy).

func tcpPair(b *testing.B) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	c1, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c2 := <-ch
	b.Cleanup(func() { c1.Close(); c2.Close() })
	return c1, c2
}

func rsocketPair(b *testing.B) (net.Conn, net.Conn) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	c1, err := Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c2 := <-ch
	b.Cleanup(func() { c1.Close(); c2.Close() })
	return c1, c2
}

var pairs = []struct {
	name string
	mk   func(*testing.B) (net.Conn, net.Conn)
}{{"tcp", tcpPair}, {"rsocket", rsocketPair}}

// BenchmarkBandwidth streams 64 KiB Writes one way.
func BenchmarkBandwidth(b *testing.B) {
	for _, p := range pairs {
		b.Run(p.name, func(b *testing.B) {
			c1, c2 := p.mk(b)
			const size = 64 << 10
			done := make(chan error, 1)
			go func() {
				buf := make([]byte, size)
				var err error
				for n := 0; err == nil && n < b.N*size; {
					var k int
					k, err = c2.Read(buf)
					n += k
				}
				done <- err
			}()
			buf := make([]byte, size)
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c1.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkLatency is a 64-octet ping-pong: one round trip per op.
func BenchmarkLatency(b *testing.B) {
	for _, p := range pairs {
		b.Run(p.name, func(b *testing.B) {
			c1, c2 := p.mk(b)
			const size = 64
			go func() {
				buf := make([]byte, size)
				for {
					if _, err := io.ReadFull(c2, buf); err != nil {
						return
					}
					if _, err := c2.Write(buf); err != nil {
						return
					}
				}
			}()
			buf := make([]byte, size)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c1.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c1, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
