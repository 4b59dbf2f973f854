package host

import (
	"context"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/internal/golden"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// FuzzTargetCommands sends any capsule to a live target, on its admin
// queue or an I/O queue: every one is answered (with its CID) and both
// queues live on. Keyed descriptors are pointed at the host's buffer, and
// the commands that end a controller by design (Property Set: CC.EN=0 or
// shutdown; a short keep-alive timeout; held AERs) become Property Gets
// and Keep Alives; write protection until power cycle becomes write
// protection, which the next input can undo.
func FuzzTargetCommands(f *testing.F) {
	for _, s := range golden.Seeds(testNQN) {
		f.Add(byte(0), s)
		f.Add(byte(1), s)
	}
	tg, sub, addr := fuzzTarget(f)
	_ = tg
	c, err := Connect(context.Background(), "tcp", addr, testNQN, Config{IOQueues: 1, QueueDepth: 4, KATO: -1})
	require.NoError(f, err)
	defer c.Close()
	f.Fuzz(func(t *testing.T, which byte, b []byte) {
		if len(b) < nvme.CommandSize {
			return
		}
		// An input that write-protected a namespace would keep every
		// later one from the write path: the namespace is made writable
		// again (write protection until power cycle is set as plain write
		// protection below, so that this can).
		for _, id := range []uint32{1, 2} {
			if sub.Namespace(id).WriteProtected() {
				_, err := c.admin.adminCmd(context.Background(), func(cmd nvme.Command) {
					nvme.NewAdmin(cmd, nvme.AdminSetFeatures, 0, id, nvme.FeatWriteProtect, uint32(nvme.WPNone))
				}, 0, "", nil)
				require.NoError(t, err)
			}
		}
		q := c.admin
		if which&1 == 1 {
			q = c.io[0]
		}
		b = b[:min(len(b), nvme.CommandSize+q.inCap)]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		i, err := q.acquire(ctx)
		require.NoError(t, err)
		s := &q.slots[i]
		n := copy(s.capsule, b)
		cmd := nvme.Command(s.capsule[:nvme.CommandSize])
		switch {
		case cmd.IsFabrics() && cmd.FCType() == nvme.FabricsPropertySet:
			cmd.SetFCType(nvme.FabricsPropertyGet)
		case q.qid == 0 && (cmd.Opcode() == nvme.AdminAER || cmd.Opcode() == nvme.AdminSetFeatures && uint8(cmd.CDW(10)) == nvme.FeatKATO):
			cmd.SetOpcode(nvme.AdminKeepAlive)
		case q.qid == 0 && cmd.Opcode() == nvme.AdminSetFeatures && uint8(cmd.CDW(10)) == nvme.FeatWriteProtect &&
			nvme.WPState(cmd.CDW(11)&7) == nvme.WPUntilPowerCycle:
			cmd.SetCDW(11, uint32(nvme.WPOn))
		}
		if sgl := cmd.SGL(); sgl.Keyed() {
			sgl.SetKeyed(s.mr.Addr(), min(sgl.Length(), uint32(s.mr.Len())), s.mr.RKey(), false)
		}
		require.NoError(t, q.submit(i, n-nvme.CommandSize))
		require.NoError(t, q.wait(ctx, i), "the target did not answer")
		q.releaseSlot(i)
	})
	require.NoError(f, c.Err())
}

func fuzzTarget(f *testing.F) (*target.Target, *target.Subsystem, string) {
	sub, err := target.NewSubsystem(testNQN)
	require.NoError(f, err)
	_, err = sub.AddNamespace(target.NewMemBackend(1<<20), 512)
	require.NoError(f, err)
	// The second: reservations on, in ANA group 2 (non-optimized below).
	_, err = sub.AddNamespaceConfig(target.NewMemBackend(1<<20), target.NamespaceConfig{ID: 2, ANAGroup: 2, Reservations: true})
	require.NoError(f, err)
	tg, err := target.New(target.Config{}, sub)
	require.NoError(f, err)
	f.Cleanup(func() { tg.Close() })
	a, err := tg.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(f, err)
	require.NoError(f, tg.Ports()[0].SetANAState(2, nvme.ANANonOptimized))
	return tg, sub, a.String()
}
