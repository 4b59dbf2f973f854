package mpa

import (
	"errors"
	"fmt"
)

// The start-up policy, as pure functions over frames: BuildRequest and
// ConfirmReply for the initiator, Respond and Reject for the responder. They
// decide; the caller does the I/O. What they decide follows siw_cm.c where
// the RFCs leave room, with siw's compile-time switches as Config fields.

// CRCPolicy says when to use MPA CRCs. RFC 5044 section 7.1: if either the
// Request or the Reply has C set, both directions use CRCs.
type CRCPolicy uint8

const (
	// CRCOn asks for CRCs, so they are always on. The default.
	CRCOn CRCPolicy = iota
	// CRCOff does not ask, and uses CRCs if the peer asks (siw's default).
	CRCOff
	// CRCRequired asks, and also refuses a Reply that does not set C: a peer
	// that does not confirm may not check them (siw mpa_crc_required).
	CRCRequired
	// CRCStrict does not ask, and refuses a peer that asks: no CRCs or no
	// connection (siw mpa_crc_strict).
	CRCStrict
)

var crcPolicyNames = [...]string{CRCOn: "on", CRCOff: "off", CRCRequired: "required", CRCStrict: "strict"}

func (p CRCPolicy) String() string {
	if int(p) < len(crcPolicyNames) {
		return crcPolicyNames[p]
	}
	return fmt.Sprintf("CRCPolicy(%d)", uint8(p))
}

func (p CRCPolicy) asks() bool { return p == CRCOn || p == CRCRequired }

// Config is one side's start-up policy. The zero value speaks Rev 2, asks for
// CRCs, sends markers if asked but wants none, and has IRD = ORD = 0.
type Config struct {
	Rev uint8 // MPA revision to speak: 1 or 2; 0 means 2
	CRC CRCPolicy
	// MarkersRx asks the peer to send markers (M in our frame).
	MarkersRx bool
	// RefuseMarkers refuses a peer that asks us to send markers, as siw does.
	RefuseMarkers bool
	// P2P is peer-to-peer mode (RFC 6581 section 9): the initiator sends an
	// RTR message first, and the responder sends nothing before it. The
	// default, P2PAuto, offers it on Rev 2 with a Read RTR and goes on
	// without it if the responder does not take it; see P2PMode.
	P2P P2PMode
	// RTRs are the RTR messages an initiator offers, or a responder accepts;
	// 0 means RTRWrite|RTRRead, as siw, except that a P2PAuto initiator
	// offers RTRRead alone (its answer tells that the responder reads). A
	// responder picks Write over Read over Send, like siw; so does a Rev 1
	// peer-to-peer side.
	RTRs RTR
	// IRD and ORD are the most inbound and outbound RDMA Read Requests this
	// side can have outstanding, at most MaxIRDORD. Rev 2 never agrees to
	// more; Rev 1 cannot tell the peer, so both sides must be configured
	// alike.
	IRD, ORD uint16
	// StrictIRD fails the start-up (CodeInsufficientIRD) when the peer cannot
	// take our ORD or wants more than our IRD, instead of lowering ORD to the
	// peer's IRD (siw's relaxed_ird_negotiation, the default).
	StrictIRD bool
	// StrictRTR fails the start-up (CodeNoMatchingRTR) when the responder
	// picks an RTR we did not offer. By default we accept any single one,
	// since we can send all three: Linux siw picks Write whatever is
	// offered, and the Terminate a strict initiator sends for it crashes
	// the Linux 6.1 iw_cm (kernel BUG at iwcm.c:969).
	StrictRTR bool
}

// P2PMode says whether a side uses peer-to-peer mode.
type P2PMode uint8

const (
	// P2PAuto: an initiator offers peer-to-peer mode on Rev 2, with a Read
	// RTR unless RTRs says otherwise, and goes on without it when the
	// responder does not echo A; a responder takes it when offered. The
	// Read RTR's answer is the one event that tells an initiator the
	// responder's QP reads the stream (Linux siw hands the socket to its QP
	// only after sending its Reply). Rev 1 cannot negotiate it: off.
	P2PAuto P2PMode = iota
	// P2POn requires it: an initiator fails the start-up when the responder
	// does not echo A, a responder rejects Rev 2 Requests that do not ask.
	// Rev 1 cannot negotiate it, so with Rev 1 both sides assume it if
	// configured alike, as iw_cxgb4 (peer2peer, p2p_type) and Windows SMB
	// Direct do.
	P2POn
	// P2POff: an initiator does not offer it. A responder still takes it
	// when offered (RFC 6581 section 9.2: a Reply echoes A).
	P2POff
)

