// Command iwarp-nvmet is an NVMe over Fabrics target on iWARP (NVMe/RDMA
// over this repository's userspace stack): one namespace backed by memory
// or a file, and a discovery controller on the same port, which the Linux
// kernel's nvme-rdma host (over siw or an iWARP NIC) connects to. Its
// bench mode is a Go NVMe/RDMA host that measures a target.
//
//	iwarp-nvmet --listen 0.0.0.0:4420 --ram 64MiB
//	iwarp-nvmet --listen 10.0.0.1:4420 --file /var/tmp/disk.img --nqn nqn.2024-01.io.example:disk
//	iwarp-nvmet bench 10.0.0.1:4420
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/goiwarp/iwarp/nvmeof"
)

const usage = `iwarp-nvmet: an NVMe over Fabrics (RDMA) target on userspace iWARP

Serve one namespace and a discovery controller on ADDR:PORT:
  iwarp-nvmet --listen ADDR[:PORT] (--ram SIZE | --file PATH) [options]
    --listen ADDR[:PORT]  where to listen (port 4420 if none)
    --ram SIZE            a namespace in memory: 64MiB, 1GiB, 512KiB, 4096...
    --file PATH           a namespace backed by an existing file or block device
    --nqn NQN             the subsystem's NQN (default derived from the host name
                          and the backing, stable across restarts)
    --block-size N        logical block size, 512 (default) or 4096
    --allow-host NQN      admit only this host NQN (repeatable; default any host)
    --advertise HOST:PORT the address the discovery log names (default: the one
                          the discovery connection came to)
    --io-queues N         I/O queues per controller (default 8)
    --queue-size N        entries per I/O queue (default 128)
    --crc                 ask hosts for MPA CRCs, with FPDUs of at most 1440
                          octets, one per TCP segment (default: CRCs only if
                          the host asks; see nvmeof.TargetConfig.AskCRC)
  Logs connections and errors to stderr; SIGINT or SIGTERM disconnects the
  hosts and exits.

Measure a target (a Go NVMe/RDMA host; it WRITES to the namespace):
  iwarp-nvmet bench [options] ADDR[:PORT]
    --nqn NQN        subsystem to use (default: the first in the discovery log)
    --queues N       I/O queues (default 2)      --qd N      queue depth (default 32)
    --time D         time per test (default 3s)  --nsid N    namespace (default 1)
  Prints 4 KiB random read and write IOPS at the queue depth, 128 KiB
  sequential read and write MiB/s, and 4 KiB read latency percentiles at QD 1.
`

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if len(os.Args) > 1 && os.Args[1] == "bench" {
		if err := bench(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "iwarp-nvmet bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := serve(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "iwarp-nvmet:", err)
		os.Exit(2)
	}
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

func serve(args []string) error {
	fs := flag.NewFlagSet("iwarp-nvmet", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage) }
	listen := fs.String("listen", "", "")
	ram := fs.String("ram", "", "")
	file := fs.String("file", "", "")
	nqn := fs.String("nqn", "", "")
	bs := fs.Int("block-size", 512, "")
	advertise := fs.String("advertise", "", "")
	ioq := fs.Int("io-queues", 0, "")
	qsize := fs.Int("queue-size", 0, "")
	crc := fs.Bool("crc", false, "")
	var hosts multi
	fs.Var(&hosts, "allow-host", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *listen == "" || (*ram == "") == (*file == "") || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("need --listen and one of --ram or --file")
	}
	var backend nvmeof.Backend
	var what string
	if *ram != "" {
		size, err := parseSize(*ram)
		if err != nil {
			return err
		}
		backend, what = nvmeof.NewMemBackend(size), "ram:"+*ram
	} else {
		fb, err := nvmeof.OpenFileBackend(*file)
		if err != nil {
			return err
		}
		defer fb.Close()
		backend, what = fb, "file:"+*file
	}
	if *nqn == "" {
		*nqn = defaultNQN(what)
	}
	sub, err := nvmeof.NewSubsystem(*nqn)
	if err != nil {
		return err
	}
	ns, err := sub.AddNamespace(backend, *bs)
	if err != nil {
		return err
	}
	for _, h := range hosts {
		sub.AllowHost(h)
	}
	t, err := nvmeof.NewTarget(nvmeof.TargetConfig{AdvertiseAddr: *advertise, MaxIOQueues: *ioq, MaxQueueSize: *qsize,
		AskCRC: *crc, Logf: log.Printf}, sub)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	addr, err := t.Listen(context.Background(), "tcp", *listen)
	if err != nil {
		t.Close()
		return err
	}
	log.Printf("serving %s: namespace 1, %d blocks of %d octets (%s), and %s on %v",
		*nqn, ns.Blocks(), ns.BlockSize, what, nvmeof.DiscoveryNQN, addr)
	s := <-sig
	log.Printf("%v: disconnecting hosts", s)
	if err := t.Close(); err != nil {
		return err
	}
	log.Printf("stopped")
	return nil
}

// defaultNQN derives an NQN from the host name and the backing.
func defaultNQN(what string) string {
	h, _ := os.Hostname()
	if h == "" {
		h = "localhost"
	}
	sum := sha256.Sum256([]byte(h + "\x00" + what))
	return fmt.Sprintf("nqn.2024-01.io.goiwarp:nvmet-%s-%x", h, sum[:4])
}

// parseSize reads 4096, 512KiB, 64MiB, 1GiB, 1G, 16M...
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1}}
	mult := int64(1)
	num := s
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<50)/mult {
		return 0, fmt.Errorf("bad size %q: want e.g. 64MiB", s)
	}
	return n * mult, nil
}
