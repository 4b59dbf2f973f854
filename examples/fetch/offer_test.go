package main

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

// The layout in bytes, with distinctive values that show a field out of
// place or in the wrong byte order.
func TestOfferGolden(t *testing.T) {
	o := offer{Addr: 0x0102030405060708, Len: 0x1112131415161718, RKey: 0x21222324, Name: "a.bin"}
	for i := range o.Sum {
		o.Sum[i] = byte(0xa0 + i)
	}
	want, _ := hex.DecodeString("46544331" + "0102030405060708" + "1112131415161718" + "21222324" +
		"a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf" + "612e62696e")
	b := appendOffer(nil, o)
	require.Equal(t, want, b)
	got, err := parseOffer(b)
	require.NoError(t, err)
	require.Equal(t, o, got)

	// Without a name.
	o.Name = ""
	got, err = parseOffer(appendOffer(nil, o))
	require.NoError(t, err)
	require.Equal(t, o, got)
}

// Every prefix shorter than the fixed part, and a wrong magic, are not an
// offer.
func TestOfferTruncated(t *testing.T) {
	b := appendOffer(nil, offer{Addr: 1, Len: 2, RKey: 3})
	require.Len(t, b, offerLen)
	for i := range len(b) {
		_, err := parseOffer(b[:i])
		require.ErrorIs(t, err, errNotOffer, "%d octets", i)
	}
	b[0] = 'f'
	_, err := parseOffer(b)
	require.ErrorIs(t, err, errNotOffer)
}
