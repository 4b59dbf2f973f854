package mpa

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// exchange is one start-up run through the wire: BuildRequest, encode,
// ReadFrame, Respond, encode, ReadFrame, ConfirmReply.
type exchange struct {
	req, rep          Frame // as received
	ini, resp         Params
	respErr, iniErr   error
	replied           bool
	reqULPPD, repULPD []byte
}

func runStartup(t *testing.T, ini, resp Config, reqPD, repPD []byte) exchange {
	t.Helper()
	var x exchange
	if ini.P2P == P2PAuto && ini.RTRs == RTRNone {
		// Tests of other features start without peer-to-peer mode;
		// TestPeerToPeerAuto covers the default offer.
		ini.P2P = P2POff
	}
	sent, err := BuildRequest(ini, reqPD)
	require.NoError(t, err)
	wire, err := sent.Append(nil)
	require.NoError(t, err)
	x.req, err = ReadFrame(bytes.NewReader(wire), false)
	require.NoError(t, err)
	x.reqULPPD, err = x.req.ULPPrivateData()
	require.NoError(t, err)

	rep, p, err := Respond(resp, x.req, repPD)
	x.resp, x.respErr = p, err
	if err != nil && !rep.Reject {
		return x
	}
	x.replied = true
	wire, err = rep.Append(nil)
	require.NoError(t, err)
	x.rep, err = ReadFrame(bytes.NewReader(wire), true)
	require.NoError(t, err)
	if x.respErr == nil {
		x.repULPD, err = x.rep.ULPPrivateData()
		require.NoError(t, err)
	}
	x.ini, x.iniErr = ConfirmReply(ini, sent, x.rep)
	return x
}

// outcome names who, if anyone, ends the start-up.
type outcome uint8

const (
	ok outcome = iota
	respRefuses
	iniRefuses
)

func (x exchange) check(t *testing.T, want outcome) {
	t.Helper()
	switch want {
	case ok:
		require.NoError(t, x.respErr)
		require.NoError(t, x.iniErr)
	case respRefuses:
		require.Error(t, x.respErr)
		require.True(t, x.replied && x.rep.Reject, "responder sends a Reject")
		require.ErrorIs(t, x.iniErr, ErrRejected)
	case iniRefuses:
		require.NoError(t, x.respErr)
		require.Error(t, x.iniErr)
	}
}

func TestCRCPolicies(t *testing.T) {
	for _, tc := range []struct {
		ini, resp CRCPolicy
		want      outcome
		crc       bool
	}{
		{CRCOn, CRCOn, ok, true},
		{CRCOn, CRCOff, ok, true}, // RFC 5044: either side asking is enough
		{CRCOn, CRCRequired, ok, true},
		{CRCOn, CRCStrict, respRefuses, false},
		{CRCOff, CRCOn, ok, true},
		{CRCOff, CRCOff, ok, false},
		{CRCOff, CRCRequired, ok, true},
		{CRCOff, CRCStrict, ok, false},
		{CRCRequired, CRCOn, ok, true},
		{CRCRequired, CRCOff, ok, true}, // the Reply echoes C
		{CRCRequired, CRCRequired, ok, true},
		{CRCRequired, CRCStrict, respRefuses, false},
		{CRCStrict, CRCOn, iniRefuses, false},
		{CRCStrict, CRCOff, ok, false},
		{CRCStrict, CRCRequired, iniRefuses, false},
		{CRCStrict, CRCStrict, ok, false},
	} {
		t.Run(tc.ini.String()+"-"+tc.resp.String(), func(t *testing.T) {
			x := runStartup(t, Config{CRC: tc.ini}, Config{CRC: tc.resp}, nil, nil)
			x.check(t, tc.want)
			switch tc.want {
			case ok:
				require.Equal(t, tc.crc, x.ini.CRC)
				require.Equal(t, tc.crc, x.resp.CRC)
				require.Equal(t, tc.crc, x.rep.CRC, "the Reply's C says whether CRCs are on")
			case respRefuses:
				require.ErrorIs(t, x.respErr, ErrRefused)
			case iniRefuses:
				require.ErrorIs(t, x.iniErr, ErrRefused)
			}
		})
	}
}

