package host

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/internal/transport"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/goiwarp/iwarp/verbs"
	"github.com/stretchr/testify/require"
)

// raw sends a command that fill builds in slot 0 of q, with inCap octets
// of in-capsule data (fill writes them after the SQE), and returns the
// response's status and result.
func raw(t *testing.T, q *queue, fill func(c nvme.Command, data []byte) int) (nvme.Status, uint64) {
	t.Helper()
	ctx := testCtx(t)
	i, err := q.acquire(ctx)
	require.NoError(t, err)
	c := q.cmd(i)
	inCap := fill(c, q.slots[i].capsule[nvme.CommandSize:])
	if sgl := c.SGL(); sgl.Keyed() && sgl.Key() == 0 && sgl.Length() > 0 {
		// Data: the slot's buffer.
		mr := q.slots[i].mr
		sgl.SetKeyed(mr.Addr(), sgl.Length(), mr.RKey(), sgl.Invalidate())
	}
	require.NoError(t, q.submit(i, inCap))
	require.NoError(t, q.wait(ctx, i))
	s := &q.slots[i]
	q.releaseSlot(i)
	return s.st, s.res
}

// rawQueue dials a queue without Connect.
func rawQueue(t *testing.T, addr string, qid uint16, depth, sqsize int) *queue {
	t.Helper()
	dev, err := verbs.Open(verbs.DeviceAttr{MaxInline: nvme.CommandSize + 4096})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	q, err := dialQueue(testCtx(t), dev, queueConfig{qid: qid, depth: depth, sqsize: sqsize, inCap: 4096, maxData: transport.DefaultMaxTransfer,
		network: "tcp", addr: addr})
	require.NoError(t, err)
	t.Cleanup(func() { q.close(context.Background(), false) })
	return q
}

func rw(op uint8, nsid uint32, slba uint64, nlb uint16, sglLen uint32) func(nvme.Command, []byte) int {
	return func(c nvme.Command, _ []byte) int {
		nvme.NewRW(c, op, 0, nsid, slba, nlb)
		c.SGL().SetKeyed(0, sglLen, 0, false)
		return 0
	}
}

