package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
)

// tlsFlags are the mutual TLS flags of both sides: our certificate and
// key, and the CA that signs the other side's. With none of them the
// connection is cleartext.
type tlsFlags struct {
	cert, key, ca string
}

func (f *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cert, "tls-cert", "", "our certificate `file` (PEM); with -tls-key and -tls-ca: mutual TLS")
	fs.StringVar(&f.key, "tls-key", "", "our private key `file` (PEM)")
	fs.StringVar(&f.ca, "tls-ca", "", "`file` of the CA certificates (PEM) that sign the other side's certificate")
}

// config returns the tls.Config of a server (which then requires and
// verifies client certificates) or a client, or nil without TLS flags.
func (f *tlsFlags) config(server bool) (*tls.Config, error) {
	if f.cert == "" && f.key == "" && f.ca == "" {
		return nil, nil
	}
	if f.cert == "" || f.key == "" || f.ca == "" {
		return nil, errors.New("mutual TLS takes all of -tls-cert, -tls-key and -tls-ca")
	}
	cert, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(f.ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", f.ca)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}}
	if server {
		c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, pool
	} else {
		c.RootCAs = pool
	}
	return c, nil
}

// tlsSummary says how a connection is protected, and who the peer is.
func tlsSummary(st *tls.ConnectionState) string {
	if st == nil {
		return "cleartext"
	}
	peer := "?"
	if len(st.PeerCertificates) > 0 {
		peer = st.PeerCertificates[0].Subject.CommonName
	}
	return fmt.Sprintf("%s %s, peer %q", tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite), peer)
}
