package rdmap

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

// The offending segments of the builder tests, with distinctive values.
var (
	// RDMA Write, STag 0x01020304, TO 0x0102030405060708, 16 payload octets.
	writeSeg = unhexS("c1 40 01 02 03 04 01 02 03 04 05 06 07 08" +
		"f0 f1 f2 f3 f4 f5 f6 f7 f8 f9 fa fb fc fd fe ff")
	// RDMA Read Request on QN 1, MSN 0x21222324, with goldenReadRequest.
	readReqSeg = append(ddp.AppendUntagged(nil, true, 0x41, 0, 1, 0x21222324, 0), goldenReadRequest...)
	// Opcode 12 on QN 0, MSN 5, 4 payload octets.
	badOpSeg = unhexS("41 4c 00 00 00 00 00 00 00 00 00 00 00 05 00 00 00 00 de ad be ef")
)

func unhexS(s string) []byte { return unhex(&testing.T{}, s) }

// The Terminate message's own untagged DDP header with MSN 1: L, DV 1,
// RDMAP control 0x47, Invalidate STag 0, QN 2, MSN 1, MO 0.
const termDDP = "41 47 | 00 00 00 00 | 00 00 00 02 | 00 00 00 01 | 00 00 00 00 | "

func TestNewTerminateGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		seg  []byte
		want string
	}{
		{
			// (a) DDP tagged buffer error, invalid STag: M and D, the segment
			// length (14 + 16 = 30) and the 14-octet DDP header.
			"write to invalid STag",
			ddp.Errorf(ddp.ETypeTagged, ddp.CodeInvalidSTag, "STag %#x", 0x01020304),
			writeSeg,
			termDDP + "11 00 c0 00 | 00 1e | c1 40 01 02 03 04 01 02 03 04 05 06 07 08",
		},
		{
			// (b) RDMAP remote protection error, invalid STag, on a Read
			// Request: M, D and R, length 46, DDP header, Read Request header.
			"read request with bad source STag",
			Errorf(ETypeRemoteProtection, CodeInvalidSTag, "source STag %#x", srcSTag),
			readReqSeg,
			termDDP + "01 00 e0 00 | 00 2e | 41 41 00 00 00 00 00 00 00 01 21 22 23 24 00 00 00 00 | " +
				"01 02 03 04 01 02 03 04 05 06 07 08 11 12 13 14 21 22 23 24 31 32 33 34 35 36 37 38",
		},
		{
			// (c) RDMAP remote operation error, unexpected opcode: the DDP
			// header is intact, so it goes back ("Yes, if possible").
			"unknown opcode",
			checkCtrlErr(false, 0x4c),
			badOpSeg,
			termDDP + "02 06 c0 00 | 00 16 | 41 4c 00 00 00 00 00 00 00 00 00 00 00 05 00 00 00 00",
		},
		{
			// (d) LLP (MPA) CRC error: no headers.
			"CRC error",
			fmt.Errorf("reading FPDU: %w", &mpa.Error{Code: mpa.CodeCRC, Msg: "got 0x0cb190b8"}),
			writeSeg,
			termDDP + "20 02 00 00",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			term, ok := NewTerminate(tc.err, tc.seg, len(tc.seg))
			require.True(t, ok)
			got := term.Append(AppendTerminateDDP(nil))
			require.Equal(t, fmt.Sprintf("% x", unhexS(tc.want)), fmt.Sprintf("% x", got))

			// What the peer decodes is what was meant.
			n, tagged, err := ddp.Parse(got)
			require.NoError(t, err)
			require.False(t, tagged)
			op, err := CheckCtrl(tagged, got[1], false)
			require.NoError(t, err)
			require.Equal(t, OpTerminate, op)
			require.Equal(t, QNTerminate, ddp.Untagged(got[:n]).QN())
			back, err := ParseTerminate(got[n:])
			require.NoError(t, err)
			require.False(t, back.SiwForm)
			require.Equal(t, term, back)
			require.Equal(t, CauseOf(tc.err), back.Cause())
			require.Equal(t, term.Len(), len(got)-n)
		})
	}
}

func checkCtrlErr(tagged bool, c byte) error {
	_, err := CheckCtrl(tagged, c, false)
	return err
}

