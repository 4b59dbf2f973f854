//go:build interop

package interop

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Wireshark judges a loopback run of every iwarp-perf test, with CRCs on and
// off and markers off, client to server, server to client and both ways:
// every octet of every judged direction belongs to an FPDU Wireshark
// decoded, every CRC is good, no frame is malformed, and the only expert
// warnings are the two RFC 6581 notes (Rev 2, and its S bit read as a
// reserved bit).
//
// Wireshark 4.0's marker decoding (packet-iwarp-mpa.c) sets its limits:
//   - it expects one FPDU per TCP segment: with markers, iwarp-perf runs with
//     --fpdu-per-segment;
//   - it keeps one marker flag per connection: when only one direction
//     carries markers it strips "markers" from the other one too, so that
//     direction is judged in the runs without markers (and counted here as
//     not judged);
//   - a segment that ends exactly where a marker is due makes it count one
//     marker too many (RFC 5044 section 4.3 puts that marker at the start
//     of the next FPDU, as we do) and lose its place in the stream for many
//     segments after. --fpdu-per-segment shortens such an FPDU by a word
//     (mpa.Writer.EndsAtMarker) when it carries payload; the test reports a
//     segment that still ends there.
func TestWiresharkJudgesIwarpPerf(t *testing.T) {
	bin := buildPerf(t)
	tests := []struct{ name, size string }{
		{"write_bw", "8192"}, {"read_bw", "8192"}, {"send_bw", "8192"}, {"atomic_bw", ""},
		{"write_lat", "4096"}, {"read_lat", "4096"}, {"send_lat", "4096"}, {"atomic_lat", ""},
	}
	for _, tc := range tests {
		for _, crc := range []string{"on", "off"} {
			for _, mk := range []string{"none", "tx", "rx", "both"} {
				t.Run(fmt.Sprintf("%s/crc=%s/markers=%s", tc.name, crc, mk), func(t *testing.T) {
					args := []string{tc.name, "--loopback", "-n", "100",
						"--crc", crc, "--markers", mk, "--fpdu", "1500"}
					if tc.size != "" {
						args = append(args, "-s", tc.size)
					}
					if mk != "none" {
						args = append(args, "--fpdu-per-segment")
					}
					var pcap string
					for try := 1; ; try++ {
						var dropped int
						pcap, dropped = capturePerf(t, bin, args)
						if dropped == 0 {
							break
						}
						// Not the stack's doing: run it again.
						t.Logf("try %d: tcpdump dropped %d packets, the capture cannot be judged", try, dropped)
						require.Less(t, try, 3, "tcpdump kept dropping packets")
					}

					r := judgePerf(t, pcap)
					t.Logf("iwarp-perf %s: %s", strings.Join(args, " "), r)
					require.NotZero(t, r.conns, "MPA start-ups seen")
					require.Empty(t, r.problems, "Wireshark's verdict")
					require.Positive(t, r.judged, "FPDUs judged")
					if crc == "on" {
						require.Equal(t, r.judged, r.goodCRC, "every judged FPDU's CRC checked and good")
					} else {
						require.Zero(t, r.goodCRC, "no CRC checked when none was negotiated")
					}
					if mk == "both" || mk == "none" {
						require.Zero(t, r.unjudgedDirs, "both directions judged")
					}
					// Our own walk of the whole streams judges what Wireshark
					// could not: the octets it lost its place in, and the
					// directions with markers, whose decoding it gets wrong.
					conns, fpdus, problems := walkCapture(t, pcap)
					t.Logf("walk: %d connections, %d FPDUs", conns, fpdus)
					require.Empty(t, problems, "the walk's verdict")
					require.Equal(t, r.conns, conns, "connections walked")
					switch {
					case mk != "none":
						require.GreaterOrEqual(t, fpdus, r.judged, "FPDUs: the walk's, at least Wireshark's")
					case r.unjudgedOctets == 0:
						require.Equal(t, r.judged, fpdus, "FPDUs: Wireshark's, and the walk's")
					default:
						require.Greater(t, fpdus, r.judged, "FPDUs: the walk's, beyond Wireshark's")
					}
				})
			}
		}
	}
}

// capturePerf runs iwarp-perf with args on a free port under tcpdump and
// returns the capture and how many packets tcpdump dropped.
func capturePerf(t *testing.T, bin string, args []string) (pcap string, dropped int) {
	t.Helper()
	p := freePort(t)
	args = append(args, "-p", strconv.Itoa(p))
	pcap, stop := capture(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	require.NoError(t, err, "iwarp-perf %s:\n%s", strings.Join(args, " "), out)
	return pcap, stop()
}

// buildPerf builds cmd/iwarp-perf into the test's temporary directory.
func buildPerf(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "iwarp-perf")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/goiwarp/iwarp/cmd/iwarp-perf").CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	return bin
}

