package host

import (
	"context"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitNotices waits for the next reservation notifications of n's
// controller (watching them), and checks their types and NSIDs.
func waitNotices(t *testing.T, ctx context.Context, n *Namespace, want ...nvme.ReservationNoticeType) []nvme.ReservationNotice {
	t.Helper()
	var got []nvme.ReservationNotice
	for len(got) < len(want) {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ns, err := n.c.WaitReservationNotice(wctx)
		cancel()
		require.NoError(t, err, "waiting for %v, got %v", want, got)
		got = append(got, ns...)
	}
	require.Len(t, got, len(want), "%v", got)
	for i, w := range want {
		require.Equal(t, w, got[i].Type, "notice %d of %v", i, got)
		require.EqualValues(t, 1, got[i].NSID)
	}
	return got
}

// noNotices checks that n's controller recorded nothing more: its log
// reads empty.
func noNotices(t *testing.T, ctx context.Context, n *Namespace) {
	t.Helper()
	ns, err := n.c.ReservationNotices(ctx)
	require.NoError(t, err)
	require.Empty(t, ns)
}

// Reservation notifications over TCP, as nvmet raises them: each case's
// notices reach the controllers of the hosts it took something from (both
// of host a's), through a Reservation Log Page Available notice and the
// log; the host that acted (b, whose controller does not watch, so its
// log is read here) and those it took nothing from get none. Counts go
// up by one per page, per controller.
func TestReservationNotices(t *testing.T) {
	ctx, a, a2, b, c, _ := resvHostsWith(t, func(name string) Config {
		return Config{IOQueues: 1, WatchReservations: name != "b"}
	})
	const ka, kb, kc = 0xa, 0xb, 0xc
	require.NoError(t, a.RegisterKey(ctx, ka))
	require.NoError(t, b.RegisterKey(ctx, kb))
	require.NoError(t, a.Reserve(ctx, ka, nvme.ResvWriteExclusiveRegsOnly))

	// b fences a: a's registration preempted (both its controllers).
	require.NoError(t, b.Preempt(ctx, kb, ka, nvme.ResvWriteExclusiveRegsOnly, true))
	n1 := waitNotices(t, ctx, a, nvme.ResvNoticeRegPreempted)
	require.EqualValues(t, 1, n1[0].Count)
	require.EqualValues(t, 1, waitNotices(t, ctx, a2, nvme.ResvNoticeRegPreempted)[0].Count)

	// b, the holder of a registrants-only type, releases: the other
	// registrants (a again, and c) are told; b, and a host that is not
	// registered, are not.
	require.NoError(t, a.RegisterKey(ctx, ka))
	require.NoError(t, c.RegisterKey(ctx, kc))
	require.NoError(t, b.Release(ctx, kb, nvme.ResvWriteExclusiveRegsOnly))
	require.EqualValues(t, 2, waitNotices(t, ctx, a, nvme.ResvNoticeReleased)[0].Count)
	waitNotices(t, ctx, c, nvme.ResvNoticeReleased)

	// Write Exclusive and Exclusive Access released: nobody is told.
	require.NoError(t, b.Reserve(ctx, kb, nvme.ResvWriteExclusive))
	require.NoError(t, b.Release(ctx, kb, nvme.ResvWriteExclusive))

	// The holder of a registrants-only type unregisters: released.
	require.NoError(t, b.Reserve(ctx, kb, nvme.ResvExclusiveAccessRegsOnly))
	require.NoError(t, b.UnregisterKey(ctx, kb))
	waitNotices(t, ctx, a, nvme.ResvNoticeReleased)
	waitNotices(t, ctx, c, nvme.ResvNoticeReleased)

	// The holder changes the type by preempting itself: released; in
	// the same type: nothing.
	require.NoError(t, b.RegisterKey(ctx, kb))
	require.NoError(t, b.Reserve(ctx, kb, nvme.ResvWriteExclusive))
	require.NoError(t, b.Preempt(ctx, kb, kb, nvme.ResvWriteExclusive, false))
	require.NoError(t, b.Preempt(ctx, kb, kb, nvme.ResvExclusiveAccess, false))
	waitNotices(t, ctx, a, nvme.ResvNoticeReleased)
	waitNotices(t, ctx, c, nvme.ResvNoticeReleased)

	// Another registrant preempts the holder: the holder's registration
	// preempted; the others are told the reservation was released only
	// when its type changed.
	require.NoError(t, c.Preempt(ctx, kc, kb, nvme.ResvExclusiveAccess, false)) // same type
	ns, err := b.c.ReservationNotices(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 1, "b, preempted by c: %v", ns)
	require.Equal(t, nvme.ResvNoticeRegPreempted, ns[0].Type)
	require.NoError(t, b.RegisterKey(ctx, kb))
	require.NoError(t, b.Preempt(ctx, kb, kc, nvme.ResvWriteExclusiveRegsOnly, false)) // another type
	waitNotices(t, ctx, c, nvme.ResvNoticeRegPreempted)
	waitNotices(t, ctx, a, nvme.ResvNoticeReleased)

	// An all-registrants reservation taken whole (preempt with key 0):
	// every other registrant's registration preempted.
	require.NoError(t, b.Release(ctx, kb, nvme.ResvWriteExclusiveRegsOnly))
	require.NoError(t, c.RegisterKey(ctx, kc))
	require.NoError(t, c.Reserve(ctx, kc, nvme.ResvWriteExclusiveAllRegs))
	require.NoError(t, b.Preempt(ctx, kb, 0, nvme.ResvExclusiveAccessAllRegs, false))
	waitNotices(t, ctx, a, nvme.ResvNoticeReleased, nvme.ResvNoticeRegPreempted) // b's release; then the preempt
	waitNotices(t, ctx, c, nvme.ResvNoticeRegPreempted)                          // not registered at b's release

	// A preempt with no reservation, of a key b shares with a: both
	// unregistered, only a told.
	require.NoError(t, b.Release(ctx, kb, nvme.ResvExclusiveAccessAllRegs))
	require.NoError(t, a.RegisterKey(ctx, kb))
	require.NoError(t, b.Preempt(ctx, kb, kb, nvme.ResvWriteExclusive, false))
	waitNotices(t, ctx, a, nvme.ResvNoticeRegPreempted)
	require.Empty(t, report(t, ctx, c).Registrants, "both gone")

	// A clear: every other registrant's reservation preempted.
	require.NoError(t, a.RegisterKey(ctx, ka))
	require.NoError(t, b.RegisterKey(ctx, kb))
	require.NoError(t, b.ClearReservations(ctx, kb))
	last := waitNotices(t, ctx, a, nvme.ResvNoticePreempted)
	require.EqualValues(t, 9, last[0].Count, "a's ninth page")
	require.Len(t, waitNotices(t, ctx, a2, nvme.ResvNoticeReleased, nvme.ResvNoticeReleased, nvme.ResvNoticeReleased, nvme.ResvNoticeReleased,
		nvme.ResvNoticeReleased, nvme.ResvNoticeRegPreempted, nvme.ResvNoticeRegPreempted, nvme.ResvNoticePreempted), 8)

	noNotices(t, ctx, b) // b acted every time since, and was told nothing
	for _, n := range []*Namespace{a, a2, c} {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		ns, err := n.c.WaitReservationNotice(ctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "nothing more: %v", ns)
	}
}

// The Reservation Notification Mask: per namespace and per controller; a
// masked type is not recorded, the others are; FFFFFFFFh sets every
// namespace with reservations; fields and namespaces are checked as
// nvmet checks them.
func TestReservationNoticeMask(t *testing.T) {
	ctx, a, a2, b, _, _ := resvHosts(t)
	const ka, kb = 0xa, 0xb
	m, err := a.ReservationNoticeMask(ctx)
	require.NoError(t, err)
	require.Empty(t, m, "none masked at first")
	require.NoError(t, a.SetReservationNoticeMask(ctx, nvme.ResvNoticeRegPreempted))
	m, err = a.ReservationNoticeMask(ctx)
	require.NoError(t, err)
	require.Equal(t, []nvme.ReservationNoticeType{nvme.ResvNoticeRegPreempted}, m)
	m, err = a2.ReservationNoticeMask(ctx)
	require.NoError(t, err)
	require.Empty(t, m, "the mask is a's controller's, not its host's")

	require.NoError(t, a.RegisterKey(ctx, ka))
	require.NoError(t, b.RegisterKey(ctx, kb))
	require.NoError(t, a.Reserve(ctx, ka, nvme.ResvWriteExclusiveRegsOnly))
	require.NoError(t, b.Preempt(ctx, kb, ka, nvme.ResvWriteExclusiveRegsOnly, false))
	noNotices(t, ctx, a)
	ns, err := a2.c.ReservationNotices(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 1, "a2 did not mask it")
	require.Equal(t, nvme.ResvNoticeRegPreempted, ns[0].Type)

	require.NoError(t, a.RegisterKey(ctx, ka))
	require.NoError(t, b.Release(ctx, kb, nvme.ResvWriteExclusiveRegsOnly))
	ns, err = a.c.ReservationNotices(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 1, "released is not masked")
	require.Equal(t, nvme.ResvNoticeReleased, ns[0].Type)
	require.EqualValues(t, 1, ns[0].Count, "the masked one was never recorded")

	// Every namespace with reservations at once; namespace 2 has none.
	_, err = a.c.admin.adminCmd(ctx, func(cmd nvme.Command) {
		nvme.NewAdmin(cmd, nvme.AdminSetFeatures, 0, 0xffffffff, nvme.FeatResvMask, 1<<nvme.ResvNoticeReleased|1<<nvme.ResvNoticePreempted)
	}, 0, "", nil)
	require.NoError(t, err)
	m, err = a.ReservationNoticeMask(ctx)
	require.NoError(t, err)
	require.Equal(t, []nvme.ReservationNoticeType{nvme.ResvNoticeReleased, nvme.ResvNoticePreempted}, m)
	n2, err := a.c.Namespace(ctx, 2)
	require.NoError(t, err)
	requireStatus(t, n2.SetReservationNoticeMask(ctx), nvme.StatusInvalidField|nvme.DNR)
	_, err = n2.ReservationNoticeMask(ctx)
	requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR)
	for _, tc := range []struct {
		op          uint8
		nsid, cdw11 uint32
		st          nvme.Status
	}{
		{nvme.AdminSetFeatures, 1, 1 << 0, nvme.StatusInvalidField | nvme.DNR}, // reserved bit
		{nvme.AdminSetFeatures, 1, 1 << 4, nvme.StatusInvalidField | nvme.DNR},
		{nvme.AdminSetFeatures, 9, 0, nvme.StatusInvalidField | nvme.DNR}, // inactive
		{nvme.AdminGetFeatures, 9, 0, nvme.StatusInvalidField | nvme.DNR},
		{nvme.AdminGetFeatures, 5000, 0, nvme.StatusInvalidNamespace | nvme.DNR}, // beyond NN
		{nvme.AdminGetFeatures, 0xffffffff, 0, nvme.StatusInvalidField | nvme.DNR},
	} {
		_, err := a.c.admin.adminCmd(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, tc.op, 0, tc.nsid, nvme.FeatResvMask, tc.cdw11) }, 0, "", nil)
		requireStatus(t, err, tc.st)
	}
}

