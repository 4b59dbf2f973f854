package rsocket

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/goiwarp/iwarp/verbs"
	"github.com/pion/transport/v3/deadline"
)

// Work request IDs say what completed.
const (
	idRecv = 1 << 63 // | index of the message slot
	idData = 1 << 62 // | octets: an RDMA Write of data from the send ring
	idMsg  = 1 << 61 // the data message (Send) after it
	idCtrl = 1 << 60 // an SGL update's Write or Send, or a control message
	idLow  = 1<<32 - 1
)

// maxXfer caps one RDMA Write of data (rsocket.c's RS_MAX_TRANSFER).
const maxXfer = 64 << 10

// closeDrain bounds how long Close waits for its disconnect message and
// the data before it to be handed to TCP.
const closeDrain = 2 * time.Second

// Conn is an rsockets stream connection: a net.Conn over an iWARP QP.
// Its methods may be called from several goroutines at once; Reads are
// served one at a time, and so are Writes.
type Conn struct {
	qp           *verbs.QP
	cq           *verbs.CQ
	pd           *verbs.PD
	rbuf, sbuf   *verbs.MR // the ring the peer writes into; our send ring
	tsgl, msgs   *verbs.MR // the target SGL the peer writes; message slots
	laddr, raddr net.Addr
	half         int // half the receive ring: the part advertised at a time
	credits      int // data messages the peer may have unread (our rq_size)
	sqDepth      int

	rdLock, wrLock chan struct{} // one Read, one Write at a time
	rdWake, wrWake chan struct{} // the pump's nudges
	rdl, wdl       *deadline.Deadline
	closed         chan struct{}
	closeOnce      sync.Once
	stopPump       func()
	pumpDone       chan struct{}
	aborting       sync.WaitGroup // a reset for a protocol violation
	sent0, acked0  uint64         // the QP's octets sent and TCP's acknowledged at start

	mu   sync.Mutex
	cond *sync.Cond // Close's wait for its sends, broadcast by the pump

	// State, as rsocket.c's rs_readable, rs_writable and rs_connected.
	readable, writable, connected bool
	shutWr                        bool  // writable ended by CloseWrite or Close
	err                           error // why the connection failed, if it did

	// Receive side.
	rmsg       []uint32 // octets of each data message not yet read (rs->rmsg)
	rmsgHead   int
	rmsgN      int
	rbufOff    int // where the next octet to read is (rbuf_offset)
	rbufAvail  int // octets read and not yet advertised (rbuf_bytes_avail)
	rbufFree   int // where the next part to advertise starts (rbuf_free_offset)
	rseqNo     uint16
	rseqComp   uint16
	remoteSGL  sge // the peer's target SGL: where our SGL updates go
	remoteSGE  int
	advertised uint64 // octets of ring the peer has been given
	received   uint64 // octets the peer said it wrote
	limit      uint16 // the credit limit the peer last heard (its sseq_comp)
	recvMsgs   uint16 // data messages received (the peer's sseq_no)

	// Send side.
	target     [sglSize]sge // the peer's buffers we may write (target_sgl)
	targetSGE  int
	tsglPlaced uint64 // SGL updates taken from tsgl
	tsglNext   int    // the entry the peer writes next
	sseqNo     uint16
	sseqComp   uint16
	sbufHead   int
	sbufUsed   int
	sqAvail    int
	ctrlOut    int

	// Posting scratch, used under mu: PostSend copies WRs and inline data.
	wr       [2]verbs.SendWR
	sgl      [1]verbs.SGE
	msgOut   [msgLen]byte
	sgeOut   [sgeLen]byte
	recvSGL  [1]verbs.SGE // the pump's
	recvWR   [1]verbs.RecvWR
	wcs      []verbs.WC // the pump's
	rxWCs    []verbs.WC // the receive handler's
	pollMu   sync.Mutex // a poll and its apply (pollApply)
	abortReq bool
}

