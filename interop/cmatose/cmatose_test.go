package cmatose

import (
	"context"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// Our server against our client over loopback, with the defaults (the
// client offers peer-to-peer mode) and with the client as siw dials
// (no peer-to-peer: the server's first Sends wait for FirstFPDUHold).
func TestServeClient(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  verbs.ConnConfig
	}{
		{"defaults", verbs.ConnConfig{}},
		{"no peer-to-peer, as siw dials", verbs.ConnConfig{MPA: mpa.Config{P2P: mpa.P2POff}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, err := verbs.Open(verbs.DeviceAttr{})
			require.NoError(t, err)
			ln, err := dev.Listen(context.Background(), "tcp", "127.0.0.1:0", verbs.ConnConfig{})
			require.NoError(t, err)
			defer ln.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			o := Options{Connections: 4, Count: 10}
			errc := make(chan error, 1)
			go func() { errc <- Serve(ctx, ln, o) }()
			require.NoError(t, Client(ctx, ln.Addr().String(), o, tc.cfg))
			require.NoError(t, <-errc)
		})
	}
}