// Bad commands from a connected host get the status the spec prescribes,
// and the queue goes on serving.
func TestHostileCommands(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	io, adm, ctrlID := c.io[0], c.admin, c.ID
	const blocks = (1 << 20) / 512
	for _, tc := range []struct {
		name string
		q    *queue
		fill func(nvme.Command, []byte) int
		want nvme.Status
	}{
		{"read beyond the end", io, rw(nvme.IORead, 1, blocks-1, 1, 1024), nvme.StatusLBARange | nvme.DNR},
		{"write beyond the end", io, rw(nvme.IOWrite, 1, blocks, 0, 512), nvme.StatusLBARange | nvme.DNR},
		{"LBA wraps", io, rw(nvme.IORead, 1, 1<<64-1, 1, 1024), nvme.StatusLBARange | nvme.DNR},
		{"namespace 2 is inactive (NSID 2 is valid: NN is 1024)", io, rw(nvme.IORead, 2, 0, 0, 512), nvme.StatusInvalidField | nvme.DNR},
		{"namespace 1025 is beyond NN", io, rw(nvme.IORead, 1025, 0, 0, 512), nvme.StatusInvalidNamespace | nvme.DNR},
		{"Flush of an inactive namespace", io, func(c nvme.Command, _ []byte) int { nvme.NewAdmin(c, nvme.IOFlush, 0, 2, 0, 0); return 0 }, nvme.StatusInvalidField | nvme.DNR},
		{"namespace 0", io, rw(nvme.IOWrite, 0, 0, 0, 512), nvme.StatusInvalidNamespace | nvme.DNR},
		{"SGL shorter than the blocks", io, rw(nvme.IORead, 1, 0, 1, 512), nvme.StatusSGLInvalidData | nvme.DNR},
		{"SGL longer than the blocks", io, rw(nvme.IOWrite, 1, 0, 0, 4096), nvme.StatusSGLInvalidData | nvme.DNR},
		{"beyond MDTS", io, rw(nvme.IORead, 1, 0, 511, 256<<10), nvme.StatusInvalidField | nvme.DNR},
		{"SGL segment descriptor", io, func(c nvme.Command, _ []byte) int {
			nvme.NewRW(c, nvme.IORead, 0, 1, 0, 0)
			c.SGL()[15] = 0x20
			return 0
		}, nvme.StatusSGLInvalidType | nvme.DNR},
		{"keyed SGL, offset subtype", io, func(c nvme.Command, _ []byte) int {
			nvme.NewRW(c, nvme.IORead, 0, 1, 0, 0)
			c.SGL().SetKeyed(0, 512, 1, false)
			c.SGL()[15] = 0x41
			return 0
		}, nvme.StatusSGLInvalidType | nvme.DNR},
		{"in-capsule data for a Read", io, func(c nvme.Command, d []byte) int {
			nvme.NewRW(c, nvme.IORead, 0, 1, 0, 0)
			c.SGL().SetInCapsule(0, 512)
			return 512
		}, nvme.StatusInvalidField | nvme.DNR},
		{"in-capsule offset beyond the data", io, func(c nvme.Command, d []byte) int {
			nvme.NewRW(c, nvme.IOWrite, 0, 1, 0, 0)
			c.SGL().SetInCapsule(600, 512)
			return 512
		}, nvme.StatusSGLInvalidOffset | nvme.DNR},
		{"in-capsule length beyond the data", io, func(c nvme.Command, d []byte) int {
			nvme.NewRW(c, nvme.IOWrite, 0, 1, 0, 0)
			c.SGL().SetInCapsule(0, 512)
			return 100
		}, nvme.StatusSGLInvalidData | nvme.DNR},
		{"unknown I/O opcode", io, func(c nvme.Command, _ []byte) int { nvme.NewAdmin(c, 0x7e, 0, 1, 0, 0); return 0 }, nvme.StatusInvalidOpcode | nvme.DNR},
		{"admin opcode on an I/O queue", io, func(c nvme.Command, _ []byte) int { nvme.NewAdmin(c, nvme.AdminIdentify, 0, 0, 1, 0); return 0 }, nvme.StatusInvalidOpcode | nvme.DNR},
		{"Property Get on an I/O queue", io, func(c nvme.Command, _ []byte) int { nvme.NewPropertyGet(c, 0, nvme.PropCAP, 8); return 0 }, nvme.StatusInvalidOpcode | nvme.DNR},
		{"Connect again", io, func(c nvme.Command, d []byte) int {
			nvme.NewConnect(c, 0, 1, uint16(io.sqsize-1), 0)
			nvme.ConnectData{CntlID: ctrlID}.Append(d[:0])
			c.SGL().SetInCapsule(0, 1024)
			return 1024
		}, nvme.StatusCommandSequenceError | nvme.DNR},
		{"unknown admin opcode", adm, func(c nvme.Command, _ []byte) int { nvme.NewAdmin(c, 0x7e, 0, 0, 0, 0); return 0 }, nvme.StatusInvalidOpcode | nvme.DNR},
		{"unknown Fabrics command", adm, func(c nvme.Command, _ []byte) int { nvme.NewPropertyGet(c, 0, 0, 4); c.SetFCType(0x7); return 0 }, nvme.StatusInvalidOpcode | nvme.DNR},
		{"Property Get of an unknown register", adm, func(c nvme.Command, _ []byte) int { nvme.NewPropertyGet(c, 0, 0x30, 4); return 0 }, nvme.StatusInvalidField | nvme.DNR},
		{"Property Get of CAP as 4 octets", adm, func(c nvme.Command, _ []byte) int { nvme.NewPropertyGet(c, 0, nvme.PropCAP, 4); return 0 }, nvme.StatusInvalidField | nvme.DNR},
		{"Property Set of CSTS", adm, func(c nvme.Command, _ []byte) int { nvme.NewPropertySet(c, 0, nvme.PropCSTS, 1); return 0 }, nvme.StatusInvalidField | nvme.DNR},
		{"Identify CNS 6 for ZNS", adm, func(c nvme.Command, _ []byte) int {
			nvme.NewAdmin(c, nvme.AdminIdentify, 0, 0, nvme.CNSIOCtrlCSI, 2<<24)
			c.SGL().SetKeyed(0, 4096, 0, false)
			return 0
		}, nvme.StatusInvalidField | nvme.DNR},
		{"Identify with a short SGL", adm, func(c nvme.Command, _ []byte) int {
			nvme.NewAdmin(c, nvme.AdminIdentify, 0, 0, nvme.CNSController, 0)
			c.SGL().SetKeyed(0, 512, 0, false)
			return 0
		}, nvme.StatusSGLInvalidData | nvme.DNR},
		{"Identify namespace 0xffffffff", adm, func(c nvme.Command, _ []byte) int {
			nvme.NewAdmin(c, nvme.AdminIdentify, 0, 0xffffffff, nvme.CNSNamespace, 0)
			c.SGL().SetKeyed(0, 4096, 0, false)
			return 0
		}, nvme.StatusInvalidNamespace | nvme.DNR},
		{"unknown log page", adm, func(c nvme.Command, _ []byte) int {
			nvme.NewAdmin(c, nvme.AdminGetLogPage, 0, 0, 0x42|127<<16, 0)
			c.SGL().SetKeyed(0, 512, 0, false)
			return 0
		}, nvme.StatusInvalidLogPage | nvme.DNR},
		{"a namespace's SMART log (LPA bit 0 clear)", adm, func(c nvme.Command, _ []byte) int {
			nvme.NewAdmin(c, nvme.AdminGetLogPage, 0, 1, nvme.LogSMART|127<<16, 0)
			c.SGL().SetKeyed(0, 512, 0, false)
			return 0
		}, nvme.StatusInvalidField | nvme.DNR},
		{"log page beyond MDTS", adm, func(c nvme.Command, _ []byte) int {
			nvme.NewAdmin(c, nvme.AdminGetLogPage, 0, 0, nvme.LogSMART|0xffff<<16, 0xffff)
			return 0
		}, nvme.StatusInvalidField | nvme.DNR},
		{"log offset beyond the log", adm, func(c nvme.Command, _ []byte) int {
			nvme.NewAdmin(c, nvme.AdminGetLogPage, 0, 0, nvme.LogSMART|127<<16, 0)
			c.SGL().SetKeyed(0, 512, 0, false)
			c.SetCDW(12, 4096)
			return 0
		}, nvme.StatusInvalidField | nvme.DNR},
		{"unknown feature", adm, func(c nvme.Command, _ []byte) int { nvme.NewAdmin(c, nvme.AdminSetFeatures, 0, 0, 0x55, 0); return 0 }, nvme.StatusInvalidField | nvme.DNR},
		{"saving a feature", adm, func(c nvme.Command, _ []byte) int {
			nvme.NewAdmin(c, nvme.AdminSetFeatures, 0, 0, nvme.FeatKATO|1<<31, 0)
			return 0
		}, nvme.StatusFeatureNotSaveable | nvme.DNR},
		{"Number of Queues 65536", adm, func(c nvme.Command, _ []byte) int {
			nvme.NewAdmin(c, nvme.AdminSetFeatures, 0, 0, nvme.FeatNumQueues, 0xffff)
			return 0
		}, nvme.StatusInvalidField | nvme.DNR},
	} {
		st, _ := raw(t, tc.q, tc.fill)
		require.Equal(t, tc.want, st, "%s: got %v", tc.name, st)
	}
	// The queues still serve.
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	w := make([]byte, 4096)
	fill(w, 1)
	_, err = ns.WriteAt(w, 0)
	require.NoError(t, err)
	r := make([]byte, 4096)
	_, err = ns.ReadAt(r, 0)
	require.NoError(t, err)
	require.Equal(t, w, r)
	// And the host API maps statuses to errors.
	_, err = ns.ReadAt(make([]byte, 512), ns.Size()-512)
	require.NoError(t, err)
	var se *nvme.StatusError
	_, err = c.io[0].run(testCtx(t), mustAcquire(t, c.io[0], func(cm nvme.Command) { nvme.NewRW(cm, nvme.IORead, 0, 1, blocks, 0) }), 0, "Read")
	require.ErrorAs(t, err, &se)
	require.Equal(t, nvme.StatusLBARange|nvme.DNR, se.Status)
	require.NoError(t, c.Err())
}

