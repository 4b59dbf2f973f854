package verbs

import (
	"errors"
	"fmt"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/tcpx"
)

// QPStats are a QP's counters since it connected, for monitoring; reading
// them costs a few atomic loads and, for TCP, one getsockopt.
type QPStats struct {
	FPDUsSent  uint64 // FPDUs handed to TCP
	OctetsSent uint64 // stream octets handed to TCP: FPDUs with their framing (length, pad, CRC, markers)
	// FPDUsReceived counts the FPDUs received (checked or being checked),
	// as of the receive side's last completion or wait for the socket:
	// during a burst it may lag by what one read brought.
	FPDUsReceived uint64

	// ReadsOutstanding are our RDMA Reads and atomics awaiting their
	// responses (not counting a peer-to-peer start-up's Read RTR); ReadsOwed
	// the peer's that we have yet to answer.
	ReadsOutstanding, ReadsOwed int

	// How the connection ended, once it has (see QP.Err): a Terminate sent
	// or received (Terminate holds its decoded cause), and whether a CRC
	// error was the cause. Each is 0 or 1: the first error ends a QP.
	TerminatesSent, TerminatesReceived, CRCErrors int
	Terminate                                     *TerminateError

	// TCP is what the kernel says of the socket (TCP_INFO: RTT, window,
	// retransmits, octets received in order); zero before the QP connects,
	// once its connection has ended (the socket is closed), and where the
	// platform has no TCP_INFO. TCPErr says why it is zero: ErrQPState
	// before, ErrClosed after. With Multipath TCP (TCP.Multipath) the path
	// fields (RTT, window, MSS, segment counters) are the first subflow's,
	// while the Bytes counters and Subflows are the connection's
	// (tcpx.Stats).
	TCP    tcpx.Stats
	TCPErr error

	// TLS says that the connection runs inside TLS (ConnConfig.TLS): every
	// octet is encrypted and authenticated. QP.TLS has the details.
	TLS bool
}

// Stats returns the QP's counters.
func (qp *QP) Stats() QPStats {
	s := QPStats{
		FPDUsSent:        qp.txStats.fpdus.Load(),
		OctetsSent:       qp.txStats.octets.Load(),
		FPDUsReceived:    qp.rxSeen.Load(),
		ReadsOutstanding: qp.ordq.ops(),
		ReadsOwed:        qp.irdq.len(),
	}
	var te *TerminateError
	if errors.As(qp.Err(), &te) {
		s.Terminate = te
		if te.Remote {
			s.TerminatesReceived = 1
		} else {
			s.TerminatesSent = 1
			if errors.Is(te.Err, mpa.ErrCRC) {
				s.CRCErrors = 1
			}
		}
	}
	s.TCP, s.TCPErr = qp.TCPInfo()
	s.TLS = qp.TLS() != nil
	return s
}

// TCPInfo returns what the kernel says of the QP's socket (TCP_INFO), the
// narrow view of its connection that monitoring needs: the socket itself
// stays the QP's, since a write to it would corrupt the MPA stream. Before
// the QP connects the error Is ErrQPState; once its connection has ended,
// ErrClosed.
func (qp *QP) TCPInfo() (tcpx.Stats, error) {
	tc := sockOf(qp.connOf())
	if tc == nil {
		return tcpx.Stats{}, fmt.Errorf("%w: not connected", ErrQPState)
	}
	s, err := tcpx.Info(tc)
	if err != nil && qp.State() == StateError {
		// The socket went with the connection.
		return tcpx.Stats{}, errConnEnded
	}
	return s, err
}

var errConnEnded = fmt.Errorf("%w: the QP's connection has ended, and its socket with it", ErrClosed)
