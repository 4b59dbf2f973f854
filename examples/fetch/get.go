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
	sum, err := readAll(ctx, qp, cq, o, chunk, depth, f)
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

// readAll reads the offered region with depth Reads of chunk octets in
// flight, writes it to w in order and returns its SHA-256.
//
// The Reads land in a ring of depth slots of one registered buffer. Read
// i goes to slot i mod depth; completions come in posting order, so the
// next one is always for the oldest Read, and once it is written out its
// slot takes the next Read. A slot is never reused before its completion:
// until then the buffer is the stack's.
func readAll(ctx context.Context, qp *verbs.QP, cq *verbs.CQ, o offer, chunk, depth int, w io.Writer) (_ []byte, err error) {
	size, n := o.Len, reads(o.Len, chunk)
	ring, err := qp.PD().RegMR(make([]byte, depth*chunk), verbs.LocalWrite)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			qp.Close() // Reads may be in flight: ended (flushed) before their buffer goes
		}
		ring.Dereg()
	}()
	// extent returns where Read i reads, and where it lands in the ring.
	extent := func(i uint64) (off uint64, slot, length int) {
		off = i * uint64(chunk)
		return off, int(i%uint64(depth)) * chunk, int(min(uint64(chunk), size-off))
	}

	h := sha256.New()
	pr := newProgress(os.Stderr, size)
	defer pr.end()
	var posted, done uint64
	wcs := make([]verbs.WC, depth)
	for done < n {
		for ; posted < n && posted-done < uint64(depth); posted++ {
			off, slot, length := extent(posted)
			_, err := qp.PostSend(verbs.SendWR{ID: posted, Opcode: verbs.OpRDMARead, Flags: verbs.Signaled,
				SGL: []verbs.SGE{ring.SGE(slot, length)}, RemoteAddr: o.Addr + off, RKey: o.RKey})
			if err != nil {
				return nil, err
			}
		}
		k, err := cq.PollWait(ctx, wcs) // ctx.Err() once ctx has ended
		if err != nil {
			return nil, err
		}
		for _, wc := range wcs[:k] {
			off, slot, length := extent(done)
			switch {
			case wc.Status != verbs.Success:
				// The first failure ends the QP; QP.Err says why, and the
				// Reads after it complete flushed.
				return nil, fmt.Errorf("RDMA Read of octets %d to %d: %v (%v)", off, off+uint64(length), wc.Status, qp.Err())
			case wc.ID != done || int(wc.ByteLen) != length:
				return nil, fmt.Errorf("completion %v: want Read %d of %d octets", wc, done, length)
			}
			data := ring.Buf()[slot : slot+length]
			h.Write(data)
			if _, err := w.Write(data); err != nil {
				return nil, err
			}
			done++
			pr.update(off + uint64(length))
		}
	}
	return h.Sum(nil), nil
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
