package host

import (
	"context"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// fakeTarget is a scripted NVMe/RDMA target for the host's error paths: it
// accepts one queue and hands each command to handle on its receive
// goroutine, which answers however the test says (any capsule, twice, not
// at all).
type fakeTarget struct {
	qp   *verbs.QP
	done chan struct{}
}

// answer sends a response capsule for cid.
func (f *fakeTarget) answer(cid uint16, st nvme.Status) {
	f.qp.PostSend(verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: nvme.AppendCompletion(nil, 0, 0, 1, cid, st)})
}

// newFakeTarget listens on loopback and returns the address.
func newFakeTarget(t *testing.T, handle func(f *fakeTarget, cmd nvme.Command)) string {
	t.Helper()
	dev, err := verbs.Open(verbs.DeviceAttr{MaxInline: nvme.CommandSize + 4096})
	require.NoError(t, err)
	ln, err := dev.Listen(context.Background(), "tcp", "127.0.0.1:0", verbs.ConnConfig{})
	require.NoError(t, err)
	f := &fakeTarget{done: make(chan struct{})}
	t.Cleanup(func() { ln.Close(); dev.Close(); <-f.done })
	go func() {
		defer close(f.done)
		req, err := ln.GetRequest(context.Background())
		if err != nil {
			return
		}
		pd := dev.AllocPD()
		cq, _ := dev.CreateCQ(256)
		if f.qp, err = pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 64, MaxInline: 64}}); err != nil {
			return
		}
		const size = nvme.CommandSize + 4096
		buf := make([]byte, 64*size)
		mr, _ := pd.RegMR(buf, verbs.LocalWrite)
		for i := range 64 {
			f.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{mr.SGE(i*size, size)}})
		}
		if req.Accept(context.Background(), f.qp, nvme.CMReply{CRQSize: 64}.Append(nil)) != nil {
			return
		}
		wcs := make([]verbs.WC, 16)
		for {
			n, err := cq.PollWait(context.Background(), wcs)
			if err != nil {
				return
			}
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.Success {
					return
				}
				if wc.Opcode == verbs.WCRecv {
					i := int(wc.ID)
					cmd := nvme.Command(append([]byte(nil), buf[i*size:i*size+int(wc.ByteLen)]...))
					f.qp.PostRecv(verbs.RecvWR{ID: wc.ID, SGL: []verbs.SGE{mr.SGE(i*size, size)}})
					handle(f, cmd)
				}
			}
		}
	}()
	return ln.Addr().String()
}
