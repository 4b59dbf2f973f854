package mpa

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// startupSeeds returns encoded frames, built by the encoder and the policy.
func startupSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	add := func(fr Frame) {
		b, err := fr.Append(nil)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	for _, c := range []Config{
		{},
		{Rev: 1, CRC: CRCOff, MarkersRx: true},
		{P2P: P2POn, RTRs: RTRSend | RTRWrite | RTRRead, IRD: 0x1234, ORD: MaxIRDORD},
	} {
		req, err := BuildRequest(c, []byte("private"))
		if err != nil {
			f.Fatal(err)
		}
		add(req)
		rep, _, err := Respond(c, req, []byte("reply"))
		if err != nil {
			f.Fatal(err)
		}
		add(rep)
		add(Reject(c, req, []byte("no")))
	}
	add(Frame{Reply: true, Markers: true, CRC: true, Reject: true, Enhanced: true, Reserved: 0xf, Rev: 2,
		PrivateData: bytes.Repeat([]byte{0x5a}, MaxPrivateData)})
	add(Frame{Enhanced: true, Rev: 2, PrivateData: []byte{1, 2}})
	return seeds
}

func FuzzParseFrame(f *testing.F) {
	for _, s := range startupSeeds(f) {
		f.Add(s)
		f.Add(append(s, 0x00, 0x10)) // followed by the first FPDU
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, n, err := ParseFrame(b)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error of unexpected type: %v", err)
			}
			return
		}
		if n > len(b) || n != fr.Len() {
			t.Fatalf("consumed %d of %d octets, frame length %d", n, len(b), fr.Len())
		}
		again, err := fr.Append(nil)
		if err != nil {
			t.Fatalf("accepted frame does not encode: %v", err)
		}
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoded %x, consumed %x", again, b[:n])
		}
		// ReadFrame agrees, and stops where ParseFrame did.
		r := bytes.NewReader(b)
		rd, err := ReadFrame(r, fr.Reply)
		if err != nil || rd.Len() != n || r.Len() != len(b)-n {
			t.Fatalf("ReadFrame: %v, frame length %d, %d octets left; ParseFrame took %d", err, rd.Len(), r.Len(), n)
		}
		_, _ = fr.ULPPrivateData()
		_, _ = fr.IRDORD()
		// The policy takes any parsed frame without panicking, and what it
		// sends encodes.
		for _, c := range []Config{{}, {Rev: 1, P2P: P2POn, StrictIRD: true, RefuseMarkers: true}} {
			if fr.Reply {
				req, _ := BuildRequest(c, nil)
				_, _ = ConfirmReply(c, req, fr)
				continue
			}
			rep, _, err := Respond(c, fr, nil)
			if err == nil || rep.Reject {
				if _, err := rep.Append(nil); err != nil {
					t.Fatalf("Respond built a frame that does not encode: %v", err)
				}
			}
		}
	})
}

func FuzzParseIRDORD(f *testing.F) {
	for _, v := range []IRDORD{
		{},
		{IRD: 16, ORD: 8},
		{IRD: MaxIRDORD, ORD: 1, P2P: true, RTR: RTRWrite | RTRRead},
		{IRD: 0x1234, ORD: 0x0567, P2P: true, RTR: RTRSend | RTRWrite | RTRRead},
	} {
		f.Add(v.Append(nil))
	}
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseIRDORD(b)
		if err != nil {
			if len(b) >= IRDORDLen {
				t.Fatalf("rejected %x: %v", b, err)
			}
			return
		}
		if again := v.Append(nil); !bytes.Equal(again, b[:IRDORDLen]) {
			t.Fatalf("re-encoded %x, parsed %x", again, b[:IRDORDLen])
		}
	})
}
