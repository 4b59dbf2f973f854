//go:build interop

package interop

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
)

// A capture's TCP streams, rebuilt in Go from the pcap itself: the octets
// each side handed TCP, in sequence order, whatever the segments looked
// like. Wireshark's reassembly loses its place in long streams where
// segments were reordered or resent (perf_wireshark_test.go); this does
// not, and it says where the capture itself has holes.

// tcpFlow is one direction of one TCP connection.
type tcpFlow struct {
	src, dst netip.AddrPort
	gen      int    // the how-manyth connection between these ports in the capture, from 0
	syn      bool   // the capture holds the SYN, so data starts at its sequence number + 1
	isn      uint32 // the SYN's sequence number, or the lowest seen
	fin      bool   // the capture holds the FIN...
	finSeq   uint32 // ...at this sequence number: the stream ends there
	rst      bool   // the connection was reset this way
	segs     []flowSeg
	data     []byte // after assemble
	holes    int    // octets missing, up to the FIN if there is one
	differ   int    // octets sent twice, the copies different
	cut      int    // packets the capture truncated (snaplen)
}

type flowSeg struct {
	seq     uint32
	payload []byte
}

// flowKey names a flow: its ports, and which of the connections between
// them it belongs to (the reverse direction's has the same gen).
type flowKey struct {
	src, dst netip.AddrPort
	gen      int
}

// readFlows reads a classic pcap file (tcpdump -w) of Ethernet or Linux
// cooked frames carrying IPv4 or IPv6, and returns its TCP flows with
// their octets assembled.
func readFlows(pcap string) (map[flowKey]*tcpFlow, error) {
	f, err := os.Open(pcap)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var gh [24]byte
	if _, err := io.ReadFull(r, gh[:]); err != nil {
		return nil, fmt.Errorf("pcap header: %w", err)
	}
	var bo binary.ByteOrder
	switch binary.LittleEndian.Uint32(gh[:]) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		bo = binary.LittleEndian
	case 0xd4c3b2a1, 0x4d3cb2a1:
		bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("%s: not a classic pcap file", pcap)
	}
	link := bo.Uint32(gh[20:])
	flows := map[flowKey]*tcpFlow{}
	cur := map[[2]netip.AddrPort]*tcpFlow{} // each pair of ports' latest connection
	var rh [16]byte
	for {
		if _, err := io.ReadFull(r, rh[:]); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("pcap record: %w", err)
		}
		incl, orig := bo.Uint32(rh[8:]), bo.Uint32(rh[12:])
		pkt := make([]byte, incl)
		if _, err := io.ReadFull(r, pkt); err != nil {
			return nil, fmt.Errorf("pcap record: %w", err)
		}
		addTCP(flows, cur, link, pkt, incl < orig)
	}
	for _, fl := range flows {
		fl.assemble()
	}
	return flows, nil
}

// addTCP files one frame's TCP segment under its flow: a SYN with a new
// sequence number starts the ports' next connection.
func addTCP(flows map[flowKey]*tcpFlow, cur map[[2]netip.AddrPort]*tcpFlow, link uint32, pkt []byte, truncated bool) {
	var ip []byte
	switch link {
	case 1: // Ethernet
		if len(pkt) < 14 {
			return
		}
		ip = pkt[14:]
	case 113: // Linux cooked (SLL)
		if len(pkt) < 16 {
			return
		}
		ip = pkt[16:]
	default:
		return
	}
	var src, dst netip.Addr
	var seg []byte
	switch {
	case len(ip) >= 20 && ip[0]>>4 == 4 && ip[9] == 6:
		hl, total := int(ip[0]&15)*4, int(binary.BigEndian.Uint16(ip[2:]))
		if total >= hl && total <= len(ip) {
			ip = ip[:total] // Ethernet pads short frames
		}
		if hl > len(ip) {
			return
		}
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		seg = ip[hl:]
	case len(ip) >= 40 && ip[0]>>4 == 6 && ip[6] == 6: // no extension headers
		if n := 40 + int(binary.BigEndian.Uint16(ip[4:])); n <= len(ip) {
			ip = ip[:n]
		}
		src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		seg = ip[40:]
	default:
		return
	}
	if len(seg) < 20 || int(seg[12]>>4)*4 > len(seg) {
		return
	}
	ports := [2]netip.AddrPort{netip.AddrPortFrom(src, binary.BigEndian.Uint16(seg)), netip.AddrPortFrom(dst, binary.BigEndian.Uint16(seg[2:]))}
	seq, flags := binary.BigEndian.Uint32(seg[4:]), seg[13]
	syn := flags&0x02 != 0
	fl := cur[ports]
	if fl == nil || syn && (fl.syn && fl.isn != seq || !fl.syn && len(fl.segs) > 0) {
		gen := 0
		if fl != nil {
			gen = fl.gen + 1
		}
		fl = &tcpFlow{src: ports[0], dst: ports[1], gen: gen}
		cur[ports] = fl
		flows[flowKey{fl.src, fl.dst, gen}] = fl
	}
	if syn {
		fl.syn, fl.isn = true, seq
	}
	if truncated {
		fl.cut++
	}
	payload := seg[int(seg[12]>>4)*4:]
	if flags&0x01 != 0 { // FIN, after this segment's octets
		fl.fin, fl.finSeq = true, seq+uint32(len(payload))
	}
	if flags&0x04 != 0 {
		fl.rst = true
	}
	if len(payload) > 0 {
		fl.segs = append(fl.segs, flowSeg{seq, payload})
	}
}

// assemble lays the segments' octets out in sequence order, from the
// SYN's sequence number + 1 (or the lowest one seen), counting the octets
// the capture misses and those resent with different contents.
func (fl *tcpFlow) assemble() {
	if !fl.syn && len(fl.segs) > 0 {
		// Without the SYN: the segment furthest back, modulo 2^32.
		low := fl.segs[0].seq
		for _, s := range fl.segs {
			if int32(s.seq-low) < 0 {
				low = s.seq
			}
		}
		fl.isn = low - 1
	}
	off := func(s flowSeg) int64 { return int64(s.seq - fl.isn - 1) }
	sort.SliceStable(fl.segs, func(i, j int) bool { return off(fl.segs[i]) < off(fl.segs[j]) })
	var data []byte
	for _, s := range fl.segs {
		o := off(s)
		if o > int64(len(data)) {
			fl.holes += int(o - int64(len(data)))
			data = append(data, make([]byte, o-int64(len(data)))...)
		}
		over := min(int64(len(data))-o, int64(len(s.payload)))
		for i := range over {
			if data[o+i] != s.payload[i] {
				fl.differ++
			}
		}
		data = append(data, s.payload[over:]...)
	}
	if fl.fin {
		if end := int64(fl.finSeq - fl.isn - 1); end > int64(len(data)) {
			fl.holes += int(end - int64(len(data))) // the last octets never captured
		}
	}
	fl.data, fl.segs = data, nil
}
