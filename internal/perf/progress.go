package perf

import (
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// progress shows a line that updates every second during a duration-mode
// run, on a terminal only. A nil *progress does nothing.
type progress struct {
	w     io.Writer
	pr    *printer
	bytes atomic.Uint64
	msgs  atomic.Uint64
	stop  chan struct{}
	wg    sync.WaitGroup
}

// startProgress starts the line for a -D run when pr writes the full
// report to a terminal.
func startProgress(pr *printer, size int) *progress {
	p := pr.p
	if p.Duration == 0 || p.Infinite || !pr.full() || !isTerminal(pr.w) {
		return nil
	}
	pg := &progress{w: pr.w, pr: pr, stop: make(chan struct{})}
	pg.wg.Add(1)
	go pg.loop(size)
	return pg
}

func (pg *progress) loop(size int) {
	defer pg.wg.Done()
	start := time.Now()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, lastM, lastT := uint64(0), uint64(0), start
	unit := "MiB/sec"
	if pg.pr.p.Gbits {
		unit = "Gb/sec"
	}
	bw := pg.pr.p.Test.BW()
	for {
		select {
		case <-pg.stop:
			fmt.Fprint(pg.w, "\r\033[K")
			return
		case now := <-t.C:
			b, m := pg.bytes.Load(), pg.msgs.Load()
			secs := now.Sub(lastT).Seconds()
			rate, mrate := float64(b-last)/secs, float64(m-lastM)/secs
			last, lastM, lastT = b, m, now
			fmt.Fprintf(pg.w, "\r %-7d  %3.0f/%.0f s ", size, now.Sub(start).Seconds(), pg.pr.p.Duration.Seconds())
			if bw {
				fmt.Fprintf(pg.w, " %10.2f %s  %9.6f Mpps\033[K", pg.pr.bwUnit(rate), unit, mrate/1e6)
			} else {
				fmt.Fprintf(pg.w, " %10.0f round trips/sec\033[K", mrate)
			}
		}
	}
}

// add counts messages of size octets done.
func (pg *progress) add(msgs uint64, size int) {
	if pg != nil && msgs > 0 {
		pg.msgs.Add(msgs)
		pg.bytes.Add(msgs * uint64(size))
	}
}

func (pg *progress) done() {
	if pg == nil {
		return
	}
	close(pg.stop)
	pg.wg.Wait()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminalFile(f)
}

func randRead(b []byte) { rand.Read(b) }
