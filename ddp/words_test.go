package ddp

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The words are the octets AppendTagged and AppendUntagged append, for
// random fields, both values of L.
func TestHeaderWords(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 2000 {
		last, ctl := i%2 == 0, byte(rng.Uint32())
		stag, to := rng.Uint32(), rng.Uint64()
		b := AppendTagged(nil, last, ctl, stag, to)
		w0, w1 := TaggedWords(last, ctl, stag, to)
		var got [16]byte
		binary.LittleEndian.PutUint64(got[:], w0)
		binary.LittleEndian.PutUint64(got[8:], w1)
		require.Equal(t, b, got[:TaggedHdrLen])
		require.Zero(t, w1>>48, "nothing beyond the header")

		ulp, qn, msn, mo := rng.Uint32(), rng.Uint32(), rng.Uint32(), rng.Uint32()
		b = AppendUntagged(nil, last, ctl, ulp, qn, msn, mo)
		w0, w1, w2 := UntaggedWords(last, ctl, ulp, qn, msn, mo)
		var got2 [24]byte
		binary.LittleEndian.PutUint64(got2[:], w0)
		binary.LittleEndian.PutUint64(got2[8:], w1)
		binary.LittleEndian.PutUint64(got2[16:], w2)
		require.Equal(t, b, got2[:UntaggedHdrLen])
		require.Zero(t, w2>>16, "nothing beyond the header")
	}
}
