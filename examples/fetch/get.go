package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/goiwarp/iwarp/tcpx"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/goiwarp/iwarp/verbs/rmem"
)

// maxChunk bounds -chunk: one RDMA Read moves at most 2 GiB - 1.
const maxChunk = 1 << 30

// get fetches the server's file into out.
func get(ctx context.Context, host string, port int, out string, chunk, depth int, tcp tcpx.Config, tc *tls.Config) error {
	if depth < 1 {
		return fmt.Errorf("-depth %d: want at least 1", depth)
	}
	dev, err := verbs.Open(verbs.DeviceAttr{MaxORD: max(depth, verbs.DefaultDeviceAttr.MaxORD)})
	if err != nil {
		return err
	}
	defer dev.Close()
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(depth)
	if err != nil {
		return err
	}
	// ORD is how many Reads we want outstanding; MPA lowers it to the
	// server's IRD if that is smaller. IRD none: the server reads nothing
	// of ours.
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, ORD: depth, IRD: -1,
		Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: 1}})
	if err != nil {
		return err
	}
	defer qp.Close()
	dctx, cancel := context.WithTimeout(ctx, startTimeout)
	err = qp.Dial(dctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)), verbs.ConnConfig{TCP: tcp, TLS: tc})
	cancel()
	if err != nil {
		return err
	}
	o, err := parseOffer(qp.PeerPrivateData())
	if err != nil {
		return err
	}
	if ord := int(qp.Params().ORD); ord < depth {
		if ord == 0 {
			return errors.New("the server allows no RDMA Reads (its IRD is 0)")
		}
		fmt.Printf("fetch: depth %d, not %d: the server serves no more Reads at once\n", ord, depth)
		depth = ord
	}
	if out == "" {
		if o.Name == "" || filepath.Base(o.Name) != o.Name || !filepath.IsLocal(o.Name) {
			return fmt.Errorf("the server's file name %q is not a plain file name: name the output with -o", o.Name)
		}
		out = o.Name
	}
	// No Read larger than the file, and no more in flight than there are.
	chunk = int(min(uint64(chunk), max(o.Len, 1)))
	depth = int(min(uint64(depth), max(reads(o.Len, chunk), 1)))
	fmt.Printf("fetch: %s from %v (%s): %d octets in Reads of %d, %d at once\n", out, qp.RemoteAddr(), tlsSummary(qp.TLS()), o.Len, chunk, depth)

	// Write next to out and rename once the checksum matches, so that out
	// is never a bad copy.
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	defer f.Close()

	start := time.Now()
	sum, err := readAll(ctx, qp, o, chunk, depth, f)
	if err != nil {
		return err
	}
	el := time.Since(start)
	if err := f.Chmod(0o644); err != nil { // CreateTemp's is 0600
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if !bytes.Equal(sum, o.Sum[:]) {
		return fmt.Errorf("SHA-256 mismatch: read %x, the server says %x; %s not written", sum, o.Sum, out)
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return err
	}
	fmt.Printf("fetch: %.1f MiB in %v: %.1f MiB/s (%.0f Mbit/s)\n", float64(o.Len)/(1<<20), el.Round(time.Millisecond),
		float64(o.Len)/(1<<20)/el.Seconds(), float64(o.Len)*8/1e6/el.Seconds())
	if st := qp.Stats(); st.TCPErr == nil {
		fmt.Printf("fetch: TCP rtt %v, retransmits %d\n", st.TCP.RTT, st.TCP.Retransmits)
	}
	fmt.Printf("fetch: SHA-256 verified: %x\n", sum)
	fmt.Printf("fetch: wrote %s\n", out)

	dctx, cancel = context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := qp.Disconnect(dctx); err != nil {
		return fmt.Errorf("%s is complete, but the disconnect failed: %w", out, err)
	}
	return nil
}

