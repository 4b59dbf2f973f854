//go:build interop

package interop

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/interop/siw"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// siwCRCError is one "siw: crc error. in: X, own Y" of the guest's log:
// the CRC siw read from an FPDU's trailer and the one it took itself.
type siwCRCError struct{ in, own uint32 }

// siwCRCLog is the shell that prints siw's CRC errors from the guest's
// dmesg as "in:own" pairs, for guestSiwCRCErrors (a guest script's
// "SIW_CRC_LOG" line).
const siwCRCLog = `$(dmesg | sed -n 's/.*siw: crc error\. in: \([0-9a-f]*\), own \([0-9a-f]*\).*/\1:\2/p' | tr '\n' ' ').`

// guestSiwCRCErrors reads the guest's SIW_CRC_LOG line; count is its
// SIW_CRC_ERRORS.
func guestSiwCRCErrors(t *testing.T, vm *siw.VM, count string, timeout time.Duration) []siwCRCError {
	t.Helper()
	var errs []siwCRCError
	for _, f := range strings.Fields(strings.TrimSuffix(guestValue(t, vm, "SIW_CRC_LOG", timeout), ".")) {
		in, own, ok := strings.Cut(f, ":")
		a, err1 := strconv.ParseUint(in, 16, 32)
		b, err2 := strconv.ParseUint(own, 16, 32)
		require.True(t, ok && err1 == nil && err2 == nil, "siw's CRC error %q", f)
		errs = append(errs, siwCRCError{uint32(a), uint32(b)})
	}
	require.Equal(t, count, strconv.Itoa(len(errs)), "siw's CRC errors, counted and read")
	return errs
}

// judgeOurStreams is the judge of a capture (complete unless dropped > 0)
// of the connections a guest's siw opened to our target on port: our
// side of each, walked from the MPA Reply to its end (mpawalk_test.go),
// must be FPDUs back to back, each with its CRC right. Each CRC error siw
// logged must then be siw's own: its split-trailer copy
// (siwSplitCopy) of one of our FPDUs, which the capture shows right. It
// returns whether every error was so explained (true with none), and the
// FPDUs walked both ways (0 when the capture is incomplete).
func judgeOurStreams(t *testing.T, pcap string, dropped, port int, siwErrs []siwCRCError) (explained bool, fpdus int) {
	t.Helper()
	if dropped > 0 {
		if len(siwErrs) > 0 {
			t.Errorf("siw reported %d CRC errors and tcpdump dropped %d packets: no telling whose they are", len(siwErrs), dropped)
			return false, 0
		}
		t.Logf("tcpdump dropped %d packets: our FPDUs not walked", dropped)
		return true, 0
	}
	flows, err := readFlows(pcap)
	require.NoError(t, err)
	type conn struct {
		name string
		resp []byte
		w    mpaWalk
	}
	var conns []conn
	total := 0
	for k, ours := range flows {
		if int(k.src.Port()) != port {
			continue
		}
		peer := flows[flowKey{k.dst, k.src, k.gen}]
		name := fmt.Sprintf("connection from %v", k.dst)
		if !assert.NotNil(t, peer, "%s: the peer's side not captured", name) {
			continue
		}
		for _, fl := range []*tcpFlow{ours, peer} {
			assert.True(t, fl.syn, "%s: the SYN not captured", name)
			assert.Zero(t, fl.holes+fl.cut, "%s: octets missing from the capture, packets cut", name)
			assert.Zero(t, fl.differ, "%s: octets TCP sent twice, different", name)
		}
		pw, w := walkConn(peer.data, ours.data)
		t.Logf("%s: ours: %v; siw's: %v", name, w, pw)
		assert.NoError(t, w.err, "%s: our side is not MPA as RFC 5044 frames it", name)
		// A stream that stops inside an FPDU: the capture or our side cut
		// short, unless the connection was reset (siw's recovery) while
		// our FPDUs were on their way.
		assert.True(t, w.tail == 0 || ours.rst || peer.rst, "%s: our side ends %d octets into an FPDU", name, w.tail)
		assert.True(t, peer.fin || peer.rst, "%s: the capture ends before the guest closed the connection", name)
		assert.Zero(t, w.badCRC, "%s: FPDUs of ours with a wrong CRC", name)
		assert.True(t, w.crcFlag, "%s: CRCs on", name)
		total += w.fpdus
		fpdus += w.fpdus + pw.fpdus
		conns = append(conns, conn{name, ours.data, w})
	}
	require.NotEmpty(t, conns, "connections captured")
	t.Logf("our side of %d connections: %d FPDUs walked", len(conns), total)
	explained = !t.Failed()
	for _, e := range siwErrs {
		found := false
		for _, c := range conns {
			if k, a := explainSiwCRC(c.resp, c.w.start, e.in, e.own); k >= 0 {
				t.Logf("siw's CRC error (in %08x, own %08x) is its own: %s, our FPDU %d, whose CRC is right, "+
					"read as siw_get_trailer reads a trailer split after %d octets", e.in, e.own, c.name, k, a)
				found = true
				break
			}
		}
		if !found {
			t.Errorf("siw's CRC error (in %08x, own %08x): no FPDU of ours gives it split", e.in, e.own)
			explained = false
		}
	}
	return explained, fpdus
}

