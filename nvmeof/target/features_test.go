package target

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// Discovery: the log lists the subsystems a host may reach, at the
// address it came to; Identify says discovery controller.
func TestDiscovery(t *testing.T) {
	checkRoutines(t)
	tg, _, addr := newTestTarget(t, 1<<20, Config{})
	private, err := NewSubsystem("nqn.2024-01.io.goiwarp:private")
	require.NoError(t, err)
	_, err = private.AddNamespace(NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	private.AllowHost("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000aa")
	require.NoError(t, tg.AddSubsystem(private))
	ents, err := host.Discover(testCtx(t), "tcp", addr, host.Config{})
	require.NoError(t, err)
	require.Len(t, ents, 1, "a host not on the private list sees only the open subsystem")
	e := ents[0]
	require.Equal(t, testNQN, e.SubNQN)
	require.EqualValues(t, nvme.TrTypeRDMA, e.TrType)
	require.EqualValues(t, nvme.AdrFamIPv4, e.AdrFam)
	require.EqualValues(t, nvme.SubTypeNVM, e.SubType)
	require.Equal(t, addr, e.TrAddr+":"+e.TrSvcID)
	ents, err = host.Discover(testCtx(t), "tcp", addr, host.Config{HostNQN: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000aa"})
	require.NoError(t, err)
	require.Len(t, ents, 2)
	require.Equal(t, "nqn.2024-01.io.goiwarp:private", ents[0].SubNQN)

	c := connectHost(t, addr, nvme.DiscoveryNQN, host.Config{})
	require.EqualValues(t, nvme.ControllerDisc, c.Info.CtrlType)
	require.Equal(t, nvme.DiscoveryNQN, c.Info.SubNQN)
	require.Zero(t, c.IOQueues())
	// Identify Namespace and I/O queues do not exist on a discovery controller.
	err = c.Identify(testCtx(t), nvme.CNSNamespace, 1, make([]byte, nvme.IdentifySize))
	requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR)
	err = c.GetLogPage(testCtx(t), nvme.LogSMART, 0, 0, make([]byte, 512))
	requireStatus(t, err, nvme.StatusInvalidLogPage|nvme.DNR)
	// Nor SMART warnings, nor namespace notices: of the asynchronous
	// events only Discovery Log Page Change Notices (OAES) may be enabled.
	for _, aec := range []uint32{1, 1 << 8, 1<<31 | 1} {
		_, err = c.SetFeatures(testCtx(t), nvme.FeatAsyncEvent, aec)
		requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR)
	}
	for _, aec := range []uint32{1 << 31, 0} {
		_, err = c.SetFeatures(testCtx(t), nvme.FeatAsyncEvent, aec)
		require.NoError(t, err)
	}
	// Discovery has no I/O queues: a Connect for one is refused.
	_, err = host.Connect(testCtx(t), "tcp", addr, "nqn.2024-01.io.goiwarp:nothere", host.Config{})
	requireStatus(t, err, nvme.StatusConnectInvalidParm|nvme.DNR)
}

func requireStatus(t *testing.T, err error, st nvme.Status) {
	t.Helper()
	var se *nvme.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, st, se.Status, "%v", err)
}

// Several subsystems and namespaces, one backed by a file: each I/O lands
// at its namespace's offset in its backing.
func TestNamespacesAndFiles(t *testing.T) {
	checkRoutines(t)
	_, subA, addr := newTestTarget(t, 1<<20, Config{})
	path := filepath.Join(t.TempDir(), "ns.img")
	require.NoError(t, os.WriteFile(path, make([]byte, 2<<20), 0o644))
	fb, err := OpenFileBackend(path)
	require.NoError(t, err)
	defer fb.Close()
	ns2, err := subA.AddNamespace(fb, 4096)
	require.NoError(t, err)
	require.EqualValues(t, 2, ns2.ID)
	c := connectHost(t, addr, testNQN, host.Config{IOQueues: 2})
	ids, err := c.ActiveNamespaces(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, []uint32{1, 2}, ids)
	n1, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	n2, err := c.Namespace(testCtx(t), 2)
	require.NoError(t, err)
	require.Equal(t, 4096, n2.BlockSize())
	require.Equal(t, int64(2<<20), n2.Size())
	w := make([]byte, 64<<10)
	fill(w, 9)
	_, err = n2.WriteAt(w, 12*4096)
	require.NoError(t, err)
	require.NoError(t, n2.Flush(testCtx(t)))
	onDisk := make([]byte, len(w))
	f, err := os.Open(path)
	require.NoError(t, err)
	_, err = f.ReadAt(onDisk, 12*4096)
	f.Close()
	require.NoError(t, err)
	require.Equal(t, w, onDisk, "the file holds the write at its offset")
	// Namespace 1 is untouched.
	r := make([]byte, len(w))
	_, err = n1.ReadAt(r, 12*4096)
	require.NoError(t, err)
	require.Equal(t, make([]byte, len(w)), r)
	// Unaligned I/O is refused before it is sent; reads at the end stop there.
	_, err = n2.ReadAt(make([]byte, 512), 0)
	require.ErrorIs(t, err, host.ErrUnaligned)
	k, err := n1.ReadAt(make([]byte, 4096), n1.Size()-1024)
	require.Equal(t, 1024, k)
	require.ErrorIs(t, err, io.EOF)
	// NS ID descriptors: NGUID and UUID as the target derives them.
	buf := make([]byte, nvme.IdentifySize)
	require.NoError(t, c.Identify(testCtx(t), nvme.CNSNSDescriptors, 2, buf))
	require.EqualValues(t, nvme.NIDTNGUID, buf[0])
	require.Equal(t, ns2.NGUID[:], buf[4:20])
	require.EqualValues(t, nvme.NIDTUUID, buf[20])
	require.Equal(t, ns2.UUID[:], buf[24:40])
	// An inactive NSID reads as zeros; CNS 2 from NSID 1 lists 2 only.
	require.NoError(t, c.Identify(testCtx(t), nvme.CNSNamespace, 7, buf))
	require.Equal(t, make([]byte, nvme.IdentifySize), buf)
	require.NoError(t, c.Identify(testCtx(t), nvme.CNSActiveNSList, 1, buf))
	require.EqualValues(t, 2, binary.LittleEndian.Uint32(buf))
	require.Zero(t, binary.LittleEndian.Uint32(buf[4:]))
}

