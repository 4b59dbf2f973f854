package verbs

import "fmt"

// SRQ is a shared receive queue: QPs created with it take their receive
// buffers from it, in the order posted, whichever QP a Send arrives on. A
// Send that finds it empty is fatal to its QP (iWARP has no receiver-not-
// ready retry), so a server that shares one among many QPs keeps it
// stocked, and arms its low-watermark event (ArmLimit) to learn when to
// post more.
//
// Its methods are safe for concurrent use, PostRecv from several goroutines.
type SRQ struct {
	pd    *PD
	q     recvQueue
	users int  // QPs not closed (under pd.dev.mu; destroy.go)
	dead  bool // Destroy'd (under pd.dev.mu)
}

// SRQAttr are an SRQ's attributes, as ibv_query_srq returns them.
type SRQAttr struct {
	MaxWR, MaxSGE int // its room, as created
	// Limit is the armed low watermark (ArmLimit); 0 when the SRQ is not
	// armed, or no longer: the event fired.
	Limit int
}

// CreateSRQ creates a shared receive queue with room for maxWR receives of
// up to maxSGE elements each.
func (pd *PD) CreateSRQ(maxWR, maxSGE int) (*SRQ, error) {
	if maxWR <= 0 || maxWR > pd.dev.attr.MaxQPWR || maxSGE <= 0 || maxSGE > pd.dev.attr.MaxSGE {
		return nil, fmt.Errorf("%w: SRQ %d WRs × %d SGEs", ErrInvalidArg, maxWR, maxSGE)
	}
	s := &SRQ{pd: pd}
	s.q.init(maxWR, maxSGE)
	d := pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return nil, fmt.Errorf("%w: device", ErrClosed)
	case pd.dead:
		return nil, fmt.Errorf("%w: PD deallocated", ErrClosed)
	}
	pd.users++
	return s, nil
}

// PostRecv posts receive buffers to the SRQ.
func (s *SRQ) PostRecv(wrs ...RecvWR) (int, error) {
	return s.q.post(s.pd, wrs, nil, nil)
}

// Len returns how many receives are posted and not yet taken by a Send.
func (s *SRQ) Len() int {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	return int(s.q.tail - s.q.head)
}

// Attr returns the SRQ's attributes.
func (s *SRQ) Attr() SRQAttr {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	return SRQAttr{MaxWR: len(s.q.ring), MaxSGE: s.q.maxSGE, Limit: s.q.limit}
}

// ArmLimit arms the SRQ's low-watermark event, as ibv_modify_srq with
// IBV_SRQ_LIMIT and its IBV_EVENT_SRQ_LIMIT_REACHED: the returned channel
// is closed when a Send takes a receive and leaves fewer than limit
// posted, and the SRQ is then disarmed (Attr().Limit is 0 again) until
// armed anew. As with Linux's siw, only a receive taken fires it: an SRQ
// armed while it already holds fewer than limit fires at the next Send.
//
// Arming an armed SRQ changes its limit and returns the same channel.
// limit 0 disarms it and returns nil; a channel returned before then is
// never closed. limit may not exceed the SRQ's MaxWR (ErrInvalidArg).
func (s *SRQ) ArmLimit(limit int) (<-chan struct{}, error) {
	q := &s.q
	if limit < 0 || limit > len(q.ring) {
		return nil, fmt.Errorf("%w: SRQ limit %d, room for %d WRs", ErrInvalidArg, limit, len(q.ring))
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return nil, fmt.Errorf("%w: SRQ destroyed", ErrClosed)
	}
	q.limit = limit
	if limit == 0 {
		q.limitCh = nil
		return nil, nil
	}
	if q.limitCh == nil {
		q.limitCh = make(chan struct{})
	}
	return q.limitCh, nil
}

// checkLimit fires the armed low-watermark event once fewer than the
// limit are posted (mu held; after a receive is taken).
func (q *recvQueue) checkLimit() {
	if q.limitCh != nil && q.tail-q.head < uint64(q.limit) {
		close(q.limitCh)
		q.limitCh, q.limit = nil, 0
	}
}