func mustAcquire(t *testing.T, q *queue, fill func(nvme.Command)) int {
	i, err := q.acquire(testCtx(t))
	require.NoError(t, err)
	c := q.cmd(i)
	fill(c)
	q.keyed(i, c, 512)
	return i
}

// Commands on queues that have not connected, Connects that are wrong,
// and admin commands before the controller is enabled.
func TestHostileConnect(t *testing.T) {
	checkRoutines(t)
	tg, sub, addr := newTestTarget(t, 1<<20, target.Config{MaxIOQueues: 2})
	hostNQN := "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555555"
	connect := func(qid uint16, cntlid uint16, subNQN, host string) func(nvme.Command, []byte) int {
		return func(c nvme.Command, d []byte) int {
			nvme.NewConnect(c, 0, qid, 31, 0)
			nvme.ConnectData{CntlID: cntlid, SubNQN: subNQN, HostNQN: host}.Append(d[:0])
			c.SGL().SetInCapsule(0, 1024)
			return 1024
		}
	}
	q0 := rawQueue(t, addr, 0, 32, 0)
	st, _ := raw(t, q0, rw(nvme.IORead, 1, 0, 0, 512))
	require.Equal(t, nvme.StatusCommandSequenceError|nvme.DNR, st, "I/O command before Connect")
	st, _ = raw(t, q0, func(c nvme.Command, _ []byte) int { nvme.NewPropertyGet(c, 0, nvme.PropCAP, 8); return 0 })
	require.Equal(t, nvme.StatusCommandSequenceError|nvme.DNR, st, "Property Get before Connect")
	st, res := raw(t, q0, connect(0, nvme.DynamicCntlID, "nqn.2024-01.io.goiwarp:nobody", hostNQN))
	require.Equal(t, nvme.StatusConnectInvalidParm|nvme.DNR, st, "unknown subsystem")
	require.EqualValues(t, 1<<16|256, res, "IATTR data, IPO 256 (SUBNQN)")
	st, res = raw(t, q0, connect(0, 5, testNQN, hostNQN))
	require.Equal(t, nvme.StatusConnectInvalidParm|nvme.DNR, st, "a static controller ID")
	require.EqualValues(t, 1<<16|16, res)
	st, res = raw(t, q0, connect(0, nvme.DynamicCntlID, testNQN, ""))
	require.Equal(t, nvme.StatusConnectInvalidParm|nvme.DNR, st, "an empty host NQN")
	require.EqualValues(t, 1<<16|512, res)
	st, res = raw(t, q0, func(c nvme.Command, d []byte) int {
		connect(0, nvme.DynamicCntlID, testNQN, hostNQN)(c, d)
		binary.LittleEndian.PutUint16(c[44:], 63)
		return 1024
	})
	require.Equal(t, nvme.StatusConnectInvalidParm|nvme.DNR, st, "SQSIZE unlike HSQSIZE")
	require.EqualValues(t, 44, res)
	st, _ = raw(t, q0, func(c nvme.Command, d []byte) int {
		connect(0, nvme.DynamicCntlID, testNQN, hostNQN)(c, d)
		c[40] = 1
		return 1024
	})
	require.Equal(t, nvme.StatusConnectIncompatFmt|nvme.DNR, st, "record format 1")
	// An access list without this host.
	sub.AllowHost("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000000")
	st, _ = raw(t, q0, connect(0, nvme.DynamicCntlID, testNQN, hostNQN))
	require.Equal(t, nvme.StatusConnectInvalidHost|nvme.DNR, st)
	sub.AllowHost(hostNQN)
	// Now a good one: controller ID in the result.
	st, res = raw(t, q0, connect(0, nvme.DynamicCntlID, testNQN, hostNQN))
	require.Equal(t, nvme.StatusSuccess, st)
	cntlid := uint16(res)
	require.Contains(t, tg.Controllers(), cntlid)
	// Admin commands before CC.EN.
	st, _ = raw(t, q0, func(c nvme.Command, _ []byte) int { nvme.NewAdmin(c, nvme.AdminKeepAlive, 0, 0, 0, 0); return 0 })
	require.Equal(t, nvme.StatusCommandSequenceError|nvme.DNR, st, "Keep Alive before CC.EN")
	// I/O queue before CC.EN.
	q1 := rawQueue(t, addr, 1, 32, 0)
	st, _ = raw(t, q1, connect(1, cntlid, testNQN, hostNQN))
	require.Equal(t, nvme.StatusCommandSequenceError|nvme.DNR, st, "I/O queue Connect before CC.EN")
	st, _ = raw(t, q0, func(c nvme.Command, _ []byte) int {
		nvme.NewPropertySet(c, 0, nvme.PropCC, nvme.CCEnable|6<<16|4<<20)
		return 0
	})
	require.Equal(t, nvme.StatusSuccess, st)
	st, res = raw(t, q0, func(c nvme.Command, _ []byte) int { nvme.NewPropertyGet(c, 0, nvme.PropCSTS, 4); return 0 })
	require.Equal(t, nvme.StatusSuccess, st)
	require.EqualValues(t, nvme.CSTSReady, res)
	st, res = raw(t, q1, connect(1, cntlid+1, testNQN, hostNQN))
	require.Equal(t, nvme.StatusConnectInvalidParm|nvme.DNR, st, "an I/O queue for another controller ID")
	require.EqualValues(t, 1<<16|16, res)
	st, _ = raw(t, q1, connect(1, cntlid, testNQN, "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000000"))
	require.Equal(t, nvme.StatusConnectInvalidParm|nvme.DNR, st, "an I/O queue from another host")
	other, perr := tg.ListenPort(testCtx(t), "tcp", "127.0.0.1:0", target.PortConfig{Subsystems: []string{testNQN}})
	require.NoError(t, perr)
	q1o := rawQueue(t, other.Addr().String(), 1, 32, 0)
	st, res = raw(t, q1o, connect(1, cntlid, testNQN, hostNQN))
	require.Equal(t, nvme.StatusConnectInvalidParm|nvme.DNR, st, "an I/O queue through another port than the admin queue's")
	require.EqualValues(t, 1<<16|16, res)
	st, _ = raw(t, q1, connect(1, cntlid, testNQN, hostNQN))
	require.Equal(t, nvme.StatusSuccess, st)
	st, _ = raw(t, q1, rw(nvme.IORead, 1, 0, 0, 512))
	require.Equal(t, nvme.StatusSuccess, st)
	// A second queue 1, and a queue beyond MaxIOQueues.
	q1b := rawQueue(t, addr, 1, 32, 0)
	st, res = raw(t, q1b, connect(1, cntlid, testNQN, hostNQN))
	require.Equal(t, nvme.StatusConnectInvalidParm|nvme.DNR, st, "queue 1 twice")
	require.EqualValues(t, 42, res)
	// The CM request itself: queue 3 is beyond MaxIOQueues, HSQSIZE 0.
	dev, err := verbs.Open(verbs.DeviceAttr{MaxInline: 4160})
	require.NoError(t, err)
	defer dev.Close()
	_, err = dialQueue(testCtx(t), dev, queueConfig{qid: 3, depth: 4, maxData: 4096, network: "tcp", addr: addr})
	require.Error(t, err)
	require.Contains(t, err.Error(), "reject")
	_, err = dialQueue(testCtx(t), dev, queueConfig{qid: 1, depth: 4, sqsize: 1, maxData: 4096, network: "tcp", addr: addr})
	require.Error(t, err)
}