var p2pNames = [...]string{"auto", "on", "off"}

func (m P2PMode) String() string {
	if int(m) < len(p2pNames) {
		return p2pNames[m]
	}
	return fmt.Sprintf("P2PMode(%d)", uint8(m))
}

// settled returns c with its defaults filled in.
func (c Config) settled() (Config, error) {
	if c.Rev == 0 {
		c.Rev = MaxRev
	}
	if c.RTRs == RTRNone {
		c.RTRs = RTRWrite | RTRRead
	}
	switch {
	case c.P2P > P2POff:
		return c, fmt.Errorf("mpa: config: unknown %v", c.P2P)
	case c.Rev > MaxRev:
		return c, fmt.Errorf("mpa: config: MPA revision %d not supported", c.Rev)
	case c.CRC > CRCStrict:
		return c, fmt.Errorf("mpa: config: unknown %v", c.CRC)
	case c.IRD > MaxIRDORD || c.ORD > MaxIRDORD:
		return c, fmt.Errorf("mpa: config: IRD %d / ORD %d, at most %d", c.IRD, c.ORD, MaxIRDORD)
	case c.RTRs&^rtrAll != 0:
		return c, fmt.Errorf("mpa: config: unknown RTR %v", c.RTRs)
	}
	return c, nil
}

// Params is what the start-up agreed, seen from the local side.
type Params struct {
	Rev       uint8
	CRC       bool // both directions
	MarkersTx bool // we send markers (the peer's frame had M)
	MarkersRx bool // the peer sends markers (our frame had M)
	IRD, ORD  uint16
	P2P       bool
	RTR       RTR // with P2P: the one RTR message the initiator sends first
}

// ErrRefused is the error for a valid peer frame that our Config does not
// accept (markers, CRC). Unlike an *Error it carries no code: siw just closes
// the connection, or (as responder) sends a Reject.
var ErrRefused = errors.New("mpa: refused by local policy")

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrRefused}, args...)...)
}

// RejectError is the error for a Reply with R set. It Is ErrRejected.
type RejectError struct {
	// PrivateData is the ULP private data of the Reject (without an IRD/ORD
	// word); it often says why.
	PrivateData []byte
	// Responder is the IRD/ORD word of an enhanced (Rev 2) Reject, nil
	// without one: the responder's IRD and ORD (RFC 6581 section 9.1: the
	// initiator passes them to its ULP, which may retry with other
	// values) and, for a refused peer-to-peer Request, the RTRs it
	// accepts.
	Responder *IRDORD
}

func (e *RejectError) Error() string {
	pd := fmt.Sprintf("%d octets of private data", len(e.PrivateData))
	if printable(e.PrivateData) {
		pd = fmt.Sprintf("%q", e.PrivateData) // a reason, as a TLS listener's
	}
	if e.Responder != nil {
		return fmt.Sprintf("%v (%s; responder IRD %d ORD %d)", ErrRejected, pd, e.Responder.IRD, e.Responder.ORD)
	}
	return fmt.Sprintf("%v (%s)", ErrRejected, pd)
}

