package verbs

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// Hostile MPA Requests at our Listener: refused, answered, rejected by the
// application, followed by early data, or too many at once. The harness is
// startup_hostile_test.go.

// Requests the Listener must refuse on its own, by closing the connection
// without a Reply: nothing reaches the application.
func TestHostileRequestClosed(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	good := mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(8, 8))
	cases := []struct {
		name       string
		send       []byte // written at once after connecting
		trickle    bool   // one octet per 100 ms instead
		closeWrite bool   // FIN after send
		stalls     bool   // closed at RequestTimeout, not at once
		resetOK    bool   // we close with the client's octets unread
		bug        string
	}{
		// RFC 5044 section 7.1.1 Key: "Responder mode receivers MUST check
		// this field for the same value, and close the connection"; 7.1.2
		// rule 5. siw: -EPROTO and close (observed: an MPA Request with a
		// wrong key gets no reply). Every frame is exactly 20 octets, so
		// nothing is left unread and the close is a FIN.
		{name: "wrong key", send: mpaFrame("MPA ID Foo Frame", flagC, 1, 0)},
		{name: "key with one bit off", send: mpaFrame("MPA ID Req Framd", flagC, 1, 0)}, // 'e' ^ 0x01
		// Rule 8: a Reply where a Request belongs is an initiator/initiator
		// start-up.
		{name: "Reply key", send: mpaFrame(repKey, flagC, 1, 0)},
		// Rev: "If the MPA receiver cannot interoperate with the received
		// version, then it MUST close the connection" (siw: Rev > 2 ->
		// -EPROTO). Rev 0, the pre-standard draft, cannot be spoken here
		// either (mpa.Respond refuses it), so the application must not see
		// it.
		{name: "Rev 3", send: mpaFrame(reqKey, flagC|flagH, 3, 0)},
		{name: "Rev 255", send: mpaFrame(reqKey, flagC, 0xff, 0)},
		{name: "Rev 0", send: mpaFrame(reqKey, flagC, 0, 0), bug: bugRev0},
		// PD_Length: "if the length of the Private Data field exceeds 512
		// octets, the receiver MUST close the connection"; checked before
		// any private data is read.
		{name: "PD_Length 513", send: mpaFrame(reqKey, flagC|flagH, 2, 513)},
		{name: "PD_Length 65535", send: mpaFrame(reqKey, flagC, 1, 0xffff)},
		// "If the receiver detects that the PD_Length field does not match
		// the length of the Private Data field ... MUST close": fewer octets
		// than announced, then silence until RequestTimeout (rule 10: "a
		// reasonable timeout while waiting for the entire set of startup
		// frames"), or then the end of the stream.
		{name: "private data shorter than PD_Length, stall", send: mpaFrame(reqKey, flagC|flagH, 2, 100, irdord(8, 8), make([]byte, 6)), stalls: true},
		{name: "private data shorter than PD_Length, FIN", send: mpaFrame(reqKey, flagC|flagH, 2, 100, irdord(8, 8)), closeWrite: true},
		{name: "half a header, FIN", send: good[:10], closeWrite: true},
		// Slowloris: the handshake goroutine gives up at RequestTimeout.
		{name: "silent client", stalls: true},
		{name: "half a header, stall", send: good[:10], stalls: true},
		// One octet every 100 ms would complete the 24-octet Request after
		// 2.4 s: the deadline is for the whole frame, not per read. An
		// octet that comes between the deadline and the close stays
		// unread: reset (on a loaded machine the close can come that
		// late, as in TestHostileDial's trickle).
		{name: "one octet per 100 ms", send: good, trickle: true, stalls: true, resetOK: true},
		// Octets after the Request, before our Reply: an initiator sends
		// FPDUs only once it has the Reply (RFC 5044 section 7.1.2 rule 3),
		// so these are private data beyond PD_Length: close. siw the same
		// ("peer sent extra data", -EPROTO). The FPDU stays unread: reset.
		{name: "FPDU right behind the Request", send: append(bytes.Clone(good),
			0x00, 0x12, 0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef),
			resetOK: true, bug: bugEarlyData},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			timeout := startupSlow
			if k.stalls {
				timeout = hostileTimeout
			}
			s := newStackSide(t, ConnConfig{RequestTimeout: timeout})
			// Before the connect: the deadline is set when the Listener
			// accepts the connection, which may come before rawConnect
			// returns, so no delay of this goroutine can make it look
			// shorter.
			start := time.Now()
			c := rawConnect(t, s.ln.Addr().String())
			switch {
			case k.trickle:
				stop := trickle(c, k.send)
				defer stop()
			case len(k.send) > 0:
				rawWrite(t, c, k.send)
			}
			if k.closeWrite {
				require.NoError(t, c.CloseWrite())
			}
			limit := atOnce
			if k.stalls {
				limit = hostileTimeout + timeoutSlack
			}
			o := waitClose(c, limit)
			if o.timedOut() && k.bug != "" {
				knownBug(t, k.bug, "the Listener kept the connection open for %v", limit)
			}
			wantPlainClose(t, o, k.resetOK)
			took := o.at.Sub(start)
			t.Logf("closed after %v", took.Round(time.Millisecond))
			if k.stalls {
				require.GreaterOrEqual(t, took, hostileTimeout, "closed before RequestTimeout")
			}
			require.Less(t, took, limit)
			s.wantNoRequest(t)
			s.wantServes(t)
		})
	}
}

