package verbs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

// Hostile responders to our Dial: hand-made Replies, or none. The harness
// is startup_hostile_test.go.

// Our Dial against a raw responder that answers with a hand-made Reply (or
// not at all). The stack's QP offers IRD = ORD = 8.
func TestHostileDial(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	type tc struct {
		name       string
		cfg        ConnConfig // the initiator's; ReplyTimeout startupSlow unless set
		ctxTimeout time.Duration
		ctxCancel  time.Duration // cancel the context after this long
		reply      []byte        // nil: none
		trickle    bool
		term       mpa.LLPCode // the Terminate we send; 0: a plain close
		resetOK    bool
		is         []error // Dial's error Is each of these
		reject     string  // Dial's error is a *RejectError with this private data (with ErrRejected in is)
		stalls     time.Duration
		accepted   func(t *testing.T, qp *QP)
		bug        string
	}
	p2p := ConnConfig{MPA: mpa.Config{P2P: mpa.P2POn, RTRs: mpa.RTRWrite}}
	// StrictRTR: the default accepts a single RTR we did not offer (siw
	// picks Write whatever is offered); strict refuses it, as siw does.
	p2pStrict := ConnConfig{MPA: mpa.Config{P2P: mpa.P2POn, RTRs: mpa.RTRWrite, StrictRTR: true}}
	cases := []tc{
		// RFC 5044 section 7.1.2 rule 3: "if the Rejected Connection bit is
		// set to '1', the implementation MUST exit MPA, leaving the TCP
		// connection open. The ULP may close TCP": Dial closes it and
		// returns the responder's private data (RFC 6581 section 9.1: "The
		// initiator MUST pass the responder provided IRD and ORD to the ULP
		// for both MPA Accept and Reject messages" -- see the report).
		{name: "Reject with private data", reply: mpaFrame(repKey, flagR|flagH, 2, 11, irdord(0, 0), []byte("go away")),
			is: []error{mpa.ErrRejected}, reject: "go away"},
		{name: "Reject, peer-to-peer word", reply: mpaFrame(repKey, flagR|flagC|flagH, 2, 8, irdord(wordA, wordD), []byte("busy")),
			is: []error{mpa.ErrRejected}, reject: "busy"},
		// siw rejects a short enhanced Request with R|H and no word at all.
		{name: "Reject, H without the word (siw)", reply: mpaFrame(repKey, flagR|flagH, 2, 0),
			is: []error{mpa.ErrRejected}, reject: ""},
		{name: "Reject, Rev 1", reply: mpaFrame(repKey, flagR, 1, 4, []byte("nope")),
			is: []error{mpa.ErrRejected}, reject: "nope"},

		// Invalid Replies: RFC 5044 section 7.1.1 (Key, Rev, PD_Length:
		// "close the connection and report an error locally") and section 8
		// code 4 ("the TCP connection MUST be immediately closed"). A plain
		// close; siw sends a Terminate 0x04 first for a wrong key, which the
		// RFC does not ask for. 20 octets each: nothing is left unread.
		{name: "wrong key", reply: mpaFrame("MPA ID Bad Frame", flagC|flagH, 2, 0), is: []error{mpa.ErrInvalidFrame}},
		{name: "Request key", reply: mpaFrame(reqKey, flagC|flagH, 2, 0), is: []error{mpa.ErrInvalidFrame}},
		{name: "Rev 3", reply: mpaFrame(repKey, flagC|flagH, 3, 0), is: []error{mpa.ErrInvalidFrame}},
		{name: "Rev 255", reply: mpaFrame(repKey, flagC, 0xff, 0), is: []error{mpa.ErrInvalidFrame}},
		{name: "PD_Length 513", reply: mpaFrame(repKey, flagC|flagH, 2, 513), is: []error{mpa.ErrInvalidFrame}},
		// Well-formed frames with contents that cannot answer our Request:
		// RFC 6581 section 8, "Any enhanced RDMA connection establishment
		// error generates an MPA termination message to a peer", LLP code
		// 0x04. Section 10: "an enhanced responder is REQUIRED to respond
		// with an enhanced ... response". The Terminate is framed with CRCs,
		// which our Request asked for.
		{name: "Rev 2 Reply without H", reply: mpaFrame(repKey, flagC, 2, 0), term: mpa.CodeInvalidReqRep, is: []error{mpa.ErrInvalidFrame}},
		{name: "Rev 0 Reply", reply: mpaFrame(repKey, flagC, 0, 0), term: mpa.CodeInvalidReqRep, is: []error{mpa.ErrInvalidFrame}},
		{name: "enhanced Reply too short for the word", reply: mpaFrame(repKey, flagC|flagH, 2, 2, []byte{0, 8}),
			term: mpa.CodeInvalidReqRep, is: []error{mpa.ErrInvalidFrame}},

		// Timeouts (RFC 5044 section 7.1.2 rule 10). The deadline is
		// absolute: a Reply trickled at one octet per 100 ms (2.4 s for 24
		// octets) fails at ReplyTimeout.
		{name: "no Reply", cfg: ConnConfig{ReplyTimeout: hostileTimeout},
			is: []error{ErrReplyTimeout, os.ErrDeadlineExceeded}, stalls: hostileTimeout},
		{name: "private data never completes", cfg: ConnConfig{ReplyTimeout: hostileTimeout},
			reply: mpaFrame(repKey, flagC|flagH, 2, 100, irdord(8, 8)),
			is:    []error{ErrReplyTimeout, os.ErrDeadlineExceeded}, stalls: hostileTimeout},
		{name: "one octet per 100 ms", cfg: ConnConfig{ReplyTimeout: hostileTimeout},
			reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(8, 8)), trickle: true, resetOK: true,
			is: []error{ErrReplyTimeout, os.ErrDeadlineExceeded}, stalls: hostileTimeout},
		{name: "context deadline before ReplyTimeout", ctxTimeout: hostileTimeout,
			is: []error{context.DeadlineExceeded}, stalls: hostileTimeout, bug: bugDialCtx},
		{name: "context cancelled", ctxCancel: hostileTimeout,
			is: []error{context.Canceled}, stalls: hostileTimeout, bug: bugDialCtx},

		// Policy refusals of a valid Reply: mpa.ErrRefused and a plain close,
		// as siw (ECONNREFUSED, no Terminate).
		{name: "CRCRequired, Reply without C", cfg: ConnConfig{MPA: mpa.Config{CRC: mpa.CRCRequired}},
			reply: mpaFrame(repKey, flagH, 2, 4, irdord(8, 8)), is: []error{mpa.ErrRefused}},
		{name: "CRCStrict, Reply with C", cfg: ConnConfig{MPA: mpa.Config{CRC: mpa.CRCStrict}},
			reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(8, 8)), is: []error{mpa.ErrRefused}},
		{name: "RefuseMarkers, Reply with M", cfg: ConnConfig{MPA: mpa.Config{RefuseMarkers: true}},
			reply: mpaFrame(repKey, flagM|flagC|flagH, 2, 4, irdord(8, 8)), is: []error{mpa.ErrRefused}},

		// Accepted: Res is "not checked on reception" (RFC 5044 section
		// 7.1.1); C in either frame turns CRCs on for both; a responder IRD
		// below our ORD lowers our ORD (RFC 6581 section 9.1: "its ORD at
		// most to the responder IRD").
		{name: "reserved bits in the Reply are ignored", reply: mpaFrame(repKey, flagC|flagH|0x0f, 2, 4, irdord(8, 8)),
			accepted: func(t *testing.T, qp *QP) { require.True(t, qp.Params().CRC) }},
		{name: "CRCOff, Reply with C", cfg: ConnConfig{MPA: mpa.Config{CRC: mpa.CRCOff}},
			reply:    mpaFrame(repKey, flagC|flagH, 2, 4, irdord(8, 8)),
			accepted: func(t *testing.T, qp *QP) { require.True(t, qp.Params().CRC) }},
		{name: "responder IRD below our ORD, relaxed", reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(2, 8)),
			accepted: func(t *testing.T, qp *QP) { require.Equal(t, uint16(2), qp.Params().ORD) }},

		// IRD/ORD we cannot meet, RFC 6581 section 9.1: "If the initiator
		// does not have sufficient resources for the required IRD, it MUST
		// send a TERM message ... Error Code 6". siw the same.
		{name: "responder ORD above our IRD", reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(8, 16)),
			term: mpa.CodeInsufficientIRD, is: []error{mpa.ErrInsufficientIRD}},
		{name: "StrictIRD, responder IRD below our ORD", cfg: ConnConfig{MPA: mpa.Config{StrictIRD: true}},
			reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(2, 8)), term: mpa.CodeInsufficientIRD, is: []error{mpa.ErrInsufficientIRD}},

		// RTRs, RFC 6581 section 9.2: "If the initiator is not able to
		// generate any of the responder-supported RTR indications, then it
		// MUST send a TERM message ... Error Code 7"; so does siw for an RTR
		// it did not offer. We offer only Write; with StrictRTR we refuse
		// (the relaxed default takes it: see the Wireshark/siw notes).
		{name: "Reply chooses the Read RTR", cfg: p2pStrict, reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(wordA|8, wordD|8)),
			term: mpa.CodeNoMatchingRTR, is: []error{mpa.ErrNoMatchingRTR}},
		{name: "Reply chooses two RTRs", cfg: p2p, reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(wordA|8, wordC|wordD|8)),
			term: mpa.CodeNoMatchingRTR, is: []error{mpa.ErrNoMatchingRTR}},
		{name: "Reply chooses no RTR", cfg: p2p, reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(wordA|8, 8)),
			term: mpa.CodeNoMatchingRTR, is: []error{mpa.ErrNoMatchingRTR}},
		{name: "Reply without A", cfg: p2p, reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(8, wordC|8)),
			term: mpa.CodeNoMatchingRTR, is: []error{mpa.ErrNoMatchingRTR}},
		{name: "client-server Request, Reply chooses an RTR", cfg: ConnConfig{MPA: mpa.Config{P2P: mpa.P2POff}}, reply: mpaFrame(repKey, flagC|flagH, 2, 4, irdord(wordA|8, wordC|8)),
			term: mpa.CodeNoMatchingRTR, is: []error{mpa.ErrNoMatchingRTR}},
		// The Reply asked for markers (M) and we accept them (RefuseMarkers
		// is off): our first octets in full operation, the Terminate's, must
		// start with the marker 0x00000000 (RFC 5044 section 7.1.2 rule 7).
		{name: "Reply with M chooses the Read RTR", cfg: p2pStrict, reply: mpaFrame(repKey, flagM|flagC|flagH, 2, 4, irdord(wordA|8, wordD|8)),
			term: mpa.CodeNoMatchingRTR, is: []error{mpa.ErrNoMatchingRTR}, bug: bugTermMarkers},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			st := newStackSide(t, ConnConfig{})
			q := st.newQP(t, 8, 8)
			cfg := k.cfg
			if cfg.ReplyTimeout == 0 {
				cfg.ReplyTimeout = startupSlow
			}
			ctxTimeout := k.ctxTimeout
			if ctxTimeout == 0 {
				ctxTimeout = peerTimeout
			}
			conn, req, res := rawResponder(t, q.qp, cfg, ctxTimeout, k.ctxCancel)
			require.True(t, req.CRC == (cfg.MPA.CRC == mpa.CRCOn || cfg.MPA.CRC == mpa.CRCRequired))
			if cfg.MPA.P2P == mpa.P2POn {
				v, err := req.IRDORD()
				require.NoError(t, err)
				require.Equal(t, mpa.IRDORD{IRD: 8, ORD: 8, P2P: true, RTR: mpa.RTRWrite}, v, "our Request offers only Write")
			}
			switch {
			case k.trickle:
				stop := trickle(conn, k.reply)
				defer stop()
			case k.reply != nil:
				rawWrite(t, conn, k.reply)
			}

			if k.accepted != nil {
				r := dialOutcome(t, res)
				require.NoError(t, r.err, "Dial")
				require.Equal(t, StateRTS, q.qp.State())
				k.accepted(t, q.qp)
				p := newRawPeer(conn, mpa.Params{CRC: q.qp.Params().CRC})
				p.closeWrite(t)
				p.wantClosed(t)
				waitDone(t, q.qp, peerTimeout)
				require.ErrorIs(t, q.qp.Err(), ErrDisconnected)
				return
			}

			// What comes back on the wire.
			if k.term != 0 {
				p := newRawPeer(conn, mpa.Params{CRC: req.CRC || k.reply[16]&flagC != 0, MarkersRx: k.reply[16]&flagM != 0})
				u, err := p.next()
				if k.bug != "" && (err != nil || !bytes.Equal(terminateULPDU(llpTerm(k.term)), u)) {
					knownBug(t, k.bug, "not the Terminate we want: %x, %v", u, err)
				}
				require.NoError(t, err, "want a Terminate")
				requireOctets(t, terminateULPDU(llpTerm(k.term)), u, "the Terminate")
				p.wantClosed(t)
			} else {
				wantPlainClose(t, waitClose(conn, peerTimeout), k.resetOK)
			}
			r := dialOutcome(t, res)
			t.Logf("Dial: %v after %v", r.err, r.took.Round(time.Millisecond))
			require.Error(t, r.err)
			require.Nil(t, r.pd)
			if k.stalls > 0 {
				require.GreaterOrEqual(t, r.took, k.stalls-10*time.Millisecond, "Dial gave up early")
				require.Less(t, r.took, k.stalls+timeoutSlack, "Dial gave up late")
			} else {
				require.Less(t, r.took, atOnce)
			}
			require.Equal(t, StateIdle, q.qp.State(), "a failed start-up leaves the QP IDLE")
			st.wantRedial(t, q)
			if slices.Contains(k.is, mpa.ErrRejected) {
				var re *mpa.RejectError
				require.ErrorAs(t, r.err, &re)
				require.Equal(t, k.reject, string(re.PrivateData), "the Reject's private data")
			}
			var me *mpa.Error
			if k.term != 0 {
				require.ErrorAs(t, r.err, &me)
				require.Equal(t, k.term, me.Code)
			}
			for _, target := range k.is {
				if k.bug != "" && !errors.Is(r.err, target) {
					knownBug(t, k.bug, "Dial error %v is not %v", r.err, target)
				}
				require.ErrorIs(t, r.err, target)
			}
		})
	}
}
