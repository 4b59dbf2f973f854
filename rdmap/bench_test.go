package rdmap

import (
	"testing"

	"github.com/goiwarp/iwarp/ddp"
)

var sink uint64

func BenchmarkAppendReadRequestMessage(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	b.SetBytes(ddp.UntaggedHdrLen + ReadRequestLen)
	for i := 0; i < b.N; i++ {
		buf = ddp.AppendUntagged(buf[:0], true, Ctrl(OpReadRequest), 0, QNReadRequest, uint32(i), 0)
		buf = AppendReadRequest(buf, 0x01020304, uint64(i), 4096, 0x21222324, 0x3000)
	}
	sink += uint64(buf[20])
}

func BenchmarkParseReadRequestMessage(b *testing.B) {
	seg := append(ddp.AppendUntagged(nil, true, Ctrl(OpReadRequest), 0, QNReadRequest, 1, 0), goldenReadRequest...)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		n, tagged, err := ddp.Parse(seg)
		if err != nil {
			b.Fatal(err)
		}
		op, err := CheckCtrl(tagged, seg[1], false)
		if err != nil || op != OpReadRequest {
			b.Fatal(err)
		}
		h := ddp.Untagged(seg[:n])
		if err := CheckQN(op, h.QN(), false); err != nil {
			b.Fatal(err)
		}
		if err := CheckLen(op, h, len(seg)-n); err != nil {
			b.Fatal(err)
		}
		rr := ReadRequest(seg[n:])
		sink += uint64(rr.SinkSTag()) + rr.SinkTO() + uint64(rr.Size()) + uint64(rr.SrcSTag()) + rr.SrcTO()
	}
}

func BenchmarkCheckCtrl(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		op, err := CheckCtrl(i&1 == 0, Ctrl(Opcode(3*(i&1))), false)
		if err != nil {
			b.Fatal(err)
		}
		sink += uint64(op.Info().HdrLen)
	}
}

func BenchmarkAtomicRequest(b *testing.B) {
	buf := make([]byte, 0, AtomicRequestLen)
	b.ReportAllocs()
	b.SetBytes(AtomicRequestLen)
	for i := 0; i < b.N; i++ {
		buf = AppendAtomicRequest(buf[:0], AtomicFetchAdd, uint32(i), 0x01020304, 0x1000, 1, 0, 0, ^uint64(0))
		r := AtomicRequest(buf)
		if err := CheckAtomicRequest(r, r.TO()); err != nil {
			b.Fatal(err)
		}
		sink += r.AddSwap() + uint64(r.ReqID())
	}
}

func BenchmarkAppendTerminate(b *testing.B) {
	term, _ := NewTerminate(ErrInvalidSTag, readReqSeg, len(readReqSeg))
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = term.Append(AppendTerminateDDP(buf[:0]))
	}
	sink += uint64(len(buf))
}

func BenchmarkParseTerminate(b *testing.B) {
	term, _ := NewTerminate(ErrInvalidSTag, readReqSeg, len(readReqSeg))
	msg := term.Append(nil)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		t, err := ParseTerminate(msg)
		if err != nil {
			b.Fatal(err)
		}
		sink += uint64(t.SegLen)
	}
}
