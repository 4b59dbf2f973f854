package rdmap

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
)

// The fuzz targets call what a queue pair of package verbs calls on the
// segments it receives (check.go lists them, in its order): FuzzSegment
// drives whole segments through them; the others take each header apart.

// lenOK is CheckLen's rule for a message of op that is nothing but its
// fixed-length header of want octets: one segment, at MO 0, with exactly the
// header (the errors differ, see CheckLen).
func lenOK(h ddp.Untagged, n, want int) bool { return h.Last() && h.MO() == 0 && n == want }

// FuzzReadRequest: CheckLen accepts a Read Request segment exactly when it is
// one whole header, and an accepted header re-encodes to its octets.
func FuzzReadRequest(f *testing.F) {
	f.Add(AppendReadRequest(nil, 0x01020304, 0x0102030405060708, 0x11121314, 0x21222324, 0x3132333435363738), true, uint32(0))
	f.Add(AppendReadRequest(nil, 0xaabbccdd, 0x2000, 0x1000, 0x11223344, 0x3000), false, uint32(0))
	f.Add(AppendReadRequest(nil, 0xaabbccdd, 0x2000, 0x1000, 0x11223344, 0x3000), true, uint32(28))
	f.Add([]byte{1, 2, 3}, true, uint32(0))
	f.Add(make([]byte, ReadRequestLen+1), true, uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, last bool, mo uint32) {
		h := untagged(OpReadRequest, last, mo)
		err := CheckLen(OpReadRequest, h, len(b))
		if ok := lenOK(h, len(b), ReadRequestLen); ok != (err == nil) {
			t.Fatalf("CheckLen of %d octets at MO %d, L %t: %v", len(b), mo, last, err)
		}
		if err != nil {
			if !CauseOf(err).Valid() {
				t.Fatalf("%v: cause %v", err, CauseOf(err))
			}
			return
		}
		r := ReadRequest(b)
		re := AppendReadRequest(nil, r.SinkSTag(), r.SinkTO(), r.Size(), r.SrcSTag(), r.SrcTO())
		if !bytes.Equal(re, b) {
			t.Fatalf("re-encoded %x, want %x", re, b)
		}
	})
}

