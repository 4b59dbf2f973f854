package verbs_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/goiwarp/iwarp/verbs"
)

// The whole model in one program: a server registers a buffer and tells
// the client where it is (address, length and RKey in its MPA private
// data); the client RDMA-Writes into it and then Sends a note, whose
// arrival tells the server that the data is there.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The server: a device, a protection domain, a buffer the client may
	// write, a QP with its completion queues, and a receive for the note.
	sdev, err := verbs.Open(verbs.DeviceAttr{})
	if err != nil {
		log.Fatal(err)
	}
	defer sdev.Close()
	spd := sdev.AllocPD()
	target, err := spd.RegMR(make([]byte, 64), verbs.LocalWrite|verbs.RemoteWrite)
	if err != nil {
		log.Fatal(err)
	}
	note, _ := spd.RegMR(make([]byte, 16), verbs.LocalWrite)
	scq, _ := sdev.CreateCQ(16)
	sqp, err := spd.CreateQP(verbs.QPConfig{SendCQ: scq, RecvCQ: scq})
	if err != nil {
		log.Fatal(err)
	}
	sqp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{note.SGE(0, 16)}})

	ln, err := sdev.Listen(ctx, "tcp", "127.0.0.1:0", verbs.ConnConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		req, err := ln.GetRequest(ctx)
		if err != nil {
			return
		}
		// Where the client may write: address, RKey, length.
		req.Accept(ctx, sqp, target.RemoteBuffer().Append(nil))
	}()

	// The client: its own device, data to write, a QP that dials.
	cdev, _ := verbs.Open(verbs.DeviceAttr{})
	defer cdev.Close()
	cpd := cdev.AllocPD()
	data, _ := cpd.RegMR([]byte("written by RDMA, no receive needed"), 0)
	ccq, _ := cdev.CreateCQ(16)
	cqp, _ := cpd.CreateQP(verbs.QPConfig{SendCQ: ccq, RecvCQ: ccq})
	if err := cqp.Dial(ctx, "tcp", ln.Addr().String(), verbs.ConnConfig{}); err != nil {
		log.Fatal(err)
	}
	dst, err := verbs.ParseRemoteBuffer(cqp.PeerPrivateData())
	if err != nil || int(dst.Len) < data.Len() {
		log.Fatal("no room at the server: ", err)
	}

	// Write, then Send: the Send reaches the server after the Write is
	// placed, so its completion tells the server the data is there.
	cqp.PostSend(
		verbs.SendWR{ID: 10, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{data.SGE(0, data.Len())}, RemoteAddr: dst.Addr, RKey: dst.RKey},
		verbs.SendWR{ID: 11, Opcode: verbs.OpSend, Flags: verbs.Inline | verbs.Signaled, InlineData: []byte("done")})

	var wc [1]verbs.WC
	if _, err := scq.PollWait(ctx, wc[:]); err != nil || wc[0].Status != verbs.Success {
		log.Fatal(err, wc[0])
	}
	fmt.Printf("server got %q, then read %q\n", note.Buf()[:wc[0].ByteLen], target.Buf()[:data.Len()])

	// An orderly end: the client waits for its sends, then both sides close.
	go func() { <-sqp.Done(); sqp.Close() }()
	if err := cqp.Disconnect(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("client:", cqp.Err())
	// Output:
	// server got "done", then read "written by RDMA, no receive needed"
	// client: verbs: disconnected
}

// pair is two connected QPs over loopback, each with one CQ, for the
// examples below (Example shows how to build one).
type pair struct {
	dev        [2]*verbs.Device
	pd         [2]*verbs.PD
	cq         [2]*verbs.CQ
	qp         [2]*verbs.QP
	closePeers func()
}

func newPair(ctx context.Context) *pair {
	p := &pair{}
	for i := range 2 {
		p.dev[i], _ = verbs.Open(verbs.DeviceAttr{})
		p.pd[i] = p.dev[i].AllocPD()
		p.cq[i], _ = p.dev[i].CreateCQ(64)
		p.qp[i], _ = p.pd[i].CreateQP(verbs.QPConfig{SendCQ: p.cq[i], RecvCQ: p.cq[i]})
	}
	ln, err := p.dev[1].Listen(ctx, "tcp", "127.0.0.1:0", verbs.ConnConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			err = req.Accept(ctx, p.qp[1], nil)
		}
		accepted <- err
	}()
	if err := p.qp[0].Dial(ctx, "tcp", ln.Addr().String(), verbs.ConnConfig{}); err != nil {
		log.Fatal(err)
	}
	if err := <-accepted; err != nil {
		log.Fatal(err)
	}
	return p
}

func (p *pair) close() {
	for i := range 2 {
		p.dev[i].Close()
	}
}