// segment is one TCP segment with data, as Wireshark dissected it.
type segment struct {
	frame, stream, src int
	seq, len           uint64 // relative sequence number, payload octets
	startup            bool   // MPA Request or Reply
	markerFlag         bool   // the start-up frame's M bit
	ulpdus             []int  // ULPDU lengths of the FPDUs decoded in it
	good, bad          int    // CRC checks
	malformed          bool
	retransmitted      bool // a copy of octets sent before
	outOfOrder         bool // overtaken by a segment with later octets
}

// direction is one direction of one TCP connection.
type direction struct {
	start   uint64 // relative sequence number of the first FPDU octet
	markers bool   // the peer asked for markers in this direction
	segs    []*segment
}

type perfVerdict struct {
	conns, judged, goodCRC, unjudgedDirs int
	unjudgedOctets                       uint64 // after Wireshark lost its place (see judgeDirection)
	problems, notes                      []string
}

func (v perfVerdict) String() string {
	s := fmt.Sprintf("%d connections, %d FPDUs judged (%d good CRCs), %d directions not judged",
		v.conns, v.judged, v.goodCRC, v.unjudgedDirs)
	if v.unjudgedOctets > 0 {
		s += fmt.Sprintf(", %d octets not judged", v.unjudgedOctets)
	}
	for _, n := range v.notes {
		s += "; " + n
	}
	return s
}

var (
	pdmlNum    = regexp.MustCompile(`<field name="num" [^>]*show="(\d+)"`)
	expertLine = regexp.MustCompile(`(?m)^\s+\d+\s+\w+\s+IWARP_\w+\s+(.*)$`)
)

func judgePerf(t *testing.T, pcap string) perfVerdict {
	t.Helper()
	var v perfVerdict
	frames := map[int]*segment{}
	var order []*segment
	out := tshark(t, pcap, "-Y", "tcp.len > 0", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,",
		"-e", "frame.number", "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tcp.seq", "-e", "tcp.len",
		"-e", "iwarp_mpa.key.req", "-e", "iwarp_mpa.key.rep", "-e", "iwarp_mpa.marker_flag", "-e", "iwarp_mpa.ulpdulength",
		"-e", "tcp.analysis.retransmission", "-e", "tcp.analysis.out_of_order")
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		f := strings.Split(l, "\t")
		require.Len(t, f, 11, "tshark fields: %q", l)
		s := &segment{}
		s.frame, _ = strconv.Atoi(f[0])
		s.stream, _ = strconv.Atoi(f[1])
		s.src, _ = strconv.Atoi(f[2])
		s.seq, _ = strconv.ParseUint(f[3], 10, 64)
		s.len, _ = strconv.ParseUint(f[4], 10, 64)
		s.startup = f[5] != "" || f[6] != ""
		s.markerFlag = f[7] == "1" || f[7] == "True"
		if f[8] != "" {
			for _, u := range strings.Split(f[8], ",") {
				n, _ := strconv.Atoi(u)
				s.ulpdus = append(s.ulpdus, n)
			}
		}
		s.retransmitted = f[9] != ""
		s.outOfOrder = f[10] != ""
		frames[s.frame] = s
		order = append(order, s)
	}
	for _, pkt := range strings.Split(tshark(t, pcap, "-Y", "iwarp_mpa.fpdu", "-T", "pdml"), "<packet>")[1:] {
		m := pdmlNum.FindStringSubmatch(pkt)
		require.NotNil(t, m, "PDML packet without a frame number")
		n, _ := strconv.Atoi(m[1])
		if s := frames[n]; s != nil {
			s.good, s.bad = strings.Count(pkt, "(Good CRC32)"), strings.Count(pkt, "(Bad CRC32")
		}
	}
	for _, l := range strings.Split(tshark(t, pcap, "-Y", "_ws.malformed || _ws.expert.severity == error", "-T", "fields", "-e", "frame.number"), "\n") {
		if n, err := strconv.Atoi(strings.TrimSpace(l)); err == nil {
			if s := frames[n]; s != nil {
				s.malformed = true
			} else {
				v.problems = append(v.problems, fmt.Sprintf("frame %d: malformed or expert error", n))
			}
		}
	}
	expert := tshark(t, pcap, "-q", "-z", "expert")
	if strings.Contains(expert, "Errors (") {
		v.problems = append(v.problems, "expert errors:\n"+expert)
	}
	for _, w := range expertLine.FindAllStringSubmatch(expert, -1) {
		if !strings.HasPrefix(w[1], "Rev field is NOT set to one") && !strings.HasPrefix(w[1], "Res field is NOT set to zero") {
			v.problems = append(v.problems, "expert: "+w[1])
		}
	}

	// Group by connection and direction; the start-up frames say where the
	// FPDUs begin and which directions carry markers.
	type key struct{ stream, src int }
	dirs := map[key]*direction{}
	for _, s := range order {
		k := key{s.stream, s.src}
		d := dirs[k]
		if d == nil {
			d = &direction{}
			dirs[k] = d
		}
		if s.startup {
			d.start = s.seq + s.len
			// M in a Request or Reply asks the other side for markers.
			if s.markerFlag {
				for _, s2 := range order {
					if s2.stream == s.stream && s2.src != s.src {
						k2 := key{s2.stream, s2.src}
						if dirs[k2] == nil {
							dirs[k2] = &direction{}
						}
						dirs[k2].markers = true
						break
					}
				}
			}
			v.conns++
			continue
		}
		d.segs = append(d.segs, s)
	}
	v.conns /= 2
	for k, d := range dirs {
		otherMarked := false
		for k2, d2 := range dirs {
			if k2.stream == k.stream && k2.src != k.src && d2.markers {
				otherMarked = true
			}
		}
		if !d.markers && otherMarked {
			// Wireshark strips markers this direction does not have.
			if len(d.segs) > 0 {
				v.unjudgedDirs++
			}
			continue
		}
		v.judgeDirection(k.stream, k.src, d)
	}
	return v
}

