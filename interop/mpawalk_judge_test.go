//go:build interop

package interop

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// The MPA walker (mpawalk_test.go) over a capture of our own traffic: it
// rebuilds both streams whole, finds every FPDU traffic sent, every CRC
// right; and an octet changed in a copy of the stream is found.
func TestMPAWalkJudgesOurTraffic(t *testing.T) {
	for _, rev := range []uint8{1, 2} {
		for _, crc := range []bool{true, false} {
			for _, mk := range []string{"none", "tx", "rx", "both"} {
				t.Run(fmt.Sprintf("rev%d/crc=%v/markers=%s", rev, crc, mk), func(t *testing.T) {
					pcap, want := capturedTraffic(t, rev, crc, mk, false)
					flows, err := readFlows(pcap)
					require.NoError(t, err)
					var init, resp *tcpFlow
					for _, fl := range flows {
						if bytes.HasPrefix(fl.data, []byte("MPA ID Req Frame")) {
							init = fl
						} else {
							resp = fl
						}
					}
					require.Len(t, flows, 2, "one connection")
					require.NotNil(t, init)
					require.NotNil(t, resp)
					for _, fl := range []*tcpFlow{init, resp} {
						require.True(t, fl.syn, "the SYN captured")
						require.Zero(t, fl.holes+fl.differ+fl.cut, "holes, octets resent different, packets cut")
					}
					iw, rw := walkConn(init.data, resp.data)
					t.Logf("initiator: %v; responder: %v", iw, rw)
					for _, w := range []mpaWalk{iw, rw} {
						require.NoError(t, w.err)
						require.Zero(t, w.tail)
						require.Zero(t, w.badCRC)
						require.Equal(t, rev, w.rev)
						require.Equal(t, crc, w.crcFlag)
					}
					require.Equal(t, want, iw.fpdus+rw.fpdus, "FPDUs traffic sent")
					require.Equal(t, mk == "rx" || mk == "both", iw.markerFlag, "the initiator asks for markers")
					require.Equal(t, mk == "tx" || mk == "both", rw.markerFlag, "the responder asks for markers")
					if mk != "none" {
						// A marker changed: the walk says where.
						data := bytes.Clone(resp.data)
						at := rw.start + 2*markerInterval + 3
						if mk == "tx" {
							data, at = bytes.Clone(init.data), iw.start+2*markerInterval+3
						}
						data[at] ^= 0x04
						var bad mpaWalk
						if mk == "tx" {
							bad, _ = walkConn(data, resp.data)
						} else {
							_, bad = walkConn(init.data, data)
						}
						require.Error(t, bad.err)
						require.Contains(t, bad.err.Error(), "marker at octet")
						return
					}

					// One octet changed inside the responder's third FPDU (its
					// DDP header's fifth octet; the third, as with rev 2 the
					// first may be an RTR's Read Response).
					data := bytes.Clone(resp.data)
					at := fpduOffset(t, data, 2) + 2 + 5
					data[at] ^= 0x10
					_, bad := walkConn(init.data, data)
					if !crc {
						require.Zero(t, bad.badCRC, "no CRC: nothing to see")
						return
					}
					require.Equal(t, 1, bad.badCRC, "%v", bad)
					require.Contains(t, bad.bad[0], "FPDU 2 at octet")
					// And a length changed: the walk loses the framing, and says so.
					data = bytes.Clone(resp.data)
					data[fpduOffset(t, data, 2)] ^= 0x40
					_, bad = walkConn(init.data, data)
					require.True(t, bad.err != nil || bad.tail > 0 || bad.badCRC > 0, "%v", bad)
				})
			}
		}
	}
}

// fpduOffset returns where the k-th FPDU of a responder's stream starts.
func fpduOffset(t *testing.T, data []byte, k int) int {
	var w mpaWalk
	off := walkStartup(data, &w)
	require.NoError(t, w.err)
	for range k {
		off += framingLen(data, off)
	}
	return off
}

func framingLen(data []byte, off int) int {
	return int(framing(int(binary.BigEndian.Uint16(data[off:]))))
}

// assemble puts octets in sequence order, counts a hole and octets resent
// with different contents.
func TestTCPFlowAssemble(t *testing.T) {
	var isn uint32 = 0xfffffffe // sequence numbers wrap in the middle
	fl := &tcpFlow{syn: true, isn: isn, segs: []flowSeg{
		{isn + 1, []byte("abc")},
		{isn + 8, []byte("hi")},
		{isn + 4, []byte("deX")},
		{isn + 1, []byte("abd")}, // resent, different
		{isn + 2, []byte("bc")},  // resent, the same
	}}
	fl.assemble()
	require.Equal(t, "abcdeX\x00hi", string(fl.data))
	require.Equal(t, 1, fl.holes, "octet 6")
	require.Equal(t, 1, fl.differ, "octet 2 sent as c and d")

	// A FIN after octets the capture never saw: they count as missing.
	fl = &tcpFlow{syn: true, isn: isn, fin: true, finSeq: isn + 1 + 9, segs: []flowSeg{{isn + 1, []byte("abcdef")}}}
	fl.assemble()
	require.Equal(t, 3, fl.holes, "octets 6 to 8, before the FIN")
}

