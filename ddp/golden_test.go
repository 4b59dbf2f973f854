package ddp

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The five FPDUs that tshark 4.0.17 decoded with "Good CRC32" in a
// capture of this stack's traffic, as written to the socket.
var tsharkFPDUs = map[string]string{
	"send1":  "00 17 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 68 65 6c 6c 6f 00 00 00 b9 90 b1 0c",
	"send2":  "00 1a 41 43 00 00 00 00 00 00 00 00 00 00 00 02 00 00 00 00 69 57 41 52 50 2d 30 31 96 ea 0d 74",
	"send3":  "00 1f 41 43 00 00 00 00 00 00 00 00 00 00 00 03 00 00 00 00 4d 50 41 20 43 52 43 20 74 65 73 74 21 00 00 00 3c 49 ea 27",
	"write":  "00 16 c1 40 00 00 12 34 00 00 00 00 00 00 10 00 77 72 69 74 74 65 6e 21 f5 cf c9 71",
	"rdreq1": "00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 aa bb cc dd 00 00 00 00 00 00 20 00 00 00 10 00 11 22 33 44 00 00 00 00 00 00 30 00 9f 3c fa bd",
}

// unhex decodes space-separated hex.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err)
	return b
}

// ulpdu strips an FPDU's 2-octet length and its pad and CRC.
func ulpdu(t testing.TB, name string) []byte {
	t.Helper()
	f := unhex(t, tsharkFPDUs[name])
	n := int(binary.BigEndian.Uint16(f))
	require.LessOrEqual(t, 2+n+4, len(f), name)
	return f[2 : 2+n]
}

func TestTsharkSends(t *testing.T) {
	for _, tc := range []struct {
		name    string
		msn     uint32
		payload string
	}{
		{"send1", 1, "hello"},
		{"send2", 2, "iWARP-01"},
		{"send3", 3, "MPA CRC test!"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seg := ulpdu(t, tc.name)
			n, tagged, err := Parse(seg)
			require.NoError(t, err)
			require.False(t, tagged)
			require.Equal(t, UntaggedHdrLen, n)
			h := Untagged(seg[:n])
			require.True(t, h.Last())
			require.EqualValues(t, 1, h.Version())
			require.Equal(t, byte(0x43), h.ULPCtrl(), "RDMAP v1 Send")
			require.Zero(t, h.ULPWord())
			require.Zero(t, h.QN())
			require.Equal(t, tc.msn, h.MSN())
			require.Zero(t, h.MO())
			require.Equal(t, tc.payload, string(seg[n:]))

			re := AppendUntagged(nil, h.Last(), h.ULPCtrl(), h.ULPWord(), h.QN(), h.MSN(), h.MO())
			require.Equal(t, seg[:n], re)
		})
	}
}

func TestTsharkWrite(t *testing.T) {
	seg := ulpdu(t, "write")
	n, tagged, err := Parse(seg)
	require.NoError(t, err)
	require.True(t, tagged)
	require.Equal(t, TaggedHdrLen, n)
	h := Tagged(seg[:n])
	require.True(t, h.Last())
	require.EqualValues(t, 1, h.Version())
	require.Equal(t, byte(0x40), h.ULPCtrl(), "RDMAP v1 RDMA Write")
	require.Equal(t, uint32(0x1234), h.STag())
	require.Equal(t, uint64(0x1000), h.TO())
	require.Equal(t, "written!", string(seg[n:]))
	require.Equal(t, seg[:n], AppendTagged(nil, h.Last(), h.ULPCtrl(), h.STag(), h.TO()))
}

func TestTsharkReadRequestDDP(t *testing.T) {
	seg := ulpdu(t, "rdreq1")
	n, tagged, err := Parse(seg)
	require.NoError(t, err)
	require.False(t, tagged)
	h := Untagged(seg[:n])
	require.Equal(t, byte(0x41), h.ULPCtrl(), "RDMAP v1 Read Request")
	require.Equal(t, uint32(1), h.QN())
	require.Equal(t, uint32(1), h.MSN())
	require.Zero(t, h.MO())
	require.Len(t, seg[n:], 28, "the Read Request header follows")
	require.Equal(t, seg[:n], AppendUntagged(nil, true, 0x41, 0, 1, 1, 0))
}