// A host that overruns its SQ gets Command Sequence Error for the extra
// commands, and Asynchronous Event Requests beyond AERL+1 their own status.
func TestHostileOverflow(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	// Five AERs: four held, the fifth refused.
	q := c.admin
	var held []int
	for range int(c.Info.AERL) + 1 {
		i, err := q.acquire(testCtx(t))
		require.NoError(t, err)
		nvme.NewAdmin(q.cmd(i), nvme.AdminAER, 0, 0, 0, 0)
		require.NoError(t, q.submit(i, 0))
		held = append(held, i)
	}
	st, _ := raw(t, q, func(c nvme.Command, _ []byte) int { nvme.NewAdmin(c, nvme.AdminAER, 0, 0, 0, 0); return 0 })
	require.Equal(t, nvme.StatusAERLimitExceeded|nvme.DNR, st)
	for _, i := range held {
		select {
		case <-q.slots[i].done:
			t.Fatal("an AER completed")
		default:
		}
	}
	// An admin queue that announces 4 entries (its own controller) but
	// has 8 slots and receive buffers.
	ctrlQ := rawQueue(t, addr, 0, 8, 4)
	st, _ = raw(t, ctrlQ, func(c nvme.Command, d []byte) int {
		nvme.NewConnect(c, 0, 0, 3, 0)
		nvme.ConnectData{CntlID: nvme.DynamicCntlID, SubNQN: testNQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555555"}.Append(d[:0])
		c.SGL().SetInCapsule(0, 1024)
		return 1024
	})
	require.Equal(t, nvme.StatusSuccess, st)
	st, _ = raw(t, ctrlQ, func(c nvme.Command, _ []byte) int {
		nvme.NewPropertySet(c, 0, nvme.PropCC, nvme.CCEnable|6<<16|4<<20)
		return 0
	})
	require.Equal(t, nvme.StatusSuccess, st)
	// Four AERs fill the SQ of 4 (they are held), so anything more overflows.
	for range 4 {
		i, err := ctrlQ.acquire(testCtx(t))
		require.NoError(t, err)
		nvme.NewAdmin(ctrlQ.cmd(i), nvme.AdminAER, 0, 0, 0, 0)
		require.NoError(t, ctrlQ.submit(i, 0))
	}
	st, _ = raw(t, ctrlQ, func(c nvme.Command, _ []byte) int { nvme.NewAdmin(c, nvme.AdminKeepAlive, 0, 0, 0, 0); return 0 })
	require.Equal(t, nvme.StatusCommandSequenceError|nvme.DNR, st, "a fifth command on an SQ of 4")
	require.NoError(t, c.Err())
}

// A keyed SGL with a key the host never registered: the target's RDMA Read
// draws a Terminate from the host, which ends that I/O queue only; the
// controller and its other queue go on.
func TestHostileBadKey(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 2})
	bad := c.io[0]
	i, err := bad.acquire(testCtx(t))
	require.NoError(t, err)
	cmd := bad.cmd(i)
	nvme.NewRW(cmd, nvme.IOWrite, 0, 1, 0, 7)
	cmd.SGL().SetKeyed(bad.slots[i].mr.Addr(), 4096, bad.slots[i].mr.RKey()^0x5a5a5a00, false)
	require.NoError(t, bad.submit(i, 0))
	err = bad.wait(testCtx(t), i)
	require.ErrorIs(t, err, ErrQueueDead)
	t.Logf("queue 1: %v", err)
	// Queue 2 and the admin queue still work.
	buf := make([]byte, nvme.IdentifySize)
	require.NoError(t, c.Identify(testCtx(t), nvme.CNSController, 0, buf))
	st, _ := raw(t, c.io[1], rw(nvme.IORead, 1, 0, 7, 4096))
	require.Equal(t, nvme.StatusSuccess, st)
}

