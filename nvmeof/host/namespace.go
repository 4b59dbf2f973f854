package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// ErrUnaligned is the error of a namespace I/O whose offset or length is
// not a multiple of the block size (Namespace.Bytes takes any).
var ErrUnaligned = errors.New("nvmeof: offset or length not a multiple of the block size")

// ErrNoNamespace is Controller.Namespace's error for an NSID that names
// no active namespace: one the controller has none for (its Identify data
// is all zeros), or one outside its range (Invalid Namespace or Format).
var ErrNoNamespace = errors.New("nvmeof: no such active namespace")

// ErrRange is the error of a namespace I/O with a negative offset or
// length, or one that runs past the namespace's end (a read there gets
// io.EOF instead).
var ErrRange = errors.New("nvmeof: offset or length outside the namespace")

// Namespace is a host's view of a namespace: io.ReaderAt and
// io.WriterAt over its blocks, spread over the controller's I/O queues
// round robin. Offsets and lengths must be multiples of the block size, as
// with O_DIRECT. Its methods may be called from several goroutines; one
// call keeps up to 16 commands of at most MDTS each in flight. A read,
// write, flush, write zeroes or deallocate command that the target
// answers with a status without DNR is sent again, up to 5 times, as
// Linux's host does (but a path status under Multipath, which sends it
// down another path instead); a reservation command is not.
type Namespace struct {
	c     *Controller
	ID    uint32
	Info  nvme.NamespaceInfo
	bs    int64
	mpath bool // a Multipath's: path statuses are its to act on
}

// Namespace returns the view of namespace nsid (Identify Namespace).
func (c *Controller) Namespace(ctx context.Context, nsid uint32) (*Namespace, error) {
	if len(c.io) == 0 {
		return nil, errors.New("nvmeof: a controller without I/O queues has no namespaces to read")
	}
	buf := make([]byte, nvme.IdentifySize)
	if err := c.Identify(ctx, nvme.CNSNamespace, nsid, buf); err != nil {
		var se *nvme.StatusError
		if errors.As(err, &se) && se.Status.Code() == nvme.StatusInvalidNamespace {
			return nil, fmt.Errorf("%w: namespace %d: %w", ErrNoNamespace, nsid, err)
		}
		return nil, err
	}
	if binary.LittleEndian.Uint64(buf) == 0 {
		// Identify Namespace of an inactive NSID: all zeros (NVMe Base
		// 2.0 5.17.2.1), whose block size field makes no sense either.
		return nil, fmt.Errorf("%w: namespace %d is inactive", ErrNoNamespace, nsid)
	}
	ni, err := nvme.ParseNamespaceInfo(buf)
	if err != nil {
		return nil, err
	}
	if ni.Size > math.MaxInt64/uint64(ni.BlockSize()) {
		// Size in octets would not fit an int64 (io.ReaderAt's offsets).
		return nil, fmt.Errorf("nvmeof: namespace %d: %d blocks of %d octets, more than an int64 of octets", nsid, ni.Size, ni.BlockSize())
	}
	if ni.BlockSize() > c.maxData {
		return nil, fmt.Errorf("nvmeof: namespace %d: blocks of %d octets, past the controller's transfer limit of %d",
			nsid, ni.BlockSize(), c.maxData)
	}
	return &Namespace{c: c, ID: nsid, Info: ni, bs: int64(ni.BlockSize())}, nil
}

// Size returns the namespace's size in octets.
func (n *Namespace) Size() int64 { return int64(n.Info.Size) * n.bs }

// BlockSize returns the logical block size.
func (n *Namespace) BlockSize() int { return int(n.bs) }

// ReadAt reads len(p) octets at off (io.ReaderAt).
func (n *Namespace) ReadAt(p []byte, off int64) (int, error) {
	return n.ReadAtContext(context.Background(), p, off)
}

// WriteAt writes p at off (io.WriterAt).
func (n *Namespace) WriteAt(p []byte, off int64) (int, error) {
	return n.WriteAtContext(context.Background(), p, off)
}

// ReadAtContext is ReadAt bounded by ctx. When ctx ends, the call returns
// its error at once and its commands still outstanding are abandoned: each
// keeps its slot (whose buffer the target may still write into) until its
// response comes, and the queue goes on serving other calls.
func (n *Namespace) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, ErrRange
	}
	if off > n.Size() || off == n.Size() && len(p) > 0 {
		return 0, io.EOF // (an empty read past the end too: its slice bound below would be negative)
	}
	var eof error
	if int64(len(p)) > n.Size()-off {
		p, eof = p[:n.Size()-off], io.EOF
	}
	k, err := n.rw(ctx, nvme.IORead, false, p, off)
	if err == nil {
		err = eof
	}
	return k, err
}

