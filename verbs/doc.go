// Package verbs is the RDMA programming interface of the stack: an
// ibverbs/librdmacm-shaped API (device, protection domain, memory region,
// completion queue, RC queue pair, shared receive queue, connection manager)
// whose queue pairs speak iWARP (RFC 5040 RDMAP over RFC 5041 DDP over RFC
// 5044/6581 MPA) over ordinary TCP.
//
// The names are the ones RDMA programmers know: PD, MR (LKey/RKey = STag),
// CQ, QP, SGE, SendWR, RecvWR, WC with the ibv_wc_status names. What changes
// is the Go shape: PostSend returns how many WRs it posted and a typed error,
// CQ.Wait(ctx) replaces completion channels, RegMR takes a []byte, and
// Dial/Listen/Accept replace rdma_cm's event loop.
//
// # Data path and ownership
//
// A connected QP runs two goroutines. The transmit loop owns the socket's
// write side, the MPA Writer and the send-side MSNs; it sends a pending
// Terminate first, then Read Responses owed to the peer, then the send queue,
// many FPDUs per writev, and completes Sends and Writes when their bytes are
// handed to TCP (iWARP semantics, as siw). The receive loop owns the read
// side, the MPA Reader and the receive contexts; it checks each tagged segment
// against the memory region in siw's order (STag, PD, rights, bounds) and
// reads the payload from the socket straight into the registered memory.
// PostSend and PostRecv run on the caller's goroutine and only copy the WR
// into a ring (a small WR that answers the peer is also sent from there when
// the transmit loop is idle). QP.SetRxHandler runs the application's code on
// the receive loop after each FPDU, which saves the goroutine hand-off that
// dominates a round trip's latency. The first error wins: the loop that detects it builds the
// Terminate, the transmit loop sends it, the connection closes and every
// outstanding WR completes with WRFlushErr.
package verbs