// siw's CRC errors of CI runs (2026-11-26/27, and the one in
// interop/README.md), all on FPDUs without pad, are each a split copy of
// the CRC siw took itself (own): explainable without the stream. An
// unrelated pair is not.
func TestSiwSplitGivesLoggedErrors(t *testing.T) {
	for _, p := range [][2]uint32{{0xa7ef37e9, 0xe9ef370f}, {0x3bfde4fc, 0xe4fcea3a}, {0x16d6c43b, 0x3bd6c49e}, {0x1756e03f, 0x3f56e07c}} {
		trailer := binary.LittleEndian.AppendUint32(nil, p[1])
		require.Positive(t, siwSplitGives(trailer, p[1], p[0], p[1]), "in %08x own %08x", p[0], p[1])
	}
	require.Zero(t, siwSplitGives(binary.LittleEndian.AppendUint32(nil, 0x9abcdef0), 0x9abcdef0, 0x12345678, 0x9abcdef0))
}

// explainSiwCRC finds the FPDU and split behind an error made as siw
// makes it, with pad octets (then siw's own CRC is wrong too) and without.
func TestExplainSiwCRC(t *testing.T) {
	var w mpaWalk
	data := append([]byte("MPA ID Rep Frame"), 0x40, 1, 0, 0)
	for i, ulpdu := range []int{18, 100, 31, 1440, 29} {
		f := binary.BigEndian.AppendUint16(nil, uint16(ulpdu))
		for j := range ulpdu {
			f = append(f, byte(i*31+j))
		}
		f = append(f, make([]byte, (4-len(f)%4)%4)...)
		data = binary.LittleEndian.AppendUint32(append(data, f...), crc32.Checksum(f, castagnoli))
	}
	walkFPDUs(data, walkStartup(data, &w), true, &w)
	require.NoError(t, w.err)
	require.Equal(t, 5, w.fpdus)
	require.Zero(t, w.badCRC)
	explained := 0
	for k, a := range map[int]int{0: 2, 2: 1, 4: 4, 3: 3} { // pads 0, 3 (2+31), 1 (2+29), 0
		off := fpduOffset(t, data, k)
		n := framingLen(data, off)
		ulpdu := int(binary.BigEndian.Uint16(data[off:]))
		trailer := data[off+2+ulpdu : off+n]
		buf, known := siwSplitCopy(trailer, a)
		pad := len(trailer) - 4
		for i := range buf {
			if !known[i] {
				buf[i] = 0xee // stale
			}
		}
		own := crc32.Update(crc32.Checksum(data[off:off+2+ulpdu], castagnoli), castagnoli, buf[:pad])
		in := binary.LittleEndian.Uint32(buf[pad:])
		if in == own {
			continue // this split happens to leave the CRC whole: no error
		}
		gotK, gotA := explainSiwCRC(data, w.start, in, own)
		require.Equal(t, k, gotK, "FPDU")
		require.Positive(t, gotA)
		explained++
	}
	require.Equal(t, 4, explained, "every split left the CRC siw read wrong")
	k, _ := explainSiwCRC(data, w.start, 0x12345678, 0x9abcdef0)
	require.Equal(t, -1, k)
}

// Two connections between the same ports, one after the other (a SYN with
// a new sequence number): two flows, not one with a 4 GiB hole.
func TestTCPFlowPortsReused(t *testing.T) {
	frame := func(sport, dport uint16, seq uint32, flags byte, payload string) []byte {
		ip := []byte{0x45, 0, 0, 0, 0, 0, 0, 0, 64, 6, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1}
		binary.BigEndian.PutUint16(ip[2:], uint16(20+20+len(payload)))
		tcp := make([]byte, 20)
		binary.BigEndian.PutUint16(tcp, sport)
		binary.BigEndian.PutUint16(tcp[2:], dport)
		binary.BigEndian.PutUint32(tcp[4:], seq)
		tcp[12], tcp[13] = 5<<4, flags
		return append(append(append(make([]byte, 14), ip...), tcp...), payload...)
	}
	flows, cur := map[flowKey]*tcpFlow{}, map[[2]netip.AddrPort]*tcpFlow{}
	for _, f := range [][]byte{
		frame(1000, 2000, 100, 0x02, ""), frame(1000, 2000, 101, 0x10, "abc"), frame(1000, 2000, 104, 0x11, ""),
		frame(1000, 2000, 4000000000, 0x02, ""), frame(1000, 2000, 4000000000, 0x02, ""), // the SYN resent
		frame(1000, 2000, 4000000001, 0x10, "xyz"), frame(1000, 2000, 4000000004, 0x04, ""),
	} {
		addTCP(flows, cur, 1, f, false)
	}
	require.Len(t, flows, 2)
	for gen, want := range []string{"abc", "xyz"} {
		fl := flows[flowKey{netip.MustParseAddrPort("127.0.0.1:1000"), netip.MustParseAddrPort("127.0.0.1:2000"), gen}]
		require.NotNil(t, fl, "connection %d", gen)
		fl.assemble()
		require.Equal(t, want, string(fl.data))
		require.Zero(t, fl.holes)
		require.Equal(t, gen == 0, fl.fin)
		require.Equal(t, gen == 1, fl.rst)
	}
}