// Replies that a conforming responder would not send.
func TestCRCAgainstOddReplies(t *testing.T) {
	reqC, err := BuildRequest(Config{}, nil)
	require.NoError(t, err)
	noC := Frame{Reply: true, Enhanced: true, Rev: 2, PrivateData: IRDORD{}.Append(nil)}

	// We asked, so CRCs are on even if the Reply does not say so (RFC 5044).
	p, err := ConfirmReply(Config{}, reqC, noC)
	require.NoError(t, err)
	require.True(t, p.CRC)

	// CRCRequired wants the peer to confirm.
	req, err := BuildRequest(Config{CRC: CRCRequired}, nil)
	require.NoError(t, err)
	_, err = ConfirmReply(Config{CRC: CRCRequired}, req, noC)
	require.ErrorIs(t, err, ErrRefused)
}

func TestMarkers(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		ini, resp            Config
		want                 outcome
		iniTx, iniRx         bool // the responder's are the other way round
		reqM, repM, rejected bool
	}{
		{name: "none"},
		{name: "initiator wants them", ini: Config{MarkersRx: true}, iniRx: true, reqM: true},
		{name: "responder wants them", resp: Config{MarkersRx: true}, iniTx: true, repM: true},
		{name: "both", ini: Config{MarkersRx: true}, resp: Config{MarkersRx: true}, iniTx: true, iniRx: true, reqM: true, repM: true},
		{name: "responder refuses to send", ini: Config{MarkersRx: true}, resp: Config{RefuseMarkers: true}, want: respRefuses, reqM: true},
		{name: "initiator refuses to send", ini: Config{RefuseMarkers: true}, resp: Config{MarkersRx: true}, want: iniRefuses, repM: true},
		{name: "refusers that are not asked", ini: Config{RefuseMarkers: true, MarkersRx: true}, resp: Config{RefuseMarkers: true},
			want: respRefuses, reqM: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := runStartup(t, tc.ini, tc.resp, nil, nil)
			x.check(t, tc.want)
			require.Equal(t, tc.reqM, x.req.Markers, "M in the Request")
			require.Equal(t, tc.repM, x.rep.Markers, "M in the Reply")
			switch tc.want {
			case ok:
				require.Equal(t, Params{Rev: 2, CRC: true, MarkersTx: tc.iniTx, MarkersRx: tc.iniRx}, x.ini)
				require.Equal(t, Params{Rev: 2, CRC: true, MarkersTx: tc.iniRx, MarkersRx: tc.iniTx}, x.resp)
			case respRefuses:
				require.ErrorIs(t, x.respErr, ErrRefused)
			case iniRefuses:
				require.ErrorIs(t, x.iniErr, ErrRefused)
			}
		})
	}
}

func TestRevisions(t *testing.T) {
	for _, tc := range []struct {
		ini, resp, want uint8
	}{{2, 2, 2}, {2, 1, 1}, {1, 2, 1}, {1, 1, 1}, {0, 0, 2}} {
		cfg := func(rev uint8) Config { return Config{Rev: rev, IRD: 5, ORD: 6} }
		x := runStartup(t, cfg(tc.ini), cfg(tc.resp), []byte("req-pd"), []byte("rep-pd"))
		x.check(t, ok)
		require.Equal(t, tc.want, x.ini.Rev)
		require.Equal(t, tc.want, x.resp.Rev)
		require.Equal(t, tc.want, x.rep.Rev)
		require.Equal(t, tc.want == 2, x.rep.HasIRDORD())
		require.Equal(t, []byte("req-pd"), x.reqULPPD)
		require.Equal(t, []byte("rep-pd"), x.repULPD)
		// Both have IRD 5 and ORD 6: Rev 2 settles on 5 both ways, Rev 1 keeps Config.
		if tc.want == 2 {
			require.Equal(t, [2]uint16{5, 5}, [2]uint16{x.ini.IRD, x.ini.ORD})
		} else {
			require.Equal(t, [2]uint16{5, 6}, [2]uint16{x.ini.IRD, x.ini.ORD})
		}
	}
}

