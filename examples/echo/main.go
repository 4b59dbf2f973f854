// Command echo is librdmacm's rdma_server and rdma_client examples on this
// stack: a 16-octet Send from the client, a 16-octet Send back from the
// server, inline, over one RC queue pair, on port 7471. It speaks the same
// wire as the C originals, so either side can be the real one on a Linux
// siw or an iWARP NIC.
//
//	echo [-p PORT]                  serve one client, echoing its message
//	echo -s HOST [-p PORT] [-m MSG] connect, send MSG, print the answer
//
// rdma_server answers with 16 octets of its own (zeros); this server sends
// back what it received.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/goiwarp/iwarp/verbs"
)

// msgLen is the message size of rdma_server and rdma_client.
const msgLen = 16

func main() {
	server := flag.String("s", "", "server `address` to connect to (client mode)")
	port := flag.Int("p", 7471, "TCP `port`")
	msg := flag.String("m", "hello, iWARP!", "client: the message to send (up to 16 octets)")
	timeout := flag.Duration("t", 30*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var err error
	if *server == "" {
		fmt.Println("echo server: start")
		err = serve(ctx, *port)
	} else {
		fmt.Println("echo client: start")
		err = client(ctx, net.JoinHostPort(*server, strconv.Itoa(*port)), *msg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
	fmt.Println("echo: end 0")
}

// endpoint is what both sides create, as rdma_create_ep does: a QP with
// one send and one receive WR, 16 octets of inline data, every send
// signalled, and a registered receive buffer.
type endpoint struct {
	qp   *verbs.QP
	scq  *verbs.CQ
	rcq  *verbs.CQ
	recv *verbs.MR
}

func newEndpoint(dev *verbs.Device) (*endpoint, error) {
	e := &endpoint{}
	var err error
	if e.scq, err = dev.CreateCQ(1); err != nil {
		return nil, err
	}
	if e.rcq, err = dev.CreateCQ(1); err != nil {
		return nil, err
	}
	pd := dev.AllocPD()
	e.qp, err = pd.CreateQP(verbs.QPConfig{SendCQ: e.scq, RecvCQ: e.rcq, SigAll: true,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: msgLen}})
	if err != nil {
		return nil, err
	}
	if e.recv, err = pd.RegMR(make([]byte, msgLen), verbs.LocalWrite); err != nil {
		return nil, err
	}
	_, err = e.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{e.recv.SGE(0, msgLen)}})
	return e, err
}

// send sends msg inline and waits for its completion.
func (e *endpoint) send(ctx context.Context, msg []byte) error {
	if _, err := e.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: msg}); err != nil {
		return err
	}
	_, err := wait(ctx, e.scq, "send")
	return err
}

// receive waits for the posted receive and returns the message: as many
// octets as the completion says arrived.
func (e *endpoint) receive(ctx context.Context) ([]byte, error) {
	wc, err := wait(ctx, e.rcq, "receive")
	if err != nil {
		return nil, err
	}
	return e.recv.Buf()[:wc.ByteLen], nil
}

// wait waits for one completion on cq and checks its status.
func wait(ctx context.Context, cq *verbs.CQ, what string) (verbs.WC, error) {
	var wc [1]verbs.WC
	if _, err := cq.PollWait(ctx, wc[:]); err != nil {
		return wc[0], fmt.Errorf("%s: %w", what, err)
	}
	if wc[0].Status != verbs.Success {
		return wc[0], fmt.Errorf("%s: %v", what, wc[0])
	}
	return wc[0], nil
}

func serve(ctx context.Context, port int) error {
	dev, err := verbs.Open(verbs.DeviceAttr{})
	if err != nil {
		return err
	}
	ln, err := dev.Listen(ctx, "tcp", fmt.Sprintf(":%d", port), verbs.ConnConfig{})
	if err != nil {
		return err
	}
	defer ln.Close()
	req, err := ln.GetRequest(ctx)
	if err != nil {
		return err
	}
	e, err := newEndpoint(dev)
	if err != nil {
		req.Reject(nil)
		return err
	}
	defer e.qp.Close()
	if err := req.Accept(ctx, e.qp, nil); err != nil {
		req.Reject(nil) // what Accept refused before answering (a no-op after)
		return err
	}
	fmt.Printf("echo server: connected to %v\n", req.RemoteAddr())
	msg, err := e.receive(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("echo server: received %q\n", trim(msg))
	if err := e.send(ctx, msg); err != nil {
		return err
	}
	return e.qp.Disconnect(ctx)
}

func client(ctx context.Context, addr, text string) error {
	msg := make([]byte, msgLen)
	if len(text) > msgLen {
		return fmt.Errorf("a message of %d octets: at most %d", len(text), msgLen)
	}
	copy(msg, text)
	dev, err := verbs.Open(verbs.DeviceAttr{})
	if err != nil {
		return err
	}
	e, err := newEndpoint(dev)
	if err != nil {
		return err
	}
	defer e.qp.Close()
	if err := e.qp.Dial(ctx, "tcp", addr, verbs.ConnConfig{}); err != nil {
		return err
	}
	if err := e.send(ctx, msg); err != nil {
		return err
	}
	answer, err := e.receive(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("echo client: received %q\n", trim(answer))
	return e.qp.Disconnect(ctx)
}

// trim drops the zeros a short message is padded with.
func trim(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}