func TestNewTerminateRules(t *testing.T) {
	// Nothing to answer.
	_, ok := NewTerminate(nil, writeSeg, len(writeSeg))
	require.False(t, ok)
	re := &RemoteError{Terminate{Layer: LayerDDP, EType: 1, Code: 0}}
	_, ok = NewTerminate(fmt.Errorf("qp: %w", re), writeSeg, len(writeSeg))
	require.False(t, ok, "a peer's Terminate is never echoed")

	noHdrs := func(err error, seg []byte) {
		t.Helper()
		term, ok := NewTerminate(err, seg, len(seg))
		require.True(t, ok)
		require.False(t, term.M || term.D || term.R, "%v", err)
		require.Equal(t, 4, term.Len())
	}
	// Local catastrophic errors, RDMAP and DDP: no headers.
	noHdrs(io.ErrUnexpectedEOF, writeSeg)
	noHdrs(Errorf(ETypeLocalCatastrophic, 0, "oops"), writeSeg)
	noHdrs(ddp.Errorf(ddp.ETypeCatastrophic, 0, "oops"), writeSeg)
	// Errors not tied to a received segment.
	noHdrs(ddp.ErrInvalidSTag, nil)
	// A header too short to send back.
	noHdrs(ddp.ErrInvalidQN, readReqSeg[:17])

	// Remote protection on a Send with Invalidate: no R (no RDMA header
	// exists for it), unlike siw.
	send := append(ddp.AppendUntagged(nil, true, Ctrl(OpSendInvalidate), 0x01020304, 0, 1, 0), "x"...)
	term, ok := NewTerminate(ErrCannotInvalidate, send, len(send))
	require.True(t, ok)
	require.True(t, term.M && term.D && !term.R)
	require.Equal(t, send[:18], term.DDPHdr)
	require.Equal(t, uint16(19), term.SegLen)
	term, _ = NewTerminate(ErrAccessRights, send, len(send))
	require.True(t, term.D && !term.R)

	// A Read Request cut short of its RDMAP header: D but no R.
	term, _ = NewTerminate(ErrBaseBounds, readReqSeg[:30], 46)
	require.True(t, term.D && !term.R)

	// Remote operation error on a Read Request: no R.
	term, _ = NewTerminate(ErrInvalidVersion, readReqSeg, len(readReqSeg))
	require.True(t, term.D && !term.R)

	// A DDP version error still sends back the header (RFC 5040 Figure 10:
	// DDP errors include it; siw leaves it out).
	bad := append([]byte(nil), writeSeg...)
	bad[0] = 0xc2
	_, _, perr := ddp.Parse(bad)
	term, _ = NewTerminate(perr, bad, len(bad))
	require.True(t, term.D)
	require.Equal(t, Cause{LayerDDP, 1, 0x04}, term.Cause())

	// A segment length that does not fit 16 bits is not valid: D without M.
	term, _ = NewTerminate(ddp.ErrInvalidSTag, writeSeg, 1<<16)
	require.True(t, term.D && !term.M)
	require.Zero(t, term.SegLen)
}

func TestTerminateRFCEncodings(t *testing.T) {
	for _, tc := range []struct {
		name  string
		term  Terminate
		bytes string
	}{
		{"RDMAP local catastrophic", Terminate{Layer: LayerRDMAP, EType: 0, Code: 0x07}, "00 07 00 00"},
		{"RDMAP remote operation", Terminate{Layer: LayerRDMAP, EType: 2, Code: 0x06, M: true, D: true, SegLen: 0x16,
			DDPHdr: badOpSeg[:18]}, "02 06 c0 00 00 16 " + "41 4c 00 00 00 00 00 00 00 00 00 00 00 05 00 00 00 00"},
		{"DDP untagged invalid QN", Terminate{Layer: LayerDDP, EType: 2, Code: 0x01, M: true, D: true, SegLen: 0x0102,
			DDPHdr: readReqSeg[:18]}, "12 01 c0 00 01 02 41 41 00 00 00 00 00 00 00 01 21 22 23 24 00 00 00 00"},
		{"DDP tagged TO wrap", Terminate{Layer: LayerDDP, EType: 1, Code: 0x03, M: true, D: true, SegLen: 30,
			DDPHdr: writeSeg[:14]}, "11 03 c0 00 00 1e c1 40 01 02 03 04 01 02 03 04 05 06 07 08"},
		{"LLP marker", Terminate{Layer: LayerLLP, EType: 0, Code: 0x03}, "20 03 00 00"},
		{"LLP insufficient IRD", Terminate{Layer: LayerLLP, EType: 0, Code: 0x06}, "20 06 00 00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := unhexS(tc.bytes)
			require.Equal(t, want, tc.term.Append(nil))
			require.Equal(t, len(want), tc.term.Len())
			got, err := ParseTerminate(want)
			require.NoError(t, err)
			require.Equal(t, tc.term, got)
			require.True(t, got.Cause().Valid())
		})
	}
}

