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

func BenchmarkSegmenter(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s := NewSegmenter(1<<20, MaxPayload(1460-6, true))
		for seg, ok := s.Next(); ok; seg, ok = s.Next() {
			sink += uint64(seg.Len)
		}
	}
}

func BenchmarkCheckUntagged(b *testing.B) {
	q := NewQueue(128)
	q.Post(128)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if CheckQN(0, 3) != nil || q.CheckMSN(uint32(i%128)+1) != nil || CheckMO(0, 1024, 4096) != nil {
			b.Fatal("check")
		}
	}
}

func BenchmarkCheckTagged(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if CheckTagged(0x1000+uint64(i%1024), 1024, 0x1000, 4096) != nil {
			b.Fatal("check")
		}
	}
}
