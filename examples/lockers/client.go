package main

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/goiwarp/iwarp/verbs"
)

// locker is where the server says our locker is.
type locker struct {
	addr uint64
	rkey uint32
	len  int
}

// conn is a client's connection and its registered buffer.
type conn struct {
	dev *verbs.Device
	cq  *verbs.CQ
	qp  *verbs.QP
	buf *verbs.MR
	lk  locker
}

func dial(ctx context.Context, addr string, tc *tls.Config) (*conn, error) {
	dev, err := verbs.Open(verbs.DeviceAttr{})
	if err != nil {
		return nil, err
	}
	c := &conn{dev: dev}
	pd := dev.AllocPD()
	if c.cq, err = dev.CreateCQ(4); err == nil {
		c.qp, err = pd.CreateQP(verbs.QPConfig{SendCQ: c.cq, RecvCQ: c.cq})
	}
	if err == nil {
		c.buf, err = pd.RegMR(make([]byte, lockerSize), verbs.LocalWrite)
	}
	if err == nil {
		err = c.qp.Dial(ctx, "tcp", addr, verbs.ConnConfig{TLS: tc})
	}
	if err == nil {
		pd := c.qp.PeerPrivateData()
		if len(pd) < offerLen {
			err = fmt.Errorf("the server's offer has %d octets, want %d", len(pd), offerLen)
		} else {
			c.lk = locker{binary.BigEndian.Uint64(pd), binary.BigEndian.Uint32(pd[8:]), int(binary.BigEndian.Uint32(pd[12:]))}
		}
	}
	if err != nil {
		dev.Close()
		return nil, err
	}
	return c, nil
}

// do posts one RDMA Write or Read of n octets between our buffer and the
// region at (addr, rkey), and waits for it.
func (c *conn) do(ctx context.Context, op verbs.SendOpcode, n int, addr uint64, rkey uint32) error {
	_, err := c.qp.PostSend(verbs.SendWR{Opcode: op, Flags: verbs.Signaled, SGL: []verbs.SGE{c.buf.SGE(0, n)},
		RemoteAddr: addr, RKey: rkey})
	if err != nil {
		return err
	}
	var wc [1]verbs.WC
	for c.cq.Poll(wc[:]) == 0 {
		if err := c.cq.Wait(ctx); err != nil {
			return err
		}
	}
	if wc[0].Status != verbs.Success {
		<-c.qp.Done()
		return fmt.Errorf("%v: %w", wc[0].Status, c.qp.Err())
	}
	return nil
}

// close disconnects in order: the server has read all we wrote.
func (c *conn) close() error {
	defer c.dev.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.qp.Disconnect(ctx)
}

// put stores text in our locker.
func put(ctx context.Context, addr string, tc *tls.Config, text []byte) error {
	c, err := dial(ctx, addr, tc)
	if err != nil {
		return err
	}
	if len(text) > c.lk.len-4 {
		c.close()
		return fmt.Errorf("%d octets do not fit a locker of %d", len(text), c.lk.len)
	}
	b := c.buf.Buf()
	binary.BigEndian.PutUint32(b, uint32(len(text)))
	copy(b[4:], text)
	if err := c.do(ctx, verbs.OpRDMAWrite, 4+len(text), c.lk.addr, c.lk.rkey); err != nil {
		c.close()
		return err
	}
	return c.close()
}

// get returns what our locker holds.
func get(ctx context.Context, addr string, tc *tls.Config) ([]byte, error) {
	c, err := dial(ctx, addr, tc)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := c.do(ctx, verbs.OpRDMARead, c.lk.len, c.lk.addr, c.lk.rkey); err != nil {
		return nil, err
	}
	b := c.buf.Buf()
	n := int(binary.BigEndian.Uint32(b))
	if n > c.lk.len-4 {
		return nil, errors.New("the locker's length is corrupt")
	}
	return append([]byte(nil), b[4:4+n]...), nil
}