// Well-formed Requests that get an answer: a Reply or a Reject, octet for
// octet, from the application's Accept (or from the Listener itself), with
// the error Accept returns and the QP's state.
func TestHostileRequestAnswered(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	type tc struct {
		name     string
		mpa      mpa.Config // the Listener's start-up policy
		req      []byte     // the raw Request
		listener bool       // the Listener answers by itself; no request reaches the application
		check    func(t *testing.T, r *ConnRequest)
		reply    []byte // the exact answer
		err      error  // Accept's error (errors.Is); nil: accepted
		crc      bool   // accepted: CRCs in use
		good     mpa.Config
		bug      string
	}
	// The stack's QP has IRD = ORD = 4, the raw client offers 8 and 8
	// unless the case says otherwise.
	cases := []tc{
		// RFC 5044 section 7.1.1: Res "MUST be set to zero when sending, and
		// not checked on reception"; R "is set to zero, and not checked on
		// reception in the MPA Request Frame". RFC 6581 section 6 keeps Res
		// (one bit smaller). siw uses 0x08 for its GSO experiment. So the
		// bits are ignored, kept in the frame the application sees, and
		// never sent back.
		{name: "reserved bits and R in a Rev 2 Request are ignored",
			req: mpaFrame(reqKey, flagC|flagR|flagH|0x0f, 2, 4, irdord(8, 8)),
			check: func(t *testing.T, r *ConnRequest) {
				require.Equal(t, uint8(0x0f), r.Request().Reserved)
				require.True(t, r.Request().Reject)
				require.Equal(t, 8, r.IRD)
				require.Equal(t, 8, r.ORD)
			},
			reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(4, 4)), crc: true},
		// RFC 6581 section 6: enhanced features need Rev 2; in a Rev 1 frame
		// the H (S) bit is one of the reserved bits, so the private data has
		// no IRD/ORD word and the Reply none either.
		{name: "H and reserved bits in a Rev 1 Request are ignored",
			req:   mpaFrame(reqKey, flagC|flagR|flagH|0x0f, 1, 4, []byte{0xc0, 0x00, 0x40, 0x00}),
			check: func(t *testing.T, r *ConnRequest) { require.Equal(t, []byte{0xc0, 0x00, 0x40, 0x00}, r.PrivateData) },
			reply: mpaFrame(repKey, flagC, 1, 0), crc: true},
		// "The Private Data field MUST be between 0 and 512 octets": 512 is
		// fine, and leaves 508 to the ULP after the IRD/ORD word.
		{name: "512 octets of private data",
			req: mpaFrame(reqKey, flagC|flagH, 2, 512, irdord(8, 8), bytes.Repeat([]byte{0x5a}, 508)),
			check: func(t *testing.T, r *ConnRequest) {
				require.Equal(t, bytes.Repeat([]byte{0x5a}, 508), r.PrivateData)
			},
			reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(4, 4)), crc: true},
		// RFC 6581 section 6: with S set the private data "MUST begin with"
		// the IRD/ORD word. siw rejects a shorter one (siw_proc_mpareq:
		// pd_len < sizeof(mpa_v2_data) -> reject_conn), and so do we, from
		// the Listener: a Reject with an all-zero word.
		{name: "enhanced Request too short for the IRD/ORD word", listener: true,
			req:   mpaFrame(reqKey, flagC|flagH, 2, 2, []byte{0, 8}),
			reply: mpaFrame(repKey, flagR|flagH, 2, 4, irdord(128, 128))},
		// Markers: "When '1' Markers MUST be added" (RFC 5044 section
		// 7.1.1 M), which RefuseMarkers does not do; siw rejects ("MPA
		// Markers: currently not supported"), the Reject has no M.
		{name: "markers asked, RefuseMarkers", mpa: mpa.Config{RefuseMarkers: true},
			req:   mpaFrame(reqKey, flagM|flagC|flagH, 2, 4, irdord(8, 8)),
			reply: mpaFrame(repKey, flagR|flagH, 2, 4, irdord(4, 4)), err: mpa.ErrRefused},
		// CRC (RFC 5044 section 7.1.1 C): "When this bit is '1' in either the
		// MPA Request Frame or MPA Reply Frame, CRCs MUST be generated and
		// checked by both endpoints". CRCStrict cannot, so it rejects (siw
		// mpa_crc_strict); a responder that asks turns them on even if the
		// initiator did not; one that does not ask follows the initiator.
		{name: "CRC asked, CRCStrict", mpa: mpa.Config{CRC: mpa.CRCStrict},
			req:   mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(8, 8)),
			reply: mpaFrame(repKey, flagR|flagH, 2, 4, irdord(4, 4)), err: mpa.ErrRefused,
			good: mpa.Config{CRC: mpa.CRCOff, IRD: 4, ORD: 4}},
		{name: "no CRC asked, CRCStrict", mpa: mpa.Config{CRC: mpa.CRCStrict},
			req:   mpaFrame(reqKey, flagH, 2, 4, irdord(8, 8)),
			reply: mpaFrame(repKey, flagH, 2, 4, irdord(4, 4)), crc: false,
			good: mpa.Config{CRC: mpa.CRCOff, IRD: 4, ORD: 4}},
		{name: "no CRC asked, CRCRequired", mpa: mpa.Config{CRC: mpa.CRCRequired},
			req:   mpaFrame(reqKey, flagH, 2, 4, irdord(8, 8)),
			reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(4, 4)), crc: true},
		{name: "CRC asked, CRCOff", mpa: mpa.Config{CRC: mpa.CRCOff},
			req:   mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(8, 8)),
			reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(4, 4)), crc: true},
		// IRD/ORD (RFC 6581 section 9.1): "initiator ORD <= responder IRD"
		// and "responder ORD <= initiator IRD". With StrictIRD we do not
		// lower our ORD nor take more Reads than our IRD: "The responder MAY
		// reject the connection request if the initiator IRD is not
		// sufficient and specify the required ORD in the MPA Reject Frame
		// responder ORD": every Reject to an enhanced Request carries our
		// IRD and ORD. Accept reports LLP code 0x06. (siw with
		// relaxed_ird_negotiation off just closes.) Relaxed, the Reply
		// carries what we agree to.
		{name: "StrictIRD, initiator ORD above our IRD", mpa: mpa.Config{StrictIRD: true},
			req:   mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(8, 16)),
			reply: mpaFrame(repKey, flagR|flagH, 2, 4, irdord(4, 4)), err: mpa.ErrInsufficientIRD},
		{name: "StrictIRD, initiator IRD below our ORD", mpa: mpa.Config{StrictIRD: true},
			req:   mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(1, 4)),
			reply: mpaFrame(repKey, flagR|flagH, 2, 4, irdord(4, 4)), err: mpa.ErrInsufficientIRD},
		{name: "relaxed IRD/ORD",
			req:   mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(1, 16)),
			reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(4, 1)), crc: true},
		// A peer-to-peer listener and a client-server Request (A clear):
		// the models do not match, LLP code 0x07 (RFC 6581 section 8); the
		// Reject echoes A = 0 (section 9.2: "The responder MUST set Control
		// Flag A to 0 if Control Flag A is 0 in the request").
		{name: "peer-to-peer listener, client-server Request", mpa: mpa.Config{P2P: mpa.P2POn},
			req:   mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(8, 8)),
			reply: mpaFrame(repKey, flagR|flagH, 2, 4, irdord(4, 4)), err: mpa.ErrNoMatchingRTR,
			good: mpa.Config{P2P: mpa.P2POn, RTRs: mpa.RTRWrite, IRD: 4, ORD: 4}},
		// Only a Send RTR offered, we take only Reads: the Reject echoes A
		// and, RFC 6581 section 9.2, "If the responder does not support any
		// of the initiator-specified RTR indication options, then the
		// responder MUST set at least one RTR indication type option it
		// supports": D.
		{name: "no common RTR", mpa: mpa.Config{P2P: mpa.P2POn, RTRs: mpa.RTRRead | mpa.RTRWrite},
			req:   mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(wordA|wordB|8, 8)),
			reply: mpaFrame(repKey, flagR|flagH, 2, 4, irdord(wordA|4, wordC|wordD|4)), err: mpa.ErrNoMatchingRTR,
			good: mpa.Config{P2P: mpa.P2POn, RTRs: mpa.RTRWrite, IRD: 4, ORD: 4}, bug: bugRejectRTR},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := newStackSide(t, ConnConfig{MPA: k.mpa, RequestTimeout: startupSlow})
			q := s.newQP(t, 4, 4)
			c := rawConnect(t, s.ln.Addr().String())
			rawWrite(t, c, k.req)
			var err error
			if !k.listener {
				r := s.getRequest(t)
				if k.check != nil {
					k.check(t, r)
				}
				err = r.Accept(context.Background(), q.qp, nil)
				require.ErrorIs(t, r.Accept(context.Background(), q.qp, nil), errAnswered, "a second answer")
			}
			got := readStartupFrame(t, c)
			if k.bug != "" && !bytes.Equal(k.reply, got) {
				knownBug(t, k.bug, "answer %x, want %x", got, k.reply)
			}
			requireOctets(t, k.reply, got, "the answer to the Request")
			good := k.good
			if good == (mpa.Config{}) {
				good = mpa.Config{IRD: 4, ORD: 4}
			}
			if k.listener || k.err != nil {
				if k.err != nil {
					require.ErrorIs(t, err, k.err, "Accept")
				}
				// RFC 5044 section 7.1.2 rule 2: after a Reject "the
				// implementation MUST exit MPA, leaving the TCP connection
				// open. The ULP may close TCP"; ours does, with nothing
				// after the Reject.
				wantPlainClose(t, waitClose(c, atOnce), false)
				s.wantNoRequest(t)
				s.wantServesRaw(t, q, good) // the refused QP is still IDLE and takes the next client
				return
			}
			require.NoError(t, err, "Accept")
			require.Equal(t, StateRTS, q.qp.State())
			require.Equal(t, k.crc, q.qp.Params().CRC, "CRCs in use")
			// The connection works: a Send, framed as agreed, arrives.
			p := newRawPeer(c, mpa.Params{CRC: k.crc})
			rb := regGuarded(t, s.pd, 64, LocalWrite)
			_, err = q.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{rb.mr.SGE(0, 64)}})
			require.NoError(t, err)
			p.send(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("accepted")))
			wc := waitWC(t, q.rcq)
			require.Equal(t, wcString(1, WCRecv, Success), wcOf(wc))
			require.Equal(t, "accepted", string(rb.region()[:wc.ByteLen]))
			p.closeWrite(t)
			p.wantClosed(t)
			waitDone(t, q.qp, peerTimeout)
			s.wantServesRaw(t, nil, good)
		})
	}
}

