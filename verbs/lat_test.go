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
