package verbs

import (
	"context"
	"io"
	"net"
	"testing"
)

// Ping-pong latency: one 8-octet message each way per iteration, so ns/op is
// a round trip. Compare with BenchmarkRawTCPPingPong in the same run.

func BenchmarkSendPingPong(b *testing.B) {
	c, s := connect(b, pairOpts{})
	defer c.qp.Close()
	defer s.qp.Close()
	cb := c.regMR(nil, 8, LocalWrite)
	sb := s.regMR(nil, 8, LocalWrite)
	post := func(sd *side, mr *MR) {
		if _, err := sd.qp.PostRecv(RecvWR{SGL: []SGE{mr.SGE(0, 8)}}); err != nil {
			b.Fatal(err)
		}
	}
	post(c, cb)
	post(s, sb)
	done := make(chan struct{})
	go func() { // the server echoes every message
		defer close(done)
		var wc [1]WC
		for {
			for s.rcq.Poll(wc[:]) == 0 {
				if s.rcq.Wait(context.Background()) != nil || s.qp.State() == StateError {
					return
				}
			}
			if wc[0].Status != Success {
				return
			}
			post(s, sb)
			s.qp.PostSend(SendWR{Opcode: OpSend, SGL: []SGE{sb.SGE(0, 8)}})
		}
	}()
	var wc [1]WC
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.qp.PostSend(SendWR{Opcode: OpSend, SGL: []SGE{cb.SGE(0, 8)}}); err != nil {
			b.Fatal(err)
		}
		for c.rcq.Poll(wc[:]) == 0 {
			c.rcq.Wait(context.Background())
		}
		post(c, cb)
	}
	b.StopTimer()
	c.qp.Close()
	s.qp.Close()
	<-done
}

func BenchmarkRawTCPPingPong(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.(*net.TCPConn).SetNoDelay(true)
		buf := make([]byte, 8)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				c.Close()
				return
			}
			c.Write(buf)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 8)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Write(buf)
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSendPingPongHandler is BenchmarkSendPingPong with both ends
// answering in their receive handlers (SetRxHandler): no goroutine hand-off
// per message.
func BenchmarkSendPingPongHandler(b *testing.B) {
	c, s := connect(b, pairOpts{})
	defer c.qp.Close()
	defer s.qp.Close()
	cb := c.regMR(nil, 8, LocalWrite)
	sb := s.regMR(nil, 8, LocalWrite)
	// echo takes sd's receive completions from its handler, reposts the
	// receive and answers each while more is wanted.
	echo := func(sd *side, mr *MR, more func() bool) func() {
		var wc [4]WC
		return func() {
			for k := sd.rcq.Poll(wc[:]); k > 0; k = sd.rcq.Poll(wc[:]) {
				for i := range wc[:k] {
					if wc[i].Status != Success {
						return
					}
					sd.qp.PostRecv(RecvWR{SGL: []SGE{mr.SGE(0, 8)}})
					if more() {
						sd.qp.PostSend(SendWR{Opcode: OpSend, Flags: Inline, InlineData: mr.Buf()})
					}
				}
			}
		}
	}
	for _, sd := range []*side{c, s} {
		mr := map[*side]*MR{c: cb, s: sb}[sd]
		if _, err := sd.qp.PostRecv(RecvWR{SGL: []SGE{mr.SGE(0, 8)}}); err != nil {
			b.Fatal(err)
		}
	}
	done := make(chan struct{})
	n := 0 // the client's handler alone counts
	s.qp.SetRxHandler(echo(s, sb, func() bool { return true }))
	c.qp.SetRxHandler(echo(c, cb, func() bool {
		if n++; n < b.N {
			return true
		}
		close(done)
		return false
	}))
	b.ReportAllocs()
	b.ResetTimer()
	if _, err := c.qp.PostSend(SendWR{Opcode: OpSend, Flags: Inline, InlineData: cb.Buf()}); err != nil {
		b.Fatal(err)
	}
	<-done
	b.StopTimer()
}
