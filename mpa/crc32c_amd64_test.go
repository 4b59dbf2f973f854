//go:build !purego

package mpa

import (
	"bytes"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// Each kernel on its own, whatever crc32cUpdate picks on this CPU.
func TestCRC32cKernels(t *testing.T) {
	if !haveCRC32c {
		t.Skip("no SSE 4.2 and PCLMULQDQ")
	}
	t.Run("single", func(t *testing.T) {
		checkCRC32cLengths(t, func(c uint32, p []byte) uint32 { return ^crc32cSingle(^c, p) }, 0)
	})
	t.Run("triple", func(t *testing.T) {
		checkCRC32cLengths(t, func(c uint32, p []byte) uint32 { return ^crc32cTripleChunks(^c, p) }, 0)
	})
	t.Run("fold", func(t *testing.T) {
		if !haveFold {
			t.Skip("no AVX-512 VPCLMULQDQ")
		}
		checkCRC32cLengths(t, func(c uint32, p []byte) uint32 { return ^crc32cFold(^c, p) }, 0)
	})
	t.Run("foldcopy", func(t *testing.T) {
		if !haveFold {
			t.Skip("no AVX-512 VPCLMULQDQ")
		}
		dst := make([]byte, 200<<10)
		checkCRC32cLengths(t, func(c uint32, p []byte) uint32 {
			off := len(p) % 61
			clear(dst[:off+len(p)+8])
			c = ^crc32cFoldCopy(^c, dst[off:off+len(p)], p)
			if !bytes.Equal(dst[off:off+len(p)], p) || !allZero(dst[:off]) || !allZero(dst[off+len(p):off+len(p)+8]) {
				t.Fatalf("%d octets at offset %d: copied wrong", len(p), off)
			}
			return c
		}, 0)
	})
}

// crc32cFoldCopy at every alignment of dst (and many of src), for every
// length where its head and blocks change, copies exactly its octets and
// takes their CRC.
func TestCRC32cFoldCopyAlignment(t *testing.T) {
	if !haveFold {
		t.Skip("no AVX-512 VPCLMULQDQ")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]byte, 4096+64)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	dst := make([]byte, 4096+64+8)
	var lengths []int
	for n := 0; n <= 400; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 1424, 1428, 1434, 1442, 4095, 4096)
	for _, n := range lengths {
		for do := range 64 {
			so := (do*7 + n) % 64
			p := src[so : so+n]
			c := rng.Uint32()
			clear(dst)
			got := ^crc32cFoldCopy(^c, dst[do:do+n], p)
			if want := stdCRC32c(c, p); got != want {
				t.Fatalf("%d octets, dst offset %d, src offset %d: %#08x, want %#08x", n, do, so, got, want)
			}
			if !bytes.Equal(dst[do:do+n], p) || !allZero(dst[:do]) || !allZero(dst[do+n:]) {
				t.Fatalf("%d octets, dst offset %d, src offset %d: copied wrong", n, do, so)
			}
		}
	}
}

// crc32cUpdate and crc32cCopy pick kernels by the CPU's features, which
// GODEBUG turns off (golang.org/x/sys/cpu reads it): .ci/run runs the
// suites again with cpu.avx512f=off and with cpu.sse42=off, so that the
// paths of CPUs without AVX-512 or SSE 4.2 run on its machine too. This
// test says that they did.
func TestCRC32cKernelChoice(t *testing.T) {
	godebug := os.Getenv("GODEBUG")
	t.Logf("GODEBUG %q: crc32 instruction %v, folding %v, fused copy %v", godebug, haveCRC32c, haveFold, crc32cCopyFused)
	if strings.Contains(godebug, "cpu.avx512f=off") && (haveFold || crc32cCopyFused) {
		t.Fatal("AVX-512 turned off, and the folding kernels still picked")
	}
	if strings.Contains(godebug, "cpu.sse42=off") && haveCRC32c {
		t.Fatal("SSE 4.2 turned off, and the crc32 instruction still used")
	}
	if crc32cCopyFused != haveFold || haveFold && !haveCRC32c {
		t.Fatalf("fused copy %v, folding %v, crc32 instruction %v", crc32cCopyFused, haveFold, haveCRC32c)
	}
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// xPowMod, which the kernels' constants come from, against hash/crc32: k
// zero octets take the CRC register from s to s·x^(8k) mod P, and the
// register x^0 is 0x80000000. And x^e·x^f = x^(e+f).
func TestXPowMod(t *testing.T) {
	for k := range 600 {
		want := ^stdCRC32c(^uint32(0x80000000), make([]byte, k))
		if got := xPowMod(8 * uint64(k)); got != want {
			t.Fatalf("x^%d mod P = %#08x, want %#08x", 8*k, got, want)
		}
	}
	// The tables, made by successive multiplication, against xPowMod.
	for i, k := range crc32cKlo {
		if want := uint64(xPowMod(64*uint64(i) + 95)); k != want {
			t.Fatalf("crc32cKlo[%d] = %#x, want %#x", i, k, want)
		}
	}
	for j := 1; j < len(crc32cKhi); j++ {
		if want := uint64(xPowMod(4096*uint64(j) - 33)); crc32cKhi[j] != want {
			t.Fatalf("crc32cKhi[%d] = %#x, want %#x", j, crc32cKhi[j], want)
		}
	}
	for _, e := range []uint64{0, 1, 31, 33, 95, 1000, 1 << 20} {
		for _, f := range []uint64{0, 7, 64, 4096, 123457} {
			prod := mulMod(bits.Reverse32(xPowMod(e)), bits.Reverse32(xPowMod(f)))
			if got, want := bits.Reverse32(prod), xPowMod(e+f); got != want {
				t.Fatalf("x^%d·x^%d = %#08x, x^%d = %#08x", e, f, got, e+f, want)
			}
		}
	}
}

// BenchmarkCRC32cKernels sets singleMax and foldMin, by independent calls
// (the CRCs of successive FPDUs) and, for the latency, by calls that each
// continue the last one's CRC. The machine is shared: take the fastest of
// several interleaved runs,
//
//	for i in $(seq 8); do go test -run '^$' -bench CRC32cKernels -benchtime 20ms ./mpa; done
func BenchmarkCRC32cKernels(b *testing.B) {
	kernels := []struct {
		name string
		min  int
		f    func(uint32, []byte) uint32
		ok   bool
	}{
		{"single", 0, crc32cSingle, haveCRC32c},
		{"triple", tripleMin, crc32cTripleChunks, haveCRC32c},
		{"fold", 64, crc32cFold, haveFold},
	}
	for _, mode := range []string{"independent", "chained"} {
		for _, k := range kernels {
			for _, size := range []int{16, 24, 32, 40, 48, 56, 64, 80, 96, 128, 160, 192, 256, 384, 512, 1442, 9000} {
				if !k.ok || size < k.min {
					continue
				}
				b.Run(fmt.Sprintf("mode=%s/kernel=%s/size=%d", mode, k.name, size), func(b *testing.B) {
					src := make([]byte, size+1)[1:]
					b.SetBytes(int64(size))
					var c uint32
					if mode == "chained" {
						for b.Loop() {
							c = k.f(c, src)
						}
					} else {
						for b.Loop() {
							c ^= k.f(0, src)
						}
					}
					crcSink = c
				})
			}
		}
	}
}