// Options size a connection's buffers; zero fields take the defaults.
type Options struct {
	// RecvBuffer is the ring the peer writes into (SO_RCVBUF), default
	// 256 KiB (rsocket.c's is 128 KiB); half of it is offered at a time,
	// and the writer waits a round trip for each half, so a larger ring
	// streams faster.
	RecvBuffer int
	// SendBuffer holds data until it is on the wire (SO_SNDBUF, 128 KiB).
	SendBuffer int
	// Credits is how many data messages the peer may have unread
	// (rsocket.c's receive queue size, RDMA_RQSIZE; default 256).
	Credits int
	// SendQueue is the QP's send queue depth (default 128); a write
	// takes two WRs.
	SendQueue int
}

func (o Options) withDefaults() (Options, error) {
	if o.RecvBuffer == 0 {
		o.RecvBuffer = 256 << 10
	}
	if o.SendBuffer == 0 {
		o.SendBuffer = 128 << 10
	}
	if o.Credits == 0 {
		o.Credits = 256
	}
	if o.SendQueue == 0 {
		o.SendQueue = 128
	}
	switch {
	case o.RecvBuffer < 2<<10 || o.RecvBuffer > 1<<30 || o.RecvBuffer%2 != 0:
		return o, fmt.Errorf("%w: RecvBuffer %d (2 KiB to 1 GiB, even)", verbs.ErrInvalidArg, o.RecvBuffer)
	case o.SendBuffer < 2<<10 || o.SendBuffer > 1<<30:
		return o, fmt.Errorf("%w: SendBuffer %d (2 KiB to 1 GiB)", verbs.ErrInvalidArg, o.SendBuffer)
	case o.Credits < 2 || o.Credits > 1<<14:
		return o, fmt.Errorf("%w: Credits %d (2 to 16384)", verbs.ErrInvalidArg, o.Credits)
	case o.SendQueue < 2+maxCtrl || o.SendQueue > 1<<14:
		return o, fmt.Errorf("%w: SendQueue %d (%d to 16384)", verbs.ErrInvalidArg, o.SendQueue, 2+maxCtrl)
	}
	return o, nil
}