// A capsule shorter than an SQE ends its queue; a lost admin queue ends
// the controller with all its queues; another host's controller is not
// touched.
func TestHostileBrokenConnections(t *testing.T) {
	checkRoutines(t)
	tg, _, addr := newTestTarget(t, 1<<20, target.Config{})
	a := connectHost(t, addr, testNQN, Config{IOQueues: 2})
	b := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	// A 10-octet capsule on a's queue 1.
	q := a.io[0]
	_, err := q.qp.PostSend(verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: make([]byte, 10)})
	require.NoError(t, err)
	select {
	case <-q.dead:
	case <-time.After(10 * time.Second):
		t.Fatal("the queue lives on after a short capsule")
	}
	st, _ := raw(t, a.io[1], rw(nvme.IORead, 1, 0, 0, 512))
	require.Equal(t, nvme.StatusSuccess, st, "a's other queue")
	// a's admin queue reset: the target ends a's controller.
	id := a.ID
	a.admin.qp.Abort()
	select {
	case <-a.io[1].dead:
	case <-time.After(10 * time.Second):
		t.Fatal("an I/O queue outlives its controller's admin queue")
	}
	require.Eventually(t, func() bool { return !slices.Contains(tg.Controllers(), id) }, 5*time.Second, 10*time.Millisecond)
	// b is untouched.
	nb, err := b.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	_, err = nb.ReadAt(make([]byte, 4096), 0)
	require.NoError(t, err)
	require.NoError(t, b.Err())
}

