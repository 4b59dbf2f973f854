//go:build netns

package wan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Emulator joins two namespaces with a TUN device in each ("wan0") and
// forwards IP packets between them in this process, delaying, dropping and
// rate-limiting them as netem does. It exists because a kernel without
// sch_netem (CONFIG_NET_SCH_NETEM unset, as on the machine these tests
// were written on) has no other way to delay packets.
//
// The TUN devices are opened with IFF_VNET_HDR and TSO/checksum offload, so
// the kernel hands over TCP segments of up to 64 KB (GSO) with a
// virtio_net_hdr, and the emulator writes them to the other device
// unchanged; the receiving stack takes them as a NIC's GRO would. That is
// what lets one goroutine pair per direction carry 1 Gbit/s on a small
// machine. It also makes loss act on whole GSO packets, which is what netem
// on a veth (TSO on by default) does too: a drop takes out a burst of up to
// 45 MSS-sized segments. The rate limit counts every segment's IP and TCP
// headers, as if the GSO packet had been cut up on the wire, and nothing of
// Ethernet (netem counts the same by default).
//
// Each direction is a reader goroutine, which drops (loss), stamps each
// packet with its departure time from the rate limiter (tail drop past
// Limit) plus the delay, and a writer goroutine, which writes the packets
// when their time comes. Packets keep their order.
type Emulator struct {
	fa, fb *os.File
	ab, ba *pipe
	wg     sync.WaitGroup
}

// TUN constants that golang.org/x/sys/unix lacks (linux/if_tun.h).
const (
	tunFCsum = 0x01
	tunFTSO4 = 0x02
	tunFTSO6 = 0x04

	vnetHdrLen  = 10 // struct virtio_net_hdr, without num_buffers
	maxPacket   = vnetHdrLen + 65535
	smallPacket = 2048 // packets up to this size are copied out of the pool buffer
	queueLen    = 1 << 16
)

// NewEmulator makes the TUN devices inside a and b, addresses them
// (point-to-point, MTU 1500) and starts forwarding with no impairment.
func NewEmulator(a, b *NS, addrA, addrB string) (*Emulator, error) {
	e := &Emulator{}
	var err error
	if e.fa, err = openTun(a, "wan0"); err != nil {
		return nil, err
	}
	if e.fb, err = openTun(b, "wan0"); err != nil {
		e.fa.Close()
		return nil, err
	}
	for _, s := range []struct {
		ns          *NS
		local, peer string
	}{{a, addrA, addrB}, {b, addrB, addrA}} {
		if _, err = s.ns.IP("addr", "add", s.local, "peer", s.peer, "dev", "wan0"); err == nil {
			// A long device queue: the emulator reads in bursts, and a
			// packet the kernel drops at the TUN device is loss nobody
			// asked for.
			_, err = s.ns.IP("link", "set", "wan0", "mtu", "1500", "txqueuelen", "10000", "up")
		}
		if err != nil {
			e.fa.Close()
			e.fb.Close()
			return nil, err
		}
	}
	e.ab = newPipe("A->B", e.fa, e.fb)
	e.ba = newPipe("B->A", e.fb, e.fa)
	for _, p := range []*pipe{e.ab, e.ba} {
		e.wg.Add(2)
		go func() { defer e.wg.Done(); p.readLoop() }()
		go func() { defer e.wg.Done(); p.writeLoop() }()
	}
	return e, nil
}

// openTun creates a TUN device inside ns: the device belongs to the
// namespace of the thread that opens /dev/net/tun.
func openTun(ns *NS, name string) (*os.File, error) {
	var f *os.File
	err := ns.Do(func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("wan: open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err == nil {
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		}
		if err == nil {
			err = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tunFCsum|tunFTSO4|tunFTSO6)
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("wan: TUN device %s in %s: %w", name, ns.Name, err)
		}
		// Non-blocking, so os.File uses the netpoller and Close wakes a
		// blocked Read.
		f = os.NewFile(uintptr(fd), "tun:"+ns.Name)
		return nil
	})
	return f, err
}

// Set changes the impairment of both directions; packets already queued
// keep the times they were given.
func (e *Emulator) Set(im Impairment) {
	if im.Rate > 0 && im.Limit == 0 {
		im.Limit = int(max(im.Rate*0.050/8, 256<<10))
	}
	e.ab.imp.Store(&im)
	e.ba.imp.Store(&im)
}

// Stats returns the packet counters of both directions.
func (e *Emulator) Stats() string {
	return e.ab.stats() + "; " + e.ba.stats()
}

// LinkCounters are one direction's packet counters since the link was made.
type LinkCounters struct {
	Packets, Octets, Lost, TailDrops uint64
}

