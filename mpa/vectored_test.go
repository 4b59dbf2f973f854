package mpa

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// vecSink is a VectoredWriter that records each call's gather list.
type vecSink struct {
	calls int
	out   bytes.Buffer
}

func (s *vecSink) Write(p []byte) (int, error) { panic("Write on a VectoredWriter") }

func (s *vecSink) WriteVectored(v [][]byte) (int64, error) {
	s.calls++
	var n int64
	for _, b := range v {
		m, _ := s.out.Write(b)
		n += int64(m)
	}
	return n, nil
}

// A stream that takes whole gather lists gets each Flush in one call, and
// the same octets an io.Writer gets, with CRCs and markers.
func TestWriterVectored(t *testing.T) {
	for _, crc := range []bool{false, true} {
		for _, markers := range []bool{false, true} {
			var plain bytes.Buffer
			vs := &vecSink{}
			pw, vw := NewWriter(&plain, crc, markers), NewWriter(vs, crc, markers)
			big := bytes.Repeat([]byte{0xa5}, 20000)
			for _, w := range []*Writer{pw, vw} {
				for i, payload := range [][]byte{nil, []byte("small"), big, big[:4096], big[:9000]} {
					require.NoError(t, w.Append([]byte{0x41, byte(i)}, payload))
				}
				require.NoError(t, w.Flush())
				require.NoError(t, w.Append([]byte{0x42}, big[:100]))
				require.NoError(t, w.Flush())
			}
			require.Equal(t, 2, vs.calls, "one call per Flush")
			require.Equal(t, plain.Bytes(), vs.out.Bytes(), "crc %v markers %v", crc, markers)
			require.Equal(t, pw.Written(), vw.Written())
		}
	}
}
