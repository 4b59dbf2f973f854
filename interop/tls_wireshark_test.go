//go:build interop

package interop

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/internal/pki"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// A connection inside TLS, captured on the wire: Wireshark sees a TLS 1.3
// handshake and application-data records, and no MPA start-up, FPDU or
// Terminate; neither the MPA key nor the data moved appear in the capture.
// The same traffic in cleartext, captured and judged the same way in the
// same run, decodes whole, so that the zeros say something. With
// CRCRequired (MPA's CRC inside TLS) the capture looks the same.
func TestWiresharkTLSConnection(t *testing.T) {
	ca, err := pki.NewCA("interop CA")
	require.NoError(t, err)
	srvCert, err := ca.Issue(pki.Options{CommonName: "server", Hosts: []string{"127.0.0.1"}})
	require.NoError(t, err)
	cliCert, err := ca.Issue(pki.Options{CommonName: "client", Client: true})
	require.NoError(t, err)
	server := &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	client := &tls.Config{Certificates: []tls.Certificate{cliCert}, RootCAs: ca.Pool()}

	for _, tc := range []struct {
		name string
		tls  bool
		crc  mpa.CRCPolicy
	}{
		{"cleartext", false, mpa.CRCOn},
		{"tls", true, mpa.CRCOn},
		{"tls-crc", true, mpa.CRCRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scfg := verbs.ConnConfig{MPA: mpa.Config{CRC: tc.crc}, MaxFPDU: 1500}
			ccfg := scfg
			if tc.tls {
				scfg.TLS, ccfg.TLS = server, client
			}
			d, err := verbs.Open(verbs.DeviceAttr{})
			require.NoError(t, err)
			defer d.Close()
			ln, err := d.Listen(context.Background(), "tcp", "127.0.0.1:0", scfg)
			require.NoError(t, err)
			defer ln.Close()
			pcap, stop := capture(t, port(ln))
			c, s := pairOn(t, ln, ccfg)
			want := traffic(t, c, s)
			if p := c.qp.Params(); p.P2P {
				want++ // the RTR (the P2PAuto default on Rev 2)
				if p.RTR == mpa.RTRRead {
					want++ // and its empty Read Response
				}
			}
			require.Equal(t, tc.tls, c.qp.Stats().TLS)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, c.qp.Disconnect(ctx))
			require.Zero(t, stop(), "packets tcpdump dropped: the capture is incomplete")

			v := judge(t, pcap)
			t.Logf("%s: Wireshark: %d MPA start-up frames, %d FPDUs, %d Terminates", tc.name, v.Startups, v.FPDUs, v.Terminates)
			if !tc.tls {
				require.Equal(t, 2, v.Startups)
				require.Positive(t, want)
				require.Equal(t, want, v.FPDUs, "the control decodes whole")
				require.Zero(t, v.BadCRC+v.Malformed)
				return
			}
			require.Zero(t, v.Startups, "no MPA start-up visible")
			require.Zero(t, v.FPDUs, "no FPDU decodable")
			require.Zero(t, v.Terminates)

			asTLS := []string{"-d", fmt.Sprintf("tcp.port==%d,tls", port(ln))}
			hello := tshark(t, pcap, append(asTLS, "-Y", "tls.handshake.type == 2", "-T", "fields", "-e", "tls.handshake.extensions.supported_version")...)
			require.Equal(t, "0x0304", strings.TrimSpace(hello), "the ServerHello picks TLS 1.3")
			records := lines(tshark(t, pcap, append(asTLS, "-Y", "tls.record.opaque_type == 23")...))
			t.Logf("%s: %d TCP segments with TLS application data", tc.name, records)
			require.Positive(t, records)

			raw, err := os.ReadFile(pcap)
			require.NoError(t, err)
			require.False(t, bytes.Contains(raw, []byte("MPA ID Req Frame")), "the MPA Request in clear")
			require.False(t, bytes.Contains(raw, []byte("MPA ID Rep Frame")), "the MPA Reply in clear")
			pattern := make([]byte, 64) // traffic's data: buf[i] = i*7
			for i := range pattern {
				pattern[i] = byte(i * 7)
			}
			require.False(t, bytes.Contains(raw, pattern), "the data moved in clear")
		})
	}
}