// walkCapture walks every MPA connection of a complete capture, both
// ways, markers and all, as judgeOurStreams walks our side: it returns the
// connections and FPDUs walked and what is wrong (nothing, for a capture
// of two conforming stacks).
func walkCapture(t *testing.T, pcap string) (conns, fpdus int, problems []string) {
	t.Helper()
	flows, err := readFlows(pcap)
	require.NoError(t, err)
	for k, init := range flows {
		if !bytes.HasPrefix(init.data, []byte("MPA ID Req Frame")) {
			continue
		}
		resp := flows[flowKey{k.dst, k.src, k.gen}]
		name := fmt.Sprintf("%v -> %v", k.src, k.dst)
		if resp == nil {
			problems = append(problems, name+": the responder's side not captured")
			continue
		}
		for _, fl := range []*tcpFlow{init, resp} {
			if !fl.syn || fl.holes+fl.cut+fl.differ > 0 {
				problems = append(problems, fmt.Sprintf("%s: SYN %v, %d octets missing, %d packets cut, %d octets resent different",
					name, fl.syn, fl.holes, fl.cut, fl.differ))
			}
		}
		iw, rw := walkConn(init.data, resp.data)
		conns++
		for _, w := range []mpaWalk{iw, rw} {
			if w.err != nil || w.badCRC > 0 || w.tail > 0 && !init.rst && !resp.rst {
				problems = append(problems, fmt.Sprintf("%s: %v", name, w))
			}
			fpdus += w.fpdus
		}
	}
	return conns, fpdus, problems
}

// checkRecoveries bounds the Linux host's error recoveries (its dmesg's
// count) by siw's own CRC errors, those judgeOurStreams explained: each
// may cost one recovery, and end one queue of ours with siw's Terminate
// (LLP, MPA CRC error); siw's errors it did not explain must not exist.
// It returns how many queues ended early otherwise, for the caller's
// test to require none where it expects none.
func checkRecoveries(t *testing.T, siwErrs []siwCRCError, explained bool, recoveries string, logs *logLines) (ended int) {
	t.Helper()
	own := 0
	if explained {
		own = len(siwErrs)
	} else {
		assert.Empty(t, siwErrs, "siw's CRC errors (dmesg)")
	}
	if own > 0 {
		t.Logf("siw's %d CRC errors are its own (above): a recovery and a queue ended by its Terminate allowed for each", own)
	}
	r, err := strconv.Atoi(recoveries)
	require.NoError(t, err, "ERROR_RECOVERIES %q", recoveries)
	assert.LessOrEqual(t, r, own, "the host's error recoveries (dmesg), one at most per CRC error of siw's")
	byCRC := logs.count(`connection ended: .*MPA CRC error`)
	assert.LessOrEqual(t, byCRC, own, "queues ended by siw's CRC Terminate")
	// The host's recovery closes every queue at once: one where our RDMA
	// Reads of its write data were in flight ends with them unanswered
	// (verbs.ErrUnanswered), not in order. Allowed only after a recovery.
	unanswered := 0
	if r > 0 {
		unanswered = logs.count(`connection ended: .*RDMA Reads or atomics unanswered`)
	}
	return logs.count(`connection ended`) - byCRC - unanswered
}