// printable reports whether b is a short line of printable ASCII.
func printable(b []byte) bool {
	if len(b) == 0 || len(b) > 80 {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// Is makes errors.Is(err, ErrRejected) true.
func (e *RejectError) Is(target error) bool { return target == ErrRejected }

// BuildRequest returns the initiator's Request, carrying the ULP private data
// pd (not copied when Rev is 1).
func BuildRequest(c Config, pd []byte) (Frame, error) {
	if _, err := c.settled(); err != nil {
		return Frame{}, err
	}
	rev := c.Rev
	if rev == 0 {
		rev = MaxRev
	}
	f := Frame{Markers: c.MarkersRx, CRC: c.CRC.asks(), Rev: rev, PrivateData: pd}
	if rev < 2 {
		if len(pd) > MaxPrivateData {
			return Frame{}, pdTooLong(len(pd), MaxPrivateData)
		}
		return f, nil
	}
	if len(pd) > MaxPrivateData-IRDORDLen {
		return Frame{}, pdTooLong(len(pd), MaxPrivateData-IRDORDLen)
	}
	auto := c.P2P == P2PAuto && c.RTRs == RTRNone
	c, err := c.settled()
	if err != nil {
		return Frame{}, err
	}
	if auto {
		c.RTRs = RTRRead
	}
	v := IRDORD{IRD: c.IRD, ORD: c.ORD}
	if c.P2P != P2POff {
		v.P2P, v.RTR = true, c.RTRs
		v.ORD = rtrCredit(v.RTR, v.ORD) // like siw_connect in peer-to-peer mode
	}
	f.Enhanced = true
	f.PrivateData = append(v.Append(make([]byte, 0, IRDORDLen+len(pd))), pd...)
	return f, nil
}

// Respond is the responder's answer to req, carrying pd on success. On error,
// reply is a Reject to send if reply.Reject is set; otherwise the connection
// is to be closed without a Reply (a frame that cannot start MPA, or a local
// error). Errors are an *Error with the LLP code of the reason, or
// ErrRefused.
//
// Revision: the Reply has the lower of req's and ours, so a Rev 1 responder
// answers a Rev 2 Request with Rev 1 and the initiator falls back. IRD/ORD
// (Rev 2 with H): our ORD becomes min(ORD, peer IRD) and our IRD
// min(IRD, peer ORD); the Reply carries them, and a relaxed initiator lowers
// its ORD to our IRD. siw instead keeps its own IRD, raised to the peer's ORD
// up to its device limit; we never go above Config, nor offer more IRD than
// the peer's ORD can use.
func Respond(c Config, req Frame, pd []byte) (reply Frame, p Params, err error) {
	c, err = c.settled()
	if err != nil {
		return Frame{}, Params{}, err
	}
	// siw closes without a Reply on these; so do we. Rev 0 is the
	// pre-standard draft, which differs in ways not implemented here.
	if req.Reply || req.Rev == 0 || req.Rev > MaxRev {
		return Frame{}, Params{}, errorf(CodeInvalidReqRep, "cannot answer a %s of revision %d", kind(req.Reply), req.Rev)
	}
	rev := min(req.Rev, c.Rev)
	enhanced := rev == 2 && req.HasIRDORD()
	maxPD := MaxPrivateData
	if enhanced {
		maxPD -= IRDORDLen
	}
	if len(pd) > maxPD {
		return Frame{}, Params{}, pdTooLong(len(pd), maxPD)
	}
	var peer IRDORD
	if req.HasIRDORD() {
		if peer, err = req.IRDORD(); err != nil {
			return Reject(c, req, nil), Params{}, err // siw rejects these too
		}
	}
	// RFC 5044 section 7.1: M asks the receiver of the frame to send markers.
	if req.Markers && c.RefuseMarkers {
		return Reject(c, req, nil), Params{}, refused("the initiator wants markers")
	}
	// RFC 5044 section 7.1: CRC MUST be used if either side asks.
	if req.CRC && c.CRC == CRCStrict {
		return Reject(c, req, nil), Params{}, refused("the initiator wants CRCs")
	}
	p = Params{Rev: rev, CRC: req.CRC || c.CRC.asks(), MarkersTx: req.Markers, MarkersRx: c.MarkersRx, IRD: c.IRD, ORD: c.ORD}
	if enhanced {
		switch {
		case c.StrictIRD && peer.ORD > c.IRD:
			return Reject(c, req, nil), Params{}, errorf(CodeInsufficientIRD, "initiator ORD %d, our IRD %d", peer.ORD, c.IRD)
		case c.StrictIRD && peer.IRD < c.ORD:
			return Reject(c, req, nil), Params{}, errorf(CodeInsufficientIRD, "initiator IRD %d, our ORD %d", peer.IRD, c.ORD)
		}
		p.IRD, p.ORD = min(c.IRD, peer.ORD), min(c.ORD, peer.IRD)
	}
	switch {
	case enhanced && peer.P2P:
		// RFC 6581 section 9.2: with A in the Request the Reply MUST set A;
		// the responder picks exactly one of the offered RTRs.
		p.P2P, p.RTR = true, pickRTR(peer.RTR&c.RTRs)
		if p.RTR == RTRNone {
			// "If the responder does not support any of the
			// initiator-specified RTR indication options, then the
			// responder MUST set at least one RTR indication type option it
			// supports": the Reject says which.
			rej := Reject(c, req, nil)
			rej.PrivateData = IRDORD{IRD: c.IRD, ORD: c.ORD, P2P: true, RTR: c.RTRs}.Append(nil)
			return rej, Params{}, errorf(CodeNoMatchingRTR, "initiator offers RTR %v, we accept %v", peer.RTR, c.RTRs)
		}
	case enhanced && c.P2P == P2POn:
		return Reject(c, req, nil), Params{}, errorf(CodeNoMatchingRTR, "initiator did not ask for peer-to-peer mode")
	case !enhanced && c.P2P == P2POn:
		p.P2P, p.RTR = true, pickRTR(c.RTRs) // Rev 1: assumed, see Config.P2P
	}
	p.IRD = rtrCredit(p.RTR, p.IRD)

	reply = Frame{Reply: true, Markers: p.MarkersRx, CRC: p.CRC, Enhanced: enhanced, Rev: rev, PrivateData: pd}
	if enhanced {
		v := IRDORD{IRD: p.IRD, ORD: p.ORD, P2P: p.P2P, RTR: p.RTR}
		reply.PrivateData = append(v.Append(make([]byte, 0, IRDORDLen+len(pd))), pd...)
	}
	return reply, p, nil
}

// Reject returns a Reply that refuses req, carrying the ULP private data pd
// (for example, why). It has req's revision (capped at ours), and for an
// enhanced Request an IRD/ORD word with our IRD and ORD, which RFC 6581
// section 9.1 has the initiator pass to its ULP (a Reject for too small an
// initiator IRD says there which ORD the responder needs), echoing A as
// section 9.2 asks of every Reply.
func Reject(c Config, req Frame, pd []byte) Frame {
	ours := c.Rev
	if ours == 0 {
		ours = MaxRev
	}
	rev := max(1, min(req.Rev, ours, MaxRev))
	f := Frame{Reply: true, Reject: true, Rev: rev, PrivateData: pd}
	if rev == 2 && req.HasIRDORD() {
		f.Enhanced = true
		peer, _ := req.IRDORD() // a short word still gets a well-formed Reject
		v := IRDORD{IRD: c.IRD, ORD: c.ORD, P2P: peer.P2P}
		f.PrivateData = append(v.Append(make([]byte, 0, IRDORDLen+len(pd))), pd...)
	}
	return f
}

// ConfirmReply is the initiator's check of rep, the answer to our req, and
// returns what was agreed. Errors: a *RejectError if rep has R set; an *Error
// whose code a Terminate to the responder may carry, as siw sends one
// (CodeInvalidReqRep, CodeInsufficientIRD, CodeNoMatchingRTR); or ErrRefused
// when our Config does not accept a valid Reply.
//
// A Rev 1 Reply to a Rev 2 Request is a fallback: nothing is negotiated and
// Config applies, as with iw_cxgb4 (siw refuses it). IRD/ORD: a responder ORD
// above our IRD always fails, since its Read Requests would overrun us; a
// responder IRD below our ORD lowers our ORD, or fails if StrictIRD.
func ConfirmReply(c Config, req, rep Frame) (Params, error) {
	c, err := c.settled()
	if err != nil {
		return Params{}, err
	}
	if !rep.Reply {
		return Params{}, errorf(CodeInvalidReqRep, "got an MPA Request, want a Reply")
	}
	if rep.Reject {
		pd, _ := rep.ULPPrivateData() // siw sends R|H with no word at all
		e := &RejectError{PrivateData: pd}
		if v, err := rep.IRDORD(); err == nil && rep.HasIRDORD() {
			e.Responder = &v
		}
		return Params{}, e
	}
	if rep.Rev == 0 || rep.Rev > req.Rev {
		return Params{}, errorf(CodeInvalidReqRep, "Reply revision %d to a revision %d Request", rep.Rev, req.Rev)
	}
	if rep.Markers && c.RefuseMarkers {
		return Params{}, refused("the responder wants markers")
	}
	switch {
	case c.CRC == CRCRequired && !rep.CRC:
		return Params{}, refused("the responder did not confirm CRCs")
	case c.CRC == CRCStrict && rep.CRC:
		return Params{}, refused("the responder wants CRCs")
	}
	p := Params{Rev: rep.Rev, CRC: req.CRC || rep.CRC, MarkersTx: rep.Markers, MarkersRx: req.Markers, IRD: c.IRD, ORD: c.ORD}
	switch {
	case rep.HasIRDORD() && !req.HasIRDORD():
		return Params{}, errorf(CodeInvalidReqRep, "enhanced Reply to a plain Request")
	case req.HasIRDORD() && rep.Rev == 2 && !rep.Enhanced:
		// RFC 6581 section 9: an enhanced Request gets an enhanced Reply.
		return Params{}, errorf(CodeInvalidReqRep, "Rev 2 Reply without H to an enhanced Request")
	case !rep.HasIRDORD():
		if c.P2P == P2POn {
			p.P2P, p.RTR = true, pickRTR(c.RTRs) // assumed, see Config.P2P
		}
		return p, nil
	}
	mine, err := req.IRDORD()
	if err != nil {
		return Params{}, fmt.Errorf("mpa: our own Request: %w", err)
	}
	peer, err := rep.IRDORD()
	if err != nil {
		return Params{}, err
	}
	if peer.ORD > mine.IRD {
		return Params{}, errorf(CodeInsufficientIRD, "responder ORD %d, our IRD %d", peer.ORD, mine.IRD)
	}
	if c.StrictIRD && peer.IRD < mine.ORD {
		return Params{}, errorf(CodeInsufficientIRD, "responder IRD %d, our ORD %d", peer.IRD, mine.ORD)
	}
	// Our ORD from the Config: the Request's may carry a Read RTR's credit,
	// which is the start-up's, not the application's (RFC 6581 section
	// 9.1: a responder IRD of 0 still allows the RTR and nothing more).
	p.IRD, p.ORD = min(mine.IRD, peer.ORD), min(c.ORD, peer.IRD)
	switch {
	case mine.P2P && !peer.P2P && c.P2P == P2POn:
		return Params{}, errorf(CodeNoMatchingRTR, "responder did not echo peer-to-peer flag A")
	case mine.P2P && !peer.P2P && peer.RTR == RTRNone:
		// Offered, not taken (P2PAuto): without peer-to-peer mode.
		mine.P2P = false
	case mine.P2P && !singleRTR(peer.RTR):
		return Params{}, errorf(CodeNoMatchingRTR, "responder chose RTR %v, not exactly one", peer.RTR)
	case mine.P2P && peer.RTR&^mine.RTR != 0 && c.StrictRTR:
		return Params{}, errorf(CodeNoMatchingRTR, "responder chose RTR %v, we offered %v", peer.RTR, mine.RTR)
	case !mine.P2P && peer.RTR != RTRNone:
		// A alone is harmless: iw_cxgb4 may set it unasked.
		return Params{}, errorf(CodeNoMatchingRTR, "responder chose RTR %v, we did not ask for peer-to-peer mode", peer.RTR)
	}
	if mine.P2P {
		p.P2P, p.RTR = true, peer.RTR
	}
	return p, nil
}

// pickRTR picks one RTR from set, preferring Write, then Read, then Send,
// as siw does: a Send needs a receive posted for it.
func pickRTR(set RTR) RTR {
	for _, r := range [...]RTR{RTRWrite, RTRRead, RTRSend} {
		if set&r != 0 {
			return r
		}
	}
	return RTRNone
}

func singleRTR(r RTR) bool { return r&^rtrAll == 0 && r != 0 && r&(r-1) == 0 }

// rtrCredit returns n, raised to 1 if the RTR is a Read: its zero-length Read
// Request takes an ORD credit at the initiator and an IRD entry at the
// responder.
func rtrCredit(r RTR, n uint16) uint16 {
	if r&RTRRead != 0 {
		return max(n, 1)
	}
	return n
}

func pdTooLong(n, most int) error {
	return fmt.Errorf("mpa: %d octets of private data, at most %d fit", n, most)
}
