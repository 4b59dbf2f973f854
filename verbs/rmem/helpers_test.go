package rmem

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/verbs"
	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
)

// pair is a client QP connected over loopback TCP to a server QP that
// offers a region of its memory, and a Buffer on that region.
type pair struct {
	cdev, sdev *verbs.Device
	client     *verbs.QP
	server     *verbs.QP
	mr         *verbs.MR // the server's region
	remote     verbs.RemoteBuffer
	b          *Buffer
}

type pairOpts struct {
	size     int
	sendWR   int // the client's send queue depth (default 128)
	ord      int // the client's ORD (0: the device's; negative: none)
	ird      int // the server's IRD (0: the device's)
	cfg      Config
	noBuffer bool
	access   verbs.Access
}

// newPair connects a pair; Cleanup closes the Buffer, the QPs and the
// devices.
func newPair(t testing.TB, o pairOpts) *pair {
	t.Helper()
	p := &pair{}
	var err error
	p.sdev, err = verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	p.cdev, err = verbs.Open(verbs.DeviceAttr{})
	require.NoError(t, err)
	t.Cleanup(func() {
		if p.b != nil {
			p.b.Close()
		}
		p.client.Close()
		p.server.Close()
		p.cdev.Close()
		p.sdev.Close()
	})
	spd := p.sdev.AllocPD()
	mem := initialMem(o.size)
	acc := o.access
	if acc == 0 {
		acc = verbs.LocalWrite | verbs.RemoteRead | verbs.RemoteWrite
	}
	p.mr, err = spd.RegMR(mem, acc)
	require.NoError(t, err)
	scq, err := p.sdev.CreateCQ(16)
	require.NoError(t, err)
	p.server, err = spd.CreateQP(verbs.QPConfig{SendCQ: scq, RecvCQ: scq, IRD: o.ird, ORD: -1,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	require.NoError(t, err)

	sendWR := o.sendWR
	if sendWR == 0 {
		sendWR = 128
	}
	cq, err := p.cdev.CreateCQ(sendWR)
	require.NoError(t, err)
	p.client, err = p.cdev.AllocPD().CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, ORD: o.ord, IRD: -1,
		Cap: verbs.QPCap{MaxSendWR: sendWR, MaxRecvWR: 1}})
	require.NoError(t, err)

	ln, err := p.sdev.Listen(context.Background(), "tcp", "127.0.0.1:0", verbs.ConnConfig{})
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			err = req.Accept(ctx, p.server, p.mr.RemoteBuffer().Append(nil))
		}
		errc <- err
	}()
	require.NoError(t, p.client.Dial(ctx, "tcp", ln.Addr().String(), verbs.ConnConfig{}))
	require.NoError(t, <-errc)
	p.remote, err = verbs.ParseRemoteBuffer(p.client.PeerPrivateData())
	require.NoError(t, err)
	if !o.noBuffer {
		p.b, err = New(p.client, p.remote, o.cfg)
		require.NoError(t, err)
	}
	return p
}

// placed waits until the server's region has counted n Writes placed: what
// they wrote may then be read from its memory.
func (p *pair) placed(t testing.TB, n uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for p.mr.Placed() < n {
		require.True(t, time.Now().Before(deadline), "%d of %d Writes placed", p.mr.Placed(), n)
		time.Sleep(time.Millisecond)
	}
}

// checkRoutines fails the test if it leaves goroutines behind. Call it
// first, so that its check runs after every other cleanup.
func checkRoutines(t *testing.T) {
	report := test.CheckRoutines(t)
	t.Cleanup(report)
}

// sentinel is what tests write into a buffer a call has returned: it
// never occurs in initialMem.
const sentinel = 0xEE

// initialMem returns the server region's contents as newPair makes them.
func initialMem(n int) []byte {
	b := make([]byte, n)
	fill(b, 1)
	for i := range b {
		if b[i] == sentinel {
			b[i] = 0
		}
	}
	return b
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func requireSame(t testing.TB, want, got []byte, what string) {
	t.Helper()
	if string(want) != string(got) {
		i := 0
		for i < len(want) && i < len(got) && want[i] == got[i] {
			i++
		}
		t.Fatalf("%s: data differs at octet %d of %d", what, i, len(want))
	}
}
