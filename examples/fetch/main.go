// Command fetch copies a file across a network with RDMA Reads: the server
// registers the file's contents for remote reading and tells each client,
// in the MPA private data of its Accept, where they are; the client reads
// them in chunks with many Reads outstanding, so that a long path stays
// full, writes them out and checks their SHA-256 against the server's.
//
//	fetch serve [-p PORT] [-ird N] [-n CLIENTS] [-cc ALGO] [-sockbuf SIZE] [-mptcp] [TLS FLAGS] FILE
//	fetch get [-p PORT] [-o OUT] [-chunk SIZE] [-depth N] [-cc ALGO] [-sockbuf SIZE] [-mptcp] [TLS FLAGS] HOST
//
// With -tls-cert, -tls-key and -tls-ca on both sides, the connection runs
// inside mutual TLS 1.3: each side proves its certificate, signed by the
// CA the other trusts, and the server logs each client's name.
//
// The server does no work per transfer: its stack answers the Reads from
// the registered memory, and the program only watches each connection
// until the client leaves. It serves any number of clients at once, each on
// its own QP, all reading the one memory region. The client keeps -depth
// Reads of -chunk octets in flight (16 × 1 MiB by default: enough for
// about 2.5 Gbit/s on a 50 ms path); the server's -ird bounds that depth,
// and MPA start-up settles on the smaller of the two.
//
// -cc, -sockbuf and -mptcp set the transport of either side for a long
// path: congestion control (bbr keeps a lossy long path full), socket
// buffers of at least the bandwidth-delay product, and Multipath TCP (the
// server listens on every address, as MPTCP's joins need). docs/wan.md
// explains each.
//
// Without -o the client writes to the file's name on the server (its base
// name, in the current directory). It writes to a temporary file next to
// OUT and renames it only once the SHA-256 matches, so OUT is never a bad
// copy.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// defaultPort is the port both sides use unless told otherwise.
const defaultPort = 7472

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "serve":
		fs := flag.NewFlagSet("fetch serve", flag.ExitOnError)
		port := fs.Int("p", defaultPort, "TCP `port` to listen on")
		ird := fs.Int("ird", 16, "RDMA Reads served at once per client (its most useful -depth)")
		clients := fs.Int("n", 0, "exit after serving this many `clients` (0: until interrupted)")
		var tf tlsFlags
		tf.register(fs)
		var nf tcpFlags
		nf.register(fs)
		fs.Usage = func() {
			fmt.Fprintln(fs.Output(), "usage: fetch serve [-p PORT] [-ird N] [-n CLIENTS] [-cc ALGO] [-sockbuf SIZE] [-mptcp] [-tls-cert F -tls-key F -tls-ca F] FILE")
			fs.PrintDefaults()
		}
		fs.Parse(args)
		if fs.NArg() != 1 {
			fs.Usage()
			os.Exit(2)
		}
		var tc *tls.Config
		if tc, err = tf.config(true); err == nil {
			err = serve(ctx, fs.Arg(0), *port, *ird, *clients, nf.config(), tc)
		}
	case "get":
		fs := flag.NewFlagSet("fetch get", flag.ExitOnError)
		port := fs.Int("p", defaultPort, "the server's TCP `port`")
		out := fs.String("o", "", "output `file` (default: the file's name on the server)")
		chunk := byteSize(1 << 20)
		fs.Var(&chunk, "chunk", "octets per RDMA Read (suffix K, M or G for KiB, MiB, GiB)")
		depth := fs.Int("depth", 16, "RDMA Reads kept outstanding (the server may allow fewer)")
		var tf tlsFlags
		tf.register(fs)
		var nf tcpFlags
		nf.register(fs)
		fs.Usage = func() {
			fmt.Fprintln(fs.Output(), "usage: fetch get [-p PORT] [-o OUT] [-chunk SIZE] [-depth N] [-cc ALGO] [-sockbuf SIZE] [-mptcp] [-tls-cert F -tls-key F -tls-ca F] HOST")
			fs.PrintDefaults()
		}
		fs.Parse(args)
		if fs.NArg() != 1 {
			fs.Usage()
			os.Exit(2)
		}
		var tc *tls.Config
		if tc, err = tf.config(false); err == nil {
			err = get(ctx, fs.Arg(0), *port, *out, int(chunk), *depth, nf.config(), tc)
		}
	default:
		usage()
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted (%w)", err)
		}
		fmt.Fprintln(os.Stderr, "fetch:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: fetch serve [-p PORT] [-ird N] [-n CLIENTS] [-cc ALGO] [-sockbuf SIZE] [-mptcp] [-tls-cert F -tls-key F -tls-ca F] FILE")
	fmt.Fprintln(os.Stderr, "       fetch get [-p PORT] [-o OUT] [-chunk SIZE] [-depth N] [-tls-cert F -tls-key F -tls-ca F] HOST")
	os.Exit(2)
}

// byteSize is a flag value in octets with an optional K, M or G suffix
// (powers of 1024).
type byteSize int

func (b *byteSize) String() string { return strconv.Itoa(int(*b)) }

func (b *byteSize) Set(s string) error {
	mul := 1
	switch strings.ToUpper(s[len(s)-min(len(s), 1):]) {
	case "K":
		mul = 1 << 10
	case "M":
		mul = 1 << 20
	case "G":
		mul = 1 << 30
	}
	if mul != 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > maxChunk/mul {
		return fmt.Errorf("want 1 to %d octets, as 4096, 256K or 1M", maxChunk)
	}
	*b = byteSize(n * mul)
	return nil
}
