package rdmap

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Distinctive values: a byte-order mistake shows at a glance.
const (
	sinkSTag = 0x01020304
	sinkTO   = 0x0102030405060708
	rdSize   = 0x11121314
	srcSTag  = 0x21222324
	srcTO    = 0x3132333435363738
)

var goldenReadRequest = []byte{
	0x01, 0x02, 0x03, 0x04, // SinkSTag
	0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // SinkTO
	0x11, 0x12, 0x13, 0x14, // RDMARDSZ
	0x21, 0x22, 0x23, 0x24, // SrcSTag
	0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, // SrcTO
}

func TestReadRequestGolden(t *testing.T) {
	require.Equal(t, goldenReadRequest, AppendReadRequest(nil, sinkSTag, sinkTO, rdSize, srcSTag, srcTO))
	rr := ReadRequest(goldenReadRequest)
	require.Equal(t, uint32(sinkSTag), rr.SinkSTag())
	require.Equal(t, uint64(sinkTO), rr.SinkTO())
	require.Equal(t, uint32(rdSize), rr.Size())
	require.Equal(t, uint32(srcSTag), rr.SrcSTag())
	require.Equal(t, uint64(srcTO), rr.SrcTO())
}

var goldenAtomicRequest = []byte{
	0x00, 0x00, 0x00, 0x02, // reserved, AOpCode CmpSwap
	0x41, 0x42, 0x43, 0x44, // Request Identifier
	0x01, 0x02, 0x03, 0x04, // Remote STag
	0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // Remote TO
	0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, // Swap Data
	0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, // Swap Mask
	0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, // Compare Data
	0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, // Compare Mask
}

func TestAtomicRequestGolden(t *testing.T) {
	b := AppendAtomicRequest(nil, AtomicCmpSwap, 0x41424344, 0x01020304, 0x0102030405060708,
		0x5152535455565758, 0x6162636465666768, 0x7172737475767778, 0x8182838485868788)
	require.Equal(t, goldenAtomicRequest, b)
	require.Len(t, b, AtomicRequestLen)

	r := AtomicRequest(b)
	require.Equal(t, AtomicCmpSwap, r.Opcode())
	require.Equal(t, uint32(0x41424344), r.ReqID())
	require.Equal(t, uint32(0x01020304), r.STag())
	require.Equal(t, uint64(0x0102030405060708), r.TO())
	require.Equal(t, uint64(0x5152535455565758), r.AddSwap())
	require.Equal(t, uint64(0x6162636465666768), r.AddSwapMask())
	require.Equal(t, uint64(0x7172737475767778), r.Compare())
	require.Equal(t, uint64(0x8182838485868788), r.CompareMask())

	// The 28 reserved bits are ignored on receive (RFC 7306 section 5.2.1).
	odd := append([]byte(nil), b...)
	odd[0], odd[3] = 0xff, 0xf0
	require.Equal(t, AtomicFetchAdd, AtomicRequest(odd).Opcode())
}

func TestAtomicResponseGolden(t *testing.T) {
	want := []byte{0x41, 0x42, 0x43, 0x44, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}
	b := AppendAtomicResponse(nil, 0x41424344, 0x0102030405060708)
	require.Equal(t, want, b)
	r := AtomicResponse(b)
	require.Equal(t, uint32(0x41424344), r.ReqID())
	require.Equal(t, uint64(0x0102030405060708), r.Original())
}

func TestAtomicOpcodes(t *testing.T) {
	// RFC 7306 section 10.1: 0x0 FetchAdd, 0x1 Reserved, 0x2 CmpSwap.
	require.Equal(t, "FetchAdd", AtomicFetchAdd.String())
	require.Equal(t, "CmpSwap", AtomicCmpSwap.String())
	require.Equal(t, "AtomicOpcode(1)", AtomicOpcode(1).String())

	req := func(op AtomicOpcode) AtomicRequest {
		return AtomicRequest(AppendAtomicRequest(nil, op, 1, 2, 0x1000, 1, 0, 0, ^uint64(0)))
	}
	require.NoError(t, CheckAtomicRequest(req(AtomicFetchAdd), 0x1000))
	require.NoError(t, CheckAtomicRequest(req(AtomicCmpSwap), 0x1008))
	err := CheckAtomicRequest(req(1), 0x1000)
	require.ErrorIs(t, err, ErrUnexpectedOpcode)
	// RFC 7306 section 8.2: misaligned target.
	err = CheckAtomicRequest(req(AtomicFetchAdd), 0x1004)
	require.ErrorIs(t, err, ErrCatastrophicStream)
	require.Equal(t, Cause{LayerRDMAP, ETypeRemoteOperation, CodeCatastrophicStream}, CauseOf(err))
}

func TestImmediateGolden(t *testing.T) {
	b := AppendImmediate(nil, 0x0102030405060708)
	require.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8}, b)
	require.Equal(t, uint64(0x0102030405060708), Immediate(b).Data())
}

func TestRoundTrips(t *testing.T) {
	for _, v := range []uint64{0, 1, 0x7f, 0xffffffff, 0x8000000000000000, ^uint64(0)} {
		w := uint32(v)
		rr := ReadRequest(AppendReadRequest(nil, w, v, w^1, w^2, ^v))
		require.Equal(t, []uint64{uint64(w), v, uint64(w ^ 1), uint64(w ^ 2), ^v},
			[]uint64{uint64(rr.SinkSTag()), rr.SinkTO(), uint64(rr.Size()), uint64(rr.SrcSTag()), rr.SrcTO()})

		ar := AtomicRequest(AppendAtomicRequest(nil, AtomicFetchAdd, w, ^w, v, ^v, v^1, v^2, v^3))
		require.Equal(t, []uint64{uint64(w), uint64(^w), v, ^v, v ^ 1, v ^ 2, v ^ 3},
			[]uint64{uint64(ar.ReqID()), uint64(ar.STag()), ar.TO(), ar.AddSwap(), ar.AddSwapMask(), ar.Compare(), ar.CompareMask()})

		as := AtomicResponse(AppendAtomicResponse(nil, w, v))
		require.Equal(t, w, as.ReqID())
		require.Equal(t, v, as.Original())

		require.Equal(t, v, Immediate(AppendImmediate(nil, v)).Data())
	}
}

func TestHeadersZeroAllocs(t *testing.T) {
	buf := make([]byte, 0, 128)
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendReadRequest(buf[:0], sinkSTag, sinkTO, rdSize, srcSTag, srcTO)
		b = AppendAtomicRequest(b, AtomicCmpSwap, 1, 2, 3, 4, 5, 6, 7)
		b = AppendAtomicResponse(b, 1, 2)
		b = AppendImmediate(b, 3)
		rr := ReadRequest(b)
		ar := AtomicRequest(b[ReadRequestLen:])
		as := AtomicResponse(b[ReadRequestLen+AtomicRequestLen:])
		im := Immediate(b[len(b)-8:])
		_ = rr.SrcTO() + ar.CompareMask() + as.Original() + im.Data()
		if CheckAtomicRequest(ar, 0x1000) != nil {
			panic("check")
		}
	})
	require.Zero(t, allocs)
}