// The application's Reject with private data (RFC 5044 section 7.1.2 rule
// 2: "the MPA Reply Frame MAY include ULP-supplied Private Data"): key
// "MPA ID Rep Frame", R, the Request's Rev (capped at ours), for an enhanced
// Request H and the IRD/ORD word first (zero but for A, which RFC 6581
// section 9.2 has every Reply echo), then the private data; then the close.
func TestHostileAppReject(t *testing.T) {
	checkRoutines(t)
	why := []byte("go away")
	cases := []struct {
		name                 string
		rev                  uint8  // the Listener's MPA revision (0: 2)
		listenIRD, listenORD uint16 // the Listener's IRD and ORD (0: unset)
		req                  []byte
		pd                   []byte
		reply                []byte
	}{
		{name: "Rev 1", req: mpaFrame(reqKey, flagC, 1, 5, []byte("hello")), pd: why,
			reply: mpaFrame(repKey, flagR, 1, 7, why)},
		// RFC 6581 section 9.1: the Reject's IRD and ORD are passed to the
		// initiator's application; unset, they are what a QP of the device
		// would take (128 each by default), not 0.
		{name: "Rev 2 enhanced", req: mpaFrame(reqKey, flagC|flagH, 2, 9, irdord(8, 8), []byte("hello")), pd: why,
			reply: mpaFrame(repKey, flagR|flagH, 2, 11, irdord(128, 128), why)},
		{name: "Rev 2 enhanced, peer-to-peer", req: mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(wordA|8, wordC|wordD|8)), pd: why,
			reply: mpaFrame(repKey, flagR|flagH, 2, 11, irdord(wordA|128, 128), why)},
		{name: "Rev 2 enhanced, listener's IRD/ORD", listenIRD: 5, listenORD: 6, req: mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(8, 8)), pd: why,
			reply: mpaFrame(repKey, flagR|flagH, 2, 11, irdord(5, 6), why)},
		{name: "Rev 2 without H", req: mpaFrame(reqKey, flagC, 2, 0), pd: why,
			reply: mpaFrame(repKey, flagR, 2, 7, why)},
		{name: "Rev 2 enhanced, no private data", req: mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(8, 8)),
			reply: mpaFrame(repKey, flagR|flagH, 2, 4, irdord(128, 128))},
		// A Rev 1 responder answers a Rev 2 Request with Rev 1, where the
		// word has no place.
		{name: "Rev 1 listener, Rev 2 Request", rev: 1, req: mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(8, 8)), pd: why,
			reply: mpaFrame(repKey, flagR, 1, 7, why)},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := newStackSide(t, ConnConfig{MPA: mpa.Config{Rev: k.rev, IRD: k.listenIRD, ORD: k.listenORD}, RequestTimeout: startupSlow})
			c := rawConnect(t, s.ln.Addr().String())
			rawWrite(t, c, k.req)
			r := s.getRequest(t)
			require.NoError(t, r.Reject(k.pd))
			require.ErrorIs(t, r.Reject(k.pd), errAnswered, "a second answer")
			requireOctets(t, k.reply, readStartupFrame(t, c), "the Reject")
			wantPlainClose(t, waitClose(c, atOnce), false)
			s.wantServes(t)
		})
	}
}

