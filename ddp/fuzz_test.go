package ddp

import (
	"bytes"
	"errors"
	"testing"
)

// The fuzz targets call what a queue pair of package verbs calls on every
// segment it receives: HdrLen and Parse on the octets it read, the views'
// getters, and for an untagged segment the checks of untagged_check.go, with
// the queue state as further inputs.

// FuzzTagged: Parse never panics, a header it accepts re-encodes to the same
// octets, apart from the reserved control bits, which RFC 5041 section 4.1
// has the receiver ignore and the sender zero, and a receiver reading the
// segment piece by piece (the first octet, then up to HdrLen) gets the same
// answer as one that has it whole.
func FuzzTagged(f *testing.F) {
	f.Add(AppendTagged(nil, true, 0x40, 0x01020304, 0x0102030405060708))
	f.Add(AppendTagged(nil, false, 0x42, 0, 0))
	f.Add(append(AppendTagged(nil, true, 0x40, 0x1234, 0x1000), "written!"...))
	f.Add([]byte{0xc2, 0x40})
	f.Add([]byte{0xc1, 0x40, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, tagged, err := parseLikeAQP(t, b)
		if err != nil || !tagged {
			return
		}
		h := Tagged(b[:n])
		re := AppendTagged(nil, h.Last(), h.ULPCtrl(), h.STag(), h.TO())
		want := append([]byte(nil), b[:n]...)
		want[0] &^= ReservedMask
		if !bytes.Equal(re, want) {
			t.Fatalf("re-encoded %x, want %x", re, want)
		}
		if h.Version() != Version {
			t.Fatalf("accepted DV %d", h.Version())
		}
	})
}

// FuzzUntagged is FuzzTagged for the untagged header, followed by the
// untagged checks against a queue state of nq queues, next expected MSN,
// want octets of the message so far, a buffer of bufLen octets and whether
// one is posted: each check must pass exactly when its rule holds and fail
// with its own RFC 5041 section 7.2 code otherwise.
func FuzzUntagged(f *testing.F) {
	f.Add(AppendUntagged(nil, false, 0x4a, 0x41424344, 0x11121314, 0x21222324, 0x31323334), uint32(3), uint32(1), uint32(0), uint32(64), true)
	f.Add(append(AppendUntagged(nil, true, 0x43, 0, 0, 1, 0), "hello"...), uint32(3), uint32(1), uint32(0), uint32(64), true)
	f.Add(append(AppendUntagged(nil, true, 0x43, 0, 0, 1, 0), "hello"...), uint32(3), uint32(1), uint32(0), uint32(4), false)
	f.Add(append(AppendUntagged(nil, true, 0x43, 0, 0, 2, 8), "hello"...), uint32(4), uint32(1), uint32(0), uint32(8), true)
	f.Add(AppendUntagged(nil, true, 0x41, 0, 5, 1, 0), uint32(3), uint32(1), uint32(0), uint32(0), true)
	f.Add([]byte{0x43}, uint32(0), uint32(0), uint32(0), uint32(0), false)
	f.Fuzz(func(t *testing.T, b []byte, nq, next, want, bufLen uint32, posted bool) {
		n, tagged, err := parseLikeAQP(t, b)
		if err != nil || tagged {
			return
		}
		h := Untagged(b[:n])
		re := AppendUntagged(nil, h.Last(), h.ULPCtrl(), h.ULPWord(), h.QN(), h.MSN(), h.MO())
		wantHdr := append([]byte(nil), b[:n]...)
		wantHdr[0] &^= ReservedMask
		if !bytes.Equal(re, wantHdr) {
			t.Fatalf("re-encoded %x, want %x", re, wantHdr)
		}
		if h.Version() != Version {
			t.Fatalf("accepted DV %d", h.Version())
		}

		plen := uint32(len(b) - n)
		checkRule(t, "CheckQN", CheckQN(h.QN(), nq), h.QN() < nq, ErrInvalidQN)
		checkRule(t, "CheckMSN", CheckMSN(h.MSN(), next), h.MSN() == next, ErrMSNRange)
		checkRule(t, "CheckMO", CheckMO(h.MO(), want), h.MO() == want, ErrInvalidMO)
		checkRule(t, "CheckBuffer", CheckBuffer(h.QN(), h.MSN(), posted), posted, ErrMSNNoBuffer)
		fits := plen == 0 || uint64(h.MO())+uint64(plen) <= uint64(bufLen)
		checkRule(t, "CheckMsgLen", CheckMsgLen(h.MO(), plen, bufLen), fits, ErrMsgTooLong)
	})
}

// parseLikeAQP parses b whole and the way a QP reads it off the stream, and
// requires the same answer from both.
func parseLikeAQP(t *testing.T, b []byte) (int, bool, error) {
	n, tagged, err := Parse(b)
	k := min(len(b), 1)
	if k > 0 {
		k = min(len(b), HdrLen(b[0]&FlagTagged != 0))
	}
	n2, tagged2, err2 := Parse(b[:k])
	if n != n2 || tagged != tagged2 || (err == nil) != (err2 == nil) || err != nil && causeOf(err) != causeOf(err2) {
		t.Fatalf("whole: %d %t %v; read piece by piece: %d %t %v", n, tagged, err, n2, tagged2, err2)
	}
	if err != nil && !errors.Is(err, ErrTaggedVersion) && !errors.Is(err, ErrUntaggedVersion) && !errors.Is(err, ErrCatastrophic) {
		t.Fatalf("Parse: %v", err)
	}
	if err != nil {
		var e *Error
		errors.As(err, &e)
		_ = err.Error() + e.EType.String()
	}
	return n, tagged, err
}

func causeOf(err error) Error {
	var e *Error
	if !errors.As(err, &e) {
		return Error{EType: 9}
	}
	return Error{EType: e.EType, Code: e.Code}
}

// checkRule requires err to be nil when ok, and sentinel otherwise.
func checkRule(t *testing.T, name string, err error, ok bool, sentinel *Error) {
	t.Helper()
	switch {
	case ok && err != nil:
		t.Fatalf("%s: %v, want nil", name, err)
	case !ok && !errors.Is(err, sentinel):
		t.Fatalf("%s: %v, want %v", name, err, sentinel)
	case !ok:
		_ = err.Error()
	}
}