func TestIRDORDNegotiation(t *testing.T) {
	for _, tc := range []struct {
		name               string
		ini, resp          Config
		want               outcome
		code               LLPCode
		iniIRD, iniORD     uint16
		respIRD, respORD   uint16
		replyIRD, replyORD uint16
	}{{
		// Responder ORD := min(16, initiator IRD 8); IRD := min(4, initiator ORD 6).
		// The initiator then lowers its ORD to the responder's IRD.
		name: "relaxed", ini: Config{IRD: 8, ORD: 6}, resp: Config{IRD: 4, ORD: 16},
		iniIRD: 8, iniORD: 4, respIRD: 4, respORD: 8, replyIRD: 4, replyORD: 8,
	}, {
		name: "relaxed, plenty", ini: Config{IRD: 8, ORD: 6}, resp: Config{IRD: 128, ORD: 128},
		iniIRD: 8, iniORD: 6, respIRD: 6, respORD: 8, replyIRD: 6, replyORD: 8,
	}, {
		name: "perftest write test: nothing asked", ini: Config{}, resp: Config{IRD: 128, ORD: 128},
	}, {
		name: "strict both, enough", ini: Config{IRD: 8, ORD: 6, StrictIRD: true}, resp: Config{IRD: 6, ORD: 8, StrictIRD: true},
		iniIRD: 8, iniORD: 6, respIRD: 6, respORD: 8, replyIRD: 6, replyORD: 8,
	}, {
		name: "strict responder, initiator ORD above its IRD", ini: Config{IRD: 8, ORD: 6}, resp: Config{IRD: 4, ORD: 8, StrictIRD: true},
		want: respRefuses, code: CodeInsufficientIRD,
	}, {
		name: "strict responder, initiator IRD below its ORD", ini: Config{IRD: 8, ORD: 6}, resp: Config{IRD: 6, ORD: 9, StrictIRD: true},
		want: respRefuses, code: CodeInsufficientIRD,
	}, {
		name: "strict initiator, responder IRD below its ORD", ini: Config{IRD: 8, ORD: 6, StrictIRD: true}, resp: Config{IRD: 4, ORD: 8},
		want: iniRefuses, code: CodeInsufficientIRD,
	}, {
		name: "strict initiator, responder lowers only its own ORD", ini: Config{IRD: 8, ORD: 6, StrictIRD: true}, resp: Config{IRD: 6, ORD: 2},
		iniIRD: 2, iniORD: 6, respIRD: 6, respORD: 2, replyIRD: 6, replyORD: 2,
	}, {
		name: "maximum", ini: Config{IRD: MaxIRDORD, ORD: MaxIRDORD}, resp: Config{IRD: MaxIRDORD, ORD: MaxIRDORD},
		iniIRD: MaxIRDORD, iniORD: MaxIRDORD, respIRD: MaxIRDORD, respORD: MaxIRDORD, replyIRD: MaxIRDORD, replyORD: MaxIRDORD,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			x := runStartup(t, tc.ini, tc.resp, nil, nil)
			x.check(t, tc.want)
			switch tc.want {
			case ok:
				require.Equal(t, [2]uint16{tc.iniIRD, tc.iniORD}, [2]uint16{x.ini.IRD, x.ini.ORD}, "initiator IRD, ORD")
				require.Equal(t, [2]uint16{tc.respIRD, tc.respORD}, [2]uint16{x.resp.IRD, x.resp.ORD}, "responder IRD, ORD")
				v, err := x.rep.IRDORD()
				require.NoError(t, err)
				require.Equal(t, IRDORD{IRD: tc.replyIRD, ORD: tc.replyORD}, v, "the Reply's word")
			case respRefuses:
				requireCode(t, x.respErr, tc.code)
			case iniRefuses:
				requireCode(t, x.iniErr, tc.code)
			}
		})
	}
}