// Octets sent after the Request was handed to the application and before it
// accepts: still before our Reply, so still a protocol error (see
// bugEarlyData). Accept must not send the Reply, and must fail.
func TestHostileDataBeforeReply(t *testing.T) {
	checkRoutines(t)
	s := newStackSide(t, ConnConfig{RequestTimeout: startupSlow})
	q := s.newQP(t, 4, 4)
	c := rawConnect(t, s.ln.Addr().String())
	rawWrite(t, c, mpaFrame(reqKey, flagC|flagH, 2, 4, irdord(8, 8)))
	r := s.getRequest(t)
	p := newRawPeer(c, mpa.Params{CRC: true})
	p.send(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("too early")))
	// Until the octets are queued at the stack's socket.
	for end := time.Now().Add(peerTimeout); earlyData(r.conn) == 0; {
		require.True(t, time.Now().Before(end), "the Send never reached the stack")
		runtime.Gosched()
	}
	err := r.Accept(context.Background(), q.qp, nil)
	if err == nil {
		knownBug(t, bugEarlyData, "Accept took the octets sent before the Reply as an FPDU")
	}
	require.ErrorIs(t, err, mpa.ErrInvalidFrame)
	require.Equal(t, StateIdle, q.qp.State())
	wantPlainClose(t, waitClose(c, atOnce), true)
	s.wantServesRaw(t, q, mpa.Config{IRD: 4, ORD: 4})
}