// Write Zeroes and Dataset Management's deallocate read back as zeros;
// SMART counts the I/O; features read back what was set.
func TestAdminAndIOCommands(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 1<<20, Config{MaxIOQueues: 3})
	c := connectHost(t, addr, testNQN, host.Config{IOQueues: 8})
	require.Equal(t, 3, c.IOQueues(), "granted no more than MaxIOQueues")
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	w := make([]byte, 64<<10)
	fill(w, 3)
	_, err = ns.WriteAt(w, 0)
	require.NoError(t, err)
	require.NoError(t, ns.WriteZeroes(testCtx(t), 4096, 8192))
	require.NoError(t, ns.Deallocate(testCtx(t), 32768, 4096))
	r := make([]byte, len(w))
	_, err = ns.ReadAt(r, 0)
	require.NoError(t, err)
	want := bytes.Clone(w)
	clear(want[4096 : 4096+8192])
	clear(want[32768 : 32768+4096])
	require.Equal(t, want, r)
	require.Error(t, ns.WriteZeroes(testCtx(t), ns.Size()-512, 1024), "beyond the end")

	smart := make([]byte, 512)
	require.NoError(t, c.GetLogPage(testCtx(t), nvme.LogSMART, 0xffffffff, 0, smart))
	require.EqualValues(t, 100, smart[3], "available spare")
	require.EqualValues(t, 1, binary.LittleEndian.Uint64(smart[64:]), "host read commands")
	require.EqualValues(t, 1, binary.LittleEndian.Uint64(smart[48:]), "data units written (64 KiB, rounded up)")
	// The log read from an offset.
	part := make([]byte, 32)
	require.NoError(t, c.GetLogPage(testCtx(t), nvme.LogSMART, 0xffffffff, 64, part))
	require.Equal(t, smart[64:96], part)
	require.NoError(t, c.GetLogPage(testCtx(t), nvme.LogError, 0, 0, make([]byte, 64)))
	require.NoError(t, c.GetLogPage(testCtx(t), nvme.LogFirmware, 0, 0, make([]byte, 512)))

	v, err := c.GetFeatures(testCtx(t), nvme.FeatNumQueues)
	require.NoError(t, err)
	require.EqualValues(t, 2|2<<16, v)
	_, err = c.SetFeatures(testCtx(t), nvme.FeatKATO, 7000)
	require.NoError(t, err)
	v, err = c.GetFeatures(testCtx(t), nvme.FeatKATO)
	require.NoError(t, err)
	require.EqualValues(t, 7000, v)
	_, err = c.SetFeatures(testCtx(t), nvme.FeatVWC, 1)
	require.NoError(t, err)
	v, err = c.GetFeatures(testCtx(t), nvme.FeatVWC)
	require.NoError(t, err)
	require.EqualValues(t, 1, v)
	_, err = c.GetFeatures(testCtx(t), 0x77)
	requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR)
	// Async Event Configuration: the SMART critical warnings and
	// Namespace Attribute Notices may be enabled; a notice this target
	// never raises (firmware activation, bit 9) may not, as with Linux's
	// nvmet, whose OAES does not announce it either.
	_, err = c.SetFeatures(testCtx(t), nvme.FeatAsyncEvent, 0x1f|1<<8)
	require.NoError(t, err)
	_, err = c.SetFeatures(testCtx(t), nvme.FeatAsyncEvent, 0x1f|1<<9)
	requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR)
	v, err = c.GetFeatures(testCtx(t), nvme.FeatAsyncEvent)
	require.NoError(t, err)
	require.EqualValues(t, 0x1f|1<<8, v, "the refused value changed nothing")
	require.Equal(t, "goiwarp NVMe/iWARP target", c.Info.Model)
	require.EqualValues(t, nvme.ControllerIO, c.Info.CtrlType)
	require.EqualValues(t, 5, c.Info.MDTS)
	require.EqualValues(t, 260, c.Info.IOCCSZ)
	require.EqualValues(t, nvme.SGLSSupported|nvme.SGLSKeyed|nvme.SGLSOffset, c.Info.SGLS)
	require.NotZero(t, c.Info.KAS)
}

