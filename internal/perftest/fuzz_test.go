package perftest

import (
	"bytes"
	"testing"
)

// FuzzMessages feeds arbitrary octets to every parser of perftest's control
// messages: a hostile or confused peer must get an error, never a panic, and
// what is accepted must re-encode to the same octets.
func FuzzMessages(f *testing.F) {
	f.Add(Version(OurVersion))
	f.Add(Int(PageSize))
	f.Add(Dest{QPN: 7, RKey: 0x1234, VAddr: 0xdead0000}.Marshal(DestLen))
	f.Add(Dest{QPN: 7, RKey: 0x1234, VAddr: 0xdead0000, TailVAddr: 9}.Marshal(DestLen629))
	f.Add([]byte("5.6\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := ParseVersion(b); err == nil && v == "" {
			t.Fatalf("ParseVersion(%q) accepted an empty version", b)
		}
		if n, err := ParseInt(b); err == nil && !bytes.Equal(Int(n), b[:SysDataLen]) {
			t.Fatalf("ParseInt(%x) = %d does not re-encode", b, n)
		}
		if d, err := ParseDest(b); err == nil {
			again := d.Marshal(len(b))
			// Octets 20..23 are C struct padding: not carried.
			w := append([]byte(nil), b...)
			copy(w[20:24], again[20:24])
			if !bytes.Equal(again, w) {
				t.Fatalf("ParseDest(%x) = %+v re-encodes to %x", b, d, again)
			}
		}
		var m [5][]byte
		for i := range m {
			lo := min(len(b), i*ReportField)
			m[i] = b[lo:min(len(b), lo+ReportField)]
		}
		if r, err := ParseReport(m); err == nil {
			got := r.Messages()
			for i := range m {
				if !bytes.Equal(got[i], m[i]) {
					t.Fatalf("ParseReport field %d: %x re-encodes to %x", i, m[i], got[i])
				}
			}
		}
	})
}
