package verbs

import "errors"

// Errors for local misuse, for errors.Is.
var (
	ErrInvalidArg     = errors.New("verbs: invalid argument")
	ErrQueueFull      = errors.New("verbs: work queue full")
	ErrTooManySGE     = errors.New("verbs: too many scatter/gather elements")
	ErrInlineTooLarge = errors.New("verbs: inline data exceeds the QP's maximum")
	ErrLocalProt      = errors.New("verbs: local protection error (lkey, PD, access or bounds)")
	ErrQPState        = errors.New("verbs: operation not allowed in the QP's state")
	ErrClosed         = errors.New("verbs: closed")
	ErrResources      = errors.New("verbs: resource limit reached")
	ErrNotOptedIn     = errors.New("verbs: RFC 7306 extension not enabled on this connection")
	ErrCQOverrun      = errors.New("verbs: completion queue overrun")
	// ErrBusy: the object is still in use (ibverbs' EBUSY): a CQ or SRQ
	// by a QP not closed, a PD by its MRs, SRQs or QPs.
	ErrBusy = errors.New("verbs: resource busy")
)
