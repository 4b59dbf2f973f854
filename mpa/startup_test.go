package mpa

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// frameHex decodes a frame written as its 16-octet key in plain text, "|",
// and the rest in hex (spaces allowed).
func frameHex(t testing.TB, s string) []byte {
	t.Helper()
	key, rest, _ := strings.Cut(s, "|")
	b, err := hex.DecodeString(strings.ReplaceAll(rest, " ", ""))
	require.NoError(t, err)
	require.Len(t, key, KeyLen)
	return append([]byte(key), b...)
}

func requireCode(t testing.TB, err error, code LLPCode) {
	t.Helper()
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, code, e.Code, "error: %v", err)
}

var goldenFrames = []struct {
	name  string
	wire  string
	frame Frame
}{{
	// What Linux siw 6.1 sends (observed on the wire), here with IRD 16 and ORD 8.
	name:  "siw request",
	wire:  "MPA ID Req Frame|10 02 0004 0010 0008",
	frame: Frame{Enhanced: true, Rev: 2, PrivateData: []byte{0x00, 0x10, 0x00, 0x08}},
}, {
	name:  "all flags and reserved bits, rev 1",
	wire:  "MPA ID Rep Frame|f5 01 0003 414243",
	frame: Frame{Reply: true, Markers: true, CRC: true, Reject: true, Enhanced: true, Reserved: 5, Rev: 1, PrivateData: []byte("ABC")},
}, {
	name:  "siw GSO bit, CRC, H, p2p word",
	wire:  "MPA ID Rep Frame|58 02 0006 d234 c567 beef",
	frame: Frame{Reply: true, CRC: true, Enhanced: true, Reserved: 8, Rev: 2, PrivateData: []byte{0xd2, 0x34, 0xc5, 0x67, 0xbe, 0xef}},
}, {
	name:  "rev 0, no private data",
	wire:  "MPA ID Req Frame|80 00 0000",
	frame: Frame{Markers: true},
}, {
	name:  "siw reject of a short enhanced request",
	wire:  "MPA ID Rep Frame|30 02 0000",
	frame: Frame{Reply: true, Reject: true, Enhanced: true, Rev: 2},
}}

func TestGoldenFrames(t *testing.T) {
	for _, tc := range goldenFrames {
		t.Run(tc.name, func(t *testing.T) {
			wire := frameHex(t, tc.wire)
			got, err := tc.frame.Append([]byte{0xee})
			require.NoError(t, err)
			require.Equal(t, wire, got[1:], "encoded")
			require.Equal(t, len(wire), tc.frame.Len())

			f, n, err := ParseFrame(append(wire, 0xaa, 0xbb)) // trailing octets are not the frame's
			require.NoError(t, err)
			require.Equal(t, len(wire), n)
			require.Equal(t, tc.frame, f)
		})
	}
}

func TestIRDORDGolden(t *testing.T) {
	for _, tc := range []struct {
		wire string
		v    IRDORD
	}{
		{"0010 0008", IRDORD{IRD: 16, ORD: 8}},
		{"d234 c567", IRDORD{IRD: 0x1234, ORD: 0x0567, P2P: true, RTR: RTRSend | RTRWrite | RTRRead}},
		{"8001 8000", IRDORD{IRD: 1, P2P: true, RTR: RTRWrite}},
		{"0000 4000", IRDORD{RTR: RTRRead}},
		{"7fff 3fff", IRDORD{IRD: MaxIRDORD, ORD: MaxIRDORD, RTR: RTRSend}},
	} {
		wire, err := hex.DecodeString(strings.ReplaceAll(tc.wire, " ", ""))
		require.NoError(t, err)
		require.Equal(t, wire, tc.v.Append(nil), "%+v", tc.v)
		v, err := ParseIRDORD(append(wire, 0x99))
		require.NoError(t, err)
		require.Equal(t, tc.v, v)
	}
}

func TestIRDORDAppendClamps(t *testing.T) {
	v := IRDORD{IRD: 0xffff, ORD: 0x4000, RTR: 0x80}
	require.Equal(t, []byte{0x3f, 0xff, 0x3f, 0xff}, v.Append(nil))
}

func TestParseIRDORDShort(t *testing.T) {
	for i := range IRDORDLen {
		_, err := ParseIRDORD(make([]byte, i))
		requireCode(t, err, CodeInvalidReqRep)
	}
}

// Every proper prefix of a valid frame must fail cleanly.
func TestParseFrameTruncated(t *testing.T) {
	for _, tc := range goldenFrames {
		wire := frameHex(t, tc.wire)
		for i := range len(wire) {
			_, n, err := ParseFrame(wire[:i])
			require.ErrorIs(t, err, io.ErrUnexpectedEOF, "%s[:%d]", tc.name, i)
			require.Zero(t, n)
		}
	}
}

func TestParseFrameInvalid(t *testing.T) {
	for _, tc := range []struct{ name, wire string }{
		{"lower-case key", "mpa id req frame|00 01 0000"},
		{"NUL in key", "MPA ID Req Frame|00 01 0000"[:15] + "\x00|00 01 0000"},
		{"rev 3", "MPA ID Req Frame|00 03 0000"},
		{"rev 255", "MPA ID Rep Frame|00 ff 0000"},
		{"PD_Length 513", "MPA ID Req Frame|00 01 0201" + strings.Repeat("00", 513)},
		{"PD_Length 65535", "MPA ID Req Frame|00 01 ffff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseFrame(frameHex(t, tc.wire))
			requireCode(t, err, CodeInvalidReqRep)
		})
	}
}

