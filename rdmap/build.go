package rdmap

import (
	"errors"

	"github.com/goiwarp/iwarp/ddp"
)

// NewTerminate builds the Terminate header that reports err (RFC 5040
// sections 4.8 and 7.1). hdr holds the first octets of the received DDP
// segment the error was found on: its DDP header and, for a Read Request, the
// Read Request header after it (octets beyond are ignored; for an error found
// while answering a Read Request, the QP passes the request as it now stands,
// with sink TO, size and source TO advanced past what was sent, as RFC 5040
// section 4.8 asks). segLen is that segment's full length, its MPA ULPDU
// length. hdr is nil for errors not tied to a received segment (RFC 5040
// section 7.1 case 1: no headers).
//
// What is included follows RFC 5040 Figure 10:
//
//	LLP errors                        no headers
//	local catastrophic (RDMAP, DDP)   no headers ("The DDP Header is not present if
//	                                  the Terminate Error Type is a Local Catastrophic Error")
//	DDP tagged/untagged errors        M, D: segment length and DDP header
//	RDMAP remote operation errors     M, D ("Yes, if possible")
//	RDMAP remote protection errors    M, D, and R with the Read Request header when the
//	                                  segment is a Read Request
//
// Linux siw differs in three places, and the RFC is followed here: it omits
// the DDP header for version and opcode errors (the RFC says "if possible",
// and the DDP header of such a segment is intact); it sets R for remote
// protection errors on Sends, with no RDMA header to go with it (the RFC sends
// one only for Read Requests); and its DDP Segment Length is the payload
// length after the headers, where RFC 5041 section 7.1 reports "the length of
// the DDP segment", headers included.
//
// It reports false, and builds nothing, for a nil err and for a
// *RemoteError: a Terminate from the peer is never answered with one.
func NewTerminate(err error, hdr []byte, segLen int) (Terminate, bool) {
	var re *RemoteError
	if err == nil || errors.As(err, &re) {
		return Terminate{}, false
	}
	c := CauseOf(err)
	t := Terminate{Layer: c.Layer, EType: c.EType, Code: c.Code}
	if !reportsSegment(c) || len(hdr) == 0 {
		return t, true
	}
	// The T flag alone gives the header length, so that a header with a bad
	// DDP version can be sent back too.
	tagged := hdr[0]&ddp.FlagTagged != 0
	n := ddp.HdrLen(tagged)
	if len(hdr) < n {
		return t, true // not possible
	}
	t.D, t.DDPHdr = true, hdr[:n]
	if segLen >= 0 && segLen <= 0xffff {
		t.M, t.SegLen = true, uint16(segLen)
	}
	if c.Layer == LayerRDMAP && c.EType == ETypeRemoteProtection && !tagged &&
		CtrlOpcode(hdr[1]) == OpReadRequest && len(hdr) >= n+ReadRequestLen {
		t.R, t.RDMAPHdr = true, hdr[n:n+ReadRequestLen]
	}
	return t, true
}

// reportsSegment says whether a Terminate for c carries the terminated DDP
// segment's length and header (RFC 5040 Figure 10).
func reportsSegment(c Cause) bool {
	switch c.Layer {
	case LayerRDMAP:
		return c.EType == ETypeRemoteProtection || c.EType == ETypeRemoteOperation
	case LayerDDP:
		return ddp.EType(c.EType) == ddp.ETypeTagged || ddp.EType(c.EType) == ddp.ETypeUntagged
	}
	return false
}

// AppendTerminateDDP appends the untagged DDP header that carries a
// Terminate message (RFC 5040 section 5.4 and Appendix A.6): L set, RDMAP
// control 0x47, Invalidate STag zero, QN 2, MSN 1, MO 0. A stream carries one
// Terminate at most, so it is always the Terminate queue's first message,
// with MSN 1 (RFC 5041 section 4.3). The Terminate header (Terminate.Append)
// follows it, in the same FPDU.
func AppendTerminateDDP(b []byte) []byte {
	return ddp.AppendUntagged(b, true, Ctrl(OpTerminate), 0, QNTerminate, 1, 0)
}