// A controller keeps 64 pages: what comes past that is lost, and the
// last page kept takes the count of the last notification, so that the
// host sees the gap; each page says how many more wait.
func TestReservationNoticesOverflow(t *testing.T) {
	ctx, a, _, b, _, _ := resvHosts(t)
	const ka, kb, n = 0xa, 0xb, resvLogPages + 6
	require.NoError(t, b.RegisterKey(ctx, kb))
	for range n {
		require.NoError(t, a.RegisterKey(ctx, ka))
		require.NoError(t, b.Preempt(ctx, kb, ka, nvme.ResvWriteExclusive, false))
	}
	ns, err := a.c.ReservationNotices(ctx)
	require.NoError(t, err)
	require.Len(t, ns, resvLogPages)
	for i, p := range ns {
		require.Equal(t, nvme.ResvNoticeRegPreempted, p.Type)
		require.Equal(t, resvLogPages-1-i, p.More, "page %d", i)
		if i < resvLogPages-1 {
			require.EqualValues(t, i+1, p.Count)
		}
	}
	require.EqualValues(t, n, ns[resvLogPages-1].Count, "the gap before the last page: 6 lost")
	noNotices(t, ctx, a)
}

// One notice until the log is read: a host that does not read it gets
// no second AER completion, however many pages come; the read unmasks it,
// and the next page completes the AER that waited.
func TestReservationNoticeMasked(t *testing.T) {
	ctx, a, _, b, _, _ := resvHosts(t)
	const ka, kb = 0xa, 0xb
	require.NoError(t, b.RegisterKey(ctx, kb))
	aer := func() (uint64, error) {
		return a.c.admin.standingCmd(ctx, func(cmd nvme.Command) { nvme.NewAdmin(cmd, nvme.AdminAER, 0, 0, 0, 0) }, "Asynchronous Event Request")
	}
	fence := func() {
		require.NoError(t, a.RegisterKey(ctx, ka))
		require.NoError(t, b.Preempt(ctx, kb, ka, nvme.ResvWriteExclusive, false))
	}
	fence()
	fence()
	res, err := aer()
	require.NoError(t, err)
	require.EqualValues(t, nvme.AERResvLog, res&0xffffff)
	second := make(chan uint64, 1)
	go func() {
		res, err := aer()
		assert.NoError(t, err)
		second <- res
	}()
	select {
	case <-second:
		t.Fatal("a second notice before the log was read")
	case <-time.After(300 * time.Millisecond):
	}
	ns, err := a.c.ReservationNotices(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 2)
	fence()
	select {
	case res := <-second:
		require.EqualValues(t, nvme.AERResvLog, res&0xffffff, "unmasked by the read")
	case <-time.After(10 * time.Second):
		t.Fatal("no notice after the log was read")
	}
}