// Sends consume the receives the peer posted, in order; each completes on
// both sides. Post receives before the peer can send.
func ExampleQP_PostRecv() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := newPair(ctx)
	defer p.close()

	buf, _ := p.pd[1].RegMR(make([]byte, 2*32), verbs.LocalWrite)
	p.qp[1].PostRecv(
		verbs.RecvWR{ID: 1, SGL: []verbs.SGE{buf.SGE(0, 32)}},
		verbs.RecvWR{ID: 2, SGL: []verbs.SGE{buf.SGE(32, 32)}})
	p.qp[0].PostSend(
		verbs.SendWR{ID: 7, Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: []byte("first")},
		verbs.SendWR{ID: 8, Opcode: verbs.OpSend, Flags: verbs.Inline | verbs.Signaled, InlineData: []byte("second")})

	for got := 0; got < 2; {
		var wcs [2]verbs.WC
		n, err := p.cq[1].PollWait(ctx, wcs[:])
		if err != nil {
			log.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			off := 32 * (wc.ID - 1)
			fmt.Printf("receive %d: %v %q\n", wc.ID, wc.Status, buf.Buf()[off:off+uint64(wc.ByteLen)])
		}
		got += n
	}
	// The sender asked for one completion (Signaled on the last WR only).
	var wc [1]verbs.WC
	p.cq[0].PollWait(ctx, wc[:])
	fmt.Println("send", wc[0].ID, wc[0].Opcode, wc[0].Status)
	// Output:
	// receive 1: success "first"
	// receive 2: success "second"
	// send 8 SEND success
}

// An RDMA Read fetches from the peer's memory without the peer's program
// taking part: it only registered the region with RemoteRead and told us
// where it is (here directly; across a network, in private data or a Send).
func ExampleQP_PostSend_rdmaRead() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := newPair(ctx)
	defer p.close()

	remote, _ := p.pd[1].RegMR([]byte("the peer's memory"), verbs.RemoteRead)
	sink, _ := p.pd[0].RegMR(make([]byte, remote.Len()), verbs.LocalWrite)
	_, err := p.qp[0].PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMARead, Flags: verbs.Signaled,
		SGL: []verbs.SGE{sink.SGE(0, sink.Len())}, RemoteAddr: remote.Addr(), RKey: remote.RKey()})
	if err != nil {
		log.Fatal(err)
	}
	var wc [1]verbs.WC
	if _, err := p.cq[0].PollWait(ctx, wc[:]); err != nil {
		log.Fatal(err)
	}
	// The sink is ours again once the Read has completed.
	fmt.Println(wc[0].Opcode, wc[0].Status, string(sink.Buf()))
	// Output: RDMA_READ success the peer's memory
}

// Fence: "Read the peer's buffer, then tell it that it may reuse it". An
// RDMA Read may be overtaken by a Send posted after it: without Fence the
// peer could hear "done" and overwrite the buffer while the Read is still
// fetching it. With Fence the Send waits for every earlier Read.
func ExampleSendFlags_fence() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := newPair(ctx)
	defer p.close()

	remote, _ := p.pd[1].RegMR([]byte("reusable buffer"), verbs.RemoteRead)
	note, _ := p.pd[1].RegMR(make([]byte, 16), verbs.LocalWrite)
	p.qp[1].PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{note.SGE(0, 16)}})
	sink, _ := p.pd[0].RegMR(make([]byte, remote.Len()), verbs.LocalWrite)

	p.qp[0].PostSend(
		verbs.SendWR{ID: 1, Opcode: verbs.OpRDMARead, SGL: []verbs.SGE{sink.SGE(0, sink.Len())}, RemoteAddr: remote.Addr(), RKey: remote.RKey()},
		verbs.SendWR{ID: 2, Opcode: verbs.OpSend, Flags: verbs.Fence | verbs.Inline | verbs.Signaled, InlineData: []byte("done")})

	// The peer hears "done" only after the Read has fetched everything:
	// now it may overwrite its buffer.
	var wc [1]verbs.WC
	p.cq[1].PollWait(ctx, wc[:])
	copy(remote.Buf(), "overwritten!!!!")
	fmt.Printf("peer got %q\n", note.Buf()[:wc[0].ByteLen])
	// Our Send's completion comes after the Read's: the sink is ours.
	p.cq[0].PollWait(ctx, wc[:])
	fmt.Printf("we read %q\n", sink.Buf())
	// Output:
	// peer got "done"
	// we read "reusable buffer"
}

