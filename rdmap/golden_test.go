package rdmap

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/stretchr/testify/require"
)

// The FPDUs that tshark 4.0.17 decoded with "Good CRC32" in a capture of
// this stack's traffic, as written to the socket.
var tsharkFPDUs = map[string]string{
	"send1":  "00 17 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 68 65 6c 6c 6f 00 00 00 b9 90 b1 0c",
	"send2":  "00 1a 41 43 00 00 00 00 00 00 00 00 00 00 00 02 00 00 00 00 69 57 41 52 50 2d 30 31 96 ea 0d 74",
	"send3":  "00 1f 41 43 00 00 00 00 00 00 00 00 00 00 00 03 00 00 00 00 4d 50 41 20 43 52 43 20 74 65 73 74 21 00 00 00 3c 49 ea 27",
	"write":  "00 16 c1 40 00 00 12 34 00 00 00 00 00 00 10 00 77 72 69 74 74 65 6e 21 f5 cf c9 71",
	"rdreq1": "00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 aa bb cc dd 00 00 00 00 00 00 20 00 00 00 10 00 11 22 33 44 00 00 00 00 00 00 30 00 9f 3c fa bd",
}

// unhex decodes hex written with spaces and "|" separators.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", "|", "").Replace(s))
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

func TestTsharkFPDUs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		op      Opcode
		payload string
	}{
		{"send1", OpSend, "hello"},
		{"send2", OpSend, "iWARP-01"},
		{"send3", OpSend, "MPA CRC test!"},
		{"write", OpWrite, "written!"},
		{"rdreq1", OpReadRequest, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seg := ulpdu(t, tc.name)
			n, tagged, err := ddp.Parse(seg)
			require.NoError(t, err)
			op, err := CheckCtrl(tagged, seg[1], false)
			require.NoError(t, err)
			require.Equal(t, tc.op, op)
			info := op.Info()
			require.Equal(t, info.Tagged, tagged)
			require.Equal(t, tc.payload, string(seg[info.HdrLen:]))
			if !tagged {
				require.Equal(t, info.QN, ddp.Untagged(seg[:n]).QN())
			}
		})
	}
}

func TestTsharkReadRequest(t *testing.T) {
	seg := ulpdu(t, "rdreq1")
	h := ddp.Untagged(seg[:ddp.UntaggedHdrLen])
	require.NoError(t, CheckQN(OpReadRequest, h.QN(), false))
	require.NoError(t, CheckLen(OpReadRequest, h, len(seg)-ddp.UntaggedHdrLen))
	rr := ReadRequest(seg[ddp.UntaggedHdrLen:])
	require.Equal(t, uint32(0xaabbccdd), rr.SinkSTag())
	require.Equal(t, uint64(0x2000), rr.SinkTO())
	require.Equal(t, uint32(0x1000), rr.Size())
	require.Equal(t, uint32(0x11223344), rr.SrcSTag())
	require.Equal(t, uint64(0x3000), rr.SrcTO())

	re := ddp.AppendUntagged(nil, true, Ctrl(OpReadRequest), 0, QNReadRequest, 1, 0)
	re = AppendReadRequest(re, rr.SinkSTag(), rr.SinkTO(), rr.Size(), rr.SrcSTag(), rr.SrcTO())
	require.Equal(t, seg, re)
}