// A controller reset empties the log, counts from 1 again, and drops the
// masks (the feature does not persist across a reset). The reset takes
// a's I/O queue with it, so the registrations go through a2, the same
// host's other controller.
func TestReservationNoticesReset(t *testing.T) {
	ctx, a, a2, b, _, _ := resvHosts(t)
	const ka, kb = 0xa, 0xb
	require.NoError(t, b.RegisterKey(ctx, kb))
	fence := func() {
		require.NoError(t, a2.RegisterKey(ctx, ka))
		require.NoError(t, b.Preempt(ctx, kb, ka, nvme.ResvWriteExclusive, false))
	}
	fence()
	fence()
	require.NoError(t, a.SetReservationNoticeMask(ctx, nvme.ResvNoticeReleased))
	require.NoError(t, a.c.propertySet(ctx, nvme.PropCC, 0)) // a reset
	require.NoError(t, a.c.enable(ctx))
	noNotices(t, ctx, a)
	m, err := a.ReservationNoticeMask(ctx)
	require.NoError(t, err)
	require.Empty(t, m)
	fence()
	ns, err := a.c.ReservationNotices(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 1)
	require.EqualValues(t, 1, ns[0].Count)
	ns, err = a2.c.ReservationNotices(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 3, "a2 was not reset")
	require.EqualValues(t, 3, ns[2].Count)
}

