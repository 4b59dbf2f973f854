package rdmap

import (
	"bytes"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
)

// FuzzReadRequest: no panic, and an accepted header re-encodes to its octets.
func FuzzReadRequest(f *testing.F) {
	f.Add(AppendReadRequest(nil, 0x01020304, 0x0102030405060708, 0x11121314, 0x21222324, 0x3132333435363738))
	f.Add(AppendReadRequest(nil, 0xaabbccdd, 0x2000, 0x1000, 0x11223344, 0x3000))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReadRequest(b)
		if err != nil {
			return
		}
		re := AppendReadRequest(nil, r.SinkSTag(), r.SinkTO(), r.Size(), r.SrcSTag(), r.SrcTO())
		if !bytes.Equal(re, b[:ReadRequestLen]) {
			t.Fatalf("re-encoded %x, want %x", re, b[:ReadRequestLen])
		}
		_ = CheckReadSource(r.SrcTO(), r.Size(), r.SinkTO(), uint64(r.SrcSTag()))
	})
}

// FuzzAtomic covers the Atomic Request and Response and the Immediate Data
// headers. The Atomic Request's 28 reserved bits re-encode as zero (RFC 7306
// section 5.2.1: "set to zero on transmit, ignored on receive").
func FuzzAtomic(f *testing.F) {
	f.Add(AppendAtomicRequest(nil, AtomicCmpSwap, 0x41424344, 0x01020304, 0x0102030405060708, 1, 2, 3, 4))
	f.Add(AppendAtomicRequest(nil, AtomicFetchAdd, 1, 2, 8, 1, 0, 0, ^uint64(0)))
	f.Add(AppendAtomicResponse(nil, 0x41424344, 0x0102030405060708))
	f.Add(AppendImmediate(nil, 0x0102030405060708))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := ParseAtomicRequest(b); err == nil {
			re := AppendAtomicRequest(nil, r.Opcode(), r.ReqID(), r.STag(), r.TO(), r.AddSwap(), r.AddSwapMask(), r.Compare(), r.CompareMask())
			want := append([]byte{0, 0, 0, b[3] & 0x0f}, b[4:AtomicRequestLen]...)
			if !bytes.Equal(re, want) {
				t.Fatalf("request re-encoded %x, want %x", re, want)
			}
			_ = CheckAtomicRequest(r, r.TO())
		}
		if r, err := ParseAtomicResponse(b); err == nil {
			if re := AppendAtomicResponse(nil, r.ReqID(), r.Original()); !bytes.Equal(re, b[:AtomicResponseLen]) {
				t.Fatalf("response re-encoded %x, want %x", re, b[:AtomicResponseLen])
			}
		}
		if h, err := ParseImmediate(b); err == nil {
			if re := AppendImmediate(nil, h.Data()); !bytes.Equal(re, b) {
				t.Fatalf("immediate re-encoded %x, want %x", re, b)
			}
		}
	})
}

// FuzzTerminate: no panic; an accepted Terminate re-encodes (always in the RFC
// form) to something that parses back to the same fields, and, when it was
// already in the RFC form, to its own octets up to the reserved bits.
func FuzzTerminate(f *testing.F) {
	seeds := []struct {
		err error
		seg []byte
	}{
		{ddp.ErrInvalidSTag, writeSeg},
		{ErrInvalidSTag, readReqSeg},
		{ErrUnexpectedOpcode, badOpSeg},
		{mpa.ErrCRC, nil},
		{ddp.ErrMSNRange, readReqSeg},
	}
	for _, s := range seeds {
		term, _ := NewTerminate(s.err, s.seg, len(s.seg))
		f.Add(term.Append(nil))
	}
	f.Add(unhexS("11 00 03 00 00 10 c1 40 de ad be 00 00 00 00 00 00 00 10 00"))
	f.Add(unhexS("02 02 00 00"))
	f.Add(append(unhexS("10 00 07 00 00 13"), ddp.AppendUntagged(nil, true, 0x44, 1, 0, 1, 0)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		term, err := ParseTerminate(b)
		if err != nil {
			return
		}
		n := term.Len()
		if n > len(b) {
			t.Fatalf("Len %d > input %d", n, len(b))
		}
		re := term.Append(nil)
		if len(re) != n {
			t.Fatalf("Append wrote %d, Len %d", len(re), n)
		}
		back, err := ParseTerminate(re)
		if err != nil {
			t.Fatalf("re-encoded %x does not parse: %v", re, err)
		}
		want := term
		want.SiwForm = false
		if !equalTerm(back, want) {
			t.Fatalf("re-parsed %+v, want %+v", back, want)
		}
		if !term.SiwForm {
			orig := append([]byte(nil), b[:n]...)
			orig[2] &= termM | termD | termR
			orig[3] = 0
			if !bytes.Equal(re, orig) {
				t.Fatalf("re-encoded %x, want %x", re, orig)
			}
		}
		_ = term.Cause().String()
		_ = (&RemoteError{term}).Error()
	})
}

func equalTerm(a, b Terminate) bool {
	return a.Layer == b.Layer && a.EType == b.EType && a.Code == b.Code && a.M == b.M && a.D == b.D &&
		a.R == b.R && a.SegLen == b.SegLen && bytes.Equal(a.DDPHdr, b.DDPHdr) &&
		bytes.Equal(a.RDMAPHdr, b.RDMAPHdr) && a.SiwForm == b.SiwForm
}

// FuzzNewTerminate: whatever the offending segment, building a Terminate does
// not panic and the message parses back to it.
func FuzzNewTerminate(f *testing.F) {
	f.Add(writeSeg, uint8(0))
	f.Add(readReqSeg, uint8(1))
	f.Add(badOpSeg, uint8(2))
	f.Add([]byte{}, uint8(3))
	errs := []error{ddp.ErrInvalidSTag, ErrInvalidSTag, ErrUnexpectedOpcode, mpa.ErrCRC, ddp.ErrInvalidQN, ErrAccessRights}
	f.Fuzz(func(t *testing.T, seg []byte, which uint8) {
		term, ok := NewTerminate(errs[int(which)%len(errs)], seg, len(seg))
		if !ok {
			t.Fatal("not built")
		}
		msg := AppendTerminateMessage(nil, 1, term)
		back, err := ParseTerminate(msg[ddp.UntaggedHdrLen:])
		if err != nil {
			t.Fatalf("%x: %v", msg, err)
		}
		if !equalTerm(back, term) {
			t.Fatalf("parsed %+v, built %+v", back, term)
		}
	})
}
