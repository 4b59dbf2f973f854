package perf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/goiwarp/iwarp/internal/pki"
	"github.com/goiwarp/iwarp/verbs"
)

// TLSParams are the TLS flags: every connection of the run, the exchange's
// and the test's, inside TLS 1.3 (verbs.ConnConfig.TLS).
type TLSParams struct {
	// Cert and Key (--tls-cert, --tls-key) are our certificate and key;
	// CA (--tls-ca) the CA certificates that sign the peer's. A server
	// needs Cert and Key, and with CA requires client certificates; a
	// client needs CA, and Cert and Key where the server requires them.
	Cert, Key, CA string
	// SelfSigned (--tls) is for a quick measurement: the server makes a
	// throw-away certificate, and the client does not verify it. It
	// encrypts but authenticates nobody.
	SelfSigned bool

	server, client *tls.Config // made by setup
}

func (t *TLSParams) on() bool { return t.SelfSigned || t.Cert != "" || t.Key != "" || t.CA != "" }

// setup checks the flags and makes the configurations this side needs.
func (t *TLSParams) setup(p *Params) error {
	if !t.on() {
		return nil
	}
	switch {
	case p.Test.TCP():
		return fmt.Errorf("TLS is for the RDMA tests, not %v", p.Test)
	case p.Perftest:
		return fmt.Errorf("TLS cannot talk to perftest (-R): perftest speaks no TLS")
	case t.SelfSigned && (t.Cert != "" || t.Key != "" || t.CA != ""):
		return fmt.Errorf("--tls makes its own certificate: no --tls-cert, --tls-key or --tls-ca with it")
	case (t.Cert == "") != (t.Key == ""):
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	server, client := !p.Client() || p.Loopback, p.Client() || p.Loopback
	if t.SelfSigned {
		if server {
			ca, err := pki.NewCA("iwarp-perf")
			if err != nil {
				return err
			}
			cert, err := ca.Issue(pki.Options{CommonName: "iwarp-perf", Hosts: []string{"localhost", "127.0.0.1", "::1"}})
			if err != nil {
				return err
			}
			t.server = &tls.Config{Certificates: []tls.Certificate{cert}}
		}
		if client {
			t.client = &tls.Config{InsecureSkipVerify: true}
		}
		return nil
	}
	var certs []tls.Certificate
	if t.Cert != "" {
		c, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return fmt.Errorf("--tls-cert, --tls-key: %w", err)
		}
		certs = []tls.Certificate{c}
	}
	var pool *x509.CertPool
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return fmt.Errorf("--tls-ca: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--tls-ca: %s holds no PEM certificate", t.CA)
		}
	}
	if server {
		if certs == nil {
			return fmt.Errorf("a TLS server needs --tls-cert and --tls-key")
		}
		t.server = &tls.Config{Certificates: certs}
		if pool != nil {
			t.server.ClientAuth, t.server.ClientCAs = tls.RequireAndVerifyClientCert, pool
		}
	}
	if client {
		if pool == nil {
			return fmt.Errorf("a TLS client needs --tls-ca to verify the server (or --tls for an unverified test)")
		}
		t.client = &tls.Config{Certificates: certs, RootCAs: pool}
		if p.Loopback {
			t.client.ServerName = "127.0.0.1"
		}
	}
	return nil
}

// config is the TLS configuration of one side, or nil.
func (t *TLSParams) config(client bool) *tls.Config {
	if client {
		return t.client
	}
	return t.server
}

// tlsLine is the banner's TLS line: what the connection negotiated, and
// whom the peer proved to be.
func tlsLine(qp *verbs.QP) string {
	st := qp.TLS()
	if st == nil {
		return ""
	}
	s := fmt.Sprintf("%s, %s", tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite))
	if len(st.VerifiedChains) > 0 {
		s += fmt.Sprintf(", peer %q verified", st.VerifiedChains[0][0].Subject.CommonName)
	} else if len(st.PeerCertificates) > 0 {
		s += ", peer not verified"
	}
	return s
}
