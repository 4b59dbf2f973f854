// Package rping reimplements the exchange of librdmacm's rping example over
// this stack's verbs, so that our QPs can be tested against the real rping
// (rdmacm-utils) on a kernel siw peer, in both roles.
//
// Per iteration the client advertises its start buffer (Send of a 16-octet
// {addr BE64, rkey BE32, len BE32}), the server RDMA Reads it, answers with
// a Send, the client advertises its sink buffer, the server RDMA Writes the
// data it read there and answers with a Send; with validation the client
// checks that the data came back unchanged. Connections use MPA IRD = ORD =
// 1, as rping asks of rdma_cm.
package rping

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/goiwarp/iwarp/verbs"
)

// InfoLen is the size of rping's struct rping_rdma_info.
const InfoLen = 16

// Endpoint is one side's verbs objects.
type Endpoint struct {
	Dev      *verbs.Device
	PD       *verbs.PD
	SCQ, RCQ *verbs.CQ
	QP       *verbs.QP
	recv     *verbs.MR
	send     *verbs.MR
}

// NewEndpoint creates the device objects rping needs.
func NewEndpoint() (*Endpoint, error) {
	dev, err := verbs.Open(verbs.DeviceAttr{})
	if err != nil {
		return nil, err
	}
	e := &Endpoint{Dev: dev}
	e.PD = e.Dev.AllocPD()
	if e.SCQ, err = e.Dev.CreateCQ(16); err != nil {
		return nil, err
	}
	if e.RCQ, err = e.Dev.CreateCQ(16); err != nil {
		return nil, err
	}
	e.QP, err = e.PD.CreateQP(verbs.QPConfig{SendCQ: e.SCQ, RecvCQ: e.RCQ, IRD: 1, ORD: 1, SigAll: true,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	if e.recv, err = e.PD.RegMR(make([]byte, InfoLen), verbs.LocalWrite); err != nil {
		return nil, err
	}
	if e.send, err = e.PD.RegMR(make([]byte, InfoLen), 0); err != nil {
		return nil, err
	}
	return e, e.postRecv()
}

// ConnConfig is what rping's rdma_cm asks for: MPA rev 2, IRD = ORD = 1.
// CRC follows the given policy.
func ConnConfig(c verbs.ConnConfig) verbs.ConnConfig {
	c.MPA.IRD, c.MPA.ORD = 1, 1
	return c
}

func (e *Endpoint) postRecv() error {
	_, err := e.QP.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{e.recv.SGE(0, InfoLen)}})
	return err
}

func (e *Endpoint) wait(ctx context.Context, cq *verbs.CQ, op verbs.WCOpcode) (verbs.WC, error) {
	var wc [1]verbs.WC
	if _, err := cq.PollWait(ctx, wc[:]); err != nil {
		return verbs.WC{}, fmt.Errorf("rping: waiting for %v: %w (QP: %w)", op, err, e.QP.Err())
	}
	if wc[0].Status != verbs.Success || wc[0].Opcode != op {
		// A flushed completion comes just before the QP records why it
		// failed: wait for that, briefly, so that the error says.
		select {
		case <-e.QP.Done():
		case <-time.After(5 * time.Second):
		}
		return wc[0], fmt.Errorf("rping: %v, want %v success (QP: %w; %+v)", wc[0], op, e.QP.Err(), e.QP.Stats())
	}
	return wc[0], nil
}

// sendInfo advertises mr[0:n] to the peer.
func (e *Endpoint) sendInfo(ctx context.Context, mr *verbs.MR, n int) error {
	b := e.send.Buf()
	binary.BigEndian.PutUint64(b[0:], mr.Addr())
	binary.BigEndian.PutUint32(b[8:], mr.RKey())
	binary.BigEndian.PutUint32(b[12:], uint32(n))
	if _, err := e.QP.PostSend(verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{e.send.SGE(0, InfoLen)}}); err != nil {
		return err
	}
	_, err := e.wait(ctx, e.SCQ, verbs.WCSend)
	return err
}