// FuzzAtomic does the same for the Atomic Request and Response and the
// Immediate Data headers (which picks one), and runs CheckAtomicRequest on an
// accepted Atomic Request. Its 28 reserved bits re-encode as zero (RFC 7306
// section 5.2.1: "set to zero on transmit, ignored on receive").
func FuzzAtomic(f *testing.F) {
	f.Add(AppendAtomicRequest(nil, AtomicCmpSwap, 0x41424344, 0x01020304, 0x0102030405060708, 1, 2, 3, 4), uint8(0), true, uint32(0))
	f.Add(AppendAtomicRequest(nil, AtomicFetchAdd, 1, 2, 8, 1, 0, 0, ^uint64(0)), uint8(0), true, uint32(0))
	f.Add(AppendAtomicRequest(nil, 1, 1, 2, 8, 1, 0, 0, ^uint64(0)), uint8(0), true, uint32(0))
	f.Add(AppendAtomicResponse(nil, 0x41424344, 0x0102030405060708), uint8(1), true, uint32(0))
	f.Add(AppendAtomicResponse(nil, 0x41424344, 0x0102030405060708), uint8(1), false, uint32(0))
	f.Add(AppendImmediate(nil, 0x0102030405060708), uint8(2), true, uint32(0))
	f.Add(AppendImmediate(nil, 0x0102030405060708), uint8(3), true, uint32(8))
	f.Add([]byte("hello"), uint8(4), false, uint32(8))
	f.Fuzz(func(t *testing.T, b []byte, which uint8, last bool, mo uint32) {
		op := []Opcode{OpAtomicRequest, OpAtomicResponse, OpImmediateData, OpImmediateDataSE, OpSend}[which%5]
		h := untagged(op, last, mo)
		err := CheckLen(op, h, len(b))
		if op == OpSend {
			if err != nil {
				t.Fatalf("CheckLen of a Send: %v", err)
			}
			return
		}
		if ok := lenOK(h, len(b), op.Info().HdrLen-ddp.UntaggedHdrLen); ok != (err == nil) {
			t.Fatalf("CheckLen of %v, %d octets at MO %d, L %t: %v", op, len(b), mo, last, err)
		}
		if err != nil {
			if !CauseOf(err).Valid() {
				t.Fatalf("%v: cause %v", err, CauseOf(err))
			}
			return
		}
		var re, want []byte
		switch op {
		case OpAtomicRequest:
			r := AtomicRequest(b)
			re = AppendAtomicRequest(nil, r.Opcode(), r.ReqID(), r.STag(), r.TO(), r.AddSwap(), r.AddSwapMask(), r.Compare(), r.CompareMask())
			want = append([]byte{0, 0, 0, b[3] & 0x0f}, b[4:]...)
			err := CheckAtomicRequest(r, r.TO())
			if ok := (r.Opcode() == AtomicFetchAdd || r.Opcode() == AtomicCmpSwap) && r.TO()%8 == 0; ok != (err == nil) {
				t.Fatalf("CheckAtomicRequest(%v at %#x): %v", r.Opcode(), r.TO(), err)
			}
		case OpAtomicResponse:
			r := AtomicResponse(b)
			re, want = AppendAtomicResponse(nil, r.ReqID(), r.Original()), b
		default:
			re, want = AppendImmediate(nil, Immediate(b).Data()), b
		}
		if !bytes.Equal(re, want) {
			t.Fatalf("%v re-encoded %x, want %x", op, re, want)
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
		// What a QP does with a Terminate it received: keep a copy that
		// shares nothing with its read buffer, whose cause is the peer's.
		c := term.Clone()
		if !equalTerm(c, term) {
			t.Fatalf("Clone %+v, want %+v", c, term)
		}
		if len(c.DDPHdr) > 0 && &c.DDPHdr[0] == &term.DDPHdr[0] || len(c.RDMAPHdr) > 0 && &c.RDMAPHdr[0] == &term.RDMAPHdr[0] {
			t.Fatal("Clone shares memory with the parsed octets")
		}
		if got := CauseOf(fmt.Errorf("qp: %w", &RemoteError{c})); got != term.Cause() {
			t.Fatalf("CauseOf a RemoteError: %v, want %v", got, term.Cause())
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
	f.Add(writeSeg, uint8(6))
	remote := &RemoteError{Terminate{Layer: LayerDDP, EType: 1}}
	errs := []error{ddp.ErrInvalidSTag, ErrInvalidSTag, ErrUnexpectedOpcode, mpa.ErrCRC, ddp.ErrInvalidQN, ErrAccessRights, remote}
	f.Fuzz(func(t *testing.T, seg []byte, which uint8) {
		err := errs[int(which)%len(errs)]
		term, ok := NewTerminate(err, seg, len(seg))
		if err == remote {
			if ok {
				t.Fatalf("answered the peer's Terminate with %+v", term)
			}
			return
		}
		if !ok {
			t.Fatal("not built")
		}
		msg := term.Append(AppendTerminateDDP(nil))
		back, err := ParseTerminate(msg[ddp.UntaggedHdrLen:])
		if err != nil {
			t.Fatalf("%x: %v", msg, err)
		}
		if !equalTerm(back, term) {
			t.Fatalf("parsed %+v, built %+v", back, term)
		}
	})
}

// FuzzSegment runs a received DDP segment through the checks a QP makes on
// it, in the QP's order (check.go), with the QP's state as further inputs: ext
// says whether RFC 7306 is on, next is the expected MSN of the segment's
// queue, off the octets of the message (or Read) under way, size its
// receive buffer (or Read) length, and sel sets the rest (bit 0: the Read
// Response's sink STag differs from the segment's, bit 1: its TO does, bit 2:
// no buffer is posted). Nothing may panic, an accepted header must re-encode
// to its octets, and an error must be one whose Terminate (NewTerminate)
// reports a cause the RFCs define and parses back to itself.
func FuzzSegment(f *testing.F) {
	un := func(op Opcode, last bool, qn, msn, mo uint32, rest ...byte) []byte {
		return append(ddp.AppendUntagged(nil, last, Ctrl(op), 0, qn, msn, mo), rest...)
	}
	tg := func(op Opcode, last bool, stag uint32, to uint64, rest ...byte) []byte {
		return append(ddp.AppendTagged(nil, last, Ctrl(op), stag, to), rest...)
	}
	rr := AppendReadRequest(nil, 0x01020304, 0x1000, 16, 0x21222324, 0x2000)
	ar := AppendAtomicRequest(nil, AtomicFetchAdd, 1, 2, 0x1000, 1, 0, 0, ^uint64(0))
	term, _ := NewTerminate(ErrInvalidSTag, readReqSeg, len(readReqSeg))
	seeds := []struct {
		seg       []byte
		ext       bool
		next      uint32
		sel       uint8
		size, off uint32
	}{
		{nil, false, 1, 0, 0, 0},
		{[]byte{0x43}, false, 1, 0, 0, 0},
		{[]byte{0x42, 0x43, 0, 0}, false, 1, 0, 0, 0},
		{tg(OpWrite, true, 0x1234, 0x1000, []byte("written!")...), false, 1, 0, 0, 0},
		{append([]byte{0xc3}, tg(OpWrite, true, 0x1234, 0x1000)[1:]...), false, 1, 0, 0, 0},
		{append([]byte{0xc1, 0x80}, tg(OpWrite, true, 0x1234, 0x1000)[2:]...), false, 1, 0, 0, 0},
		{tg(OpSend, true, 0x1234, 0x1000), false, 1, 0, 0, 0},
		{tg(Opcode(12), true, 0x1234, 0x1000), false, 1, 0, 0, 0},
		{tg(OpReadResponse, true, 0x1234, 0x1000, []byte("read")...), false, 1, 0, 4, 0},
		{tg(OpReadResponse, false, 0x1234, 0x1004, []byte("read")...), false, 1, 0, 12, 4},
		{tg(OpReadResponse, true, 0x1234, 0x1000, []byte("read")...), false, 1, 1, 4, 0},
		{tg(OpReadResponse, true, 0x1234, 0x1000, []byte("read")...), false, 1, 2, 4, 0},
		{tg(OpReadResponse, true, 0x1234, 0x1000, []byte("read")...), false, 1, 0, 3, 0},
		{tg(OpReadResponse, true, 0x1234, 0x1000, []byte("read")...), false, 1, 0, 12, 0},
		{tg(OpReadResponse, true, 1, 0), false, 1, 3, 0, 0},
		{un(OpSend, true, QNSend, 1, 0, []byte("hello")...), false, 1, 0, 64, 0},
		{un(OpSend, false, QNSend, 1, 0, []byte("hello")...), false, 1, 4, 64, 0},
		{un(OpSendSE, true, QNSend, 2, 5, []byte("hello")...), false, 2, 0, 8, 5},
		{un(OpSendInvalidate, true, QNSend, 1, 0, []byte("hello")...), false, 2, 0, 64, 0},
		{un(OpSendSEInvalidate, true, QNSend, 1, 3, []byte("hello")...), false, 1, 0, 64, 0},
		{un(OpSend, true, 5, 1, 0), false, 1, 0, 64, 0},
		{un(OpSend, true, QNAtomicResponse, 1, 0), true, 1, 0, 64, 0},
		{un(OpReadRequest, true, QNReadRequest, 1, 0, rr...), false, 1, 0, 0, 0},
		{un(OpReadRequest, true, QNReadRequest, 1, 0, rr...), false, 1, 4, 0, 0},
		{un(OpReadRequest, true, QNReadRequest, 1, 0, rr[:20]...), false, 1, 0, 0, 0},
		{un(OpReadRequest, true, QNReadRequest, 1, 0, append(rr, 0)...), false, 1, 0, 0, 0},
		{un(OpReadRequest, false, QNReadRequest, 1, 0, rr...), false, 1, 0, 0, 0},
		{un(OpReadRequest, true, QNReadRequest, 1, 4, rr...), false, 1, 0, 0, 0},
		{un(OpReadRequest, true, QNSend, 1, 0, rr...), false, 1, 0, 0, 0},
		{un(OpReadRequest, true, QNReadRequest, 0, 0, rr...), false, 1, 0, 0, 0},
		{un(OpAtomicRequest, true, QNReadRequest, 1, 0, ar...), true, 1, 0, 0, 0},
		{un(OpAtomicRequest, true, QNReadRequest, 1, 0, ar...), false, 1, 0, 0, 0},
		{un(OpAtomicResponse, true, QNAtomicResponse, 1, 0, AppendAtomicResponse(nil, 1, 42)...), true, 1, 0, 0, 0},
		{un(OpAtomicResponse, true, QNAtomicResponse, 1, 0, AppendAtomicResponse(nil, 1, 42)[:8]...), true, 1, 0, 0, 0},
		{un(OpImmediateData, true, QNSend, 1, 0, AppendImmediate(nil, 7)...), true, 1, 0, 8, 0},
		{un(OpImmediateDataSE, true, QNSend, 1, 0, 1, 2, 3), true, 1, 0, 8, 0},
		{term.Append(AppendTerminateDDP(nil)), false, 1, 0, 0, 0},
		{un(OpTerminate, true, QNTerminate, 1, 0, 0x01, 0x00, 0x20, 0x00), false, 1, 0, 0, 0},
		{un(OpTerminate, true, QNSend, 1, 0, 0x20, 0x02, 0x00, 0x00), false, 1, 0, 0, 0},
	}
	for _, s := range seeds {
		f.Add(s.seg, s.ext, s.next, s.sel, s.size, s.off)
	}
	f.Fuzz(func(t *testing.T, seg []byte, ext bool, next uint32, sel uint8, size, off uint32) {
		err := checkSegment(t, seg, ext, next, sel, size, off)
		if err == nil {
			return
		}
		c := CauseOf(err)
		if !c.Valid() || c == CauseOf(errors.New("not ours")) {
			t.Fatalf("%v: cause %v", err, c)
		}
		_ = err.Error()
		term, ok := NewTerminate(err, seg, len(seg))
		if !ok || term.Cause() != c {
			t.Fatalf("%v: Terminate %+v", err, term)
		}
		back, perr := ParseTerminate(term.Append(nil))
		if perr != nil || !equalTerm(back, term) {
			t.Fatalf("%v: Terminate %+v parsed back as %+v, %v", err, term, back, perr)
		}
	})
}

// checkSegment is what a QP checks on the segment seg, in its order, with the
// state FuzzSegment describes; it stops at the first error, as a QP does.
func checkSegment(t *testing.T, seg []byte, ext bool, next uint32, sel uint8, size, off uint32) error {
	// The QP reads the first octet, then as much of the header as its T
	// flag calls for.
	k := min(len(seg), 1)
	if k > 0 {
		k = min(len(seg), ddp.HdrLen(seg[0]&ddp.FlagTagged != 0))
	}
	n, tagged, err := ddp.Parse(seg[:k])
	if err != nil {
		return err
	}
	op, err := CheckCtrl(tagged, seg[1], ext)
	if err != nil {
		return err
	}
	plen := len(seg) - n
	if tagged {
		h := ddp.Tagged(seg[:n])
		if op == OpWrite {
			return nil // the rest is memory: the QP's
		}
		stag, to := h.STag(), h.TO()-uint64(off)
		if sel&1 != 0 {
			stag ^= 0x5a
		}
		if sel&2 != 0 {
			to += 8
		}
		return CheckReadResponse(h, uint32(plen), stag, to, size, off)
	}
	h := ddp.Untagged(seg[:n])
	if err := CheckQN(op, h.QN(), ext); err != nil {
		return err
	}
	if op == OpTerminate {
		// Never answered: a QP that cannot parse one takes it as a local
		// catastrophic error of the peer's.
		term, err := ParseTerminate(seg[n:])
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("ParseTerminate: %v", err)
		}
		if err == nil && term.Len() > plen {
			t.Fatalf("Terminate of %d octets in %d", term.Len(), plen)
		}
		return nil
	}
	if err := ddp.CheckMSN(h.MSN(), next); err != nil {
		return err
	}
	posted := sel&4 == 0
	switch op {
	case OpSend, OpSendInvalidate, OpSendSE, OpSendSEInvalidate:
		if err := ddp.CheckMO(h.MO(), off); err != nil {
			return err
		}
		if err := ddp.CheckBuffer(h.QN(), h.MSN(), posted); err != nil {
			return err
		}
		return ddp.CheckMsgLen(h.MO(), uint32(plen), size)
	}
	if err := CheckLen(op, h, plen); err != nil {
		return err
	}
	b := seg[n:]
	if want := op.Info().HdrLen - ddp.UntaggedHdrLen; len(b) != want {
		t.Fatalf("CheckLen accepted a %v of %d octets, want %d", op, len(b), want)
	}
	switch op {
	case OpReadRequest, OpAtomicRequest:
		if err := ddp.CheckBuffer(h.QN(), h.MSN(), posted); err != nil {
			return err
		}
		if op == OpAtomicRequest {
			r := AtomicRequest(b)
			return CheckAtomicRequest(r, r.TO())
		}
		r := ReadRequest(b)
		if re := AppendReadRequest(nil, r.SinkSTag(), r.SinkTO(), r.Size(), r.SrcSTag(), r.SrcTO()); !bytes.Equal(re, b) {
			t.Fatalf("Read Request re-encoded %x, want %x", re, b)
		}
	case OpAtomicResponse:
		r := AtomicResponse(b)
		if re := AppendAtomicResponse(nil, r.ReqID(), r.Original()); !bytes.Equal(re, b) {
			t.Fatalf("Atomic Response re-encoded %x, want %x", re, b)
		}
	default: // Immediate Data
		if re := AppendImmediate(nil, Immediate(b).Data()); !bytes.Equal(re, b) {
			t.Fatalf("Immediate Data re-encoded %x, want %x", re, b)
		}
		return ddp.CheckBuffer(h.QN(), h.MSN(), posted)
	}
	return nil
}