// A host that stops sending anything loses its controller after KATO.
func TestKeepAliveExpiry(t *testing.T) {
	checkRoutines(t)
	tg, _, addr := newTestTarget(t, 1<<20, target.Config{})
	// Keep Alive goes every KATO/2 and the target ends a controller that
	// hears nothing for KATO: a KATO of a second leaves room for a loaded
	// machine.
	const kato = time.Second
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1, KATO: kato})
	// A host that keeps the controller alive keeps it.
	time.Sleep(5 * kato / 2)
	require.Contains(t, tg.Controllers(), c.ID)
	require.NoError(t, c.Err())
	// Silence the host's keep-alive.
	close(c.kaStop)
	c.kaWG.Wait()
	c.kaStop = make(chan struct{})
	start := time.Now()
	select {
	case <-c.admin.dead:
	case <-time.After(10 * kato):
		t.Fatal("the controller outlived KATO by seconds")
	}
	took := time.Since(start)
	require.Less(t, took, 3*kato)
	require.NotContains(t, tg.Controllers(), c.ID)
	select {
	case <-c.io[0].dead:
	case <-time.After(5 * time.Second):
		t.Fatal("the I/O queue outlived its controller")
	}
	require.True(t, errors.Is(c.Err(), ErrQueueDead))
}