// A responder whose ORD exceeds our IRD would overrun us: never accepted.
func TestResponderORDAboveOurIRD(t *testing.T) {
	req, err := BuildRequest(Config{IRD: 4, ORD: 4}, nil)
	require.NoError(t, err)
	rep := Frame{Reply: true, CRC: true, Enhanced: true, Rev: 2, PrivateData: IRDORD{IRD: 4, ORD: 5}.Append(nil)}
	_, err = ConfirmReply(Config{IRD: 4, ORD: 4}, req, rep)
	requireCode(t, err, CodeInsufficientIRD)
}

func TestPeerToPeer(t *testing.T) {
	all := RTRSend | RTRWrite | RTRRead
	for _, tc := range []struct {
		name      string
		ini, resp Config
		want      outcome
		rtr       RTR
		p2p       bool
	}{
		{name: "off"},
		{name: "default offer", ini: Config{P2P: P2POn}, p2p: true, rtr: RTRWrite},
		{name: "write", ini: Config{P2P: P2POn, RTRs: RTRWrite}, p2p: true, rtr: RTRWrite},
		{name: "read", ini: Config{P2P: P2POn, RTRs: RTRRead}, p2p: true, rtr: RTRRead},
		{name: "send", ini: Config{P2P: P2POn, RTRs: RTRSend}, resp: Config{RTRs: all}, p2p: true, rtr: RTRSend},
		{name: "read over send", ini: Config{P2P: P2POn, RTRs: RTRSend | RTRRead}, resp: Config{RTRs: all}, p2p: true, rtr: RTRRead},
		{name: "responder accepts only read", ini: Config{P2P: P2POn}, resp: Config{RTRs: RTRRead}, p2p: true, rtr: RTRRead},
		{name: "no match", ini: Config{P2P: P2POn, RTRs: RTRSend}, want: respRefuses},
		{name: "responder requires it", resp: Config{P2P: P2POn}, want: respRefuses},
		{name: "both want it", ini: Config{P2P: P2POn}, resp: Config{P2P: P2POn}, p2p: true, rtr: RTRWrite},
		{name: "rev 1, assumed", ini: Config{Rev: 1, P2P: P2POn, RTRs: RTRRead}, resp: Config{P2P: P2POn, RTRs: RTRRead}, p2p: true, rtr: RTRRead},
		{name: "rev 1 fallback, assumed", ini: Config{P2P: P2POn}, resp: Config{Rev: 1, P2P: P2POn}, p2p: true, rtr: RTRWrite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := runStartup(t, tc.ini, tc.resp, nil, nil)
			x.check(t, tc.want)
			if tc.want != ok {
				requireCode(t, x.respErr, CodeNoMatchingRTR)
				return
			}
			for _, p := range []Params{x.ini, x.resp} {
				require.Equal(t, tc.p2p, p.P2P)
				require.Equal(t, tc.rtr, p.RTR)
			}
			if x.rep.HasIRDORD() {
				v, err := x.rep.IRDORD()
				require.NoError(t, err)
				require.Equal(t, tc.p2p, v.P2P, "A echoed (RFC 6581 section 9.2)")
				require.Equal(t, tc.rtr, v.RTR, "exactly one RTR chosen")
			}
			if tc.rtr == RTRRead {
				// The zero-length Read needs a credit on each side, even
				// with IRD = ORD = 0 configured: on the wire, and in the
				// responder's IRD. The initiator's ORD stays what it was
				// configured: the credit is the start-up's (its QP keeps
				// one more ORD slot for the RTR).
				if x.req.HasIRDORD() {
					v, err := x.req.IRDORD()
					require.NoError(t, err)
					require.Equal(t, uint16(1), v.ORD, "the Request's ORD")
				}
				require.Equal(t, uint16(0), x.ini.ORD)
				require.Equal(t, uint16(1), x.resp.IRD)
			}
		})
	}
}

