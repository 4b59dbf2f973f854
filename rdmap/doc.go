// Package rdmap implements the Remote Direct Memory Access Protocol (RFC 5040)
// and its RFC 7306 extensions (atomic operations, immediate data) on top of
// package ddp: the RDMAP control octet and opcode table, the Read Request,
// Atomic Request/Response and Immediate Data headers, and the Terminate
// message with the error causes it carries.
//
// Like package ddp, headers are views over byte slices checked once for
// length, and encoders append to a caller's buffer; nothing allocates unless
// it returns an error. The receive-side checks (check.go: CheckCtrl, CheckQN,
// CheckLen, CheckReadResponse; CheckAtomicRequest, ParseTerminate) are the
// ones a queue pair of package verbs makes on the header views it has read,
// and the only implementation of those rules.
//
// Errors are split by who detected them. A *Error is an RDMAP-layer error
// detected here; *ddp.Error and *mpa.Error come from the layers below. CauseOf
// maps any of them to the Terminate cause (Layer, EType, Code), and
// NewTerminate turns one plus the offending segment into the Terminate to
// send. A Terminate received from the peer is a *RemoteError, a different
// type, so that it is never echoed back. ParseTerminate also reads the
// byte-swapped control word that Linux siw sends from little-endian hosts.
package rdmap
