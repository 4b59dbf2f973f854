package verbs

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
)

// side is one end of a connected test pair.
type side struct {
	dev    *Device
	pd     *PD
	scq    *CQ
	rcq    *CQ
	qp     *QP
	peerPD []byte // private data received from the other side
}

type pairOpts struct {
	client, server ConnConfig
	cap            QPCap
	ird, ord       int
	clientPD       []byte
	serverPD       []byte
}

func defaultCap() QPCap {
	return QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 6, MaxRecvSGE: 6, MaxInline: 256}
}

func newSide(t testing.TB, o pairOpts) *side {
	t.Helper()
	s := &side{dev: openDev(DeviceAttr{})}
	s.pd = s.dev.AllocPD()
	var err error
	s.scq, err = s.dev.CreateCQ(4096)
	require.NoError(t, err)
	s.rcq, err = s.dev.CreateCQ(4096)
	require.NoError(t, err)
	c := o.cap
	if c.MaxSendWR == 0 {
		c = defaultCap()
	}
	s.qp, err = s.pd.CreateQP(QPConfig{SendCQ: s.scq, RecvCQ: s.rcq, Cap: c, IRD: o.ird, ORD: o.ord})
	require.NoError(t, err)
	return s
}

// connect makes a connected pair over loopback TCP: the client dials, the
// server accepts.
func connect(t testing.TB, o pairOpts) (client, server *side) {
	t.Helper()
	client, server = newSide(t, o), newSide(t, o)
	ln, err := server.dev.Listen(context.Background(), "tcp", "127.0.0.1:0", o.server)
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err == nil {
			server.peerPD = req.PrivateData
			err = req.Accept(ctx, server.qp, o.serverPD)
		}
		errc <- err
	}()
	err = client.qp.Dial(ctx, "tcp", ln.Addr().String(), withPD(o.client, o.clientPD))
	client.peerPD = client.qp.PeerPrivateData()
	require.NoError(t, err)
	require.NoError(t, <-errc)
	t.Cleanup(func() {
		client.qp.Close()
		server.qp.Close()
	})
	return client, server
}

// checkRoutines fails the test if it leaves goroutines behind.
func checkRoutines(t *testing.T) {
	report := test.CheckRoutines(t)
	t.Cleanup(report)
}

func (s *side) regMR(t *testing.T, n int, acc Access) *MR {
	mr, err := s.pd.RegMR(make([]byte, max(n, 1)), acc)
	if err != nil {
		panic(err)
	}
	return mr
}

// regFilled registers n octets of seeded random data (at least one octet).
func (s *side) regFilled(t *testing.T, n int, acc Access, seed uint64) *MR {
	t.Helper()
	b := make([]byte, max(n, 1))
	fill(b, seed)
	mr, err := s.pd.RegMR(b, acc)
	require.NoError(t, err)
	return mr
}

// wait polls cq until one completion arrives.
func wait(t *testing.T, cq *CQ) WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		require.NoError(t, cq.Wait(ctx), "waiting for a completion")
	}
}

func waitOK(t *testing.T, cq *CQ, op WCOpcode) WC {
	t.Helper()
	wc := wait(t, cq)
	if wc.Status != Success && wc.QP != nil {
		<-wc.QP.Done()
		t.Fatalf("%v; QP error: %v", wc, wc.QP.Err())
	}
	require.Equal(t, op, wc.Opcode)
	return wc
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func requireSame(t *testing.T, want, got []byte) {
	t.Helper()
	if !bytes.Equal(want, got) {
		i := 0
		for i < len(want) && i < len(got) && want[i] == got[i] {
			i++
		}
		t.Fatalf("data differs at octet %d of %d", i, len(want))
	}
}

// openDev is Open for tests, whose limits are valid.
func openDev(attr DeviceAttr) *Device {
	d, err := Open(attr)
	if err != nil {
		panic(err)
	}
	return d
}

// withPD returns cfg with private data pd.
func withPD(cfg ConnConfig, pd []byte) ConnConfig {
	cfg.PrivateData = pd
	return cfg
}

// barrier sends a Send from one side to the other and waits for it to
// arrive: what the sender posted before it (Writes) has landed, since it
// arrived later on the same stream.
func barrier(t *testing.T, from, to *side) {
	t.Helper()
	rb := to.regMR(t, 8, LocalWrite)
	_, err := to.qp.PostRecv(RecvWR{SGL: []SGE{rb.SGE(0, 8)}})
	require.NoError(t, err)
	_, err = from.qp.PostSend(SendWR{Opcode: OpSend, Flags: Inline, InlineData: []byte("barrier")})
	require.NoError(t, err)
	waitOK(t, to.rcq, WCRecv)
}

// halter returns a channel for goroutines that run until it closes, and
// halt, which closes it once; the test's end closes it too, so that they
// end (and the leak check passes or names the real leak) when the test
// fails early.
func halter(t testing.TB) (stop <-chan struct{}, halt func()) {
	ch := make(chan struct{})
	var once sync.Once
	halt = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(halt)
	return ch, halt
}

// note reports msg on fails unless it is full, so that a goroutine that
// keeps failing never blocks.
func note(fails chan<- string, msg string) {
	select {
	case fails <- msg:
	default:
	}
}
