package host

import (
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// Identify says what the target does: several controllers and ports on a
// subsystem with shared namespaces (Linux refuses a second controller of a
// subsystem whose CMIC says otherwise), traffic based keep alive and
// 128-bit host identifiers in CTRATT (bit 6 and bit 0; it was bit 2, NVM
// Sets), ANA reporting with the fields Linux's host sizes its ANA log by
// (MNAN must be 1 .. NN, or it fails the controller), and of the optional
// asynchronous events those it raises: Namespace Attribute and ANA Change
// Notices on an NVM controller (TestNamespaceAddedNotice, TestANAChange),
// Discovery Log Page Change Notices on discovery (TestDiscoveryChangeNotice).
func TestIdentifySaysWhatItDoes(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	a := connectHost(t, addr, testNQN, Config{})
	b := connectHost(t, addr, testNQN, Config{HostNQN: a.cfg.HostNQN, HostID: a.cfg.HostID}) // a second path
	require.NotEqual(t, a.ID, b.ID)
	require.EqualValues(t, 1<<3|3, b.Info.CMIC, "CMIC: ANA reporting, multi-port, multi-controller")
	require.EqualValues(t, 1<<6|1<<0, b.Info.CTRATT)
	require.EqualValues(t, 1<<11|1<<8, b.Info.OAES, "OAES: ANA Change and Namespace Attribute Notices")
	require.EqualValues(t, 0x1f, b.Info.ANACAP, "ANACAP: the five states")
	require.EqualValues(t, 10, b.Info.ANATT)
	require.EqualValues(t, nvme.MaxANAGroup, b.Info.ANAGRPMAX)
	require.EqualValues(t, nvme.MaxANAGroup, b.Info.NANAGRPID)
	require.EqualValues(t, b.Info.NN, b.Info.MNAN)
	require.NotZero(t, b.Info.MNAN)
	ns, err := b.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, ns.Info.NMIC, "NMIC: shared")
	require.EqualValues(t, 1, ns.Info.ANAGroup, "ANAGRPID: group 1 unless set")
	d := connectHost(t, addr, nvme.DiscoveryNQN, Config{})
	require.Zero(t, d.Info.CMIC)
	require.Zero(t, d.Info.ANACAP)
	require.EqualValues(t, uint32(1<<31), d.Info.OAES, "OAES: Discovery Log Page Change Notices")
}

// Fused commands and data not described by SGLs (PSDT other than 01b) are
// refused, as Linux's nvmet does; they ran as plain commands.
func TestTargetRefusesFlags(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	for _, flags := range []uint8{nvme.FlagSGL | 1, nvme.FlagSGL | 2, 0x00, 0x80, 0xc0} {
		st, _ := raw(t, c.io[0], func(cm nvme.Command, _ []byte) int {
			rw(nvme.IOWrite, 1, 0, 0, 512)(cm, nil)
			cm.SetFlags(flags)
			return 0
		})
		require.Equal(t, nvme.StatusInvalidField|nvme.DNR, st, "flags %#x", flags)
	}
	st, _ := raw(t, c.io[0], rw(nvme.IOWrite, 1, 0, 0, 512))
	require.Equal(t, nvme.StatusSuccess, st, "the same Write with PSDT 01b")
}

// Number of Queues once I/O queues exist is a Command Sequence Error
// (NVMe base); it lowered the count under the queues.
func TestTargetNumQueuesAfterIOQueues(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 2})
	st, _ := raw(t, c.admin, func(cm nvme.Command, _ []byte) int {
		nvme.NewAdmin(cm, nvme.AdminSetFeatures, 0, 0, nvme.FeatNumQueues, 0)
		return 0
	})
	require.Equal(t, nvme.StatusCommandSequenceError|nvme.DNR, st)
}

// A lower KATO set by Set Features takes effect at once: the timer checked
// at the old KATO's pace until its next tick (10 s here).
func TestTargetKATOLowered(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{KATO: 40 * time.Second})
	c.stopKeepAlive() // a silent host from here
	_, err := c.SetFeatures(testCtx(t), nvme.FeatKATO, 200)
	require.NoError(t, err)
	select {
	case <-c.admin.dead:
	case <-time.After(4 * time.Second):
		t.Fatal("KATO 200 ms, a silent host: the controller lives on after 4 s")
	}
}

// bigBackend is 8 GiB that holds nothing.
type bigBackend struct{ writes, octets int }

func (f *bigBackend) Size() int64                             { return 8 << 30 }
func (f *bigBackend) Flush() error                            { return nil }
func (f *bigBackend) ReadAt(p []byte, off int64) (int, error) { return len(p), nil }
func (f *bigBackend) WriteAt(p []byte, off int64) (int, error) {
	f.writes++
	f.octets += len(p)
	return len(p), nil
}

// 65 536 blocks of 64 KiB is 4 GiB: on a 32-bit port its length in an int
// was 0, so a Read or Write of it with an empty SGL passed every check and
// succeeded with no data (CI runs this package as linux/386).
func TestTargetTransferLengthIn64Bits(t *testing.T) {
	checkRoutines(t)
	b := &bigBackend{}
	sub, err := target.NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespace(b, 65536)
	require.NoError(t, err)
	tg, err := target.New(target.Config{Logf: t.Logf}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	a, err := tg.Listen(testCtx(t), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c := connectHost(t, a.String(), testNQN, Config{IOQueues: 1})
	for _, op := range []uint8{nvme.IOWrite, nvme.IORead} {
		st, _ := raw(t, c.io[0], rw(op, 1, 0, 0xffff, 0))
		require.Equal(t, nvme.StatusInvalidField|nvme.DNR, st, "op %d", op)
	}
	require.Zero(t, b.writes)
}

// Enabling with a page size or arbitration the controller does not have
// (CC.MPS, CC.AMS other than 0) is a fatal status, as nvmet's; they were
// taken for 4 KiB and round robin.
func TestTargetEnableChecksMPSAndAMS(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	ctx := testCtx(t)
	for _, bad := range []uint32{1 << 7, 1 << 11} { // MPS 1 (8 KiB), AMS 1 (weighted round robin)
		require.NoError(t, c.propertySet(ctx, nvme.PropCC, 0)) // a reset
		require.NoError(t, c.propertySet(ctx, nvme.PropCC, nvme.CCEnable|6<<16|4<<20|bad))
		csts, err := c.propertyGet(ctx, nvme.PropCSTS, 4)
		require.NoError(t, err)
		require.EqualValues(t, nvme.CSTSFatal, csts&(nvme.CSTSFatal|nvme.CSTSReady), "CC %#x", bad)
	}
	require.NoError(t, c.propertySet(ctx, nvme.PropCC, 0))
	require.NoError(t, c.propertySet(ctx, nvme.PropCC, nvme.CCEnable|6<<16|4<<20))
	csts, err := c.propertyGet(ctx, nvme.PropCSTS, 4)
	require.NoError(t, err)
	require.EqualValues(t, nvme.CSTSReady, csts)
}
