package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// bench connects a Go host to a target and measures it.
func bench(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("iwarp-nvmet bench", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage) }
	nqn := fs.String("nqn", "", "")
	queues := fs.Int("queues", 2, "")
	qd := fs.Int("qd", 32, "")
	dur := fs.Duration("time", 3*time.Second, "")
	nsid := fs.Uint("nsid", 1, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("need the target's ADDR[:PORT]")
	}
	addr := fs.Arg(0)
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "4420")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if *nqn == "" {
		ents, err := host.Discover(ctx, "tcp", addr, host.Config{})
		if err != nil {
			return fmt.Errorf("discovery: %w", err)
		}
		for _, e := range ents {
			if e.SubType == nvme.SubTypeNVM {
				*nqn = e.SubNQN
				break
			}
		}
		if *nqn == "" {
			return errors.New("the discovery log lists no NVM subsystem")
		}
	}
	c, err := host.Connect(ctx, "tcp", addr, *nqn, host.Config{IOQueues: *queues, QueueDepth: *qd})
	if err != nil {
		return err
	}
	defer c.Close()
	ns, err := c.Namespace(ctx, uint32(*nsid))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s at %s: controller %d, %d I/O queues, QD %d, namespace %d: %d MiB, %d-octet blocks\n",
		*nqn, addr, c.ID, c.IOQueues(), *qd, ns.ID, ns.Size()>>20, ns.BlockSize())
	r, err := runBench(ns, *qd, *dur)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "4 KiB random read:   %8.0f IOPS (QD %d)\n", r.RandReadIOPS, *qd)
	fmt.Fprintf(out, "4 KiB random write:  %8.0f IOPS (QD %d)\n", r.RandWriteIOPS, *qd)
	fmt.Fprintf(out, "128 KiB seq read:    %8.1f MiB/s (QD %d)\n", r.SeqReadMiBs, *qd)
	fmt.Fprintf(out, "128 KiB seq write:   %8.1f MiB/s (QD %d)\n", r.SeqWriteMiBs, *qd)
	fmt.Fprintf(out, "4 KiB read latency at QD 1: p50 %v p99 %v p99.9 %v (%d I/Os)\n",
		r.P50, r.P99, r.P999, r.LatN)
	return nil
}

// results are what runBench measures.
type results struct {
	RandReadIOPS, RandWriteIOPS float64
	SeqReadMiBs, SeqWriteMiBs   float64
	P50, P99, P999              time.Duration
	LatN                        int
}

type rw interface {
	io.ReaderAt
	io.WriterAt
	Size() int64
}

func runBench(ns rw, qd int, dur time.Duration) (results, error) {
	var r results
	var err error
	if r.RandReadIOPS, err = load(ns, qd, dur, 4096, false, true); err != nil {
		return r, err
	}
	if r.RandWriteIOPS, err = load(ns, qd, dur, 4096, true, true); err != nil {
		return r, err
	}
	iops, err := load(ns, qd, dur, 128<<10, false, false)
	if err != nil {
		return r, err
	}
	r.SeqReadMiBs = iops * 128 / 1024
	if iops, err = load(ns, qd, dur, 128<<10, true, false); err != nil {
		return r, err
	}
	r.SeqWriteMiBs = iops * 128 / 1024
	lats, err := latencies(ns, dur)
	if err != nil {
		return r, err
	}
	slices.Sort(lats)
	pct := func(p float64) time.Duration { return lats[min(len(lats)-1, int(p*float64(len(lats))))] }
	r.P50, r.P99, r.P999, r.LatN = pct(0.50), pct(0.99), pct(0.999), len(lats)
	return r, nil
}

// load runs qd goroutines of size-octet I/Os for dur and returns I/Os per
// second: random offsets, or sequential ones shared by all.
func load(ns rw, qd int, dur time.Duration, size int, write, random bool) (float64, error) {
	blocks := ns.Size() / int64(size)
	if blocks == 0 {
		return 0, fmt.Errorf("a namespace of %d octets is smaller than one %d-octet I/O", ns.Size(), size)
	}
	var next, done atomic.Int64
	var wg sync.WaitGroup
	var errOnce sync.Once
	var firstErr error
	end := time.Now().Add(dur)
	start := time.Now()
	for g := range qd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, size)
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; ; i++ {
				if i%16 == 0 && time.Now().After(end) {
					return
				}
				var blk int64
				if random {
					blk = rng.Int64N(blocks)
				} else {
					blk = next.Add(1) % blocks
				}
				var err error
				if write {
					_, err = ns.WriteAt(buf, blk*int64(size))
				} else {
					_, err = ns.ReadAt(buf, blk*int64(size))
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), firstErr
}

// latencies times 4 KiB reads one at a time for dur.
func latencies(ns rw, dur time.Duration) ([]time.Duration, error) {
	buf := make([]byte, 4096)
	blocks := ns.Size() / 4096
	rng := rand.New(rand.NewPCG(1, 2))
	var lats []time.Duration
	end := time.Now().Add(dur)
	for time.Now().Before(end) {
		t0 := time.Now()
		if _, err := ns.ReadAt(buf, rng.Int64N(blocks)*4096); err != nil {
			return nil, err
		}
		lats = append(lats, time.Since(t0))
	}
	return lats, nil
}
