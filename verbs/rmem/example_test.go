package rmem_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"

	"github.com/goiwarp/iwarp/verbs"
	"github.com/goiwarp/iwarp/verbs/rmem"
)

// A server offers a region of its memory in its Accept's private data; the
// client reaches it through a Buffer, with calls from any goroutine, and
// through the io package.
func Example() {
	ctx := context.Background()

	// The server: a region peers may read and write, offered to whoever
	// connects. Its stack answers the Reads and places the Writes.
	sdev, err := verbs.Open(verbs.DeviceAttr{})
	if err != nil {
		log.Fatal(err)
	}
	defer sdev.Close()
	spd := sdev.AllocPD()
	mem := []byte(strings.Repeat(".", 64))
	mr, err := spd.RegMR(mem, verbs.LocalWrite|verbs.RemoteRead|verbs.RemoteWrite)
	if err != nil {
		log.Fatal(err)
	}
	scq, err := sdev.CreateCQ(1)
	if err != nil {
		log.Fatal(err)
	}
	sqp, err := spd.CreateQP(verbs.QPConfig{SendCQ: scq, RecvCQ: scq})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := sdev.Listen(ctx, "tcp", "127.0.0.1:0", verbs.ConnConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			err = req.Accept(ctx, sqp, mr.RemoteBuffer().Append(nil))
		}
		accepted <- err
	}()

	// The client: a QP whose send CQ is its own, since the Buffer polls it.
	dev, err := verbs.Open(verbs.DeviceAttr{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	cq, err := dev.CreateCQ(128)
	if err != nil {
		log.Fatal(err)
	}
	qp, err := dev.AllocPD().CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		log.Fatal(err)
	}
	if err := qp.Dial(ctx, "tcp", ln.Addr().String(), verbs.ConnConfig{}); err != nil {
		log.Fatal(err)
	}
	if err := <-accepted; err != nil {
		log.Fatal(err)
	}
	remote, err := verbs.ParseRemoteBuffer(qp.PeerPrivateData())
	if err != nil {
		log.Fatal(err)
	}

	b, err := rmem.New(qp, remote, rmem.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	if _, err := b.WriteAt(ctx, []byte("remote"), 8); err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(io.NewOffsetWriter(b.IO(ctx), 20), "memory %d", 42)

	p := make([]byte, 32)
	if _, err := b.ReadAt(ctx, p, 0); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", p)
	_, err = b.ReadAt(ctx, p, 40)
	fmt.Println(err)
	// Output:
	// ........remote......memory 42...
	// rmem: octets 40 to 72 outside the remote buffer's 64
}