func TestPeerToPeerBadReplies(t *testing.T) {
	cfg := Config{P2P: P2POn, IRD: 2, ORD: 2} // offers Write|Read
	req, err := BuildRequest(cfg, nil)
	require.NoError(t, err)
	plain, err := BuildRequest(Config{IRD: 2, ORD: 2, P2P: P2POff}, nil)
	require.NoError(t, err)
	reply := func(v IRDORD) Frame {
		v.IRD, v.ORD = 2, 2
		return Frame{Reply: true, CRC: true, Enhanced: true, Rev: 2, PrivateData: v.Append(nil)}
	}
	for _, tc := range []struct {
		name   string
		req    Frame
		v      IRDORD
		strict bool
		want   RTR // RTRNone: CodeNoMatchingRTR
	}{
		{"no A echoed", req, IRDORD{RTR: RTRWrite}, false, RTRNone},
		{"two chosen", req, IRDORD{P2P: true, RTR: RTRWrite | RTRRead}, false, RTRNone},
		{"none chosen", req, IRDORD{P2P: true}, false, RTRNone},
		{"not offered, strict", req, IRDORD{P2P: true, RTR: RTRSend}, true, RTRNone},
		// Relaxed (the default): we can send any RTR, so we take the
		// responder's single choice (siw picks Write whatever is offered).
		{"not offered, relaxed", req, IRDORD{P2P: true, RTR: RTRSend}, false, RTRSend},
		{"chosen unasked", plain, IRDORD{P2P: true, RTR: RTRWrite}, false, RTRNone},
		{"read", req, IRDORD{P2P: true, RTR: RTRRead}, false, RTRRead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.StrictRTR = tc.strict
			c.P2P = P2POff
			if tc.req.PrivateData[0]&0x80 != 0 {
				c.P2P = P2POn
			}
			p, err := ConfirmReply(c, tc.req, reply(tc.v))
			if tc.want == RTRNone {
				requireCode(t, err, CodeNoMatchingRTR)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, p.RTR)
		})
	}
	// iw_cxgb4 may set A in a Reply unasked; with no RTR chosen that is harmless.
	p, err := ConfirmReply(Config{IRD: 2, ORD: 2}, plain, reply(IRDORD{P2P: true}))
	require.NoError(t, err)
	require.False(t, p.P2P)
}

func TestBadReplies(t *testing.T) {
	req2, err := BuildRequest(Config{IRD: 1, ORD: 1}, nil)
	require.NoError(t, err)
	req1, err := BuildRequest(Config{Rev: 1}, nil)
	require.NoError(t, err)
	req2plain := Frame{CRC: true, Rev: 2}
	word := IRDORD{IRD: 1, ORD: 1}.Append(nil)
	for _, tc := range []struct {
		name string
		req  Frame
		rep  Frame
	}{
		{"request key", req2, Frame{Enhanced: true, Rev: 2, PrivateData: word}},
		{"rev 2 reply to rev 1", req1, Frame{Reply: true, Enhanced: true, Rev: 2, PrivateData: word}},
		{"rev 0 reply", req1, Frame{Reply: true}},
		{"rev 2 without H to an enhanced request", req2, Frame{Reply: true, Rev: 2, PrivateData: word}},
		{"enhanced reply to a plain rev 2 request", req2plain, Frame{Reply: true, Enhanced: true, Rev: 2, PrivateData: word}},
		{"enhanced reply without the word", req2, Frame{Reply: true, Enhanced: true, Rev: 2, PrivateData: word[:3]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ConfirmReply(Config{IRD: 1, ORD: 1}, tc.req, tc.rep)
			requireCode(t, err, CodeInvalidReqRep)
		})
	}
	// Rev 2 without H answered in kind is fine (siw echoes it so).
	p, err := ConfirmReply(Config{IRD: 3, ORD: 4}, req2plain, Frame{Reply: true, Rev: 2})
	require.NoError(t, err)
	require.Equal(t, Params{Rev: 2, CRC: true, IRD: 3, ORD: 4}, p)
}