// WriteAtContext is WriteAt bounded by ctx.
func (n *Namespace) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 || int64(len(p)) > n.Size()-off { // not off+len(p): a huge off would wrap past the check
		return 0, fmt.Errorf("%w: a write of %d octets at %d, the namespace's %d", ErrRange, len(p), off, n.Size())
	}
	return n.rw(ctx, nvme.IOWrite, false, p, off)
}

// WriteAtFUA is WriteAtContext with Force Unit Access: it returns once p
// is on the target's non-volatile media, where WriteAt's data may wait in
// the target's volatile write cache for a Flush. It costs less than
// WriteAt and Flush when the namespace's other writes need not be durable
// yet (a journal's commit record, say): the target makes only p durable.
func (n *Namespace) WriteAtFUA(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 || int64(len(p)) > n.Size()-off { // not off+len(p): a huge off would wrap past the check
		return 0, fmt.Errorf("%w: a write of %d octets at %d, the namespace's %d", ErrRange, len(p), off, n.Size())
	}
	return n.rw(ctx, nvme.IOWrite, true, p, off)
}

// inflight is one command of a ReadAt or WriteAt, at pos in its p.
type inflight struct {
	q    *queue
	slot int
	pos  int
	p    []byte
}

const maxInflight = 16

// rw splits p into commands of at most MDTS and keeps up to maxInflight
// of them in flight. Its count is of the octets before the first command
// that failed or was not sent (io.ReaderAt and io.WriterAt: p[:n] is done).
func (n *Namespace) rw(ctx context.Context, op uint8, fua bool, p []byte, off int64) (int, error) {
	if off%n.bs != 0 || int64(len(p))%n.bs != 0 {
		return 0, ErrUnaligned
	}
	c := n.c
	var fl [maxInflight]inflight
	head, tail := 0, 0
	failed := len(p) // where the first failed or unsent command starts
	var firstErr error
	stop := func(pos int, err error) {
		failed = min(failed, pos)
		if firstErr == nil {
			firstErr = err
		}
	}
	finish := func() {
		f := &fl[head%maxInflight]
		head++
		if err := f.q.finish(ctx, f.slot, op, f.p, n.mpath); err != nil {
			stop(f.pos, err)
		}
	}
	chunk := c.maxData / int(n.bs) * int(n.bs)
	for pos := 0; pos < len(p) && firstErr == nil; pos += chunk {
		if err := ctx.Err(); err != nil {
			stop(pos, err)
			break
		}
		b := p[pos:min(pos+chunk, len(p))]
		q := c.nextIO()
		// Never wait for a slot while holding others: callers that each
		// hold slots whose commands have completed, waiting for a slot
		// another holds, would wait forever (hold and wait). Our own
		// commands are finished, oldest first, until one is free.
		i, ok, err := q.tryAcquire()
		for !ok && err == nil && head < tail && firstErr == nil {
			finish()
			i, ok, err = q.tryAcquire()
		}
		if err != nil {
			stop(pos, err)
		}
		if firstErr != nil {
			if ok {
				q.releaseSlot(i)
			}
			stop(pos, firstErr)
			break
		}
		if !ok {
			if i, err = q.acquire(ctx); err != nil {
				stop(pos, err)
				break
			}
		}
		slba := uint64(off+int64(pos)) / uint64(n.bs)
		if err := q.startRW(i, op, fua, n.ID, slba, uint16(int64(len(b))/n.bs-1), b); err != nil {
			stop(pos, err)
			break
		}
		fl[tail%maxInflight] = inflight{q: q, slot: i, pos: pos, p: b}
		tail++
		if tail-head == maxInflight {
			finish()
		}
	}
	for head < tail {
		finish()
	}
	if firstErr == nil {
		return len(p), nil
	}
	return failed, firstErr
}

// startRW sends a Read or Write of p (nlb+1 blocks at slba) from slot i:
// write data in the capsule when it fits, otherwise in the slot's buffer
// for the target's RDMA Read.
func (q *queue) startRW(i int, op uint8, fua bool, nsid uint32, slba uint64, nlb uint16, p []byte) error {
	s := &q.slots[i]
	cmd := q.cmd(i)
	nvme.NewRW(cmd, op, 0, nsid, slba, nlb)
	if fua {
		cmd.SetCDW(12, cmd.CDW(12)|nvme.RWFUA)
	}
	inCap := 0
	if op == nvme.IOWrite && len(p) <= q.inCap {
		copy(s.capsule[nvme.CommandSize:], p)
		cmd.SGL().SetInCapsule(0, uint32(len(p)))
		inCap = len(p)
	} else {
		if op == nvme.IOWrite {
			copy(s.buf, p)
		}
		q.keyed(i, cmd, len(p))
	}
	if err := q.submit(i, inCap); err != nil {
		return err
	}
	return nil
}

// maxRetries is how often an I/O command answered with a status that
// allows it is sent again: Linux's nvme_max_retries.
const maxRetries = 5

