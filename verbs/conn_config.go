package verbs

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/tcpx"
)

// ConnConfig is the start-up and transport configuration of a connection
// (what rdma_cm's conn_param and the iw_cm's MPA knobs say in Linux).
type ConnConfig struct {
	// PrivateData goes to the peer in our MPA Request (Dial) — at most
	// DeviceAttr.MaxPrivData octets — and the peer's comes back in
	// QP.PeerPrivateData. A Listener ignores it: Accept and Reject take
	// theirs per request.
	PrivateData []byte
	// MPA is the start-up policy: revision (2 by default), CRC policy
	// (on by default), markers per direction, peer-to-peer mode and RTR
	// types, strict or relaxed IRD/ORD. Its IRD and ORD, when zero, come
	// from the QP.
	MPA mpa.Config
	// TCP are the socket options (buffers, keep-alive, user timeout), the
	// congestion control (CongestionControl) and Multipath TCP
	// (MultipathTCP, which refuses a user timeout).
	TCP tcpx.Config
	// TLS, if set, runs the connection inside TLS 1.3 (crypto/tls): the
	// handshake on the TCP connection first, then the MPA start-up and
	// every FPDU in TLS records. Dial takes a client configuration (its
	// ServerName defaults to addr's host, as tls.Dial's), Listen a server
	// one; to require client certificates, set ClientAuth and ClientCAs,
	// and read the verified identity in ConnRequest.TLS before Accept.
	// MinVersion is raised to TLS 1.3, and NextProtos, if empty, is the
	// ALPN protocol "iwarp". Inside TLS, the CRC policy's zero value
	// (mpa.CRCOn) means mpa.CRCOff: TLS authenticates every octet, and
	// the CRC would only cost time; mpa.CRCRequired keeps both. A TLS
	// listener answers a cleartext MPA Request with an MPA Reject whose
	// private data reads "iwarp: TLS required".
	TLS *tls.Config
	// DialContext, if set, makes Dial's TCP connection instead of
	// tcpx.Dial (to pick a network namespace or reach a peer through a
	// tunnel), as net/http.Transport's; TCP's options are then applied to
	// what it returns, but for TCP.LocalAddr, which is then its own to
	// bind. A source address alone is TCP.LocalAddr.
	DialContext func(ctx context.Context, network, addr string) (*net.TCPConn, error)
	// ReplyTimeout bounds the initiator's wait for the MPA Reply (siw:
	// 10 s); RequestTimeout the responder's wait for the Request (siw: 5 s),
	// and, in peer-to-peer mode, for the RTR message.
	ReplyTimeout, RequestTimeout time.Duration
	// MaxFPDU caps the FPDU size in octets; 0 sizes FPDUs to the TCP
	// segment (EMSS), which hardware peers require.
	MaxFPDU int
	// ReadBuffer is the receive buffer of the QP's MPA reader (default
	// mpa.DefaultReadBuffer).
	ReadBuffer int
	// SegmentPerFPDU puts each FPDU in a TCP segment of its own: it is
	// handed to TCP with its own write, once TCP has sent everything before
	// it (so that Linux does not append it to a segment still waiting for
	// the window). An FPDU is at most one segment (MaxFPDU, EMSS), so each
	// segment then starts with an FPDU and holds just that one, as RFC 5044
	// section 8 recommends but does not require. With markers, an FPDU that
	// would end exactly where a marker is due is a word shorter, so that
	// the marker falls inside the next FPDU rather than between two
	// segments (mpa.Writer.EndsAtMarker). It costs throughput; it is
	// for packet analysers that assume it (Wireshark's marker decoding
	// does). The wait for TCP is bounded: a peer that closes its window
	// for longer (segmentWaitMax) gets the next FPDU appended anyway.
	SegmentPerFPDU bool
	// FirstFPDUHold bounds how long a QP that must not send first holds
	// its work requests back (Read Responses and Terminates are never
	// held): a responder outside peer-to-peer mode until the initiator's
	// first FPDU has arrived and checked out (RFC 5044 section 7.1.2: "MPA
	// Responder mode implementations MUST receive and validate at least one
	// FPDU before sending any FPDUs"), and an initiator that sent a Read
	// RTR (the P2PAuto default) until its answer, which tells that the
	// responder's QP reads the stream. The event ends the hold at once;
	// this is the fallback for applications whose protocol has the
	// responder speak first (rdma_cm's cmatose, perftest), and for a peer
	// that stalled an RTR (below). Default 100 ms; negative: no fallback,
	// the RFC's rule strictly. A peer-to-peer responder holds until the
	// RTR, bounded by RequestTimeout.
	//
	// Why: Linux siw (6.1) as initiator fails the connection (-EPROTO,
	// "peer sent extra data") when an FPDU is already queued behind the
	// Reply as it reads it; as responder it hands the socket to its QP only
	// after sending its Reply, and an FPDU that arrives in between sits
	// unread until more data comes. The hold keeps our first FPDU out of
	// both windows whenever the other side's events allow.
	FirstFPDUHold time.Duration
	// FirstFPDUDelay holds the initiator's first FPDU back for this long
	// after the MPA Reply, whatever the responder does. RFC 5044 lets the
	// initiator send at once, and that is the default; with P2PAuto (the
	// Read RTR above) it is rarely needed. For a siw responder without
	// peer-to-peer mode, a few milliseconds (more under emulation) avoid
	// the race FirstFPDUHold describes.
	FirstFPDUDelay time.Duration
	// Backlog bounds, on a Listener, the connection requests read but not
	// yet taken by GetRequest (default 1024); one more is refused with an
	// MPA Reject, as Linux's iw_cm does past its backlog. BacklogTimeout
	// bounds how long one waits there (default 10 s, the initiator's own
	// wait for a Reply in siw); then it is closed. A queued request whose
	// initiator closes or resets gives its place back at once.
	Backlog        int
	BacklogTimeout time.Duration
	// RFC7306 enables the RFC 7306 extensions (atomics, Immediate Data) on
	// the connection. MPA has no bit to negotiate them, so both sides must
	// set it; a QP without it never sends them and answers them with a
	// Terminate (unexpected opcode).
	RFC7306 bool
	// ResponseTimeout ends the QP when RDMA Reads or atomics of ours await
	// their responses and the peer sends nothing for this long, as
	// ibverbs' timeout and retry_cnt do (IBV_WC_RETRY_EXC_ERR): the oldest
	// completes with RetryExcErr, the rest flush, the connection is reset
	// and Err Is ErrResponseTimeout. Default 30 s; negative: no bound.
	// See the package doc's "Reads need a running peer".
	ResponseTimeout time.Duration
}

func (c *ConnConfig) defaults() {
	if c.ReplyTimeout <= 0 {
		c.ReplyTimeout = 10 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 5 * time.Second
	}
	if c.ReadBuffer <= 0 {
		c.ReadBuffer = mpa.DefaultReadBuffer
	}
	if c.Backlog <= 0 {
		c.Backlog = 1024
	}
	if c.BacklogTimeout <= 0 {
		c.BacklogTimeout = 10 * time.Second
	}
	if c.FirstFPDUHold == 0 {
		c.FirstFPDUHold = 100 * time.Millisecond
	}
	if c.ResponseTimeout == 0 {
		c.ResponseTimeout = defaultResponseTimeout
	}
}

// mpaConfig fills the QP's IRD/ORD into the start-up policy.
func (c *ConnConfig) mpaConfig(qp *QP) mpa.Config {
	m := c.MPA
	if c.TLS != nil && m.CRC == mpa.CRCOn {
		m.CRC = mpa.CRCOff
	}
	if m.IRD == 0 {
		m.IRD = uint16(min(qp.cfg.IRD, mpa.MaxIRDORD))
	}
	if m.ORD == 0 {
		m.ORD = uint16(min(qp.cfg.ORD, mpa.MaxIRDORD))
	}
	return m
}
