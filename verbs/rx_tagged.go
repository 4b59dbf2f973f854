package verbs

import (
	"fmt"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/rdmap"
)

// The receive loop's tagged buffer model: RDMA Write and Read Response
// segments placed straight into registered memory (RFC 5041 section 5.2).

// taggedErr maps a failed memory check on a tagged segment to its DDP error
// (RFC 5041 section 7.2, in siw's mapping: RFC 5041 has no code for missing
// access rights, so that is "invalid STag" on the wire, and a rightsError
// here says what was wrong).
func taggedErr(e accessErr, stag uint32, to uint64, n int) *ddp.Error {
	code := ddp.CodeInvalidSTag
	switch e {
	case accessPD:
		code = ddp.CodeSTagNotAssoc
	case accessTOWrap:
		code = ddp.CodeTOWrap
	case accessBounds:
		code = ddp.CodeBaseBounds
	}
	return ddp.Errorf(ddp.ETypeTagged, code, "STag %#x TO %#x len %d", stag, to, n)
}

// rightsError is an RDMA Write into a region registered without
// RemoteWrite. The Terminate says "invalid STag" (its Unwrap), as Linux
// siw's does; the error says that the STag was right and the rights wrong.
type rightsError struct {
	wire *ddp.Error
	stag uint32
	have Access
}

func (e *rightsError) Error() string {
	return fmt.Sprintf("access rights violation: RDMA Write to STag %#x, a region registered %v, without RemoteWrite "+
		"(RFC 5041 has no code for access rights: the Terminate says invalid STag, as Linux siw's)", e.stag, e.have)
}

func (e *rightsError) Unwrap() error { return e.wire }

// rxWrite places an RDMA Write segment straight into the registered region.
// The checks of RFC 5041 section 7.1 on a tagged segment all concern memory:
// the device makes them (Device.check, in siw's order) and taggedErr names
// the failure.
func (qp *QP) rxWrite(h ddp.Tagged, n int) error {
	if n == 0 {
		// Section 7.1 checks non-zero-length segments only, and nothing is
		// placed: siw's zero-length RTR Write carries a dummy STag. An
		// empty last segment still ends a Write whose earlier segments
		// were placed: that Write is counted, in the region they went to.
		if h.Last() && qp.rx.writeOpen {
			qp.rx.writeOpen = false
			if c := &qp.rx.stags; c.mr != nil && c.stag == h.STag() {
				c.mr.placed.Add(1)
			}
		}
		return nil
	}
	dst, mr, e := qp.rx.stags.check(qp.dev, h.STag(), qp.pd, RemoteWrite, h.TO(), n)
	if e != accessOK {
		if e == accessRights {
			return &rightsError{wire: taggedErr(e, h.STag(), h.TO(), n), stag: h.STag(), have: mr.Access()}
		}
		return taggedErr(e, h.STag(), h.TO(), n)
	}
	mr.placed.Load() // acquires what a poller did before (MR.Placed)
	// The last piece of a segment: when the Reader holds the FPDU whole,
	// ReadLast places it and finishes the FPDU in one step; otherwise
	// ReadFull reads it and the loop's Finish takes the rest. (Not
	// ReadLast either way: its frame on the path that waits for the
	// socket made receive goroutines outgrow their first stack, 1–2 KiB
	// more per idle QP after traffic in TestIdleQPMemory. rxReadResponse
	// and rxSend do the same.)
	var err error
	if qp.rx.r.Whole() != nil {
		err = qp.rx.r.ReadLast(dst)
	} else {
		err = qp.rx.r.ReadFull(dst)
	}
	if err != nil {
		return err
	}
	qp.rx.writeOpen = !h.Last()
	if h.Last() {
		mr.placed.Add(1) // releases the message to the next poller
	}
	return nil
}

// failSQ ends the QP for err and completes SQ entry idx (a Read or an
// atomic whose local buffer died since it was posted) with LocProtErr: the
// cause first, so that the application polling the WC finds it in Err.
func (qp *QP) failSQ(err error, idx uint64) error {
	qp.rxFatal(err)
	qp.completeSQ(idx, LocProtErr, true)
	return err
}

// rxReadResponse places a Read Response segment into the sink of our oldest
// outstanding Read; rdmap.CheckReadResponse checks that it continues exactly
// where the last one ended.
func (qp *QP) rxReadResponse(h ddp.Tagged, n int) error {
	x := &qp.rx
	j := x.readJob
	if j == nil {
		// The response's first segment: find its Read (a slot stays put
		// until pop, so the later segments take no lock).
		j = qp.ordq.front()
		if j == nil || j.atomic {
			// An atomic at the head of the ORD queue is no Read: its entry
			// has no sink, and a response must not complete it.
			return rdmap.Errorf(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, "Read Response with no Read outstanding")
		}
		x.readJob = j
	}
	if err := rdmap.CheckReadResponse(h, uint32(n), j.stag, j.to, j.size, x.readOff); err != nil {
		return err
	}
	if n > 0 {
		// The sink was resolved when the Read was posted; its STag may
		// have died since (a Send with Invalidate may even arrive between
		// two segments of the response).
		if x.readMR == nil {
			x.readMR, _ = qp.dev.lookup(j.stag)
		}
		if x.readMR == nil || !x.readMR.live(j.stag) {
			return qp.failSQ(taggedErr(accessSTag, h.STag(), h.TO(), n), j.sqIdx)
		}
	}
	dst := j.buf[x.readOff : x.readOff+uint32(n)]
	var err error
	if x.r.Whole() != nil { // as in rxWrite
		err = x.r.ReadLast(dst)
	} else {
		err = x.r.ReadFull(dst)
	}
	if err != nil {
		return err
	}
	x.readOff += uint32(n)
	if h.Last() {
		x.act = actReadDone
	}
	return nil
}
