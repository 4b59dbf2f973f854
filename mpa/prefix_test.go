package mpa

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// FPDUs written with every header length around the tagged and untagged
// ones (whose length field and header the Writer hashes from registers ahead of a fused
// payload) and payloads in one to three pieces around fuseMin come out as
// RFC 5044 has them, checked against hash/crc32 octet by octet.
func TestWriterPrefixFPDUs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for round := range 400 {
		hdr := make([]byte, []int{0, 13, 14, 15, 17, 18, 19, 28}[round%8])
		for i := range hdr {
			hdr[i] = byte(rng.Uint32())
		}
		var pieces [][]byte
		var whole []byte
		for range 1 + rng.IntN(3) {
			p := make([]byte, []int{0, 1, fuseMin - 1, fuseMin, fuseMin + 1, 1428, rng.IntN(4000)}[rng.IntN(7)])
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			pieces = append(pieces, p)
			whole = append(whole, p...)
		}
		if len(hdr)+len(whole) > MaxULPDU {
			continue
		}
		var out bytes.Buffer
		w := NewWriter(&out, true, false)
		require.NoError(t, w.AppendV(hdr, pieces))
		require.NoError(t, w.Flush())

		n := len(hdr) + len(whole)
		want := binary.BigEndian.AppendUint16(nil, uint16(n))
		want = append(append(want, hdr...), whole...)
		want = append(want, make([]byte, PadLen(n))...)
		want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(want, castagnoli))
		require.Equal(t, want, out.Bytes(), "header %d octets, pieces %d", len(hdr), len(pieces))
	}
}

// crc32cPrefix and crc32cPrefix20, from registers, and their Go forms
// (slicing-by-8, what other CPUs run) give hash/crc32's CRC of the 16 or 20
// octets the words hold, from any CRC, and allocate nothing.
func TestCRC32cPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for range 1000 {
		crc, w0, w1 := rng.Uint32(), rng.Uint64(), rng.Uint64()
		b := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, w0), w1)
		want := crc32.Update(crc, castagnoli, b)
		require.Equal(t, want, crc32cPrefix(crc, w0, w1))
		require.Equal(t, want, crc32cPrefixGo(crc, w0, w1))

		w2 := rng.Uint32()
		b = binary.LittleEndian.AppendUint32(b, w2)
		want = crc32.Update(crc, castagnoli, b)
		require.Equal(t, want, crc32cPrefix20(crc, w0, w1, w2))
		require.Equal(t, want, crc32cPrefix20Go(crc, w0, w1, w2))
	}
	var sink uint32
	allocs := testing.AllocsPerRun(100, func() {
		sink += crc32cPrefix(sink, 1, 2) + crc32cPrefix20(sink, 3, 4, 5) + crc32cPrefixGo(sink, 6, 7) + crc32cPrefix20Go(sink, 8, 9, 10)
	})
	require.Zero(t, allocs, "allocations of the prefix CRCs")
}

// crc32cPrefixCopy is the CRC of a prefix and then of a payload it copies,
// for the prefixes a Reader hands it (16 and 20 octets) and any other
// length, payloads around every kernel's threshold, and it writes dst's
// first len(src) octets only.
func TestCRC32cPrefixCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for _, pl := range []int{0, 4, 15, 16, 17, 20, 24} {
		for _, n := range []int{0, 1, 63, 64, 65, 255, 256, 257, 1428, 1424, 4096, 9000} {
			prefix, src := make([]byte, pl), make([]byte, n)
			for i := range prefix {
				prefix[i] = byte(rng.Uint32())
			}
			for i := range src {
				src[i] = byte(rng.Uint32())
			}
			crc := rng.Uint32()
			dst := bytes.Repeat([]byte{0xa5}, n+8)
			got := crc32cPrefixCopy(crc, prefix, dst, src)
			require.Equal(t, crc32.Update(crc32.Update(crc, castagnoli, prefix), castagnoli, src), got, "prefix %d, payload %d", pl, n)
			require.Equal(t, src, dst[:n])
			require.Equal(t, bytes.Repeat([]byte{0xa5}, 8), dst[n:], "written past the payload")
		}
	}
}
