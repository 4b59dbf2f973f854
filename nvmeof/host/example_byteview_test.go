package host_test

import (
	"context"
	"fmt"
	"io"
	"log"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/target"
)

// A namespace used by code that knows nothing of blocks: Fprintf through
// an io.OffsetWriter and io.ReadFull over an io.SectionReader, at offsets
// and lengths no block size divides.
func ExampleNamespace_Bytes() {
	ctx := context.Background()
	sub, _ := target.NewSubsystem("nqn.2024-01.io.example:bytes")
	sub.AddNamespace(target.NewMemBackend(1<<20), 512)
	t, err := target.New(target.Config{}, sub)
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	addr, err := t.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	c, err := host.Connect(ctx, "tcp", addr.String(), sub.NQN, host.Config{IOQueues: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ns, err := c.Namespace(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	v := ns.Bytes()
	fmt.Fprintf(io.NewOffsetWriter(v, 1000), "record %d: %s", 7, "ok")
	got := make([]byte, 11)
	_, err = io.ReadFull(io.NewSectionReader(v, 1000, 11), got)
	fmt.Printf("%q %v\n", got, err)
	// Output: "record 7: o" <nil>
}