// A mask belongs to its namespace: a new namespace given a removed one's
// NSID starts with none (as nvmet, whose mask is the namespace's).
func TestReservationNoticeMaskNewNamespace(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	sub, _, addr := serveNamespaces(t, target.NamespaceConfig{ID: 1, Reservations: true})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	n, err := c.Namespace(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, n.SetReservationNoticeMask(ctx, nvme.ResvNoticeRegPreempted, nvme.ResvNoticeReleased, nvme.ResvNoticePreempted))
	require.NoError(t, sub.RemoveNamespace(ctx, 1))
	_, err = sub.AddNamespaceConfig(target.NewMemBackend(1<<20), target.NamespaceConfig{ID: 1, Reservations: true})
	require.NoError(t, err)
	m, err := n.ReservationNoticeMask(ctx)
	require.NoError(t, err)
	require.Empty(t, m)
}

// A read of the log at an offset is refused, and takes no page.
func TestReservationNoticeOffset(t *testing.T) {
	ctx, a, _, b, _, _ := resvHosts(t)
	require.NoError(t, b.RegisterKey(ctx, 0xb))
	require.NoError(t, a.RegisterKey(ctx, 0xa))
	require.NoError(t, b.Preempt(ctx, 0xb, 0xa, nvme.ResvWriteExclusive, false))
	for _, off := range []uint64{16, 128} {
		err := a.c.GetLogPage(ctx, nvme.LogResvNotice, 0xffffffff, off, make([]byte, 64))
		requireStatus(t, err, nvme.StatusInvalidField|nvme.DNR)
	}
	ns, err := a.c.ReservationNotices(ctx)
	require.NoError(t, err)
	require.Len(t, ns, 1)
}

// resvLogPages is how many Reservation Notification log pages the target
// keeps for a controller, as nvmet's.
const resvLogPages = 64
