package transport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/verbs"
)

// The CRC policy and framing AskCRC resolves to.
func TestCRCConn(t *testing.T) {
	for _, c := range []struct {
		name string
		in   verbs.ConnConfig
		ask  bool
		want verbs.ConnConfig
	}{
		{"off: use CRCs only if the peer asks", verbs.ConnConfig{}, false, verbs.ConnConfig{MPA: mpa.Config{CRC: mpa.CRCOff}}},
		{"off keeps a stricter policy", verbs.ConnConfig{MPA: mpa.Config{CRC: mpa.CRCStrict}}, false,
			verbs.ConnConfig{MPA: mpa.Config{CRC: mpa.CRCStrict}}},
		{"on: FPDUs capped, one per segment", verbs.ConnConfig{}, true,
			verbs.ConnConfig{MaxFPDU: CRCMaxFPDU, SegmentPerFPDU: true}},
		{"on with the caller's FPDU size", verbs.ConnConfig{MaxFPDU: 9000}, true, verbs.ConnConfig{MaxFPDU: 9000}},
		{"on, required", verbs.ConnConfig{MPA: mpa.Config{CRC: mpa.CRCRequired}}, true,
			verbs.ConnConfig{MPA: mpa.Config{CRC: mpa.CRCRequired}, MaxFPDU: CRCMaxFPDU, SegmentPerFPDU: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := ConnConfig(c.in, c.ask)
			require.Equal(t, c.want.MPA.CRC, got.MPA.CRC)
			require.Equal(t, c.want.MaxFPDU, got.MaxFPDU)
			require.Equal(t, c.want.SegmentPerFPDU, got.SegmentPerFPDU)
		})
	}
}
