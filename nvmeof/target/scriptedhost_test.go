package target

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/internal/transport"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// scriptedQueue is one NVMe/RDMA queue that a test drives by hand, the
// mirror of the host package's fakeTarget: it sends the capsules the test
// builds (a hostile host's, or commands it holds, as Asynchronous Event
// Requests) and records each response, with none of a host's checks. The
// CID of slot i's command is i.
type scriptedQueue struct {
	qp     *verbs.QP
	cq     *verbs.CQ
	slots  []scriptedSlot
	free   chan int
	resp   []byte
	respMR *verbs.MR
	dead   chan struct{} // closed when the connection has ended
}

// scriptedSlot is a command slot: its capsule, a data buffer that keyed
// SGLs of key 0 are pointed at, and its response once done is signalled.
type scriptedSlot struct {
	capsule []byte
	buf     []byte
	mr      *verbs.MR
	done    chan struct{}
	st      nvme.Status
	res     uint64
}

var errScriptedDead = errors.New("scripted queue: connection ended")

// rawQueue dials a queue of depth slots that announces sqsize SQ entries
// (0: depth), and sends nothing: not even the Fabrics Connect.
func rawQueue(t *testing.T, addr string, qid uint16, depth, sqsize int) *scriptedQueue {
	t.Helper()
	if sqsize == 0 {
		sqsize = depth
	}
	dev, err := verbs.Open(verbs.DeviceAttr{MaxInline: nvme.CommandSize + 4096})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(4*depth + 16)
	require.NoError(t, err)
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, ORD: -1,
		Cap: verbs.QPCap{MaxSendWR: 4*depth + 16, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: nvme.CommandSize + 4096}})
	require.NoError(t, err)
	q := &scriptedQueue{qp: qp, cq: cq, slots: make([]scriptedSlot, depth), free: make(chan int, depth),
		resp: make([]byte, depth*nvme.CompletionSize), dead: make(chan struct{})}
	q.respMR, err = pd.RegMR(q.resp, verbs.LocalWrite)
	require.NoError(t, err)
	for i := range q.slots {
		s := &q.slots[i]
		s.capsule = make([]byte, nvme.CommandSize+4096)
		s.buf = make([]byte, transport.DefaultMaxTransfer)
		s.mr, err = pd.RegMR(s.buf, verbs.LocalWrite|verbs.RemoteWrite|verbs.RemoteRead)
		require.NoError(t, err)
		s.done = make(chan struct{}, 1)
		q.free <- i
		require.NoError(t, q.repost(i))
	}
	conn := verbs.ConnConfig{PrivateData: nvme.CMRequest{QID: qid, HRQSize: uint16(depth), HSQSize: uint16(sqsize - 1)}.Append(nil)}
	require.NoError(t, qp.Dial(testCtx(t), "tcp", addr, conn))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-qp.Done():
		case <-ctx.Done():
		}
		cancel()
	}()
	go q.receive(ctx)
	t.Cleanup(func() { qp.Close(); cancel(); <-q.dead })
	return q
}

func (q *scriptedQueue) repost(i int) error {
	_, err := q.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{q.respMR.SGE(i*nvme.CompletionSize, nvme.CompletionSize)}})
	return err
}

// receive hands each response to its slot until the connection ends.
func (q *scriptedQueue) receive(ctx context.Context) {
	defer close(q.dead)
	wcs := make([]verbs.WC, 16)
	for {
		n, err := q.cq.PollWait(ctx, wcs)
		if err != nil {
			return
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.Success {
				return
			}
			if wc.Opcode != verbs.WCRecv {
				continue
			}
			ri := int(wc.ID)
			cqe, ok := nvme.ParseCompletion(q.resp[ri*nvme.CompletionSize : ri*nvme.CompletionSize+int(wc.ByteLen)])
			if !ok || int(cqe.CID()) >= len(q.slots) {
				return
			}
			s := &q.slots[cqe.CID()]
			s.st, s.res = cqe.Status(), cqe.Result()
			if q.repost(ri) != nil {
				return
			}
			s.done <- struct{}{}
		}
	}
}

