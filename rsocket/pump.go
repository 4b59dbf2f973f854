package rsocket

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/goiwarp/iwarp/verbs"
)

// pump is the connection's completion goroutine (rs_poll_cq): it takes
// the CQ's completions, reposts receives, applies the peer's messages,
// frees send resources, gives credits back, and nudges waiting Reads and
// Writes. Close stops it.
func (c *Conn) pump(ctx context.Context) {
	defer close(c.pumpDone)
	for {
		if c.pollApply(c.wcs) {
			continue
		}
		err := ctx.Err()
		if err == nil {
			err = c.cq.Wait(ctx)
		}
		if err != nil {
			c.mu.Lock()
			c.failLocked(err)
			c.mu.Unlock()
			c.wakeAll()
			return
		}
	}
}

// onRx runs on the QP's receive goroutine after each FPDU
// (QP.SetRxHandler): it takes what arrived at once, saving the hand-off
// to the pump that a round trip would otherwise pay for.
func (c *Conn) onRx() { c.pollApply(c.rxWCs) }

// pollApply polls a batch and applies it, and says whether there was one.
// The pump and the receive handler both poll: pollMu keeps each poll and
// its apply together, so that the peer's messages are applied in the order
// they arrived (a DISCONNECT never before the DATA ahead of it, an older
// SGL update never after a newer one).
func (c *Conn) pollApply(wcs []verbs.WC) bool {
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	n := c.cq.Poll(wcs)
	if n > 0 {
		c.apply(wcs[:n])
	}
	return n > 0
}

// apply applies a batch of completions and wakes whoever they concern.
func (c *Conn) apply(wcs []verbs.WC) {
	c.mu.Lock()
	for _, wc := range wcs {
		c.complete(wc)
	}
	c.takeSGLUpdates()
	c.giveCredits()
	abort := c.abortReq
	c.abortReq = false
	c.mu.Unlock()
	c.wakeAll()
	if abort {
		// Not on the receive goroutine, which Abort waits for; Close
		// waits for this one.
		c.aborting.Go(func() { c.qp.Abort() })
	}
}

func (c *Conn) wakeAll() {
	c.cond.Broadcast()
	nudge(c.rdWake)
	nudge(c.wrWake)
}

// complete applies one work completion. Called with mu held.
func (c *Conn) complete(wc verbs.WC) {
	if wc.Status != verbs.Success {
		if wc.Status == verbs.WRFlushErr {
			c.failLocked(qpErr(c.qp))
		} else {
			c.failLocked(fmt.Errorf("%v: %w", wc.Status, qpErr(c.qp)))
		}
		return
	}
	if wc.ID&idRecv != 0 {
		i := int(wc.ID & idLow)
		m := binary.LittleEndian.Uint32(c.msgs.Buf()[i*msgLen:])
		if wc.ByteLen != msgLen {
			c.protocolErr("a message of %d octets, not %d", wc.ByteLen, msgLen)
			return
		}
		if err := c.postRecv(i); err != nil {
			c.failLocked(err)
			return
		}
		c.message(m)
		return
	}
	c.sqAvail++
	switch {
	case wc.ID&idData != 0:
		c.sbufUsed -= int(wc.ID & idLow)
	case wc.ID&idCtrl != 0:
		c.ctrlOut--
	}
}

// qpErr returns why the QP ended, or that it did.
func qpErr(qp *verbs.QP) error {
	if err := qp.Err(); err != nil {
		return err
	}
	return verbs.ErrClosed
}

// message applies one of the peer's messages (rs_poll_cq's switch).
func (c *Conn) message(m uint32) {
	switch op, data := msgOp(m), msgData(m); op {
	case opSGL:
		c.sseqComp = uint16(data)
	case opIOMapSGL, opWrite:
		// An iomap entry written, which we never read; riowrite's direct
		// Writes are never announced by a message.
	case opCtrl:
		switch data {
		case ctrlDisconnect:
			c.readable, c.writable, c.connected = false, false, false
		case ctrlShutdown:
			if c.writable {
				c.readable = false
			} else {
				c.readable, c.connected = false, false
			}
		}
	default: // RS_OP_DATA, and the reserved ones rsocket.c also queues
		if c.rmsgN == len(c.rmsg) {
			c.protocolErr("more than %d data messages unread: the credits were ignored", len(c.rmsg))
			return
		}
		if c.received+uint64(data) > c.advertised {
			c.protocolErr("%d octets written into %d of ring offered", c.received+uint64(data), c.advertised)
			return
		}
		c.received += uint64(data)
		c.recvMsgs++
		c.rmsg[(c.rmsgHead+c.rmsgN)%len(c.rmsg)] = data
		c.rmsgN++
	}
}

// takeSGLUpdates loads the target SGL entries the peer has written since
// the last call. MR.Placed counts its RDMA Writes, and synchronises with
// them, so an entry is read only once it has landed in full; the peer
// writes the entries in turn (remote_sge), and rewrites one only after we
// used it up.
func (c *Conn) takeSGLUpdates() {
	placed := c.tsgl.Placed()
	for ; c.tsglPlaced < placed; c.tsglPlaced++ {
		i := c.tsglNext
		c.tsglNext = (i + 1) % sglSize
		s := getSGELE(c.tsgl.Buf()[i*sgeLen:])
		if c.target[i].len != 0 {
			c.protocolErr("target SGL entry %d rewritten before it was used up", i)
			return
		}
		c.target[i] = s
	}
}

// protocolErr fails the connection for the peer's protocol violation and
// has the pump reset it.
func (c *Conn) protocolErr(format string, args ...any) {
	c.failLocked(fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...))
	c.abortReq = true
}