// Linux siw on x86, as observed on the wire.
func TestParseTerminateSiw(t *testing.T) {
	t.Run("write to invalid STag", func(t *testing.T) {
		// The notes elide the header after "c1 40 de ad be 00"; the TO
		// here is filled in.
		b := unhexS("11 00 03 00 | 00 10 | c1 40 de ad be 00 00 00 00 00 00 00 10 00")
		term, err := ParseTerminate(b)
		require.NoError(t, err)
		require.True(t, term.SiwForm)
		require.Equal(t, Cause{LayerDDP, uint8(ddp.ETypeTagged), ddp.CodeInvalidSTag}, term.Cause())
		require.True(t, term.M)
		require.True(t, term.D)
		require.False(t, term.R)
		require.Equal(t, uint16(16), term.SegLen)
		h := ddp.Tagged(term.DDPHdr)
		require.Len(t, term.DDPHdr, ddp.TaggedHdrLen)
		require.Equal(t, uint32(0xdeadbe00), h.STag())
		require.Equal(t, uint64(0x1000), h.TO())
		// Re-encoded, it is the RFC form.
		require.Equal(t, unhexS("11 00 c0 00 | 00 10 | c1 40 de ad be 00 00 00 00 00 00 00 10 00"), term.Append(nil))

		e := &RemoteError{term}
		require.EqualError(t, e, "rdmap: peer sent Terminate: DDP tagged buffer error: invalid STag (Linux siw byte-swapped control word)")
		require.Equal(t, term.Cause(), CauseOf(e))
	})
	t.Run("CRC error", func(t *testing.T) {
		term, err := ParseTerminate(unhexS("02 02 00 00"))
		require.NoError(t, err)
		require.True(t, term.SiwForm)
		require.Equal(t, Cause{LayerLLP, ETypeMPA, uint8(mpa.CodeCRC)}, term.Cause())
		require.False(t, term.M || term.D || term.R)
		require.Equal(t, unhexS("20 02 00 00"), term.Append(nil))
		require.EqualError(t, &RemoteError{term}, "rdmap: peer sent Terminate: LLP MPA error: MPA CRC error (Linux siw byte-swapped control word)")
	})
	t.Run("remote protection on a Send, R without RDMA header", func(t *testing.T) {
		send := ddp.AppendUntagged(nil, true, Ctrl(OpSendInvalidate), 0x01020304, 0, 1, 0)
		b := append(unhexS("10 00 07 00 00 13"), send...)
		term, err := ParseTerminate(b)
		require.NoError(t, err)
		require.True(t, term.SiwForm)
		require.Equal(t, Cause{LayerRDMAP, ETypeRemoteProtection, CodeInvalidSTag}, term.Cause())
		require.True(t, term.M && term.D && term.R)
		require.Nil(t, term.RDMAPHdr)
		require.Equal(t, send, term.DDPHdr)
	})
	t.Run("symmetric and RFC forms stay RFC", func(t *testing.T) {
		for _, s := range []string{"00 07 00 00", "20 02 00 00", "22 22 00 00", "11 00 00 00"} {
			term, err := ParseTerminate(unhexS(s))
			require.NoError(t, err)
			require.False(t, term.SiwForm, s)
		}
		// Valid only the swapped way round.
		term, err := ParseTerminate(unhexS("21 03 00 00"))
		require.NoError(t, err)
		require.True(t, term.SiwForm)
		require.Equal(t, Cause{LayerDDP, 2, 3}, term.Cause())
	})
}