// retryable reports whether an I/O command op answered with st is sent
// again, as Linux's host does (nvme_decide_disposition): an I/O command
// of the block layer's (not a reservation command: those are passthrough,
// failfast), a status without DNR, and not a path status under Multipath
// (mpath), which sends it down another path instead.
func retryable(op uint8, st nvme.Status, mpath bool) bool {
	switch op {
	case nvme.IORead, nvme.IOWrite, nvme.IOFlush, nvme.IOWriteZeroes, nvme.IODSM:
		return !st.OK() && st&nvme.DNR == 0 && !(mpath && st.SCT() == nvme.SCTPath)
	}
	return false
}

// finish waits for slot i's command, sends it again while its status
// allows (retryable, up to maxRetries times: the slot still holds the
// command, its in-capsule data and its buffer), and copies read data
// into p.
func (q *queue) finish(ctx context.Context, i int, op uint8, p []byte, mpath bool) error {
	if err := q.wait(ctx, i); err != nil {
		return err
	}
	s := &q.slots[i]
	for tries := 0; retryable(op, s.st, mpath) && tries < maxRetries && ctx.Err() == nil; tries++ {
		if err := q.submit(i, s.inCap); err != nil {
			return err
		}
		if err := q.wait(ctx, i); err != nil {
			return err
		}
	}
	if !s.st.OK() {
		q.releaseSlot(i)
		return &nvme.StatusError{Op: nvme.IOCommandName(op), Status: s.st, Result: s.res}
	}
	if op == nvme.IORead {
		copy(p, s.buf[:len(p)])
	}
	q.releaseSlot(i)
	return nil
}

// Flush commits the namespace's written data to non-volatile media.
func (n *Namespace) Flush(ctx context.Context) error {
	return n.simple(ctx, nvme.IOFlush, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.IOFlush, 0, n.ID, 0, 0) }, nil)
}

// WriteZeroes zeroes length octets at off (Write Zeroes, at most 65536
// blocks).
func (n *Namespace) WriteZeroes(ctx context.Context, off, length int64) error {
	if off < 0 || length <= 0 || length > n.Size()-off || length/n.bs > 65536 {
		return ErrRange
	}
	if off%n.bs != 0 || length%n.bs != 0 {
		return ErrUnaligned
	}
	return n.simple(ctx, nvme.IOWriteZeroes, func(cmd nvme.Command) {
		nvme.NewRW(cmd, nvme.IOWriteZeroes, 0, n.ID, uint64(off/n.bs), uint16(length/n.bs-1))
		cmd.SGL().SetKeyed(0, 0, 0, false)
	}, nil)
}

// Deallocate tells the target that length octets at off are no longer
// needed (Dataset Management, attribute Deallocate); this target then
// reads them as zeros. One command carries up to 256 ranges of up to
// 2^32-1 blocks each.
func (n *Namespace) Deallocate(ctx context.Context, off, length int64) error {
	if off < 0 || length <= 0 || length > n.Size()-off {
		return ErrRange
	}
	if off%n.bs != 0 || length%n.bs != 0 {
		return ErrUnaligned
	}
	const maxBlocks = 1<<32 - 1 // a range's count is 32 bits
	slba, left := uint64(off/n.bs), uint64(length/n.bs)
	k := (left + maxBlocks - 1) / maxBlocks
	if k > 256 {
		return ErrRange
	}
	rng := make([]byte, 0, k*nvme.DSMRangeSize)
	for left > 0 {
		nlb := min(left, maxBlocks)
		rng = binary.LittleEndian.AppendUint32(rng, 0) // context attributes
		rng = binary.LittleEndian.AppendUint32(rng, uint32(nlb))
		rng = binary.LittleEndian.AppendUint64(rng, slba)
		slba, left = slba+nlb, left-nlb
	}
	nr := uint32(len(rng)/nvme.DSMRangeSize - 1)
	return n.simple(ctx, nvme.IODSM, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.IODSM, 0, n.ID, nr, 1<<2) }, rng)
}

// simple runs a command on the next I/O queue, with data to the target
// (in the capsule or by its RDMA Read).
func (n *Namespace) simple(ctx context.Context, op uint8, fill func(nvme.Command), data []byte) error {
	q := n.c.nextIO()
	i, err := q.acquire(ctx)
	if err != nil {
		return err
	}
	cmd := q.cmd(i)
	fill(cmd)
	inCap := 0
	if len(data) > 0 {
		if len(data) <= q.inCap {
			copy(q.slots[i].capsule[nvme.CommandSize:], data)
			cmd.SGL().SetInCapsule(0, uint32(len(data)))
			inCap = len(data)
		} else {
			copy(q.slots[i].buf, data)
			q.keyed(i, cmd, len(data))
		}
	}
	if err := q.submit(i, inCap); err != nil {
		return err
	}
	return q.finish(ctx, i, op, nil, n.mpath)
}

// nextIO picks the I/O queue of the next command, round robin.
func (c *Controller) nextIO() *queue { return c.io[c.rr.Add(1)%uint32(len(c.io))] }
