package rsocket

import (
	"errors"
	"net"
	"syscall"
)

// Errors. A Conn's and Listener's methods return them wrapped in a
// *net.OpError, as the net package's connections do; use errors.Is. A
// deadline that passed is os.ErrDeadlineExceeded (a net.Error whose
// Timeout is true), a closed Conn or Listener net.ErrClosed.
var (
	// ErrProtocol: the peer broke the rsockets protocol (bad private data,
	// more data than the ring it was given, more messages than credits).
	// The connection is reset.
	ErrProtocol = errors.New("rsocket: protocol violation by the peer")
	// ErrByteOrder: the peer is big-endian (RS_CONN_FLAG_NET). rsocket.c
	// sends its messages over iWARP in host byte order, and on a
	// byte-order mismatch clears its RS_OPT_MSG_SEND (rs_save_conn_data
	// assigns opts = RS_OPT_SWAP_SGL), so such a peer falls back to RDMA
	// Write with Immediate, which iWARP lacks: it cannot work.
	ErrByteOrder = errors.New("rsocket: big-endian peers cannot speak rsockets over iWARP")
	// ErrPeerReset: the peer closed or shut down its side for both
	// directions (RS_CTRL_DISCONNECT) and a Write has nowhere to go. It
	// matches syscall.ECONNRESET, as rsend's error.
	ErrPeerReset error = peerReset{}
	// ErrWriteClosed: a Write after CloseWrite. It matches syscall.EPIPE.
	ErrWriteClosed error = writeClosed{}
	// ErrConnLost: the RDMA connection ended without the rsockets
	// disconnect message (the peer crashed, the network failed, the QP
	// failed); the error wraps the QP's.
	ErrConnLost = errors.New("rsocket: connection lost")
)

type peerReset struct{}

func (peerReset) Error() string        { return "rsocket: connection reset by peer" }
func (peerReset) Is(target error) bool { return target == syscall.ECONNRESET }

type writeClosed struct{}

func (writeClosed) Error() string        { return "rsocket: write after CloseWrite" }
func (writeClosed) Is(target error) bool { return target == syscall.EPIPE }

// opError wraps err as the net package does.
func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "rsocket", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