func TestParseTerminateMalformed(t *testing.T) {
	valid := [][]byte{
		unhexS("20 02 00 00"),
		unhexS("02 02 00 00"),
		unhexS("11 00 03 00 00 10 c1 40 de ad be 00 00 00 00 00 00 00 10 00"),
		append(unhexS("10 00 07 00 00 13"), ddp.AppendUntagged(nil, true, 0x44, 1, 0, 1, 0)...),
	}
	for _, tc := range []struct {
		name string
		err  error
		seg  []byte
	}{
		{"a", ddp.ErrInvalidSTag, writeSeg},
		{"b", ErrInvalidSTag, readReqSeg},
		{"c", ErrUnexpectedOpcode, badOpSeg},
		{"d", mpa.ErrCRC, nil},
	} {
		term, ok := NewTerminate(tc.err, tc.seg, len(tc.seg))
		require.True(t, ok, tc.name)
		valid = append(valid, term.Append(nil))
	}
	for _, b := range valid {
		term, err := ParseTerminate(b)
		require.NoError(t, err, "% x", b)
		require.Equal(t, len(b), term.Len())
		for i := 0; i < len(b); i++ {
			_, err := ParseTerminate(b[:i])
			require.ErrorIs(t, err, ErrMalformed, "% x cut to %d", b, i)
		}
	}

	// R without D.
	_, err := ParseTerminate(unhexS("01 00 20 00"))
	require.ErrorIs(t, err, ErrMalformed)
	// R on a Read Request, without its header.
	_, err = ParseTerminate(append(unhexS("01 00 e0 00 00 2e"), readReqSeg[:18]...))
	require.ErrorIs(t, err, ErrMalformed)
	// Trailing octets are ignored.
	term, err := ParseTerminate(unhexS("20 02 00 00 ff ff"))
	require.NoError(t, err)
	require.Equal(t, 4, term.Len())
	// Reserved bits are ignored (RFC 5040 section 4.8), except the low three
	// of the third octet, where siw puts M, D and R.
	term, err = ParseTerminate(unhexS("20 02 18 ff"))
	require.NoError(t, err)
	require.False(t, term.SiwForm)
	require.Equal(t, Cause{LayerLLP, 0, 2}, term.Cause())
}

func TestTerminateClone(t *testing.T) {
	b := NewTerminateBytes(t)
	term, err := ParseTerminate(b)
	require.NoError(t, err)
	c := term.Clone()
	for i := range b {
		b[i] = 0
	}
	require.Equal(t, readReqSeg[:18], c.DDPHdr)
	require.Equal(t, goldenReadRequest, c.RDMAPHdr)
	require.Equal(t, make([]byte, 18), term.DDPHdr, "the parsed one aliases the input")
}

func NewTerminateBytes(t *testing.T) []byte {
	term, ok := NewTerminate(ErrInvalidSTag, readReqSeg, len(readReqSeg))
	require.True(t, ok)
	return term.Append(nil)
}

func TestRemoteErrorIsNotLocal(t *testing.T) {
	term, err := ParseTerminate(unhexS("11 00 c0 00 00 1e c1 40 01 02 03 04 01 02 03 04 05 06 07 08"))
	require.NoError(t, err)
	var e error = fmt.Errorf("qp 3: %w", &RemoteError{term.Clone()})
	var de *ddp.Error
	require.False(t, errors.As(err, &de))
	require.False(t, errors.As(e, &de), "a RemoteError is not a *ddp.Error")
	var re *RemoteError
	require.True(t, errors.As(e, &re))
	require.EqualError(t, re, "rdmap: peer sent Terminate: DDP tagged buffer error: invalid STag")
}

func TestTerminateZeroAllocs(t *testing.T) {
	b := NewTerminateBytes(t)
	buf := make([]byte, 0, 128)
	allocs := testing.AllocsPerRun(100, func() {
		term, err := ParseTerminate(b)
		if err != nil {
			panic(err)
		}
		buf = term.Append(AppendTerminateDDP(buf[:0]))
	})
	require.Zero(t, allocs)
}
