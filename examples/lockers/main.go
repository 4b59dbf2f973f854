// Command lockers gives each client certificate a protection domain of its
// own: a server over mutual TLS that reads the verified client identity on
// the connection request, before Accept, and accepts the client's QP in
// that identity's PD, where its locker (a registered region) lives. A
// client writes its locker with an RDMA Write and reads it back with an
// RDMA Read, across connections; the STag of one tenant's locker is
// useless on another tenant's QP, since the region is in another PD (the
// stack answers with a Terminate).
//
//	lockers serve [-p PORT] -tls-cert F -tls-key F -tls-ca F
//	lockers put [-p PORT] -tls-cert F -tls-key F -tls-ca F HOST TEXT
//	lockers get [-p PORT] -tls-cert F -tls-key F -tls-ca F HOST
//
// The identity is the certificate's Common Name, as verified against
// -tls-ca; a client without a certificate the CA signed never reaches
// the application.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
)

const defaultPort = 7473

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet("lockers "+cmd, flag.ExitOnError)
	port := fs.Int("p", defaultPort, "TCP `port`")
	cert := fs.String("tls-cert", "", "our certificate `file` (PEM)")
	key := fs.String("tls-key", "", "our private key `file` (PEM)")
	ca := fs.String("tls-ca", "", "`file` of the CA certificates (PEM) that sign the other side's")
	fs.Parse(os.Args[2:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tc, err := tlsConfig(*cert, *key, *ca, cmd == "serve")
	if err != nil {
		fail(err)
	}
	switch {
	case cmd == "serve" && fs.NArg() == 0:
		err = serve(ctx, fmt.Sprintf(":%d", *port), tc, func(addr net.Addr) { fmt.Println("lockers: serving on", addr) })
	case cmd == "put" && fs.NArg() == 2:
		err = put(ctx, net.JoinHostPort(fs.Arg(0), strconv.Itoa(*port)), tc, []byte(fs.Arg(1)))
	case cmd == "get" && fs.NArg() == 1:
		var b []byte
		if b, err = get(ctx, net.JoinHostPort(fs.Arg(0), strconv.Itoa(*port)), tc); err == nil {
			fmt.Printf("%s\n", b)
		}
	default:
		usage()
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "lockers:", err)
	os.Exit(1)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: lockers serve [-p PORT] -tls-cert F -tls-key F -tls-ca F")
	fmt.Fprintln(os.Stderr, "       lockers put [-p PORT] -tls-cert F -tls-key F -tls-ca F HOST TEXT")
	fmt.Fprintln(os.Stderr, "       lockers get [-p PORT] -tls-cert F -tls-key F -tls-ca F HOST")
	os.Exit(2)
}

// tlsConfig is mutual TLS: a server requires client certificates the CA
// signed; a client verifies the server's against it.
func tlsConfig(certFile, keyFile, caFile string, server bool) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, errors.New("-tls-cert, -tls-key and -tls-ca are required")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}}
	if server {
		c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, pool
	} else {
		c.RootCAs = pool
	}
	return c, nil
}
