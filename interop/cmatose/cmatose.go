// Package cmatose reimplements the exchange of librdmacm's cmatose example
// (ucmatose in rdmacm-utils) over this stack's verbs, so that our QPs can
// be tested against the real one on a kernel siw peer, in both roles.
//
// The server accepts every connection (posting its receives first), and
// once all are established it sends Count messages of Size octets on each
// (signalled, from one buffer), waits for their completions, then receives
// Count replies on each and disconnects. The client posts its receives,
// connects every QP with IRD = ORD = 1, receives Count messages on each,
// sends Count replies and waits for the server's disconnect. The server
// speaks first: the pattern that RFC 5044 section 7.1.2 leaves to the
// responder's discretion and that broke our first connections with siw.
package cmatose

import (
	"context"
	"errors"
	"fmt"

	"github.com/goiwarp/iwarp/verbs"
)

// Port is cmatose's default port.
const Port = 7471

// Options are cmatose's -c, -C and -S.
type Options struct {
	Connections int // -c (default 1)
	Count       int // -C (default 10)
	Size        int // -S (default 100)
}

func (o *Options) defaults() {
	if o.Connections <= 0 {
		o.Connections = 1
	}
	if o.Count <= 0 {
		o.Count = 10
	}
	if o.Size <= 0 {
		o.Size = 100
	}
}

// node is one connection's verbs objects, as cmatose's cmatest_node.
type node struct {
	dev      *verbs.Device
	scq, rcq *verbs.CQ
	qp       *verbs.QP
	mr       *verbs.MR
}

func newNode(dev *verbs.Device, o Options) (*node, error) {
	n := &node{dev: dev}
	pd := dev.AllocPD()
	var err error
	if n.scq, err = dev.CreateCQ(o.Count); err != nil {
		return nil, err
	}
	if n.rcq, err = dev.CreateCQ(o.Count); err != nil {
		return nil, err
	}
	n.qp, err = pd.CreateQP(verbs.QPConfig{SendCQ: n.scq, RecvCQ: n.rcq, SigAll: true, IRD: 1, ORD: 1,
		Cap: verbs.QPCap{MaxSendWR: o.Count, MaxRecvWR: o.Count, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	if n.mr, err = pd.RegMR(make([]byte, o.Size), verbs.LocalWrite); err != nil {
		n.qp.Close()
		return nil, err
	}
	for range o.Count {
		if _, err := n.qp.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{n.mr.SGE(0, o.Size)}}); err != nil {
			n.qp.Close()
			return nil, err
		}
	}
	return n, nil
}

func (n *node) postSends(o Options) error {
	for range o.Count {
		if _, err := n.qp.PostSend(verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{n.mr.SGE(0, o.Size)}}); err != nil {
			return err
		}
	}
	return nil
}

// complete waits for count successful completions on cq.
func complete(ctx context.Context, cq *verbs.CQ, count int, what string) error {
	var wc [8]verbs.WC
	for done := 0; done < count; {
		k, err := cq.PollWait(ctx, wc[:min(len(wc), count-done)])
		if err != nil {
			return fmt.Errorf("cmatose: %s: %d of %d: %w", what, done, count, err)
		}
		for _, c := range wc[:k] {
			if c.Status != verbs.Success {
				return fmt.Errorf("cmatose: %s: %v", what, c)
			}
		}
		done += k
	}
	return nil
}

// Serve is cmatose's server: it takes o.Connections requests from ln and
// runs the exchange on them.
func Serve(ctx context.Context, ln *verbs.Listener, o Options) error {
	o.defaults()
	dev, err := verbs.Open(verbs.DeviceAttr{})
	if err != nil {
		return err
	}
	var nodes []*node
	defer func() {
		for _, n := range nodes {
			n.qp.Close()
		}
	}()
	for range o.Connections {
		req, err := ln.GetRequest(ctx)
		if err != nil {
			return fmt.Errorf("cmatose: waiting for connection %d: %w", len(nodes)+1, err)
		}
		n, err := newNode(dev, o)
		if err != nil {
			req.Reject(nil)
			return err
		}
		nodes = append(nodes, n)
		if err := req.Accept(ctx, n.qp, nil); err != nil {
			req.Reject(nil) // what Accept refused before answering (a no-op after)
			return fmt.Errorf("cmatose: accepting connection %d: %w", len(nodes), err)
		}
	}
	for _, n := range nodes {
		if err := n.postSends(o); err != nil {
			return err
		}
	}
	for i, n := range nodes {
		if err := complete(ctx, n.scq, o.Count, fmt.Sprintf("connection %d: sends", i+1)); err != nil {
			return err
		}
	}
	for i, n := range nodes {
		if err := complete(ctx, n.rcq, o.Count, fmt.Sprintf("connection %d: receives", i+1)); err != nil {
			return err
		}
	}
	var errs []error
	for _, n := range nodes {
		errs = append(errs, n.qp.Disconnect(ctx))
	}
	return errors.Join(errs...)
}

// Client is cmatose's client: it connects o.Connections QPs to addr and
// runs the exchange on them, with cfg as each connection's start-up.
func Client(ctx context.Context, addr string, o Options, cfg verbs.ConnConfig) error {
	o.defaults()
	dev, err := verbs.Open(verbs.DeviceAttr{})
	if err != nil {
		return err
	}
	var nodes []*node
	defer func() {
		for _, n := range nodes {
			n.qp.Close()
		}
	}()
	for i := range o.Connections {
		n, err := newNode(dev, o)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
		if err := n.qp.Dial(ctx, "tcp", addr, cfg); err != nil {
			return fmt.Errorf("cmatose: connection %d: %w", i+1, err)
		}
	}
	for i, n := range nodes {
		if err := complete(ctx, n.rcq, o.Count, fmt.Sprintf("connection %d: receives", i+1)); err != nil {
			return err
		}
	}
	for _, n := range nodes {
		if err := n.postSends(o); err != nil {
			return err
		}
	}
	for i, n := range nodes {
		if err := complete(ctx, n.scq, o.Count, fmt.Sprintf("connection %d: sends", i+1)); err != nil {
			return err
		}
	}
	// The server disconnects once it has our replies.
	for i, n := range nodes {
		select {
		case <-n.qp.Done():
			if err := n.qp.Err(); !errors.Is(err, verbs.ErrDisconnected) {
				return fmt.Errorf("cmatose: connection %d: %w", i+1, err)
			}
		case <-ctx.Done():
			return fmt.Errorf("cmatose: connection %d: waiting for the server's disconnect: %w", i+1, ctx.Err())
		}
	}
	return nil
}