func TestRejects(t *testing.T) {
	siwReq, _, err := ParseFrame(frameHex(t, "MPA ID Req Frame|10 02 0004 0010 0008"))
	require.NoError(t, err)
	p2pReq, _, err := ParseFrame(frameHex(t, "MPA ID Req Frame|10 02 0004 8010 c008"))
	require.NoError(t, err)
	rev1Req := Frame{Rev: 1, PrivateData: []byte("x")}
	for _, tc := range []struct {
		name string
		c    Config
		req  Frame
		wire string
	}{
		{"rev 2", Config{}, siwReq, "MPA ID Rep Frame|30 02 0008 0000 0000 62757379"},
		{"rev 2 p2p echoes A", Config{}, p2pReq, "MPA ID Rep Frame|30 02 0008 8000 0000 62757379"},
		// RFC 6581 section 9.1: the Reject says the responder's IRD and
		// ORD, which the initiator passes to its ULP.
		{"rev 2 with our IRD/ORD", Config{IRD: 16, ORD: 2}, siwReq, "MPA ID Rep Frame|30 02 0008 0010 0002 62757379"},
		{"rev 1 responder", Config{Rev: 1}, siwReq, "MPA ID Rep Frame|20 01 0004 62757379"},
		{"rev 1 request", Config{}, rev1Req, "MPA ID Rep Frame|20 01 0004 62757379"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rej := Reject(tc.c, tc.req, []byte("busy"))
			wire, err := rej.Append(nil)
			require.NoError(t, err)
			require.Equal(t, frameHex(t, tc.wire), wire)

			_, err = ConfirmReply(tc.c, tc.req, rej)
			require.ErrorIs(t, err, ErrRejected)
			var re *RejectError
			require.ErrorAs(t, err, &re)
			require.Equal(t, []byte("busy"), re.PrivateData)
			if rej.HasIRDORD() {
				require.NotNil(t, re.Responder, "the Reject's IRD/ORD word reaches the ULP")
				require.Equal(t, IRDORD{IRD: tc.c.IRD, ORD: tc.c.ORD, P2P: rej.PrivateData[0]&0x80 != 0}, *re.Responder)
			} else {
				require.Nil(t, re.Responder)
			}
		})
	}

	// siw refuses with R|H and no private data at all.
	siwRej, _, err := ParseFrame(frameHex(t, "MPA ID Rep Frame|30 02 0000"))
	require.NoError(t, err)
	_, err = ConfirmReply(Config{}, siwReq, siwRej)
	var re *RejectError
	require.ErrorAs(t, err, &re)
	require.Empty(t, re.PrivateData)
	require.Nil(t, re.Responder, "no word, no IRD/ORD")
}

func TestRespondBadRequests(t *testing.T) {
	for _, tc := range []struct {
		name   string
		req    Frame
		reject bool
	}{
		{"reply key", Frame{Reply: true, Rev: 1}, false},
		{"rev 0", Frame{Rev: 0}, false},
		{"rev 3", Frame{Rev: 3}, false},
		// siw answers R|H (observed with Linux siw 6.1).
		{"enhanced without the word", Frame{Enhanced: true, Rev: 2, PrivateData: []byte{0, 1}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, _, err := Respond(Config{}, tc.req, nil)
			requireCode(t, err, CodeInvalidReqRep)
			require.Equal(t, tc.reject, rep.Reject)
			if tc.reject {
				require.True(t, rep.Reply)
				require.Equal(t, tc.req.Enhanced, rep.Enhanced)
			}
		})
	}
}