// newConn creates a connection's verbs objects and posts its receives,
// ready for Dial or Accept.
func newConn(dev *verbs.Device, o Options) (c *Conn, err error) {
	o, err = o.withDefaults()
	if err != nil {
		return nil, err
	}
	// Twice the credits in receives: control messages (SGL updates,
	// shutdown) are not counted by credits, and iWARP has no
	// receiver-not-ready retry to cover a Send that finds none.
	nRecv := 2 * o.Credits
	c = &Conn{
		half:     o.RecvBuffer / 2,
		credits:  o.Credits,
		sqDepth:  o.SendQueue,
		sqAvail:  o.SendQueue,
		rdLock:   make(chan struct{}, 1),
		wrLock:   make(chan struct{}, 1),
		rdWake:   make(chan struct{}, 1),
		wrWake:   make(chan struct{}, 1),
		rdl:      deadline.New(),
		wdl:      deadline.New(),
		closed:   make(chan struct{}),
		pumpDone: make(chan struct{}),
		rmsg:     make([]uint32, o.Credits),
		wcs:      make([]verbs.WC, 64),
		rxWCs:    make([]verbs.WC, 64),
		tsglNext: 1, // the peer's first SGL update goes to entry 1 (remote_sge)
	}
	c.cond = sync.NewCond(&c.mu)
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	c.pd = dev.AllocPD()
	if c.cq, err = dev.CreateCQ(o.SendQueue + nRecv); err != nil {
		return nil, err
	}
	if c.qp, err = c.pd.CreateQP(verbs.QPConfig{SendCQ: c.cq, RecvCQ: c.cq, SigAll: true, IRD: 1, ORD: 1,
		Cap: verbs.QPCap{MaxSendWR: o.SendQueue, MaxRecvWR: nRecv, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: sgeLen}}); err != nil {
		return nil, err
	}
	rw := verbs.LocalWrite | verbs.RemoteWrite
	if c.rbuf, err = c.pd.RegMR(make([]byte, o.RecvBuffer), rw); err != nil {
		return nil, err
	}
	if c.sbuf, err = c.pd.RegMR(make([]byte, o.SendBuffer), 0); err != nil {
		return nil, err
	}
	if c.tsgl, err = c.pd.RegMR(make([]byte, sglSize*sgeLen), rw); err != nil {
		return nil, err
	}
	if c.msgs, err = c.pd.RegMR(make([]byte, nRecv*msgLen), verbs.LocalWrite); err != nil {
		return nil, err
	}
	for i := range nRecv {
		if err = c.postRecv(i); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// connData is what we offer the peer, as rs_format_conn_data: the first
// half of the ring, our target SGL, our credits; little-endian (no
// RS_CONN_FLAG_NET), an iomap table of size 0.
func (c *Conn) connData() []byte {
	return connData{
		version:   connVersion,
		flags:     connFlagIOMap,
		credits:   uint16(c.credits),
		targetSGL: sge{addr: c.tsgl.Addr(), key: c.tsgl.RKey(), len: sglSize},
		dataBuf:   sge{addr: c.rbuf.Addr(), key: c.rbuf.RKey(), len: uint32(c.half)},
	}.marshal()
}

// start takes the peer's rs_conn_data (rs_save_conn_data) once the QP is
// connected, and starts the pump.
func (c *Conn) start(peer connData) {
	c.laddr, c.raddr = c.qp.LocalAddr(), c.qp.RemoteAddr()
	if st := c.qp.Stats(); st.TCPErr == nil {
		c.sent0, c.acked0 = st.OctetsSent, st.TCP.BytesAcked
	}
	c.mu.Lock()
	c.remoteSGL = peer.targetSGL
	c.remoteSGE = 1
	c.target[0] = peer.dataBuf
	c.sseqComp = peer.credits
	c.rbufFree = c.half
	c.rbufAvail = c.half
	c.advertised = uint64(c.half)
	c.rseqComp = uint16(c.credits / 2)
	c.limit = uint16(c.credits)
	c.readable, c.writable, c.connected = true, true, true
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	c.stopPump = cancel
	go c.pump(ctx)
	c.qp.SetRxHandler(c.onRx)
}

// release frees what newConn made.
func (c *Conn) release() {
	if c.qp != nil {
		c.qp.Close()
	}
	if c.cq != nil {
		c.cq.Destroy()
	}
	for _, mr := range []*verbs.MR{c.rbuf, c.sbuf, c.tsgl, c.msgs} {
		if mr != nil {
			mr.Dereg()
		}
	}
	if c.pd != nil {
		c.pd.Dealloc()
	}
	c.rdl.Set(time.Time{})
	c.wdl.Set(time.Time{})
}

func (c *Conn) postRecv(i int) error {
	c.recvSGL[0] = c.msgs.SGE(i*msgLen, msgLen)
	c.recvWR[0] = verbs.RecvWR{ID: idRecv | uint64(i), SGL: c.recvSGL[:]}
	_, err := c.qp.PostRecv(c.recvWR[:]...)
	return err
}

// LocalAddr returns the local address (that of the QP's TCP connection).
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline sets the read and write deadlines, as net.Conn's.
func (c *Conn) SetDeadline(t time.Time) error {
	c.rdl.Set(t)
	c.wdl.Set(t)
	return nil
}

// SetReadDeadline sets the deadline for Reads, pending ones included.
func (c *Conn) SetReadDeadline(t time.Time) error { c.rdl.Set(t); return nil }

// SetWriteDeadline sets the deadline for Writes, pending ones included.
func (c *Conn) SetWriteDeadline(t time.Time) error { c.wdl.Set(t); return nil }

// acquire takes a direction's lock, unless the Conn is closed or the
// direction's deadline has passed (which win even when the lock is free).
func (c *Conn) acquire(l chan struct{}, dl *deadline.Deadline) error {
	select {
	case <-c.closed:
		return net.ErrClosed
	case <-dl.Done():
		return os.ErrDeadlineExceeded
	default:
	}
	select {
	case l <- struct{}{}:
		return nil
	case <-c.closed:
		return net.ErrClosed
	case <-dl.Done():
		return os.ErrDeadlineExceeded
	}
}

// wait waits for the pump's next nudge.
func (c *Conn) wait(wake chan struct{}, dl *deadline.Deadline) error {
	select {
	case <-wake:
		return nil
	case <-c.closed:
		return net.ErrClosed
	case <-dl.Done():
		return os.ErrDeadlineExceeded
	}
}

// isClosed reports whether Close has begun: from then on Reads and Writes
// fail with net.ErrClosed, whatever else the state says.
func (c *Conn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

func nudge(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Read reads what the peer wrote, as net.Conn's: data already received
// is returned even after the peer disconnected; then io.EOF.
func (c *Conn) Read(p []byte) (int, error) {
	if err := c.acquire(c.rdLock, c.rdl); err != nil {
		return 0, c.opError("read", err)
	}
	defer func() { <-c.rdLock }()
	for {
		c.mu.Lock()
		switch {
		case c.isClosed():
			c.mu.Unlock()
			return 0, c.opError("read", net.ErrClosed)
		case c.rmsgN > 0:
			n := c.consume(p)
			c.giveCredits()
			c.mu.Unlock()
			return n, nil
		case !c.readable:
			c.mu.Unlock()
			return 0, io.EOF
		case c.err != nil:
			err := c.err
			c.mu.Unlock()
			return 0, c.opError("read", err)
		}
		c.mu.Unlock()
		if err := c.wait(c.rdWake, c.rdl); err != nil {
			return 0, c.opError("read", err)
		}
	}
}

// consume copies queued data into p, as rrecv.
func (c *Conn) consume(p []byte) int {
	ring := c.rbuf.Buf()
	n := 0
	for n < len(p) && c.rmsgN > 0 {
		m := &c.rmsg[c.rmsgHead]
		k := min(int(*m), len(p)-n)
		if k == int(*m) {
			c.rseqNo++
			c.rmsgHead = (c.rmsgHead + 1) % len(c.rmsg)
			c.rmsgN--
		}
		*m -= uint32(k)
		for k > 0 {
			chunk := min(k, len(ring)-c.rbufOff)
			copy(p[n:], ring[c.rbufOff:c.rbufOff+chunk])
			n += chunk
			k -= chunk
			c.rbufAvail += chunk
			if c.rbufOff += chunk; c.rbufOff == len(ring) {
				c.rbufOff = 0
			}
		}
	}
	return n
}

// Write writes p to the peer's ring, as many RDMA Writes each followed by
// its 4-octet message as the ring, the credits and the send queue allow.
func (c *Conn) Write(p []byte) (int, error) {
	if err := c.acquire(c.wrLock, c.wdl); err != nil {
		return 0, c.opError("write", err)
	}
	defer func() { <-c.wrLock }()
	n := 0
	for n < len(p) {
		select {
		case <-c.wdl.Done():
			return n, c.opError("write", os.ErrDeadlineExceeded)
		default:
		}
		c.mu.Lock()
		if err := c.writeErr(); err != nil {
			c.mu.Unlock()
			return n, c.opError("write", err)
		}
		if k := c.sendable(len(p) - n); k > 0 {
			err := c.writeData(p[n : n+k])
			c.mu.Unlock()
			if err != nil {
				return n, c.opError("write", err)
			}
			n += k
			continue
		}
		c.mu.Unlock()
		if err := c.wait(c.wrWake, c.wdl); err != nil {
			return n, c.opError("write", err)
		}
	}
	return n, nil
}

func (c *Conn) writeErr() error {
	switch {
	case c.isClosed():
		return net.ErrClosed
	case c.shutWr:
		return ErrWriteClosed
	case !c.writable:
		return ErrPeerReset
	case c.err != nil:
		return c.err
	}
	return nil
}

// sendable returns how many of want octets can go in one transfer now
// (rs_can_send and rsend's sizing), 0 if none.
func (c *Conn) sendable(want int) int {
	t := c.target[c.targetSGE]
	if c.sqAvail < 2 || c.sseqNo == c.sseqComp || t.len == 0 {
		return 0
	}
	space, tailEnd := c.sbufSpace()
	// Wait for a worthwhile piece of the ring (RS_SNDLOWAT), but take
	// what is left before its end.
	if space == 0 || (space < min(want, 2048) && !tailEnd) {
		return 0
	}
	return min(want, space, int(t.len), maxXfer)
}

// sbufSpace returns the free octets of the send ring from sbufHead on,
// and whether they run to the ring's end with more free at its start.
func (c *Conn) sbufSpace() (int, bool) {
	size := c.sbuf.Len()
	switch c.sbufUsed {
	case 0:
		c.sbufHead = 0
		return size, false
	case size:
		return 0, false
	}
	tail := c.sbufHead - c.sbufUsed
	if tail < 0 {
		tail += size
	}
	if c.sbufHead > tail {
		return size - c.sbufHead, tail > 0
	}
	return tail - c.sbufHead, false
}

// writeData posts one transfer (rs_write_data in RS_OPT_MSG_SEND mode):
// an RDMA Write of p into the peer's current buffer, then a Send of
// RS_OP_DATA with its length. Called with mu held.
func (c *Conn) writeData(p []byte) error {
	off := c.sbufHead
	copy(c.sbuf.Buf()[off:], p)
	t := &c.target[c.targetSGE]
	c.sgl[0] = c.sbuf.SGE(off, len(p))
	c.wr[0] = verbs.SendWR{ID: idData | uint64(len(p)), Opcode: verbs.OpRDMAWrite, SGL: c.sgl[:], RemoteAddr: t.addr, RKey: t.key}
	binary.LittleEndian.PutUint32(c.msgOut[:], msgSet(opData, uint32(len(p))))
	c.wr[1] = verbs.SendWR{ID: idMsg, Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: c.msgOut[:]}
	if _, err := c.qp.PostSend(c.wr[:2]...); err != nil {
		return c.failLocked(err)
	}
	c.sseqNo++
	c.sqAvail -= 2
	c.sbufUsed += len(p)
	if c.sbufHead += len(p); c.sbufHead == c.sbuf.Len() {
		c.sbufHead = 0
	}
	t.addr += uint64(len(p))
	if t.len -= uint32(len(p)); t.len == 0 {
		c.targetSGE = (c.targetSGE + 1) % sglSize
	}
	return nil
}

// giveCredits sends an SGL update when the application has read half the
// ring, or half the credits (rs_give_credits, rs_send_credits in
// RS_OPT_MSG_SEND mode). Called with mu held.
func (c *Conn) giveCredits() {
	if !c.connected || c.err != nil || c.ctrlOut+2 > maxCtrl || c.sqAvail < 2 {
		return
	}
	// Unlike rsocket.c, which gives as soon as it may, we give only what
	// the peer has run out of: an rsocket.c peer that has sent its last
	// data closes at once (rshutdown, then its QP leaves RTS and siw stops
	// reading its socket), and a message of ours arriving then is unread
	// data at its close: Linux resets the connection, and the peer's
	// last octets, still in its socket's send queue, are lost.
	ring := c.rbufAvail >= c.half && c.received == c.advertised
	if !ring && (int16(c.rseqNo-c.rseqComp) < 0 || c.recvMsgs != c.limit) {
		return
	}
	c.rseqComp = c.rseqNo + uint16(c.credits/2)
	c.limit = c.rseqNo + uint16(c.credits)
	binary.LittleEndian.PutUint32(c.msgOut[:], msgSet(opSGL, uint32(c.rseqNo)+uint32(c.credits)))
	send := verbs.SendWR{ID: idCtrl, Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: c.msgOut[:]}
	wrs := c.wr[:1]
	if ring {
		sge{addr: c.rbuf.Addr() + uint64(c.rbufFree), key: c.rbuf.RKey(), len: uint32(c.half)}.putLE(c.sgeOut[:])
		c.wr[0] = verbs.SendWR{ID: idCtrl, Opcode: verbs.OpRDMAWrite, Flags: verbs.Inline, InlineData: c.sgeOut[:],
			RemoteAddr: c.remoteSGL.addr + uint64(c.remoteSGE)*sgeLen, RKey: c.remoteSGL.key}
		c.wr[1] = send
		wrs = c.wr[:2]
	} else {
		c.wr[0] = send
	}
	if _, err := c.qp.PostSend(wrs...); err != nil {
		c.failLocked(err)
		return
	}
	c.ctrlOut += len(wrs)
	c.sqAvail -= len(wrs)
	if ring {
		c.rbufAvail -= c.half
		c.advertised += uint64(c.half)
		if c.rbufFree += c.half; c.rbufFree >= c.rbuf.Len() {
			c.rbufFree = 0
		}
		c.remoteSGE = (c.remoteSGE + 1) % int(c.remoteSGL.len)
	}
}

// postCtrl sends a control message (RS_OP_CTRL), waiting up to closeDrain
// for a control slot as rshutdown does. Called with mu held.
func (c *Conn) postCtrl(ctrl uint32) error {
	end := time.Now().Add(closeDrain)
	t := time.AfterFunc(closeDrain, c.cond.Broadcast)
	defer t.Stop()
	for c.connected && c.err == nil && (c.ctrlOut >= maxCtrl || c.sqAvail < 1) {
		if time.Now().After(end) {
			return os.ErrDeadlineExceeded
		}
		c.cond.Wait()
	}
	if !c.connected || c.err != nil {
		return nil // the peer is gone: nothing to tell it
	}
	binary.LittleEndian.PutUint32(c.msgOut[:], msgSet(opCtrl, ctrl))
	c.wr[0] = verbs.SendWR{ID: idCtrl, Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: c.msgOut[:]}
	if _, err := c.qp.PostSend(c.wr[:1]...); err != nil {
		return c.failLocked(err)
	}
	c.ctrlOut++
	c.sqAvail--
	return nil
}

// CloseWrite shuts down the writing side (rshutdown SHUT_WR): data
// already written still arrives, then the peer reads io.EOF; reading
// goes on. It waits for a Write in progress, until the write deadline; a
// deadline that has passed does not stop it when no Write is in progress.
func (c *Conn) CloseWrite() error {
	select {
	case c.wrLock <- struct{}{}:
	default:
		if err := c.acquire(c.wrLock, c.wdl); err != nil {
			return c.opError("close", err)
		}
	}
	defer func() { <-c.wrLock }()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isClosed() {
		return c.opError("close", net.ErrClosed)
	}
	if c.shutWr {
		return nil
	}
	c.shutWr = true
	if !c.writable {
		return nil
	}
	c.writable = false
	ctrl := uint32(ctrlShutdown)
	if !c.readable {
		ctrl = ctrlDisconnect
	}
	if err := c.postCtrl(ctrl); err != nil {
		return c.opError("close", err)
	}
	return nil
}

// Close closes the connection (rclose): it tells the peer
// (RS_CTRL_DISCONNECT) after the data already written, waits up to 2 s for
// that to be handed to TCP, closes the QP and frees the buffers. Reads and
// Writes blocked on the Conn return net.ErrClosed.
func (c *Conn) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		close(c.closed)
	})
	if !first {
		return c.opError("close", net.ErrClosed)
	}
	c.mu.Lock()
	if c.connected && c.err == nil && (c.readable || c.writable) {
		c.readable, c.writable, c.shutWr = false, false, true
		if c.postCtrl(ctrlDisconnect) == nil {
			c.drainLocked()
		}
	}
	c.mu.Unlock()
	c.waitAcked(time.Now().Add(closeDrain))
	c.qp.Close()
	c.stopPump()
	<-c.pumpDone
	c.aborting.Wait()
	c.mu.Lock() // wait for a Read or Write that is copying (it sees closed next)
	c.mu.Unlock()
	c.release()
	return nil
}

// waitAcked waits, until end, for the peer's TCP to acknowledge every
// octet the QP has handed to ours. An rsocket.c peer keeps sending SGL
// updates while it reads; one that arrives after our QP has stopped
// reading is unread data when the socket closes, and Linux then resets the
// connection and drops what its send queue still holds: our last octets
// and the disconnect message. Acknowledged octets are past that.
func (c *Conn) waitAcked(end time.Time) {
	for {
		s := c.qp.Stats()
		if s.TCPErr != nil || s.TCP.BytesAcked-c.acked0 >= s.OctetsSent-c.sent0 || !time.Now().Before(end) {
			return
		}
		select {
		case <-c.qp.Done():
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// drainLocked waits, up to closeDrain, until every send WR has completed
// (rs_conn_all_sends_done).
func (c *Conn) drainLocked() {
	end := time.Now().Add(closeDrain)
	t := time.AfterFunc(closeDrain, c.cond.Broadcast)
	defer t.Stop()
	for c.sqAvail < c.sqDepth && c.err == nil && time.Now().Before(end) {
		c.cond.Wait()
	}
}

// failLocked records the first failure: the connection is unusable from
// now on. Called with mu held.
func (c *Conn) failLocked(err error) error {
	if c.err == nil {
		if !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrConnLost) {
			err = fmt.Errorf("%w: %w", ErrConnLost, err)
		}
		c.err = err
		c.connected = false
	}
	return c.err
}
