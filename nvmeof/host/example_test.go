package host_test

import (
	"bytes"
	"context"
	"fmt"
	"log"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
)

// A subsystem on two ports, one path each, and a host that uses them as
// one (ConnectMultipath): I/O goes down the path ANA calls optimized and,
// when the administrator takes that port out of service, moves to the
// other with no error to the application.
func ExampleConnectMultipath() {
	ctx := context.Background()
	sub, _ := target.NewSubsystem("nqn.2024-01.io.example:ha")
	sub.AddNamespace(target.NewMemBackend(1<<20), 512)
	t, err := target.New(target.Config{}, sub)
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	var addrs []string
	var ports []*target.Port
	for _, s := range []nvme.ANAState{nvme.ANAOptimized, nvme.ANANonOptimized} {
		p, err := t.ListenPort(ctx, "tcp", "127.0.0.1:0", target.PortConfig{Subsystems: []string{sub.NQN},
			ANA: map[uint32]nvme.ANAState{1: s}})
		if err != nil {
			log.Fatal(err)
		}
		ports, addrs = append(ports, p), append(addrs, p.Addr().String())
	}

	m, err := host.ConnectMultipath(ctx, "tcp", addrs, sub.NQN, host.MultipathConfig{Config: host.Config{IOQueues: 1}})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	ns, err := m.Namespace(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	ns.WriteAt(bytes.Repeat([]byte("a"), 4096), 0) // down port 1

	// Port 1 out of service: port 2's group optimized, port 1's
	// inaccessible. The next write goes down port 2: at once if the
	// notices came first, or after port 1 refused it (a path status).
	ports[1].SetANAState(1, nvme.ANAOptimized)
	ports[0].SetANAState(1, nvme.ANAInaccessible)
	_, err = ns.WriteAt(bytes.Repeat([]byte("b"), 4096), 4096)
	fmt.Println("write during the change:", err)
	got := make([]byte, 8192)
	_, err = ns.ReadAt(got, 0)
	fmt.Println("read back:", err, string(got[0]), string(got[4096]))
	// Output:
	// write during the change: <nil>
	// read back: <nil> a b
}

// Fencing with reservations, as a two-node cluster does: node A holds a
// Write Exclusive - Registrants Only reservation; node B, also registered,
// writes; when A is declared dead, B preempts it, and A's writes are
// refused from then on, even if it comes back. A, watching reservation
// notifications, learns it was fenced as it happens.
func ExampleNamespace_Preempt() {
	ctx := context.Background()
	sub, _ := target.NewSubsystem("nqn.2024-01.io.example:shared")
	sub.AddNamespaceConfig(target.NewMemBackend(1<<20), target.NamespaceConfig{Reservations: true})
	t, err := target.New(target.Config{}, sub)
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	addr, err := t.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	var ctrls []*host.Controller
	defer func() {
		for _, c := range ctrls {
			c.Close()
		}
	}()
	node := func(id byte) *host.Namespace {
		// A node's host identifier must stay the same across its
		// connections: registrations are the host's.
		c, err := host.Connect(ctx, "tcp", addr.String(), sub.NQN,
			host.Config{IOQueues: 1, HostID: [16]byte{id}, WatchReservations: true})
		if err != nil {
			log.Fatal(err)
		}
		ctrls = append(ctrls, c)
		ns, err := c.Namespace(ctx, 1)
		if err != nil {
			log.Fatal(err)
		}
		return ns
	}
	a, b := node(0xa), node(0xb)
	a.RegisterKey(ctx, 0xa)
	b.RegisterKey(ctx, 0xb)
	a.Reserve(ctx, 0xa, nvme.ResvWriteExclusiveRegsOnly)

	b.Preempt(ctx, 0xb, 0xa, nvme.ResvWriteExclusiveRegsOnly, true) // A is fenced
	notes, _ := ctrls[0].WaitReservationNotice(ctx)
	fmt.Printf("A is told: %v on namespace %d\n", notes[0].Type, notes[0].NSID)
	_, err = a.WriteAt(make([]byte, 512), 0)
	fmt.Println("A writes:", err)
	st, _ := b.ReservationReport(ctx)
	fmt.Printf("%v, %d registrant, holder key %#x\n", st.Type, st.Count, st.Registrants[0].Key)
	// Output:
	// A is told: Registration Preempted on namespace 1
	// A writes: nvmeof: Write: Reservation Conflict (DNR) (status 0x4083)
	// Write Exclusive - Registrants Only, 1 registrant, holder key 0xb
}
