package mpa

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err)
	return b
}

// RFC 3720 appendix B.4 vectors, with the wire octets the CRC field carries.
func TestCRC32cVectors(t *testing.T) {
	inc := make([]byte, 32)
	dec := make([]byte, 32)
	for i := range inc {
		inc[i] = byte(i)
		dec[i] = byte(31 - i)
	}
	iscsi := unhex(t, "01c00000 00000000 00000000 00000000 14000000 00000400 00000014 00000018 28000000 00000000 02000000 00000000")
	for _, tc := range []struct {
		name string
		in   []byte
		want uint32
		wire string
	}{
		{"32 zeros", make([]byte, 32), 0x8a9136aa, "aa36918a"},
		{"32 ones", bytes.Repeat([]byte{0xff}, 32), 0x62a8ab43, "43aba862"},
		{"incrementing", inc, 0x46dd794e, "4e79dd46"},
		{"decrementing", dec, 0x113fdb5c, "5cdb3f11"},
		{"iSCSI read", iscsi, 0xd9963a56, "563a96d9"},
		{"123456789", []byte("123456789"), 0xe3069283, "839206e3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, CRC32c(tc.in))
			// The FPDU trailer carries the value least significant octet first.
			f := AppendFPDU(nil, tc.in[:0], false)
			_ = f
			var trailer [4]byte
			trailer[0], trailer[1], trailer[2], trailer[3] = byte(tc.want), byte(tc.want>>8), byte(tc.want>>16), byte(tc.want>>24)
			require.Equal(t, tc.wire, hex.EncodeToString(trailer[:]))
		})
	}
}

// The five FPDUs Wireshark 4.0.17 decoded with "Good CRC32" in a capture
// of this stack's traffic.
var goldenFPDUs = []string{
	"0017 4143 00000000 00000000 00000001 00000000 68656c6c6f 000000 b990b10c",
	"001a 4143 00000000 00000000 00000002 00000000 6957415250 2d3031 96ea0d74",
	"001f 4143 00000000 00000000 00000003 00000000 4d50412043524320746573742100 0000 3c49ea27",
	"0016 c140 00001234 0000000000001000 7772697474656e21 f5cfc971",
	"002e 4141 00000000 00000001 00000001 00000000 aabbccdd 0000000000002000 00001000 11223344 0000000000003000 9f3cfabd",
}

func TestGoldenFPDUs(t *testing.T) {
	for i, g := range goldenFPDUs {
		want := unhex(t, g)
		ulpdu := want[2 : 2+(int(want[0])<<8|int(want[1]))]
		require.Equal(t, want, AppendFPDU(nil, ulpdu, true), "FPDU %d via AppendFPDU", i)

		// The Writer produces the same octets, header and payload split anywhere.
		for split := 0; split <= len(ulpdu); split += 5 {
			var out bytes.Buffer
			w := NewWriter(&out, true, false)
			require.NoError(t, w.Append(ulpdu[:split], ulpdu[split:]))
			require.NoError(t, w.Flush())
			require.Equal(t, want, out.Bytes(), "FPDU %d split %d", i, split)
		}

		// And the Reader takes it apart.
		r := NewReader(bytes.NewReader(want), true, false, 0, nil)
		n, err := r.Next()
		require.NoError(t, err)
		require.Equal(t, len(ulpdu), n)
		got := make([]byte, n)
		require.NoError(t, r.ReadFull(got))
		require.NoError(t, r.Finish())
		require.Equal(t, ulpdu, got)
	}
}

func TestCRCOffSendsZero(t *testing.T) {
	f := AppendFPDU(nil, []byte("abc"), false)
	require.Equal(t, unhex(t, "0003 616263 000000 00000000"), f)
}

func TestPadLen(t *testing.T) {
	for n, want := range []int{2, 1, 0, 3, 2, 1, 0, 3} {
		require.Equal(t, want, PadLen(n), "n=%d", n)
		require.Zero(t, (LenFieldLen+n+PadLen(n))%4)
	}
	for n := 0; n <= MaxULPDU; n++ {
		if p := PadLen(n); p < 0 || p > 3 || (LenFieldLen+n+p)%4 != 0 {
			t.Fatalf("PadLen(%d) = %d", n, p)
		}
	}
}

func TestMULPDU(t *testing.T) {
	// Ethernet: 1460-octet MSS less 12 octets of TCP timestamps.
	require.Equal(t, 1448-6, MULPDU(1448, false))
	require.LessOrEqual(t, FPDULen(MULPDU(1448, false)), 1448)
	// With markers the FPDU and all its markers still fit the segment.
	for _, emss := range []int{536, 1448, 1460, 8948, 9000, 65483} {
		for _, mk := range []bool{false, true} {
			n := MULPDU(emss, mk)
			require.Positive(t, n)
			l := FPDULen(n)
			if mk {
				l += MarkerLen * ((emss + MarkerInterval - 1) / MarkerInterval)
			}
			require.LessOrEqual(t, l, emss, "emss %d markers %v", emss, mk)
		}
	}
	require.LessOrEqual(t, MULPDU(1<<20, false), MaxULPDU)
}

// RFC 5044 section 6.1, Figures 5 and 6: the annotated FPDUs with markers,
// CRCs included. Figure 5 is the first FPDU of a stream (a marker with
// FPDUPTR 0 before it); Figure 6 the second, after a first FPDU of 492
// octets, with a marker 20 octets into it.
func TestRFC5044MarkerFigures(t *testing.T) {
	send := func(msn byte) []byte {
		h := unhex(t, "4143 00000000 00000000 00000000 00000000")
		h[13] = msn
		return append(h, make([]byte, 24)...) // 42-octet ULPDU
	}
	var out bytes.Buffer
	w := NewWriter(&out, true, true)
	require.NoError(t, w.Append(send(1), nil))
	require.NoError(t, w.Flush())
	fig5 := unhex(t, "00000000 002a")
	fig5 = append(fig5, send(1)...)
	fig5 = append(fig5, unhex(t, "52239983")...)
	require.Equal(t, fig5, out.Bytes(), "Figure 5")

	out.Reset()
	w = NewWriter(&out, true, true)
	// A first Send of 492 octets on the wire: marker, length, 482-octet ULPDU, CRC.
	first := unhex(t, "4143 00000000 00000000 00000001 00000000")
	require.NoError(t, w.Append(first, make([]byte, 482-len(first))))
	require.NoError(t, w.Append(send(2), nil))
	require.NoError(t, w.Flush())
	raw := out.Bytes()
	require.Len(t, raw, 0x220)
	fig6 := unhex(t, "002a 4143 00000000 00000000 00000002 00000000 00000014")
	fig6 = append(fig6, make([]byte, 24)...)
	fig6 = append(fig6, unhex(t, "84925898")...)
	require.Equal(t, fig6, raw[0x1ec:], "Figure 6")

	// And the Reader takes both streams apart.
	r := NewReader(bytes.NewReader(raw), true, true, 0, nil)
	for _, want := range [][]byte{append(first, make([]byte, 482-len(first))...), send(2)} {
		n, err := r.Next()
		require.NoError(t, err)
		got := make([]byte, n)
		require.NoError(t, r.ReadFull(got))
		require.NoError(t, r.Finish())
		require.Equal(t, want, got)
	}
}
