// Package verbs is the RDMA programming interface of the stack: an
// ibverbs/librdmacm-shaped API (device, protection domain, memory region,
// completion queue, RC queue pair, shared receive queue, connection manager)
// whose queue pairs speak iWARP (RFC 5040 RDMAP over RFC 5041 DDP over RFC
// 5044/6581 MPA) over ordinary TCP, so that two Go programs, or a Go
// program and the Linux kernel's siw or an iWARP NIC, read and write each
// other's memory across any IP network.
//
// # The model in five objects
//
// A Device (Open) owns everything else. A protection domain (PD) groups the
// memory a connection may reach. A memory region (MR, PD.RegMR) is a []byte
// registered with access rights; its RKey (an STag) is what a peer names to
// reach it, together with an address inside it (MR.Addr plus an offset). A
// completion queue (CQ) collects work completions (WC). A queue pair (QP)
// is one reliable connection: work requests posted to its send queue
// (PostSend: Send, RDMA Write, RDMA Read, atomics) and receive queue
// (PostRecv: buffers for the peer's Sends) complete into its CQs.
//
// # Connecting
//
// A server listens (Device.Listen), takes each connection request
// (Listener.GetRequest), looks at the initiator's private data and accepts
// it onto a QP (ConnRequest.Accept) or rejects it (Reject). A client dials
// (QP.Dial) with ConnConfig.PrivateData. Private data, up to 508 octets each
// way, is how RDMA programs exchange what they need to address each other:
// typically a buffer's address, length and RKey (QP.PeerPrivateData has
// the peer's). A request taken and not yet answered stays watched: its
// Context ends once the initiator has gone, so that an application that
// holds requests (busy with another client) can free it at once. A flood of
// silent connections does not lock legitimate initiators out: past 256
// start-ups in progress, a new one evicts the oldest silent one.
//
// Between two programs of this stack a connection can run inside TLS 1.3
// (ConnConfig.TLS, a *tls.Config as net/http takes): the listener then
// knows the verified client before Accept (ConnRequest.TLS), to pick the
// PD it gets; docs/tls.md has the whole story.
//
// # Moving data
//
// A Send consumes a receive buffer the peer posted, in order, and completes
// there with WCRecv; post receives before the peer can send. An RDMA Write
// places data in the peer's region with no receive and no completion on the
// peer; an RDMA Read fetches from it. Both need the peer's RKey and address
// and the right access (RemoteWrite, RemoteRead). A buffer handed to
// PostSend or PostRecv belongs to the stack until its completion: do not
// change or reuse it before (Inline data is copied at post time instead).
// Completions come in posting order on each queue; a send WR without
// Signaled (on a QP without SigAll) completes silently, but an error
// always completes.
//
// Poll a CQ (CQ.Poll never blocks) or wait for it (CQ.PollWait, CQ.Wait);
// a WC's Status is data, not a Go error: anything but Success means the
// QP has failed (or the WR was flushed because it had), and QP.Err says
// why (from the moment the QP leaves RTS, so before that WC is polled).
// A CQ that completions reach in bursts can wake its waiter less often
// (CQ.SetModeration, as ibv_modify_cq): each wake-up is a hand-off between
// threads, which at Ethernet MSS costs as much CPU as a 64 KiB message's
// protocol work.
//
// # Ordering and visibility: the rules that bite
//
// RDMA Writes and Sends from one QP reach the peer in the order posted, and
// the peer completes a Send only after placing every Write before it. So
// "Write the data, then Send a note" is the idiom: when the peer's receive
// completes, the data is in its memory and visible to its program (the
// completion orders it, as a channel receive does). An RDMA Read, though,
// may be overtaken: a Send or Write posted after a Read can reach the peer
// before the Read's data has come back. Set Fence on a WR that must wait
// for every earlier Read to complete — "Read the peer's buffer, then tell
// it it may reuse the buffer" needs Fence on the telling Send, or the peer
// may overwrite the buffer while the Read is still fetching it.
//
// Data a peer places with an RDMA Write is visible to this program after a
// completion that orders it (a receive of the peer's later Send) or, for
// programs that poll memory for the fastest reaction, after MR.Placed has
// counted it; reading memory the peer is writing without either is a data
// race.
//
// # Ending
//
// QP.Disconnect ends a connection in order: it waits for the posted sends,
// the peer finishes what it owes us, and both sides flush what is left;
// it returns nil only if that happened, and QP.Err if the QP failed.
// QP.Close ends it at once but still in order at the TCP level (what was
// queued, then a FIN, as net.Conn's Close); QP.Abort resets it (Err Is
// ErrAborted, as after a Disconnect whose ctx ended). A failure ends it
// too: a protocol error detected on either side travels as a Terminate
// message (RFC 5040), and QP.Err returns a *TerminateError with the
// decoded cause, Remote true for one the peer sent; a lost connection is
// ErrConnLost, an orderly end ErrDisconnected (but see below for Reads
// left unanswered). Either way every outstanding WR completes with
// WRFlushErr. Device.Close closes all of a device's QPs and listeners, and
// returns the goroutines waiting on its CQs.
// CQ.Destroy, SRQ.Destroy and PD.Dealloc tear the rest down in ibverbs'
// order: each returns ErrBusy while a QP not yet closed, an SRQ or a
// registered MR still uses the object.
//
// # Reads need a running peer
//
// An iWARP NIC answers RDMA Reads and atomics without the remote CPU; here
// the peer's program answers them, on its receive goroutine. A peer whose
// process is stopped (SIGSTOP, a debugger, a long stall) still has its
// kernel acknowledge our segments, so TCP's keep-alive and UserTimeout
// never fire, and its Read Responses never come. ConnConfig.ResponseTimeout
// (30 s by default) bounds that wait as ibverbs' timeout and retry_cnt
// bound a hardware QP's: while a Read or atomic of ours is outstanding and
// the peer sends nothing at all for that long, the QP ends as with
// IBV_WC_RETRY_EXC_ERR: the oldest completes with RetryExcErr, the rest
// flush, the connection is reset and Err Is ErrResponseTimeout (and
// ErrConnLost). A slow peer or path is not timed out: any octet from the
// peer restarts the clock. A peer that closes (FIN) with Reads of ours
// unanswered or not yet sent, as a killed process's kernel does, ends the
// QP with ErrUnanswered (and ErrConnLost), not ErrDisconnected. Inside TLS
// an orderly end sends close_notify before the FIN, and a FIN without one
// (a truncation) ends the QP with ErrConnLost.
//
// Reads and atomics beyond the ORD negotiated at connection time (QP.Params)
// are not refused: they wait in the send queue, in order, until earlier
// ones complete, as RFC 5040 section 6.5 requires of the Data Sink; the
// send queue's depth bounds them.
//
// # Concurrency
//
// Every method of every type may be called from any goroutine, at the same
// time as any other method, unless this section says otherwise; what
// concurrent calls do is:
//
//   - Device: Close may run while anything else does: QPs end and flush,
//     CQ waiters return, later creations fail with ErrClosed.
//   - PD: RegMR, AllocMR, CreateQP, CreateSRQ and Dealloc at once.
//   - MR: its getters (LKey, RKey, Addr, Len, Buf, Access, Valid, Placed,
//     SGE, RemoteBuffer) at any time, also while WRs use the region and
//     while Dereg runs. Dereg with WRs still using the region is the
//     caller's error, as in ibverbs: they may fail or still use the memory
//     (which Go keeps alive). The memory itself is the program's: see the
//     ordering rules for when a peer's data may be read.
//   - CQ: Poll, PollWait, Wait and WaitSolicited from several goroutines:
//     each completion is polled by exactly one of them, and every waiter
//     returns while completions are queued (they then race to poll).
//     Destroy and Device.Close release waiters with ErrClosed. SetModeration,
//     Len, Cap and Err at any time.
//   - QP: PostSend, PostRecv and PostRegMR from several goroutines at once:
//     each call's WRs are consecutive in their queue, calls in the order
//     they took it. Close, Abort and Disconnect at any time, also together
//     and while posts run; the first to end the QP decides Err, a post that
//     loses the race completes with WRFlushErr (never a panic or a lost WR).
//     Dial and Accept are one at a time: another while one runs, or on a
//     connected QP, fails with ErrQPState. State, Err, Done, Stats,
//     TCPInfo, TLS, Params, MULPDU, PeerPrivateData, LocalAddr,
//     RemoteAddr, Config and PD at any time (zero values until connected).
//     SetRxHandler at any time; the handler runs on the receive goroutine
//     and must not block, Close or Disconnect the QP (see SetRxHandler).
//   - SRQ: PostRecv from several goroutines, while its QPs take receives;
//     ArmLimit, Len, Attr and Destroy at any time.
//   - Listener: GetRequest from several goroutines (each request goes to
//     one); Close releases them with ErrClosed.
//   - ConnRequest: Accept or Reject, once: of concurrent or repeated calls
//     one answers the request and the others return an error.
//   - Values (SendWR, RecvWR, SGE, WC, RemoteBuffer, the configs) are plain
//     data. A buffer a posted WR names belongs to the stack until its
//     completion; a WR's own fields are copied at post time.
//
// # Names and shapes
//
// The names are the ones RDMA programmers know: PD, MR (LKey/RKey = STag),
// CQ, QP, SGE, SendWR, RecvWR, WC with the ibv_wc_status names. What changes
// is the Go shape: PostSend returns how many WRs it posted and a typed error,
// CQ.Wait(ctx) replaces completion channels, RegMR takes a []byte, Dial,
// Listen and Accept take a context and replace rdma_cm's event loop, and
// every call that can block ends with its context, wrapping ctx.Err().
//
// The package does not log. What a program may want to watch is in
// QP.Stats (FPDUs, octets, Reads in flight, TCP_INFO) and QP.Err.
//
// # Data path and ownership
//
// A connected QP runs two goroutines. The transmit loop owns the socket's
// write side, the MPA Writer and the send-side MSNs; it sends a pending
// Terminate first, then Read Responses owed to the peer, then the send queue,
// many FPDUs per writev, and completes Sends and Writes when their bytes are
// handed to TCP (iWARP semantics, as siw); a small one (under 16 KiB, while
// the loop is gathering and more WRs wait behind it) completes as soon as
// the Writer holds its own copy of its payload (up to 4 KiB an FPDU, and
// inline data), so that the application refills the queue while the write
// runs; what the Writer holds still goes out before a FIN.
// The receive loop owns the read
// side, the MPA Reader and the receive contexts; it checks each tagged segment
// against the memory region in siw's order (STag, PD, rights, bounds) and
// reads the payload from the socket straight into the registered memory.
// PostSend and PostRecv run on the caller's goroutine and only copy the WR
// into a ring (WRs that put few octets on the wire, a Read being only its
// request, are also sent from there when they answer the peer and the
// transmit loop is idle). QP.SetRxHandler runs the application's code on
// the receive loop after each FPDU, which saves the goroutine hand-off that
// dominates a round trip's latency. The first error wins: the loop that
// detects it builds the Terminate, the transmit loop sends it, the
// connection closes and every outstanding WR completes with WRFlushErr.
package verbs