// Sub is c minus an earlier snapshot.
func (c LinkCounters) Sub(old LinkCounters) LinkCounters {
	return LinkCounters{c.Packets - old.Packets, c.Octets - old.Octets, c.Lost - old.Lost, c.TailDrops - old.TailDrops}
}

func (c LinkCounters) String() string {
	avg := 0.0
	if c.Packets > 0 {
		avg = float64(c.Octets) / float64(c.Packets)
	}
	return fmt.Sprintf("%d packets of %.0f octets on average, %d lost, %d tail drops", c.Packets, avg, c.Lost, c.TailDrops)
}

// Counters returns the counters of A to B and B to A.
func (e *Emulator) Counters() (ab, ba LinkCounters) {
	return e.ab.counters(), e.ba.counters()
}

func (p *pipe) counters() LinkCounters {
	return LinkCounters{p.packets.Load(), p.bytes.Load(), p.lost.Load(), p.tailDrops.Load()}
}

// Close stops forwarding and closes the TUN devices, which deletes them.
func (e *Emulator) Close() error {
	err := errors.Join(e.fa.Close(), e.fb.Close())
	e.wg.Wait()
	return err
}

type packet struct {
	buf *[]byte // pool buffer, or nil when b was copied out
	b   []byte
	at  time.Time
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, maxPacket); return &b }}

type pipe struct {
	name     string
	src, dst *os.File
	imp      atomic.Pointer[Impairment]
	q        chan packet

	// Reader state.
	rng     *rand.Rand
	lastDep time.Time

	packets, bytes, lost, tailDrops, writeErrs atomic.Uint64
}

func newPipe(name string, src, dst *os.File) *pipe {
	p := &pipe{name: name, src: src, dst: dst, q: make(chan packet, queueLen),
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	p.imp.Store(&Impairment{})
	return p
}

func (p *pipe) stats() string {
	return fmt.Sprintf("%s %d packets %d octets (wire), %d lost, %d tail drops, %d write errors", p.name,
		p.packets.Load(), p.bytes.Load(), p.lost.Load(), p.tailDrops.Load(), p.writeErrs.Load())
}

func (p *pipe) readLoop() {
	defer close(p.q)
	for {
		bp := bufPool.Get().(*[]byte)
		n, err := p.src.Read(*bp)
		if err != nil {
			bufPool.Put(bp)
			return // closed
		}
		now := time.Now()
		im := p.imp.Load()
		if im.Loss > 0 && (im.Loss >= 1 || p.rng.Float64() < im.Loss) {
			p.lost.Add(1)
			bufPool.Put(bp)
			continue
		}
		wire := wireLen((*bp)[:n])
		at := now
		if im.Rate > 0 {
			start := now
			if p.lastDep.After(now) {
				start = p.lastDep
				if queued := start.Sub(now).Seconds() * im.Rate / 8; queued > float64(im.Limit) {
					p.tailDrops.Add(1)
					bufPool.Put(bp)
					continue
				}
			}
			p.lastDep = start.Add(time.Duration(float64(wire*8) / im.Rate * 1e9))
			at = p.lastDep
		}
		at = at.Add(im.Delay)
		p.packets.Add(1)
		p.bytes.Add(uint64(wire))
		pk := packet{buf: bp, b: (*bp)[:n], at: at}
		if n <= smallPacket {
			pk.b = append([]byte(nil), pk.b...)
			pk.buf = nil
			bufPool.Put(bp)
		}
		p.q <- pk
	}
}

func (p *pipe) writeLoop() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for pk := range p.q {
		if d := time.Until(pk.at); d > 0 {
			t.Reset(d)
			<-t.C
		}
		if _, err := p.dst.Write(pk.b); err != nil {
			p.writeErrs.Add(1)
		}
		if pk.buf != nil {
			bufPool.Put(pk.buf)
		}
	}
}

// wireLen is the IP octets a packet read from the TUN device takes on the
// wire: a GSO packet counts the headers of every segment it stands for.
func wireLen(b []byte) int {
	if len(b) < vnetHdrLen {
		return len(b)
	}
	gsoType, gsoSize := b[1], int(binary.LittleEndian.Uint16(b[4:6]))
	ip := b[vnetHdrLen:]
	if gsoType == 0 || gsoSize == 0 || len(ip) < 20 {
		return len(ip)
	}
	var hl int
	switch ip[0] >> 4 {
	case 4:
		hl = int(ip[0]&0xf) * 4
	case 6:
		hl = 40
	default:
		return len(ip)
	}
	if len(ip) < hl+13 {
		return len(ip)
	}
	hl += int(ip[hl+12]>>4) * 4 // TCP header with options
	payload := len(ip) - hl
	if payload <= 0 {
		return len(ip)
	}
	segs := (payload + gsoSize - 1) / gsoSize
	return len(ip) + (segs-1)*hl
}
