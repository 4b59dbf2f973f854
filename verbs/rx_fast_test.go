package verbs

import (
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/rdmap"
)

// taggedFast accepts exactly the pairs of control octets that ddp.Parse
// and rdmap.CheckCtrl accept as an RDMA Write or a Read Response, with or
// without the RFC 7306 extensions, and those are all the tagged messages
// there are: every one of the 65536 pairs is compared.
func TestTaggedFastMatchesChecks(t *testing.T) {
	hdr := make([]byte, ddp.TaggedHdrLen)
	accepted := 0
	for c0 := range 256 {
		for c1 := range 256 {
			op, fast := taggedFast(byte(c0), byte(c1))
			hdr[0], hdr[1] = byte(c0), byte(c1)
			for _, ext := range []bool{false, true} {
				_, tagged, err := ddp.Parse(hdr)
				var gop rdmap.Opcode
				if err == nil && tagged {
					gop, err = rdmap.CheckCtrl(true, byte(c1), ext)
				}
				ok := err == nil && tagged
				if ok && gop != rdmap.OpWrite && gop != rdmap.OpReadResponse {
					t.Fatalf("%#02x %#02x: the checks accept tagged %v, which taggedFast does not know", c0, c1, gop)
				}
				if fast != ok || fast && op != gop {
					t.Fatalf("%#02x %#02x ext %v: taggedFast %v %v, the checks %v %v (%v)", c0, c1, ext, op, fast, gop, ok, err)
				}
			}
			if fast {
				accepted++
			}
		}
	}
	// L and the four reserved DDP bits, the two reserved RDMAP bits, two
	// opcodes.
	if want := 2 * 16 * 4 * 2; accepted != want {
		t.Fatalf("%d pairs accepted, want %d", accepted, want)
	}
}

// sendFast accepts exactly the untagged headers that ddp.Parse,
// rdmap.CheckCtrl and rdmap.CheckQN accept as one of the four Sends, with
// or without the RFC 7306 extensions: every pair of control octets, on
// every queue number that matters.
func TestSendFastMatchesChecks(t *testing.T) {
	hdr := make([]byte, ddp.UntaggedHdrLen)
	accepted := 0
	for c0 := range 256 {
		for c1 := range 256 {
			for _, qn := range []uint32{0, 1, 2, 3, 4, 0x100, 0xffffffff} {
				op, fast := sendFast(byte(c0), byte(c1), qn)
				hdr[0], hdr[1] = byte(c0), byte(c1)
				for _, ext := range []bool{false, true} {
					_, tagged, err := ddp.Parse(hdr)
					var gop rdmap.Opcode
					if err == nil && !tagged {
						gop, err = rdmap.CheckCtrl(false, byte(c1), ext)
					}
					if err == nil && !tagged {
						err = rdmap.CheckQN(gop, qn, ext)
					}
					ok := err == nil && !tagged && gop >= rdmap.OpSend && gop <= rdmap.OpSendSEInvalidate
					if fast != ok || fast && op != gop {
						t.Fatalf("%#02x %#02x QN %d ext %v: sendFast %v %v, the checks %v %v (%v)", c0, c1, qn, ext, op, fast, gop, ok, err)
					}
				}
				if fast {
					accepted++
				}
			}
		}
	}
	// L and the four reserved DDP bits, the two reserved RDMAP bits, four
	// opcodes, one queue.
	if want := 2 * 16 * 4 * 4; accepted != want {
		t.Fatalf("%d headers accepted, want %d", accepted, want)
	}
}