func TestPrivateDataSizes(t *testing.T) {
	pd := make([]byte, MaxPrivateData)
	_, err := BuildRequest(Config{Rev: 1}, pd)
	require.NoError(t, err)
	_, err = BuildRequest(Config{}, pd[:MaxPrivateData-IRDORDLen])
	require.NoError(t, err)
	_, err = BuildRequest(Config{}, pd[:MaxPrivateData-IRDORDLen+1])
	require.Error(t, err)
	_, err = BuildRequest(Config{Rev: 1}, append(pd, 0))
	require.Error(t, err)

	req, err := BuildRequest(Config{}, nil)
	require.NoError(t, err)
	rep, _, err := Respond(Config{}, req, pd[:MaxPrivateData-IRDORDLen])
	require.NoError(t, err)
	require.Len(t, rep.PrivateData, MaxPrivateData)
	rep, _, err = Respond(Config{}, req, pd[:MaxPrivateData-IRDORDLen+1])
	require.Error(t, err)
	require.False(t, rep.Reject, "a local error sends nothing")
}

func TestBadConfigs(t *testing.T) {
	req, err := BuildRequest(Config{}, nil)
	require.NoError(t, err)
	for _, c := range []Config{{Rev: 3}, {CRC: 4}, {IRD: MaxIRDORD + 1}, {ORD: 0x8000}, {RTRs: 0x08}} {
		_, err := BuildRequest(c, nil)
		require.Error(t, err, "%+v", c)
		_, _, err = Respond(c, req, nil)
		require.Error(t, err, "%+v", c)
		_, err = ConfirmReply(c, req, Frame{Reply: true, Rev: 2})
		require.Error(t, err, "%+v", c)
	}
}

// What siw_cm.c (Linux 6.1) sends and answers, next to what we do.
func TestGoldenSiwExchange(t *testing.T) {
	encode := func(f Frame) []byte {
		b, err := f.Append(nil)
		require.NoError(t, err)
		return b
	}
	siwReq, _, err := ParseFrame(frameHex(t, "MPA ID Req Frame|10 02 0004 0010 0008")) // IRD 16, ORD 8
	require.NoError(t, err)

	// siw accepting with IRD 8, ORD 128 echoes the flags and revision, and
	// answers ORD min(16, 128) and IRD 8: ours is the same octets.
	rep, p, err := Respond(Config{CRC: CRCOff, IRD: 8, ORD: 128}, siwReq, nil)
	require.NoError(t, err)
	require.Equal(t, frameHex(t, "MPA ID Rep Frame|10 02 0004 0008 0010"), encode(rep))
	require.Equal(t, Params{Rev: 2, IRD: 8, ORD: 16}, p)

	// With our defaults the Reply asks for CRCs, which siw accepts
	// (mpa_crc_strict is off). With IRD 128 siw would advertise 128; we
	// advertise what the initiator's ORD can use.
	rep, p, err = Respond(Config{IRD: 128, ORD: 128}, siwReq, nil)
	require.NoError(t, err)
	require.Equal(t, frameHex(t, "MPA ID Rep Frame|50 02 0004 0008 0010"), encode(rep))
	require.Equal(t, Params{Rev: 2, CRC: true, IRD: 8, ORD: 16}, p)

	// siw in peer-to-peer mode offers Write and Read; we pick Write, as siw does.
	siwP2P, _, err := ParseFrame(frameHex(t, "MPA ID Req Frame|10 02 0004 8010 c008"))
	require.NoError(t, err)
	rep, p, err = Respond(Config{CRC: CRCOff, IRD: 8, ORD: 16}, siwP2P, nil)
	require.NoError(t, err)
	require.Equal(t, frameHex(t, "MPA ID Rep Frame|10 02 0004 8008 8010"), encode(rep))
	require.Equal(t, Params{Rev: 2, IRD: 8, ORD: 16, P2P: true, RTR: RTRWrite}, p)

	// Our Request (IRD 16, ORD 4), and siw's answer when its application
	// asks for IRD = ORD = 16: it echoes C and H, ORD := min(our IRD, 16),
	// and raises its IRD to at least our ORD.
	ourReq, err := BuildRequest(Config{IRD: 16, ORD: 4, P2P: P2POff}, nil)
	require.NoError(t, err)
	require.Equal(t, frameHex(t, "MPA ID Req Frame|50 02 0004 0010 0004"), encode(ourReq))
	siwRep, _, err := ParseFrame(frameHex(t, "MPA ID Rep Frame|50 02 0004 0010 0010"))
	require.NoError(t, err)
	p, err = ConfirmReply(Config{IRD: 16, ORD: 4}, ourReq, siwRep)
	require.NoError(t, err)
	require.Equal(t, Params{Rev: 2, CRC: true, IRD: 16, ORD: 4}, p)
}