// framing is the stream length of an FPDU without markers.
func framing(ulpdu int) uint64 {
	return uint64(2 + ulpdu + (4-(ulpdu+2)%4)%4 + 4)
}

// wiresharkMinFPDU is the FPDU header Wireshark 4.0 must see in one piece:
// packet-iwarp-mpa.c hands tcp_dissect_pdus MPA_SMALLEST_FPDU_LEN (8) as the
// fixed length, and when a segment ends fewer octets than that into an FPDU
// the heuristic dissector drops them and reads the next segment as if an
// FPDU began there (seen as one FPDU lost, or as a run of bad CRCs with
// ULPDU lengths read from inside a payload).
const wiresharkMinFPDU = 8

func (v *perfVerdict) judgeDirection(stream, src int, d *direction) {
	problem := func(s *segment, f string, a ...any) {
		v.problems = append(v.problems, fmt.Sprintf("stream %d port %d frame %d (seq %d len %d): %s",
			stream, src, s.frame, s.seq-d.start, s.len, fmt.Sprintf(f, a...)))
	}
	// Wireshark reports a retransmitted segment's octets once, where they
	// were first seen; the stream is judged in sequence order.
	var segs []*segment
	retransmitted := 0
	for _, s := range d.segs {
		if s.retransmitted {
			retransmitted++
			continue
		}
		segs = append(segs, s)
	}
	sort.SliceStable(segs, func(i, j int) bool { return segs[i].seq < segs[j].seq })
	if retransmitted > 0 {
		v.notes = append(v.notes, fmt.Sprintf("stream %d port %d: %d retransmitted segments left out", stream, src, retransmitted))
	}
	if d.markers {
		v.judgeMarkedDirection(stream, src, d, segs, problem)
		return
	}

	// Without markers FPDUs run across segments. Walk the FPDU boundaries
	// Wireshark decoded and find the first segment that ends fewer than
	// wiresharkMinFPDU octets into an FPDU (cut): if anything goes wrong
	// after it and only after it, Wireshark lost its place there and the
	// rest of the direction is not judged.
	type trouble struct {
		at  int
		msg string
		s   *segment
	}
	var troubles []trouble
	pos, end, cut := d.start, d.start, -1
	var cutInto uint64
	for i, s := range segs {
		if s.malformed {
			troubles = append(troubles, trouble{i, "malformed", s})
		}
		if s.bad > 0 {
			troubles = append(troubles, trouble{i, fmt.Sprintf("%d bad CRCs", s.bad), s})
		}
		for _, u := range s.ulpdus {
			pos += framing(u)
		}
		end = max(end, s.seq+s.len)
		if cut < 0 && end > pos && end-pos < wiresharkMinFPDU {
			cut, cutInto = i, end-pos
		}
	}
	// Where TCP first delivered octets out of order: on loopback a segment
	// can overtake the one before it (each CPU has its own receive
	// backlog), and the overtaken one is resent. Wireshark 4.0's
	// out-of-order reassembly then at times loses its place in the FPDU
	// stream; judge the direction up to there if it was in step.
	reorder, rk, rpos, rend, maxFPDU := firstReordered(d), 0, d.start, d.start, uint64(0)
	for _, s := range segs {
		for _, u := range s.ulpdus {
			maxFPDU = max(maxFPDU, framing(u))
		}
		if s.seq+s.len > reorder {
			break
		}
		rk++
		rend = max(rend, s.seq+s.len)
		for _, u := range s.ulpdus {
			rpos += framing(u)
		}
	}
	inStep := rk > 0 && rpos <= rend && rend-rpos < maxFPDU
	var ok []*segment
	switch {
	case len(troubles) == 0 && pos == end:
		ok = segs
	case cut >= 0 && (len(troubles) == 0 || troubles[0].at > cut):
		ok = segs[:cut+1]
		c := segs[cut]
		v.unjudgedOctets += end - (c.seq + c.len)
		v.notes = append(v.notes, fmt.Sprintf("stream %d port %d: frame %d ends %d octets into an FPDU, where Wireshark 4.0 "+
			"loses its place; the %d octets after it are not judged", stream, src, c.frame, cutInto, end-(c.seq+c.len)))
	case reorder < end && inStep && (len(troubles) == 0 || troubles[0].at >= rk):
		ok = segs[:rk]
		v.unjudgedOctets += end - rend
		v.notes = append(v.notes, fmt.Sprintf("stream %d port %d: octets from %d arrived out of order and were resent, "+
			"where Wireshark 4.0's reassembly may lose its place; the %d octets after it are not judged",
			stream, src, reorder-d.start, end-rend))
	default:
		for _, tr := range troubles {
			problem(tr.s, "%s", tr.msg)
		}
		if pos != end {
			v.problems = append(v.problems, fmt.Sprintf("stream %d port %d: FPDUs decoded cover %d of %d octets",
				stream, src, pos-d.start, end-d.start))
		}
		ok = segs
	}
	for _, s := range ok {
		v.goodCRC += s.good
		v.judged += len(s.ulpdus)
	}
}