// recvInfo waits for the peer's advertisement.
func (e *Endpoint) recvInfo(ctx context.Context) (addr uint64, rkey, n uint32, err error) {
	wc, err := e.wait(ctx, e.RCQ, verbs.WCRecv)
	if err != nil {
		return 0, 0, 0, err
	}
	b := e.recv.Buf()
	addr, rkey, n = binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])
	if wc.ByteLen != InfoLen {
		return 0, 0, 0, fmt.Errorf("rping: advertisement of %d octets", wc.ByteLen)
	}
	return addr, rkey, n, e.postRecv()
}

// Pattern is the text rping's client puts in its start buffer for ping i.
func Pattern(i, size int) []byte {
	b := make([]byte, size)
	p := fmt.Sprintf("rdma-ping-%d: ", i)
	n := copy(b, p)
	// As rping.c: characters from 'A' + ping number on, wrapping after 'z'.
	c := byte(65 + i%58)
	for j := n; j < size-1; j++ {
		b[j] = c
		if c++; c > 122 {
			c = 65
		}
	}
	b[size-1] = 0
	return b
}

// ErrMismatch is returned when validation finds the echoed data changed.
var ErrMismatch = errors.New("rping: data mismatch")

// Client runs count pings of size octets on a connected endpoint.
func (e *Endpoint) Client(ctx context.Context, count, size int, validate bool) error {
	start, err := e.PD.RegMR(make([]byte, size), verbs.RemoteRead)
	if err != nil {
		return err
	}
	sink, err := e.PD.RegMR(make([]byte, size), verbs.LocalWrite|verbs.RemoteWrite)
	if err != nil {
		return err
	}
	for i := 0; i < count; i++ {
		copy(start.Buf(), Pattern(i, size))
		if err := e.sendInfo(ctx, start, size); err != nil {
			return err
		}
		if _, _, _, err := e.recvInfo(ctx); err != nil { // server read it
			return err
		}
		if err := e.sendInfo(ctx, sink, size); err != nil {
			return err
		}
		if _, _, _, err := e.recvInfo(ctx); err != nil { // server wrote it
			return err
		}
		if validate && !bytes.Equal(start.Buf(), sink.Buf()) {
			return fmt.Errorf("%w in ping %d", ErrMismatch, i)
		}
	}
	return nil
}

// Server answers pings until the client disconnects or count pings are
// done (count 0: until disconnect). It returns the number of pings served.
func (e *Endpoint) Server(ctx context.Context, count, size int) (int, error) {
	buf, err := e.PD.RegMR(make([]byte, size), verbs.LocalWrite|verbs.RemoteWrite)
	if err != nil {
		return 0, err
	}
	for i := 0; count == 0 || i < count; i++ {
		addr, rkey, n, err := e.recvInfo(ctx)
		if err != nil {
			if i > 0 && errors.Is(e.QP.Err(), verbs.ErrDisconnected) {
				return i, nil
			}
			return i, err
		}
		n = min(n, uint32(size))
		if _, err := e.QP.PostSend(verbs.SendWR{Opcode: verbs.OpRDMARead, SGL: []verbs.SGE{buf.SGE(0, int(n))}, RemoteAddr: addr, RKey: rkey}); err != nil {
			return i, err
		}
		if _, err := e.wait(ctx, e.SCQ, verbs.WCRDMARead); err != nil {
			return i, err
		}
		if err := e.sendInfo(ctx, buf, int(n)); err != nil { // "go ahead"
			return i, err
		}
		addr, rkey, _, err = e.recvInfo(ctx)
		if err != nil {
			return i, err
		}
		if _, err := e.QP.PostSend(verbs.SendWR{Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{buf.SGE(0, int(n))}, RemoteAddr: addr, RKey: rkey}); err != nil {
			return i, err
		}
		if _, err := e.wait(ctx, e.SCQ, verbs.WCRDMAWrite); err != nil {
			return i, err
		}
		if err := e.sendInfo(ctx, buf, int(n)); err != nil { // "write done"
			return i, err
		}
	}
	return count, nil
}

// DefaultTimeout bounds one rping run.
const DefaultTimeout = 60 * time.Second