// A Listener with more silent clients than start-ups it runs at once
// (maxHandshakes): the bound holds, the ones beyond it evict the oldest at
// once, the rest are closed by RequestTimeout, and a good client that
// comes after them all is served.
func TestHostileListenerOverload(t *testing.T) {
	checkRoutines(t)
	// RequestTimeout outlasts the connecting by far, so that the table
	// fills on any machine: with 300 ms the first start-ups timed out
	// before the last clients came on a loaded one, and the table never
	// held more than 174.
	s := newStackSide(t, ConnConfig{RequestTimeout: startupSlow})
	const n = maxHandshakes + 44
	start := time.Now()
	idle := make([]*net.TCPConn, n)
	for i := range idle {
		idle[i] = rawConnect(t, s.ln.Addr().String())
	}
	t.Logf("%d silent clients connected in %v", n, time.Since(start).Round(time.Millisecond))
	s.wantServes(t)
	served := time.Now()
	t.Logf("the good client was served %v after the first silent one", served.Sub(start).Round(time.Millisecond))
	// The table's own high-water mark: a sampler missed the instant it was
	// full on a loaded machine.
	require.Equal(t, maxHandshakes, s.ln.starts.high(), "start-ups in progress at once")
	// The Listener accepts in order: the oldest, one for each client
	// beyond the bound and one for the good client, were evicted as those
	// came, long before RequestTimeout.
	evicted := n - maxHandshakes + 1
	for i, c := range idle[:evicted] {
		o := waitClose(c, time.Until(served.Add(atOnce)))
		if o.timedOut() {
			t.Fatalf("silent client %d still open %v after the good client was served", i, atOnce)
		}
		wantPlainClose(t, o, false)
	}
	// The rest at RequestTimeout: each was accepted after start and before
	// the good client.
	for i, c := range idle[evicted:] {
		o := waitClose(c, time.Until(served.Add(startupSlow+timeoutSlack)))
		if o.timedOut() {
			t.Fatalf("silent client %d still open after %v", evicted+i, time.Since(start))
		}
		wantPlainClose(t, o, false)
		require.GreaterOrEqual(t, o.at.Sub(start), startupSlow, "silent client %d closed before RequestTimeout", evicted+i)
	}
	t.Logf("all closed after %v", time.Since(start).Round(time.Millisecond))
	require.Zero(t, s.ln.starts.len())
	s.wantNoRequest(t)
}