// readAll reads the offered region with up to depth Reads of chunk octets
// in flight, writes it to w in order and returns its SHA-256.
//
// An rmem.Buffer does the Reads: it splits each ReadAt into Reads of at
// most chunk octets, keeps up to depth of them in flight, lands them in
// its own registered memory and copies them out. Windows of about half the
// depth, each read by one ReadAt, are read three at a time: while one is
// written out, the Reads of the next two keep depth in flight (the Buffer
// keeps to depth, first come first served, so the windows fill in order).
func readAll(ctx context.Context, qp *verbs.QP, o offer, chunk, depth int, w io.Writer) ([]byte, error) {
	b, err := rmem.New(qp, verbs.RemoteBuffer{Addr: o.Addr, RKey: o.RKey, Len: o.Len}, rmem.Config{Depth: depth, PieceSize: chunk})
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	pr := newProgress(os.Stderr, o.Len)
	defer pr.end()
	win := (depth + 1) / 2 * chunk
	var bufs [windows][]byte
	for i := range bufs {
		bufs[i] = make([]byte, win)
	}
	err = readWindows(ctx, b, bufs, func(off uint64, data []byte) error {
		h.Write(data)
		if _, err := w.Write(data); err != nil {
			return err
		}
		pr.update(off + uint64(len(data)))
		return nil
	})
	if err != nil {
		qp.Close() // so that Close need not wait for Reads a stalled server never answers
	}
	b.Close()
	if err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// windows is how many ReadAt calls readAll keeps in flight.
const windows = 3

// readWindows reads b in windows of len(bufs[0]) octets, one into each
// buffer at a time, and hands each to out in order.
func readWindows(ctx context.Context, b *rmem.Buffer, bufs [windows][]byte, out func(off uint64, data []byte) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	size, win := uint64(b.Size()), uint64(len(bufs[0]))
	n := (size + win - 1) / win
	var done [windows]chan error
	for i := range done {
		done[i] = make(chan error, 1)
	}
	// window returns where window i reads, and into which buffer.
	window := func(i uint64) (off uint64, p []byte) {
		off = i * win
		return off, bufs[i%windows][:min(win, size-off)]
	}
	start := func(i uint64) {
		off, p := window(i)
		go func() {
			_, err := b.ReadAt(ctx, p, int64(off))
			if err != nil {
				err = fmt.Errorf("RDMA Read of octets %d to %d: %w", off, off+uint64(len(p)), err)
			}
			done[i%windows] <- err
		}()
	}
	started := min(n, windows)
	for i := range started {
		start(i)
	}
	var err error
	for i := uint64(0); i < n; i++ {
		if err = <-done[i%windows]; err == nil {
			err = out(window(i))
		}
		if err != nil {
			cancel() // the other windows' ReadAt calls return at once
			for j := i + 1; j < started; j++ {
				<-done[j%windows]
			}
			break
		}
		if started < n {
			start(started)
			started++
		}
	}
	return err
}

// reads is the number of Reads of chunk octets that size takes.
func reads(size uint64, chunk int) uint64 { return (size + uint64(chunk) - 1) / uint64(chunk) }

// progress reports a transfer: on a terminal one line that updates in
// place, elsewhere a line a second.
type progress struct {
	w           io.Writer
	tty         bool
	total       uint64
	start, last time.Time
}

func newProgress(f *os.File, total uint64) *progress {
	fi, err := f.Stat()
	now := time.Now()
	return &progress{w: f, tty: err == nil && fi.Mode()&os.ModeCharDevice != 0, total: total, start: now, last: now}
}

// update reports that n octets have arrived.
func (p *progress) update(n uint64) {
	now := time.Now()
	every := time.Second
	if p.tty {
		every = 200 * time.Millisecond
	}
	if now.Sub(p.last) < every || n == p.total {
		return
	}
	p.last = now
	rate := float64(n) / now.Sub(p.start).Seconds()
	eta := time.Duration(float64(p.total-n) / rate * float64(time.Second)).Round(time.Second)
	line := fmt.Sprintf("%.1f of %.1f MiB  %3.0f%%  %.1f MiB/s  ETA %v",
		float64(n)/(1<<20), float64(p.total)/(1<<20), float64(n)*100/float64(p.total), rate/(1<<20), eta)
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\033[K", line)
	} else {
		fmt.Fprintf(p.w, "fetch: %s\n", line)
	}
}

// end clears the terminal's progress line.
func (p *progress) end() {
	if p.tty && p.last != p.start {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
