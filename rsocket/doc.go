// Package rsocket is a stream socket over iWARP RDMA for Go programs: Dial
// and Listen return a net.Conn and a net.Listener whose connections are
// verbs QPs speaking the wire protocol of librdmacm's rsockets (rdma-core's
// rsocket.c), so that a Go program talks to rstream, or to any socket
// program run under LD_PRELOAD=librspreload.so, on a Linux siw or iWARP
// NIC peer, and to other Go programs.
//
// Any Go code that takes a net.Conn runs over it unchanged (net/http,
// io.Copy, bufio): deadlines, CloseWrite, and concurrent use work as
// with a *net.TCPConn. Flow control is rsockets' own: a Write waits for
// room in the peer's ring and for receive credits, so a Send never finds
// the peer without a posted receive (which iWARP, having no
// receiver-not-ready retry, would make fatal).
//
// # Wire compatibility
//
// Every octet follows rsocket.c (rdma-core v44, Debian bookworm's
// librdmacm1, checked against rstream and librspreload.so on Linux siw by
// the interop tests):
//
//   - Start-up: an iWARP connection (MPA) whose private data is struct
//     rs_conn_data each way, 40 octets, big-endian: version 1, flags
//     (RS_CONN_FLAG_IOMAP, never RS_CONN_FLAG_NET: we are little-endian),
//     receive credits, 3 reserved octets, target_iomap_size 0, then two
//     rs_sge {addr, key, length}: our target SGL (2 entries) and the first
//     half of our receive ring.
//   - Over iWARP rsocket.c sets RS_OPT_MSG_SEND (rs_create_ep: the device's
//     transport_type is IBV_TRANSPORT_IWARP), since iWARP has no RDMA Write
//     with Immediate: each message is a 4-octet Send in host byte order
//     (little-endian), bits 31..29 the operation, 28..0 its data. Data is
//     an RDMA Write into the peer's ring followed by RS_OP_DATA with its
//     length.
//   - Credits and buffers: the receiver offers its ring half at a time. An
//     SGL update is an RDMA Write of a 16-octet rs_sge (receiver's byte
//     order) into the next entry of the sender's target SGL, then a Send of
//     RS_OP_SGL whose data is the new credit limit (messages read +
//     credits); a Send of RS_OP_SGL alone returns credits only. At most 4
//     control WRs are outstanding (RS_QP_CTRL_SIZE). One difference in
//     timing, none in format: rsocket.c offers the next half of its ring
//     and returns credits as soon as its reader has freed them; we wait
//     until the writer has used up what it had. An rsocket.c peer closes
//     right after its last write (rshutdown, then its QP leaves RTS and
//     siw stops reading the socket), and an update arriving then is
//     unread data at its close: Linux resets the connection, and the
//     peer's last octets, still in its socket's send queue, are lost (the
//     interop tests lost rstream's tails so until we changed it).
//   - Shutdown: RS_OP_CTRL with RS_CTRL_SHUTDOWN (CloseWrite while the
//     read side is open) or RS_CTRL_DISCONNECT (Close), then the QP
//     closes (a TCP FIN).
//
// # What is not spoken
//
//   - riostream's iomap mode (riomap/riowrite: RDMA Writes straight into a
//     region the peer mapped, announced by RS_OP_IOMAP_SGL). We offer an
//     iomap table of size 0 (target_iomap_size 0), so a peer's riomap
//     finds no free entry in our table and fails with ENOMEM (riostream
//     says "riomap: Cannot allocate memory" and closes); we never riomap,
//     so a peer's riowrite finds no mapping of ours and writes nothing.
//     An RS_OP_IOMAP_SGL message from a peer is read and ignored. The
//     plain stream works.
//   - librspreload.so (rdma-core 44) intercepts accept but not accept4,
//     so a program that accepts with accept4 (Debian's nc.openbsd -l)
//     does not get rsockets through it; that is the preload library's
//     limit, not the protocol's.
//   - Keep-alive (SO_KEEPALIVE on the rsocket side): rsocket.c sends it
//     as an RDMA Write of 0 octets to STag 0 (tcp_svc_send_keepalive),
//     which names no buffer (RFC 5041 section 5.2): we take it and the
//     stream goes on, as with siw. We never send one; TCP's own keep-alive
//     (verbs.ConnConfig.TCP) watches the connection instead.
//   - Big-endian peers (RS_CONN_FLAG_NET): refused with ErrByteOrder (see
//     its doc for why rsocket.c itself cannot do it over iWARP).
//   - Datagram rsockets (SOCK_DGRAM) use UD QPs, which iWARP does not have.
//
// # Concurrency and ownership
//
// A Conn's methods may be called from any goroutine; Reads are served one
// at a time, as are Writes, and a Read and a Write run at once. Each Conn
// has one goroutine of its own (its completion pump), which Close stops
// before it returns; a Conn that is never closed keeps its QP and memory.
// A Listener runs up to 16 start-ups at once, each on a goroutine of its
// own, which its Close ends before it returns; with all 16 busy, a new
// request ends the oldest, so clients that stall theirs lock no one out.
// Close sends the disconnect message after the data written before it
// and waits up to 2 s for both to be handed to TCP.
package rsocket
