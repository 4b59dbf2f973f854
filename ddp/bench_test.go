package ddp

import "testing"

var sink uint64

func BenchmarkAppendTagged(b *testing.B) {
	buf := make([]byte, 0, TaggedHdrLen)
	b.ReportAllocs()
	b.SetBytes(TaggedHdrLen)
	for i := 0; i < b.N; i++ {
		buf = AppendTagged(buf[:0], true, 0x40, 0x01020304, uint64(i))
	}
	sink += uint64(buf[13])
}

func BenchmarkAppendUntagged(b *testing.B) {
	buf := make([]byte, 0, UntaggedHdrLen)
	b.ReportAllocs()
	b.SetBytes(UntaggedHdrLen)
	for i := 0; i < b.N; i++ {
		buf = AppendUntagged(buf[:0], true, 0x43, 0, 0, uint32(i), 0)
	}
	sink += uint64(buf[13])
}

func BenchmarkParseTagged(b *testing.B) {
	seg := append(AppendTagged(nil, true, 0x40, 0x01020304, 0x0102030405060708), make([]byte, 1024)...)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		n, tagged, err := Parse(seg)
		if err != nil || !tagged {
			b.Fatal(err)
		}
		h := Tagged(seg[:n])
		sink += uint64(h.STag()) + h.TO() + uint64(h.ULPCtrl())
	}
}

func BenchmarkParseUntagged(b *testing.B) {
	seg := append(AppendUntagged(nil, true, 0x43, 0, 0, 1, 0), make([]byte, 1024)...)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		n, tagged, err := Parse(seg)
		if err != nil || tagged {
			b.Fatal(err)
		}
		h := Untagged(seg[:n])
		sink += uint64(h.QN()) + uint64(h.MSN()) + uint64(h.MO()) + uint64(h.ULPWord())
	}
}

func BenchmarkCheckUntagged(b *testing.B) {
	h := Untagged(AppendUntagged(nil, false, 0x43, 0, 0, 1, 0))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if CheckQN(h.QN(), 3) != nil || CheckMSN(h.MSN(), 1) != nil || CheckMO(h.MO(), 0) != nil ||
			CheckBuffer(h.QN(), h.MSN(), true) != nil || CheckMsgLen(h.MO(), 1024, 4096) != nil {
			b.Fatal("check")
		}
	}
}
