// Command iwarp-nvmet is an NVMe over Fabrics target on iWARP (NVMe/RDMA
// over this repository's userspace stack), which the Linux kernel's
// nvme-rdma host (over siw or an iWARP NIC) connects to: one namespace
// backed by memory or a file, or what a configuration saved by nvmetcli
// (Linux nvmet's tool) names, and a discovery controller on the same
// ports. Its bench mode is a Go NVMe/RDMA host that measures a target.
//
//	iwarp-nvmet --listen 0.0.0.0:4420 --ram 64MiB
//	iwarp-nvmet --listen 10.0.0.1:4420 --file /var/tmp/disk.img --nqn nqn.2024-01.io.example:disk
//	iwarp-nvmet --config /etc/nvmet/config.json
//	iwarp-nvmet bench 10.0.0.1:4420
//
// With --config, the file is nvmetcli's saveconfig JSON: ports whose
// trtype is rdma are listened on with their portid (others are logged and
// skipped), each exposing the subsystems linked to it, with the ANA
// states of its ana_groups and the enabled RDMA referrals its discovery
// log lists, as nvmet's ports; each subsystem is served
// with its allow_any_host, allowed_hosts, serial and model attributes and
// its enabled namespaces (nsid, device path, nguid, uuid, ana_grpid,
// resv_enable; and resv.ptpl_file, ours, the file where registrations and
// reservations persist through a restart while hosts ask for it: nvmet
// has no such thing), with nvmet's block size (the block device's logical block
// size; a file's file system block, at most 4096). SIGHUP reads the file again and
// applies the difference while hosts stay connected: namespaces enabled,
// disabled or changed (hosts are told by an Asynchronous Event, and
// Linux's host adds or drops the block device), subsystems added or
// removed, allowed hosts and port links changed (discovery controllers
// are told; a host that reached a subsystem through a port it is unlinked
// from is disconnected, as in nvmet), ports added, removed or moved to
// another address (the hosts through a port removed are disconnected),
// ANA states and groups changed (hosts are told, and Linux's multipath
// host moves its I/O to the paths that are now optimized: how a path is
// taken out of service); serials and models are read at start only. A
// file that does not parse or check changes nothing.
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

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
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
Or serve what a saved nvmetcli configuration names (ports of trtype rdma,
subsystems, namespaces, allowed hosts); SIGHUP applies the file's changes:
  iwarp-nvmet --config /etc/nvmet/config.json [options]
Options for both:
    --advertise HOST:PORT the discovery log's address (default: the one reached)
    --io-queues N, --queue-size N  per controller (default 8), per queue (128)
    --max-queues N, --max-host-controllers N  all hosts' (256), a host NQN's (16)
    --max-transfer SIZE   largest transfer of one command (MDTS): 8KiB .. 1MiB,
                          a power of two (default 128KiB; nvmet's is 1MiB)
    --crc                 ask hosts for MPA CRCs, FPDUs of at most 1440 octets
  Logs to stderr; SIGINT or SIGTERM disconnects the hosts and exits.

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
	config := fs.String("config", "", "")
	listen := fs.String("listen", "", "")
	ram := fs.String("ram", "", "")
	file := fs.String("file", "", "")
	nqn := fs.String("nqn", "", "")
	bs := fs.Int("block-size", 512, "")
	advertise := fs.String("advertise", "", "")
	ioq := fs.Int("io-queues", 0, "")
	qsize := fs.Int("queue-size", 0, "")
	maxq := fs.Int("max-queues", 0, "")
	maxhc := fs.Int("max-host-controllers", 0, "")
	crc := fs.Bool("crc", false, "")
	mdts := fs.String("max-transfer", "", "")
	var hosts multi
	fs.Var(&hosts, "allow-host", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	tcfg := target.Config{AdvertiseAddr: *advertise, MaxIOQueues: *ioq, MaxQueueSize: *qsize, AskCRC: *crc, Logf: log.Printf,
		MaxQueues: *maxq, MaxControllersPerHost: *maxhc}
	if *mdts != "" {
		n, err := parseSize(*mdts)
		if err != nil {
			return fmt.Errorf("--max-transfer: %w", err)
		}
		tcfg.MaxTransfer = int(n)
	}
	if *config != "" {
		var clash []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "listen", "ram", "file", "nqn", "block-size", "allow-host":
				clash = append(clash, "--"+f.Name)
			}
		})
		if len(clash) > 0 || fs.NArg() > 0 {
			return fmt.Errorf("--config names the ports, subsystems, namespaces and hosts: drop %s", strings.Join(append(clash, fs.Args()...), " "))
		}
		return serveConfig(*config, tcfg)
	}
	if *listen == "" || (*ram == "") == (*file == "") || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("need --config, or --listen and one of --ram or --file")
	}
	var backend target.Backend
	var what string
	if *ram != "" {
		size, err := parseSize(*ram)
		if err != nil {
			return err
		}
		backend, what = target.NewMemBackend(size), "ram:"+*ram
	} else {
		fb, err := target.OpenFileBackend(*file)
		if err != nil {
			return err
		}
		defer fb.Close()
		backend, what = fb, "file:"+*file
	}
	if *nqn == "" {
		*nqn = defaultNQN(what)
	}
	sub, err := target.NewSubsystem(*nqn)
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
	t, err := target.New(tcfg, sub)
	if err != nil {
		return err
	}
	sig := notify()
	addr, err := t.Listen(context.Background(), "tcp", *listen)
	if err != nil {
		t.Close()
		return err
	}
	log.Printf("serving %s: namespace 1, %d blocks of %d octets (%s), and %s on %v",
		*nqn, ns.Blocks(), ns.BlockSize, what, nvme.DiscoveryNQN, addr)
	for s := range sig {
		if s == syscall.SIGHUP {
			log.Printf("%v: nothing to reload without --config", s)
			continue
		}
		log.Printf("%v: disconnecting hosts", s)
		break
	}
	return stop(t)
}

// serveConfig serves what an nvmetcli configuration file names, and
// applies the file's changes on SIGHUP.
func serveConfig(path string, tcfg target.Config) error {
	p, err := loadConfig(path)
	if err != nil {
		return err
	}
	for _, n := range p.notes {
		log.Printf("config: %s", n)
	}
	t, err := target.New(tcfg)
	if err != nil {
		return err
	}
	s := &served{t: t, logf: log.Printf}
	defer s.close()
	ctx := context.Background()
	if err := s.apply(ctx, p); err != nil {
		t.Close()
		return err
	}
	sig := notify()
	if err := s.listen(ctx, p.ports); err != nil {
		t.Close()
		return err
	}
	log.Printf("serving %d subsystems from %s, and %s; SIGHUP reloads the file", len(s.subs), path, nvme.DiscoveryNQN)
	for sg := range sig {
		if sg != syscall.SIGHUP {
			log.Printf("%v: disconnecting hosts", sg)
			break
		}
		p, err := loadConfig(path)
		if err != nil {
			log.Printf("%v: %v: nothing changed", sg, err)
			continue
		}
		for _, n := range p.notes {
			log.Printf("config: %s", n)
		}
		if err := s.apply(ctx, p); err != nil {
			log.Printf("%v: reloaded %s, but not all of it", sg, path)
			continue
		}
		log.Printf("%v: reloaded %s", sg, path)
	}
	return stop(t)
}

// notify returns the signals serve acts on.
func notify() chan os.Signal {
	// Room for a few: a SIGTERM that comes while a reload runs, after
	// another SIGHUP, is not dropped.
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	return sig
}

func stop(t *target.Target) error {
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