// firstReordered returns the stream offset of the first octets TCP did not
// deliver in order: a segment Wireshark flags as a retransmission or out of
// order, or one captured after a segment with later octets (a hole it
// fills, whatever Wireshark called it); MaxUint64 if none.
func firstReordered(d *direction) uint64 {
	reorder, maxEnd := uint64(math.MaxUint64), uint64(0)
	for _, s := range d.segs { // in capture order
		if s.retransmitted || s.outOfOrder || s.seq < maxEnd {
			reorder = min(reorder, s.seq)
		}
		maxEnd = max(maxEnd, s.seq+s.len)
	}
	return reorder
}

// judgeMarkedDirection judges a direction that carries markers, with one
// FPDU in each segment (--fpdu-per-segment) and a marker every 512 octets
// from d.start. As without markers (judgeDirection), Wireshark 4.0's
// reassembly may lose its place where TCP delivered octets out of order:
// the segments from there on are not judged, those before are.
func (v *perfVerdict) judgeMarkedDirection(stream, src int, d *direction, segs []*segment, problem func(*segment, string, ...any)) {
	start, reorder, unjudged := d.start, firstReordered(d), uint64(0)
	for _, s := range segs {
		if s.seq+s.len > reorder {
			unjudged += s.len
			continue
		}
		if s.malformed {
			problem(s, "malformed")
		}
		if s.bad > 0 {
			problem(s, "%d bad CRCs", s.bad)
		}
		v.goodCRC += s.good
		v.judged += len(s.ulpdus)
		off, end := s.seq-start, s.seq-start+s.len
		markers := (end+511)/512 - (off+511)/512
		switch {
		case len(s.ulpdus) == 1 && framing(s.ulpdus[0])+4*markers == s.len:
		case end%512 == 0:
			problem(s, "ends where a marker is due, which Wireshark 4.0 miscounts (%d FPDUs decoded)", len(s.ulpdus))
		default:
			problem(s, "%d FPDUs decoded (ULPDU lengths %v), %d markers due", len(s.ulpdus), s.ulpdus, markers)
		}
	}
	if unjudged > 0 {
		v.unjudgedOctets += unjudged
		v.notes = append(v.notes, fmt.Sprintf("stream %d port %d: octets from %d arrived out of order and were resent, "+
			"where Wireshark 4.0's reassembly may lose its place; the %d octets after it are not judged",
			stream, src, reorder-start, unjudged))
	}
}