func TestCRCPolicyString(t *testing.T) {
	require.Equal(t, "strict", CRCStrict.String())
	require.Equal(t, "CRCPolicy(9)", CRCPolicy(9).String())
}

// P2PAuto, the default: an initiator offers peer-to-peer mode with a Read
// RTR alone, whose answer tells it that the responder's QP reads; a
// responder that does not take it leaves the connection without it.
func TestPeerToPeerAuto(t *testing.T) {
	encode := func(f Frame) []byte {
		b, err := f.Append(nil)
		require.NoError(t, err)
		return b
	}
	req, err := BuildRequest(Config{IRD: 16, ORD: 4}, nil)
	require.NoError(t, err)
	// A (0x8000) in the IRD word, the Read RTR (0x4000) in the ORD word.
	require.Equal(t, frameHex(t, "MPA ID Req Frame|50 02 0004 8010 4004"), encode(req))
	// ORD 0 is raised to 1: the Read RTR takes a credit (as siw_connect).
	req0, err := BuildRequest(Config{}, nil)
	require.NoError(t, err)
	require.Equal(t, frameHex(t, "MPA ID Req Frame|50 02 0004 8000 4001"), encode(req0))

	for _, tc := range []struct {
		name string
		resp Config
		p2p  bool
		rtr  RTR
		code LLPCode // the responder's rejection, 0: none
	}{
		{name: "our responder's default takes it", resp: Config{IRD: 8, ORD: 8}, p2p: true, rtr: RTRRead},
		{name: "a responder that requires it", resp: Config{P2P: P2POn, IRD: 8, ORD: 8}, p2p: true, rtr: RTRRead},
		{name: "a responder accepting only Write RTRs rejects", resp: Config{RTRs: RTRWrite, IRD: 8, ORD: 8}, code: CodeNoMatchingRTR},
		{name: "a Rev 1 responder: none", resp: Config{Rev: 1, IRD: 8, ORD: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ini := Config{IRD: 8, ORD: 8}
			sent, err := BuildRequest(ini, nil)
			require.NoError(t, err)
			rep, p, err := Respond(tc.resp, sent, nil)
			if tc.code != 0 {
				requireCode(t, err, tc.code)
				require.True(t, rep.Reject)
				return
			}
			require.NoError(t, err)
			q, err := ConfirmReply(ini, sent, rep)
			require.NoError(t, err)
			require.Equal(t, tc.p2p, p.P2P)
			require.Equal(t, tc.p2p, q.P2P)
			require.Equal(t, tc.rtr, q.RTR)
			require.Equal(t, tc.rtr, p.RTR)
		})
	}
	// A Rev 2 responder that does not echo A: the auto initiator goes on
	// without peer-to-peer mode; one that requires it (P2POn) fails.
	noA := Frame{Reply: true, CRC: true, Enhanced: true, Rev: 2, PrivateData: IRDORD{IRD: 8, ORD: 8}.Append(nil)}
	p, err := ConfirmReply(Config{IRD: 8, ORD: 8}, req, noA)
	require.NoError(t, err)
	require.False(t, p.P2P)
	require.Equal(t, RTRNone, p.RTR)
	_, err = ConfirmReply(Config{P2P: P2POn, IRD: 8, ORD: 8}, req, noA)
	requireCode(t, err, CodeNoMatchingRTR)
	// An initiator that turns it off offers nothing.
	off, err := BuildRequest(Config{IRD: 16, ORD: 4, P2P: P2POff}, nil)
	require.NoError(t, err)
	require.Equal(t, frameHex(t, "MPA ID Req Frame|50 02 0004 0010 0004"), encode(off))
	_, err = BuildRequest(Config{P2P: 7}, nil)
	require.Error(t, err)
}