// Many queues and hosts at once, data checked: 4 hosts with 4 queues of
// depth 16 each, 8 goroutines per host on their own regions.
func TestManyQueuesAndHosts(t *testing.T) {
	checkRoutines(t)
	_, _, addr := newTestTarget(t, 64<<20, Config{})
	const hosts, workers = 4, 8
	var wg sync.WaitGroup
	errs := make(chan error, hosts*workers)
	for h := range hosts {
		c := connectHost(t, addr, testNQN, host.Config{IOQueues: 4, QueueDepth: 16})
		require.Equal(t, 4, c.IOQueues())
		ns, err := c.Namespace(testCtx(t), 1)
		require.NoError(t, err)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				base := int64(h*workers+w) * (2 << 20)
				buf := make([]byte, 256<<10)
				back := make([]byte, len(buf))
				for r := range 8 {
					fill(buf, uint64(h*1000+w*10+r))
					off := base + int64(r%4)*int64(len(buf))
					if _, err := ns.WriteAt(buf, off); err != nil {
						errs <- err
						return
					}
					if _, err := ns.ReadAt(back, off); err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(buf, back) {
						errs <- context.Canceled
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// flushBackend is a MemBackend that counts its Flushes and fails them
// when told.
type flushBackend struct {
	*MemBackend
	flushes atomic.Int32
	fail    atomic.Bool
}

func (b *flushBackend) Flush() error {
	b.flushes.Add(1)
	if b.fail.Load() {
		return errors.New("the disk went away")
	}
	return nil
}

// A shutdown commits what was written (the host sends no Flush: Linux's
// does not either), and a Flush that fails reaches the host's Close as a
// fatal controller status; so does the target's Close, to its caller.
func TestShutdownFlushes(t *testing.T) {
	checkRoutines(t)
	b := &flushBackend{MemBackend: NewMemBackend(1 << 20)}
	tg, _, addr := newBackendTarget(t, b, Config{})
	for _, fail := range []bool{false, true} {
		b.flushes.Store(0)
		b.fail.Store(fail)
		c := connectHost(t, addr, testNQN, host.Config{})
		ns, err := c.Namespace(testCtx(t), 1)
		require.NoError(t, err)
		_, err = ns.WriteAt(bytes.Repeat([]byte{7}, 8192), 4096)
		require.NoError(t, err)
		require.Zero(t, b.flushes.Load(), "a Flush before the shutdown")
		err = c.Close()
		require.EqualValues(t, 1, b.flushes.Load(), "Flushes at the shutdown (failing: %v)", fail)
		if fail {
			require.ErrorIs(t, err, host.ErrShutdownFatal)
		} else {
			require.NoError(t, err)
		}
	}
	// A target closed under a host flushes too, and says when it could not.
	b.flushes.Store(0)
	c := connectHost(t, addr, testNQN, host.Config{})
	ns, err := c.Namespace(testCtx(t), 1)
	require.NoError(t, err)
	_, err = ns.WriteAt(bytes.Repeat([]byte{9}, 8192), 4096)
	require.NoError(t, err)
	require.ErrorContains(t, tg.Close(), "the disk went away")
	require.EqualValues(t, 1, b.flushes.Load(), "Flushes at the target's Close")
}

// slowBackend is a MemBackend whose writes take a while, and which
// remembers when the last write ended and the first Flush began.
type slowBackend struct {
	*MemBackend
	delay    time.Duration
	mu       sync.Mutex
	writes   int
	inFlight int
	lastEnd  time.Time
	flushAt  time.Time
}

func (b *slowBackend) WriteAt(p []byte, off int64) (int, error) {
	b.mu.Lock()
	b.inFlight++
	b.mu.Unlock()
	time.Sleep(b.delay)
	n, err := b.MemBackend.WriteAt(p, off)
	b.mu.Lock()
	b.inFlight--
	b.writes++
	b.lastEnd = time.Now()
	b.mu.Unlock()
	return n, err
}

func (b *slowBackend) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.flushAt.IsZero() {
		b.flushAt = time.Now()
	}
	return nil
}
