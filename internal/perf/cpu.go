package perf

import (
	"fmt"
	"sync/atomic"
	"time"
)

// lastCPU is the CPU cost of the last bandwidth test this process ran, for
// the demo's comparison line.
var lastCPU atomic.Pointer[cpuCost]

// cpuUse is CPU time this process has used (cpuTime), user and system
// apart: what the stack adds to TCP's cost is in user space, while the
// kernel's part is TCP's own work.
type cpuUse struct{ user, sys time.Duration }

func (u cpuUse) sub(v cpuUse) cpuUse { return cpuUse{u.user - v.user, u.sys - v.sys} }

func (u cpuUse) total() time.Duration { return u.user + u.sys }

// cpuCost is the CPU a bandwidth measurement took in this process and the
// octets it moved (each direction of a bidirectional test counts).
type cpuCost struct {
	start cpuUse // cpuTime when the measurement began
	cpu   cpuUse
	bytes float64
	win   *cpuWindow // duration mode: the sample window's CPU; nil otherwise
}

// cpuWindow takes the CPU time at the start and at the end of a duration
// run's sample window, a margin (a quarter of -D, Params.margin) in from
// each end: the report counts only the octets moved inside it, so the CPU
// per GiB must count only the CPU spent there. Its timers fire once each
// and hold nothing: a run that fails before the window closes leaves them
// to fire into a window nobody reads.
type cpuWindow struct{ from, to atomic.Pointer[cpuUse] }

func newCPUWindow(p *Params) *cpuWindow {
	m := p.margin()
	if p.Duration <= 0 || m <= 0 || p.Infinite { // an infinite run counts all it moved
		return nil
	}
	w := &cpuWindow{}
	time.AfterFunc(m, func() { u := cpuTime(); w.from.Store(&u) })
	time.AfterFunc(p.Duration-m, func() { u := cpuTime(); w.to.Store(&u) })
	return w
}

// finish sets c.cpu: the CPU of the sample window once it has closed, else
// the CPU since the measurement began.
func (c *cpuCost) finish() {
	c.cpu = cpuTime().sub(c.start)
	if c.win != nil {
		if from, to := c.win.from.Load(), c.win.to.Load(); from != nil && to != nil {
			c.cpu = to.sub(*from)
		}
	}
}

// perGiB is CPU seconds (user+sys) per GiB moved.
func (c cpuCost) perGiB() float64 { return c.perGiBOf(c.cpu.total()) }

// perGiBOf is d in seconds per GiB moved.
func (c cpuCost) perGiBOf(d time.Duration) float64 {
	if c.bytes <= 0 {
		return 0
	}
	return d.Seconds() / (c.bytes / (1 << 30))
}

// measureCPU runs fn, a bandwidth measurement, and returns its report
// with the CPU it cost this process: with --loopback both sides. A side
// whose work goes on after fn returns (the passive side of a one-sided
// test) calls finish again when it is done.
func measureCPU(p *Params, fn func() (Report, error)) (Report, cpuCost, error) {
	c := cpuCost{start: cpuTime(), win: newCPUWindow(p)}
	r, err := fn()
	c.finish()
	c.bytes = float64(r.Iters) * float64(r.Size)
	return r, c, err
}

// minCPUBytes is the least a measurement must move for its CPU cost per
// GiB to be printed: below it the CPU measured is the set-up's and the
// clock's granularity, not the transfer's, and the ratio divides by almost
// nothing.
const minCPUBytes = 1 << 20

// ratioOK reports whether c moved enough for a CPU cost per GiB.
func (c cpuCost) ratioOK() bool { return c.bytes >= minCPUBytes }

// cpuLine is the CPU cost line under a bandwidth table.
func cpuLine(c cpuCost, loopback bool) string {
	who := "this process"
	if loopback {
		who = "both sides, in this process"
	}
	if !c.ratioOK() {
		return fmt.Sprintf(" CPU       : %.2f s user+sys for %.0f octets (%s): too little moved for a cost per GiB",
			c.cpu.total().Seconds(), c.bytes, who)
	}
	return fmt.Sprintf(" CPU       : %.2f s user+sys for %.2f GiB = %.3f s/GiB (%s): user %.3f, sys %.3f s/GiB",
		c.cpu.total().Seconds(), c.bytes/(1<<30), c.perGiB(), who, c.perGiBOf(c.cpu.user), c.perGiBOf(c.cpu.sys))
}
