package verbs

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"io"
	"math/bits"
	"net"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
)

// A QP's receive loop and transmit side alone, each on a connection in
// memory, so that their cost per FPDU shows without the kernel's: compare
// BenchmarkDecode and BenchmarkEncode at 1448 octets, the MPA layer's share.

// replayConn is a net.Conn whose reads give a recorded stream of FPDUs
// over and over, n FPDUs in all, and then end of stream; writes vanish.
type replayConn struct {
	memConn
	stream []byte
	per    int // FPDUs in stream
	left   int // FPDUs still to give
	off    int
}

func (c *replayConn) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && c.left > 0 {
		k := copy(p[n:], c.stream[c.off:])
		n += k
		if c.off += k; c.off == len(c.stream) {
			c.off = 0
			c.left -= c.per
		}
	}
	return n, nil
}

func (c *replayConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *replayConn) Close() error                { return nil }

// memConn has the net.Conn methods a QP calls besides Read, Write and
// Close, for connections in memory.
type memConn struct{ net.Conn }

func (memConn) SetReadDeadline(time.Time) error  { return nil }
func (memConn) SetWriteDeadline(time.Time) error { return nil }
func (memConn) SetDeadline(time.Time) error      { return nil }
func (memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// benchQP returns a QP of a new device, not connected, with room for
// sendWRs send WRs.
func benchQP(b *testing.B, sendWRs int) (*PD, *CQ, *QP) {
	d := openDev(DeviceAttr{})
	pd := d.AllocPD()
	scq, _ := d.CreateCQ(sendWRs)
	rcq, _ := d.CreateCQ(64)
	qp, err := pd.CreateQP(QPConfig{SendCQ: scq, RecvCQ: rcq, IRD: 4, ORD: 4,
		Cap: QPCap{MaxSendWR: sendWRs, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2}})
	if err != nil {
		b.Fatal(err)
	}
	return pd, scq, qp
}

// BenchmarkRxWrite measures a QP's receive loop alone on RDMA Write FPDUs
// as iwarp-perf's write_bw sends them at an Ethernet MSS (1442-octet
// ULPDUs), from memory: the cost per FPDU of taking it apart, checking it
// and placing it, CRC included. BenchmarkDecode's 1448 case is the MPA
// layer's share of it.
func BenchmarkRxWrite(b *testing.B) {
	pd, _, qp := benchQP(b, 8)
	const msg = 64 << 10
	mr, _ := pd.RegMR(make([]byte, msg), LocalWrite|RemoteWrite)
	const payload = 1442 - ddp.TaggedHdrLen
	var stream bytes.Buffer
	w := mpa.NewWriter(&stream, true, false)
	per := 0
	for off := 0; off < msg; off += payload {
		n := min(payload, msg-off)
		h := ddp.AppendTagged(nil, off+n == msg, rdmap.Ctrl(rdmap.OpWrite), mr.RKey(), mr.Addr()+uint64(off))
		if err := w.Append(h, make([]byte, n)); err != nil {
			b.Fatal(err)
		}
		per++
	}
	w.Flush()
	conn := &replayConn{stream: stream.Bytes(), per: per, left: (b.N + per - 1) / per * per}
	b.SetBytes(int64(payload))
	b.ReportAllocs()
	b.ResetTimer()
	if err := qp.start(conn, mpa.Params{Rev: 2, CRC: true, IRD: 4, ORD: 4}, ConnConfig{ReadBuffer: mpa.DefaultReadBuffer}, false); err != nil {
		b.Fatal(err)
	}
	<-qp.Done()
	b.StopTimer()
	if st := qp.Stats(); st.FPDUsReceived != uint64(conn.left+(b.N+per-1)/per*per) || st.CRCErrors != 0 {
		b.Fatalf("%+v (%v)", st, qp.Err())
	}
	qp.Close()
}

// BenchmarkRxSend is BenchmarkRxWrite with 64 KiB Sends (1424 octets of
// payload a FPDU behind the untagged header) into posted receives, which
// the benchmark's goroutine posts again as they complete, as send_bw's
// receiver does: the cost per FPDU, with each message's pop, completion,
// poll and repost shared among its 47 FPDUs.
func BenchmarkRxSend(b *testing.B) {
	d := openDev(DeviceAttr{})
	pd := d.AllocPD()
	const depth, msg = 64, 64 << 10
	scq, _ := d.CreateCQ(8)
	rcq, _ := d.CreateCQ(depth)
	qp, err := pd.CreateQP(QPConfig{SendCQ: scq, RecvCQ: rcq, IRD: 4, ORD: 4,
		Cap: QPCap{MaxSendWR: 8, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		b.Fatal(err)
	}
	mr, _ := pd.RegMR(make([]byte, msg), LocalWrite)
	const payload = 1442 - ddp.UntaggedHdrLen
	var stream bytes.Buffer
	w := mpa.NewWriter(&stream, true, false)
	var at []int // each FPDU's offset in the stream
	for off := 0; off < msg; off += payload {
		n := min(payload, msg-off)
		at = append(at, stream.Len()+w.Buffered())
		h := ddp.AppendUntagged(nil, off+n == msg, rdmap.Ctrl(rdmap.OpSend), 0, rdmap.QNSend, 1, uint32(off))
		if err := w.Append(h, make([]byte, n)); err != nil {
			b.Fatal(err)
		}
	}
	w.Flush()
	msgs := (b.N + len(at) - 1) / len(at)
	conn := newSendReplay(stream.Bytes(), at, msgs)
	conn.posted = make(chan struct{}, depth)
	for i := range depth {
		if _, err := qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{mr.SGE(0, msg)}}); err != nil {
			b.Fatal(err)
		}
		conn.posted <- struct{}{}
	}
	b.SetBytes(int64(msg / len(at))) // the mean payload of an FPDU
	b.ReportAllocs()
	b.ResetTimer()
	if err := qp.start(conn, mpa.Params{Rev: 2, CRC: true, IRD: 4, ORD: 4}, ConnConfig{ReadBuffer: mpa.DefaultReadBuffer}, false); err != nil {
		b.Fatal(err)
	}
	wcs := make([]WC, 16)
	for done := 0; done < msgs; {
		n := rcq.Poll(wcs)
		if n == 0 {
			if err := rcq.Wait(context.Background()); err != nil {
				b.Fatalf("%v (%v)", err, qp.Err())
			}
			continue
		}
		for _, wc := range wcs[:n] {
			if done == msgs {
				break // the receives left are flushed at the end of the stream
			}
			if wc.Status != Success || wc.ByteLen != msg {
				b.Fatalf("%v: %v", wc, qp.Err())
			}
			if _, err := qp.PostRecv(RecvWR{ID: wc.ID, SGL: []SGE{mr.SGE(0, msg)}}); err != nil {
				b.Fatal(err)
			}
			conn.posted <- struct{}{}
			done++
		}
	}
	<-qp.Done()
	b.StopTimer()
	if st := qp.Stats(); st.FPDUsReceived != uint64(msgs*len(at)) || st.CRCErrors != 0 {
		b.Fatalf("%+v, want %d FPDUs (%v)", st, msgs*len(at), qp.Err())
	}
	qp.Close()
}

// sendReplay is a net.Conn whose reads give one Send message msgs times,
// with MSNs 1, 2, ..., and then end of stream; a message starts only with
// a receive posted for it (a token in posted), as a sender with credits
// sends, and a read with nothing to give waits for one, as on a socket. Before each message goes out
// its MSNs are rewritten and each CRC corrected for the change: a CRC is
// linear in the octets it covers, so flipping a bit of an FPDU flips a
// fixed set of its CRC's bits (basis), found once per FPDU and bit.
type sendReplay struct {
	memConn
	msg    []byte
	at     []int         // each FPDU's offset in msg
	basis  [][32]uint32  // per FPDU, what flipping bit k of its MSN flips in the CRC
	msn    uint32        // the MSN msg carries
	posted chan struct{} // a token per receive posted
	msgs   int
	sent   int // messages given whole
	off    int // octets of the next message given
}

func newSendReplay(msg []byte, at []int, msgs int) *sendReplay {
	c := &sendReplay{msg: msg, at: at, msn: 1, msgs: msgs, basis: make([][32]uint32, len(at))}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for i, a := range at {
		f := bytes.Clone(msg[a:c.end(i)])
		covered := f[:len(f)-mpa.CRCLen]
		base := crc32.Checksum(covered, castagnoli)
		for k := range 32 {
			covered[c.msnAt()+3-k/8] ^= 1 << (k % 8)
			c.basis[i][k] = crc32.Checksum(covered, castagnoli) ^ base
			covered[c.msnAt()+3-k/8] ^= 1 << (k % 8)
		}
	}
	return c
}

// end is the end of FPDU i in msg.
func (c *sendReplay) end(i int) int {
	if i+1 < len(c.at) {
		return c.at[i+1]
	}
	return len(c.msg)
}

// msnAt is the MSN's offset in an FPDU: the length field, then the
// untagged header's MSN.
func (c *sendReplay) msnAt() int { return mpa.LenFieldLen + 10 }

// renumber sets every FPDU's MSN to msn and corrects its CRC.
func (c *sendReplay) renumber(msn uint32) {
	for i, a := range c.at {
		f := c.msg[a:c.end(i)]
		flip := binary.BigEndian.Uint32(f[c.msnAt():]) ^ msn
		binary.BigEndian.PutUint32(f[c.msnAt():], msn)
		var d uint32
		for ; flip != 0; flip &= flip - 1 { // the bits that change: two on average
			d ^= c.basis[i][bits.TrailingZeros32(flip)]
		}
		t := f[len(f)-mpa.CRCLen:]
		binary.LittleEndian.PutUint32(t, binary.LittleEndian.Uint32(t)^d)
	}
	c.msn = msn
}

func (c *sendReplay) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && c.sent < c.msgs {
		if c.off == 0 {
			if n > 0 {
				select {
				case <-c.posted:
				default:
					return n, nil // the rest once a receive is posted
				}
			} else {
				<-c.posted
			}
			if c.msn != uint32(c.sent+1) {
				c.renumber(uint32(c.sent + 1))
			}
		}
		k := copy(p[n:], c.msg[c.off:])
		n += k
		if c.off += k; c.off == len(c.msg) {
			c.sent, c.off = c.sent+1, 0
		}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (c *sendReplay) Write(p []byte) (int, error) { return len(p), nil }
func (c *sendReplay) Close() error                { return nil }

// sinkConn is a net.Conn that takes every write and has nothing to read
// until it is closed.
type sinkConn struct {
	memConn
	closed  chan struct{}
	written int
}

func (c *sinkConn) Read(p []byte) (int, error) {
	<-c.closed
	return 0, io.EOF
}

func (c *sinkConn) Write(p []byte) (int, error) { c.written += len(p); return len(p), nil }
func (c *sinkConn) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return nil
}

// BenchmarkTxWrite measures a QP's transmit side alone: 64 KiB RDMA
// Writes, 128 outstanding, framed into FPDUs of an Ethernet MSS (1442-octet
// ULPDUs) and written to memory. ns/op is per FPDU, posting and completion
// included.
func BenchmarkTxWrite(b *testing.B) { benchTx(b, OpRDMAWrite, 64<<10) }

// BenchmarkTxSend is BenchmarkTxWrite with 64 KiB Sends (1424 octets of
// payload a FPDU behind the untagged header).
func BenchmarkTxSend(b *testing.B) { benchTx(b, OpSend, 64<<10) }

// BenchmarkTxWrite64 is BenchmarkTxWrite with 64-octet Writes, as
// write_bw -s 64 -t 128 posts them: one FPDU each, copied into the
// Writer's arena. ns/op is per Write, posting and completion included;
// with -cpu 1 the poster and the transmit loop take turns on one
// processor, so it is their costs added.
func BenchmarkTxWrite64(b *testing.B) { benchTx(b, OpRDMAWrite, 64) }

func benchTx(b *testing.B, op SendOpcode, msg int) {
	pd, scq, qp := benchQP(b, 256)
	payload := 1442 - ddp.TaggedHdrLen
	if op == OpSend {
		payload = 1442 - ddp.UntaggedHdrLen
	}
	per := (msg + payload - 1) / payload
	src, _ := pd.RegMR(make([]byte, msg), LocalWrite)
	conn := &sinkConn{closed: make(chan struct{})}
	if err := qp.start(conn, mpa.Params{Rev: 2, CRC: true, IRD: 4, ORD: 4}, ConnConfig{MaxFPDU: 1448}, true); err != nil {
		b.Fatal(err)
	}
	wr := SendWR{Opcode: op, SGL: []SGE{src.SGE(0, msg)}, RemoteAddr: 0x1000, RKey: 0x100}
	msgs := (b.N + per - 1) / per
	wcs := make([]WC, 32)
	b.SetBytes(int64(min(msg, payload)))
	b.ReportAllocs()
	b.ResetTimer()
	posted, done := 0, 0
	for done < msgs {
		for posted-done < 128 && posted < msgs {
			wr.Flags = 0
			if posted%16 == 15 || posted == msgs-1 {
				wr.Flags = Signaled
			}
			if _, err := qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		n := scq.Poll(wcs)
		if n == 0 {
			scq.Wait(context.Background())
			continue
		}
		for _, wc := range wcs[:n] {
			if wc.Status != Success {
				b.Fatalf("%v: %v", wc, qp.Err())
			}
			done = min(posted, (done/16+1)*16)
		}
	}
	b.StopTimer()
	// WRs complete when the Writer writes on its own (its arena full, in
	// an Append) or holds their copy; the counters are published at the
	// transmit loop's flush, which may come after.
	deadline := time.Now().Add(5 * time.Second)
	for qp.Stats().FPDUsSent != uint64(msgs*per) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := qp.Stats(); st.FPDUsSent != uint64(msgs*per) {
		b.Fatalf("%d FPDUs sent, want %d", st.FPDUsSent, msgs*per)
	}
	qp.Close()
}