func TestPrivateDataLimit(t *testing.T) {
	f := Frame{Rev: 1, PrivateData: bytes.Repeat([]byte{7}, MaxPrivateData)}
	b, err := f.Append(nil)
	require.NoError(t, err)
	g, n, err := ParseFrame(b)
	require.NoError(t, err)
	require.Equal(t, FrameHeaderLen+MaxPrivateData, n)
	require.Equal(t, f, g)

	f.PrivateData = append(f.PrivateData, 7)
	b, err = f.Append([]byte("x"))
	requireCode(t, err, CodeInvalidReqRep)
	require.Equal(t, []byte("x"), b, "nothing appended on error")
}

// ParseFrame's private data must not let a caller's append overwrite what
// follows the frame.
func TestParseFrameCapsPrivateData(t *testing.T) {
	wire := append(frameHex(t, "MPA ID Req Frame|00 01 0001 41"), 'Z')
	f, _, err := ParseFrame(wire)
	require.NoError(t, err)
	_ = append(f.PrivateData, 'Y')
	require.Equal(t, byte('Z'), wire[len(wire)-1])
}

func TestReadFrameStopsAtFrameEnd(t *testing.T) {
	extra := []byte{0x00, 0x10, 0xc1, 0x40} // the start of the first FPDU
	for _, tc := range goldenFrames {
		wire := frameHex(t, tc.wire)
		for _, slow := range []bool{false, true} {
			src := bytes.NewReader(append(append([]byte{}, wire...), extra...))
			var r io.Reader = src
			if slow {
				r = iotest.OneByteReader(src)
			}
			f, err := ReadFrame(r, tc.frame.Reply)
			require.NoError(t, err, tc.name)
			require.Equal(t, tc.frame, f, tc.name)
			rest, _ := io.ReadAll(src)
			require.Equal(t, extra, rest, "%s: octets after the frame", tc.name)
		}
	}
}

func TestReadFrameErrors(t *testing.T) {
	req := frameHex(t, "MPA ID Req Frame|10 02 0004 0010 0008")

	// A Request where a Reply is expected: the key is wrong.
	_, err := ReadFrame(bytes.NewReader(req), true)
	requireCode(t, err, CodeInvalidReqRep)

	// PD_Length is refused before any private data is read.
	big := bytes.NewReader(frameHex(t, "MPA ID Req Frame|00 01 0201"+strings.Repeat("00", 513)))
	_, err = ReadFrame(big, false)
	requireCode(t, err, CodeInvalidReqRep)
	require.Equal(t, 513, big.Len())

	_, err = ReadFrame(bytes.NewReader(frameHex(t, "MPA ID Req Frame|00 03 0000")), false)
	requireCode(t, err, CodeInvalidReqRep)

	// The stream ends: nothing, inside the header, inside the private data.
	_, err = ReadFrame(bytes.NewReader(nil), false)
	requireCode(t, err, CodeStreamLost)
	require.ErrorIs(t, err, io.EOF)
	for _, n := range []int{5, FrameHeaderLen + 1} {
		_, err = ReadFrame(bytes.NewReader(req[:n]), false)
		requireCode(t, err, CodeStreamLost)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF, "cut at %d", n)
	}
	_, err = ReadFrame(bytes.NewReader(req[:FrameHeaderLen]), false)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "cut at the end of the header")

	boom := errors.New("boom")
	_, err = ReadFrame(iotest.ErrReader(boom), false)
	require.ErrorIs(t, err, boom)
}

func TestFrameIRDORDHelpers(t *testing.T) {
	enh := Frame{Enhanced: true, Rev: 2, PrivateData: []byte{0x80, 0x03, 0x40, 0x02, 'h', 'i'}}
	require.True(t, enh.HasIRDORD())
	v, err := enh.IRDORD()
	require.NoError(t, err)
	require.Equal(t, IRDORD{IRD: 3, ORD: 2, P2P: true, RTR: RTRRead}, v)
	pd, err := enh.ULPPrivateData()
	require.NoError(t, err)
	require.Equal(t, []byte("hi"), pd)

	// H in a Rev 1 frame is a reserved bit: the private data is all ULP.
	rev1 := Frame{Enhanced: true, Rev: 1, PrivateData: []byte("hello")}
	require.False(t, rev1.HasIRDORD())
	pd, err = rev1.ULPPrivateData()
	require.NoError(t, err)
	require.Equal(t, []byte("hello"), pd)
	_, err = rev1.IRDORD()
	requireCode(t, err, CodeInvalidReqRep)

	// Rev 2 without H carries no word either (siw answers it alike).
	require.False(t, Frame{Rev: 2, PrivateData: []byte("abcd")}.HasIRDORD())

	short := Frame{Enhanced: true, Rev: 2, PrivateData: []byte{1, 2, 3}}
	_, err = short.IRDORD()
	requireCode(t, err, CodeInvalidReqRep)
	_, err = short.ULPPrivateData()
	requireCode(t, err, CodeInvalidReqRep)
}

func TestRTRString(t *testing.T) {
	require.Equal(t, "none", RTRNone.String())
	require.Equal(t, "Write", RTRWrite.String())
	require.Equal(t, "Send|Write|Read", (RTRSend | RTRWrite | RTRRead).String())
	require.Equal(t, "Read|0x80", (RTRRead | 0x80).String())
}

func BenchmarkParseFrame(b *testing.B) {
	wire := frameHex(b, "MPA ID Req Frame|10 02 0004 0010 0008")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ParseFrame(wire); err != nil {
			b.Fatal(err)
		}
	}
}
