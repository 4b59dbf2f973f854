package target_test

import (
	"context"
	"fmt"
	"log"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/target"
)

// A target with one 1 MiB RAM namespace, and a host that writes a block
// and reads it back.
func Example() {
	ctx := context.Background()
	sub, err := target.NewSubsystem("nqn.2024-01.io.example:disk")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := sub.AddNamespace(target.NewMemBackend(1<<20), 512); err != nil {
		log.Fatal(err)
	}
	t, err := target.New(target.Config{}, sub)
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	addr, err := t.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}

	ents, err := host.Discover(ctx, "tcp", addr.String(), host.Config{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("discovered:", ents[0].SubNQN)

	c, err := host.Connect(ctx, "tcp", addr.String(), ents[0].SubNQN, host.Config{IOQueues: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ns, err := c.Namespace(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	block := make([]byte, ns.BlockSize())
	copy(block, "hello, NVMe over iWARP")
	if _, err := ns.WriteAt(block, 4096); err != nil {
		log.Fatal(err)
	}
	back := make([]byte, len(block))
	if _, err := ns.ReadAt(back, 4096); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d blocks of %d octets; read back %q\n", ns.Info.Size, ns.BlockSize(), back[:22])
	// Output:
	// discovered: nqn.2024-01.io.example:disk
	// 2048 blocks of 512 octets; read back "hello, NVMe over iWARP"
}

// A port exposes only the subsystems linked to it, as a port of Linux's
// nvmet: here an internal port that exposes both subsystems and a public
// one that exposes one, whose discovery log says so.
func ExampleTarget_ListenPort() {
	ctx := context.Background()
	pub, _ := target.NewSubsystem("nqn.2024-01.io.example:public")
	priv, _ := target.NewSubsystem("nqn.2024-01.io.example:private")
	t, err := target.New(target.Config{}, pub, priv)
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	if _, err := t.ListenPort(ctx, "tcp", "127.0.0.1:0", target.PortConfig{ID: 1, Subsystems: []string{pub.NQN, priv.NQN}}); err != nil {
		log.Fatal(err)
	}
	public, err := t.ListenPort(ctx, "tcp", "127.0.0.1:0", target.PortConfig{ID: 2, Subsystems: []string{pub.NQN}})
	if err != nil {
		log.Fatal(err)
	}
	ents, err := host.Discover(ctx, "tcp", public.Addr().String(), host.Config{})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range ents {
		fmt.Println("port", e.PortID, e.SubNQN)
	}
	_, err = host.Connect(ctx, "tcp", public.Addr().String(), priv.NQN, host.Config{})
	fmt.Println("private through the public port:", err != nil)
	// Output:
	// port 2 nqn.2024-01.io.example:public
	// private through the public port: true
}