// acquire takes a free slot.
func (q *scriptedQueue) acquire(ctx context.Context) (int, error) {
	select {
	case i := <-q.free:
		return i, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// releaseSlot gives slot i back.
func (q *scriptedQueue) releaseSlot(i int) { q.free <- i }

// cmd returns slot i's SQE, zeroed.
func (q *scriptedQueue) cmd(i int) nvme.Command {
	c := nvme.Command(q.slots[i].capsule[:nvme.CommandSize])
	clear(c)
	return c
}

// submit sends slot i's command with inCap octets of in-capsule data.
func (q *scriptedQueue) submit(i, inCap int) error {
	s := &q.slots[i]
	nvme.Command(s.capsule).SetCID(uint16(i))
	return transport.PostSend(q.qp, []verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: s.capsule[:nvme.CommandSize+inCap]}})
}

// exec sends a command that fill builds in a free slot (fill writes any
// in-capsule data after the SQE and returns its length; a keyed SGL of
// key 0 is pointed at the slot's buffer) and waits for its response.
func (q *scriptedQueue) exec(ctx context.Context, fill func(c nvme.Command, data []byte) int) (nvme.Status, uint64, error) {
	i, err := q.acquire(ctx)
	if err != nil {
		return 0, 0, err
	}
	c := q.cmd(i)
	s := &q.slots[i]
	inCap := fill(c, s.capsule[nvme.CommandSize:])
	if sgl := c.SGL(); sgl.Keyed() && sgl.Key() == 0 && sgl.Length() > 0 {
		sgl.SetKeyed(s.mr.Addr(), sgl.Length(), s.mr.RKey(), sgl.Invalidate())
	}
	if err := q.submit(i, inCap); err != nil {
		return 0, 0, err
	}
	select {
	case <-s.done:
	case <-q.dead:
		return 0, 0, errScriptedDead
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	st, res := s.st, s.res
	q.releaseSlot(i)
	return st, res, nil
}

// raw is exec that fails the test unless a response came.
func raw(t *testing.T, q *scriptedQueue, fill func(c nvme.Command, data []byte) int) (nvme.Status, uint64) {
	t.Helper()
	st, res, err := q.exec(testCtx(t), fill)
	require.NoError(t, err)
	return st, res
}

// scriptedAdmin dials an admin queue and brings up a controller on it:
// Connect (as hostNQN, with hostID), then CC.EN and CSTS.RDY.
func scriptedAdmin(t *testing.T, addr, subNQN, hostNQN string, hostID [16]byte) *scriptedQueue {
	t.Helper()
	q := rawQueue(t, addr, 0, 16, 0)
	st, _ := raw(t, q, func(c nvme.Command, d []byte) int {
		nvme.NewConnect(c, 0, 0, 15, 0)
		c.SGL().SetInCapsule(0, nvme.ConnectDataSize)
		nvme.ConnectData{HostID: hostID, CntlID: nvme.DynamicCntlID, SubNQN: subNQN, HostNQN: hostNQN}.Append(d[:0])
		return nvme.ConnectDataSize
	})
	require.Equal(t, nvme.StatusSuccess, st, "Connect")
	st, _ = raw(t, q, func(c nvme.Command, _ []byte) int {
		nvme.NewPropertySet(c, 0, nvme.PropCC, nvme.CCEnable|6<<16|4<<20)
		return 0
	})
	require.Equal(t, nvme.StatusSuccess, st, "CC.EN")
	require.Eventually(t, func() bool {
		st, csts := raw(t, q, func(c nvme.Command, _ []byte) int { nvme.NewPropertyGet(c, 0, nvme.PropCSTS, 4); return 0 })
		return st == nvme.StatusSuccess && csts&nvme.CSTSReady != 0
	}, 5*time.Second, 10*time.Millisecond, "CSTS.RDY")
	return q
}
