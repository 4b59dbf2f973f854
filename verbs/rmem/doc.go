// Package rmem is remote memory as Go calls: a goroutine-safe handle on a
// peer's memory region (a verbs.RemoteBuffer) reached through a connected
// QP, with blocking ReadAt and WriteAt calls that take a context, and
// io.ReaderAt and io.WriterAt adapters for io.SectionReader,
// io.NewOffsetWriter and the rest of the io package.
//
//	b, err := rmem.New(qp, remote, rmem.Config{})
//	...
//	defer b.Close()
//	n, err := b.ReadAt(ctx, p, off)      // RDMA Reads of the peer's octets [off, off+len(p))
//	n, err = b.WriteAt(ctx, p, off)      // RDMA Writes
//	r := io.NewSectionReader(b.IO(ctx), 0, b.Size())
//
// It does once what programs that use RDMA Reads and Writes from many
// goroutines otherwise each write: a completion dispatcher (one goroutine
// polls the QP's send CQ and hands each completion to the call it belongs
// to, so that no goroutine takes another's), the WR ID bookkeeping, the
// splitting of a large transfer into WRs of at most Config.PieceSize octets,
// and the limits: at most Config.Depth WRs outstanding (the send queue), of
// which at most the negotiated ORD are Reads. A call that finds them full
// waits its turn in first-come, first-served order, one WR at a time, so
// that a large transfer and small ones share the queue fairly (strictly: a
// Read at the head of the queue that waits for the ORD holds the Writes
// behind it).
//
// # Ownership and cancellation: the contract
//
// The Buffer owns the QP's send queue and its send CQ from New to Close:
// post nothing else to the QP's send queue, poll nothing from that CQ, and
// let no other QP complete into it (give the QP a send CQ of its own).
// Completions that are not the Buffer's are dropped.
//
// The caller's p belongs to the Buffer only while ReadAt or WriteAt runs:
// the data travels through registered staging memory that the Buffer owns
// (Config.Depth × Config.PieceSize octets), so p need not be registered,
// and nothing reads or writes p once the call has returned, whatever the
// outcome. A Write copies p into staging before it is posted; a Read's data
// lands in staging and is copied into p before the call returns.
//
// A call whose ctx ends returns at once with an error wrapping ctx.Err(),
// and affects no other call: the QP lives on. RDMA cannot recall a posted
// WR, so what the cancelled call had in flight still completes: a Read may
// still land in its staging slot, and a Write may still reach the peer's
// memory (in part or whole). Those slots are quarantined until their
// completions arrive, and only then reused. So after a cancelled WriteAt
// the peer's octets in its range are undefined; after a cancelled ReadAt,
// p's are.
//
// # Errors
//
// A range outside the remote buffer is a *RangeError (errors.Is
// ErrOutOfRange), checked before anything is posted. A failed WR means the
// QP has ended (a WC status other than Success always does): the call's
// error is a *QPError that wraps the QP's Err (errors.Is(err,
// verbs.ErrConnLost) and the like hold), and every later call fails at once
// with it. After Close calls return ErrClosed.
//
// # Close
//
// Close ends the calls in progress (they return ErrClosed), waits until
// every WR the Buffer posted has completed or the QP has ended, stops the
// Buffer's goroutines and deregisters its staging memory. It leaves the QP
// open. A peer that stops answering Reads holds the calls without a
// deadline, and Close, until the QP's ConnConfig.ResponseTimeout ends it;
// closing the QP ends them at once (its WRs complete flushed). When the QP
// ends, the Buffer's goroutines end with it; Close still frees the staging
// memory.
package rmem