// A peer that detects a protocol error sends a Terminate message and
// closes; QP.Err then decodes it. Here the RDMA Write names an RKey the
// peer never gave out.
func ExampleTerminateError() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := newPair(ctx)
	defer p.close()

	src, _ := p.pd[0].RegMR([]byte("uninvited"), 0)
	p.qp[0].PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.Signaled,
		SGL: []verbs.SGE{src.SGE(0, src.Len())}, RemoteAddr: 0x1000, RKey: 0xbad00bad})

	<-p.qp[0].Done()
	var te *verbs.TerminateError
	if errors.As(p.qp[0].Err(), &te) {
		fmt.Println("remote:", te.Remote)
		fmt.Println(te.Terminate.Cause())
	}
	<-p.qp[1].Done()
	fmt.Println("peer:", p.qp[1].Err())
	// Output:
	// remote: true
	// DDP tagged buffer error: invalid STag
	// peer: verbs: sent Terminate (DDP tagged buffer error: invalid STag): ddp: invalid STag: STag 0xbad00bad TO 0x1000 len 9
}

// A server that shares one SRQ among its connections refills it when its
// low watermark fires, not after every message: a Send that finds the SRQ
// empty would end its connection (iWARP has no receiver-not-ready retry).
func ExampleSRQ_ArmLimit() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The server: eight 32-octet receives in an SRQ, armed at three.
	sdev, _ := verbs.Open(verbs.DeviceAttr{})
	defer sdev.Close()
	spd := sdev.AllocPD()
	const depth, size = 8, 32
	bufs, _ := spd.RegMR(make([]byte, depth*size), verbs.LocalWrite)
	srq, err := spd.CreateSRQ(depth, 1)
	if err != nil {
		log.Fatal(err)
	}
	next := uint64(0) // the next receive's ID; its buffer is slot ID % depth
	refill := func() {
		for srq.Len() < depth {
			srq.PostRecv(verbs.RecvWR{ID: next, SGL: []verbs.SGE{bufs.SGE(int(next%depth)*size, size)}})
			next++
		}
	}
	refill()
	low, _ := srq.ArmLimit(3)
	scq, _ := sdev.CreateCQ(64)
	ln, err := sdev.Listen(ctx, "tcp", "127.0.0.1:0", verbs.ConnConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for range 2 { // each connection on a QP of its own, sharing the SRQ
			req, err := ln.GetRequest(ctx)
			if err != nil {
				return
			}
			qp, _ := spd.CreateQP(verbs.QPConfig{SendCQ: scq, RecvCQ: scq, SRQ: srq})
			req.Accept(ctx, qp, nil)
		}
	}()

	// Two clients, taking turns.
	cdev, _ := verbs.Open(verbs.DeviceAttr{})
	defer cdev.Close()
	var clients [2]*verbs.QP
	for i := range clients {
		cq, _ := cdev.CreateCQ(16)
		clients[i], _ = cdev.AllocPD().CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
		if err := clients[i].Dial(ctx, "tcp", ln.Addr().String(), verbs.ConnConfig{}); err != nil {
			log.Fatal(err)
		}
	}
	for i := range 12 {
		msg := fmt.Sprintf("client %d, message %d", i%2, i)
		clients[i%2].PostSend(verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: []byte(msg)})
		var wc [1]verbs.WC
		if _, err := scq.PollWait(ctx, wc[:]); err != nil || wc[0].Status != verbs.Success {
			log.Fatal(err, wc[0])
		}
		off := int(wc[0].ID%depth) * size
		fmt.Printf("%s\n", bufs.Buf()[off:off+int(wc[0].ByteLen)])
		select {
		case <-low: // closed before the completion that took the SRQ below three
			fmt.Printf("low watermark: %d posted; refilled, armed again\n", srq.Len())
			refill()
			low, _ = srq.ArmLimit(3)
		default:
		}
	}
	// Output:
	// client 0, message 0
	// client 1, message 1
	// client 0, message 2
	// client 1, message 3
	// client 0, message 4
	// client 1, message 5
	// low watermark: 2 posted; refilled, armed again
	// client 0, message 6
	// client 1, message 7
	// client 0, message 8
	// client 1, message 9
	// client 0, message 10
	// client 1, message 11
	// low watermark: 2 posted; refilled, armed again
}

// Tearing down in ibverbs' order: QPs first, then what they used. An object
// still in use refuses to go (ErrBusy), so a wrong order shows at once.
func ExamplePD_Dealloc() {
	dev, err := verbs.Open(verbs.DeviceAttr{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	qp, _ := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
	mr, _ := pd.RegMR(make([]byte, 4096), verbs.LocalWrite)

	fmt.Println("CQ first:", errors.Is(cq.Destroy(), verbs.ErrBusy))
	qp.Close()
	fmt.Println("CQ after the QP:", cq.Destroy())
	fmt.Println("PD with an MR:", errors.Is(pd.Dealloc(), verbs.ErrBusy))
	mr.Dereg()
	fmt.Println("PD after:", pd.Dealloc())
	// Output:
	// CQ first: true
	// CQ after the QP: <nil>
	// PD with an MR: true
	// PD after: <nil>
}