// Send with Invalidate: a host that registers its buffer by fast
// registration and asks for invalidation gets the key invalidated with the
// response, as the Linux host does.
func TestSendWithInvalidate(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	q := c.admin
	mr, err := q.pd.AllocMR()
	require.NoError(t, err)
	defer mr.Dereg()
	buf := make([]byte, nvme.IdentifySize)
	key, err := q.qp.PostRegMR(77, verbs.Signaled, mr, buf, verbs.LocalWrite|verbs.RemoteWrite)
	require.NoError(t, err)
	require.Eventually(t, mr.Valid, 5*time.Second, time.Millisecond)
	require.Equal(t, key, mr.RKey())
	i, err := q.acquire(testCtx(t))
	require.NoError(t, err)
	cmd := q.cmd(i)
	nvme.NewAdmin(cmd, nvme.AdminIdentify, 0, 0, nvme.CNSController, 0)
	cmd.SGL().SetKeyed(mr.Addr(), nvme.IdentifySize, key, true)
	require.NoError(t, q.submit(i, 0))
	require.NoError(t, q.wait(testCtx(t), i))
	s := &q.slots[i]
	require.Equal(t, nvme.StatusSuccess, s.st)
	require.NotZero(t, s.flags&verbs.WithInv, "the response came by Send with Invalidate")
	require.Equal(t, key, s.invKey)
	require.False(t, mr.Valid(), "the key is invalid")
	q.releaseSlot(i)
	ci, err := nvme.ParseControllerInfo(buf)
	require.NoError(t, err)
	require.Equal(t, c.ID, ci.CntlID)
	// A command without data and a zero-length keyed SGL gets a plain Send,
	// even with the invalidate subtype.
	i, err = q.acquire(testCtx(t))
	require.NoError(t, err)
	cmd = q.cmd(i)
	nvme.NewAdmin(cmd, nvme.AdminKeepAlive, 0, 0, 0, 0)
	cmd.SGL().SetKeyed(0, 0, 0, true)
	require.NoError(t, q.submit(i, 0))
	require.NoError(t, q.wait(testCtx(t), i))
	require.Zero(t, q.slots[i].flags&verbs.WithInv)
	q.releaseSlot(i)
	// A Set Features whose data the target ignores (the SGL is longer
	// than the none it moves) still has its key invalidated.
	key, err = q.qp.PostRegMR(78, verbs.Signaled, mr, buf[:512], verbs.LocalWrite|verbs.RemoteWrite)
	require.NoError(t, err)
	require.Eventually(t, mr.Valid, 5*time.Second, time.Millisecond)
	i, err = q.acquire(testCtx(t))
	require.NoError(t, err)
	cmd = q.cmd(i)
	nvme.NewAdmin(cmd, nvme.AdminSetFeatures, 0, 0, nvme.FeatKATO, 30000)
	cmd.SGL().SetKeyed(mr.Addr(), 512, key, true)
	require.NoError(t, q.submit(i, 0))
	require.NoError(t, q.wait(testCtx(t), i))
	require.Equal(t, nvme.StatusSuccess, q.slots[i].st)
	require.NotZero(t, q.slots[i].flags&verbs.WithInv, "Send with Invalidate for the data the command did not use")
	require.Equal(t, key, q.slots[i].invKey)
	require.False(t, mr.Valid())
	q.releaseSlot(i)
}
