package host

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// A namespace added while a host is connected, as Linux's nvmet raises
// it: the Changed Namespace List (log page 04h) names it; a held AER
// completes with a Namespace Attribute Changed notice (type 2, information
// 0, log page 04h) only if the host enabled the notice, and only once
// until the host reads the list without Retain Asynchronous Event; a
// notice raised with no AER held waits for the next; and the namespace
// serves I/O at once.
func TestNamespaceAddedNotice(t *testing.T) {
	checkRoutines(t)
	_, sub, addr := newTestTarget(t, 1<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	ctx := testCtx(t)
	q := c.admin
	postAER, noticed := aerProbe(t, c, 2|nvme.LogChangedNS<<16) // a notice: namespace attribute changed, log page 04h
	add := func() uint32 {
		t.Helper()
		ns, err := sub.AddNamespace(target.NewMemBackend(1<<20), 512)
		require.NoError(t, err)
		return ns.ID
	}
	changed := func() []uint32 {
		t.Helper()
		log := make([]byte, 4096)
		require.NoError(t, c.GetLogPage(ctx, nvme.LogChangedNS, 0xffffffff, 0, log))
		var ids []uint32
		for i := 0; i < len(log); i += 4 {
			if id := binary.LittleEndian.Uint32(log[i:]); id != 0 {
				ids = append(ids, id)
			}
		}
		return ids
	}
	const quiet = 200 * time.Millisecond

	// Not enabled: listed, not noticed.
	aer := postAER()
	require.EqualValues(t, 2, add())
	require.False(t, noticed(aer, quiet), "Namespace Attribute Notices are off")
	require.Equal(t, []uint32{2}, changed())
	require.Empty(t, changed(), "a read empties the list")

	// Enabled: the held AER completes.
	_, err := c.SetFeatures(ctx, nvme.FeatAsyncEvent, nvme.AECNSAttr)
	require.NoError(t, err)
	require.EqualValues(t, 3, add())
	require.True(t, noticed(aer, 5*time.Second), "the held AER completes with the notice")

	// Masked until the list is read; a read that retains the event
	// (RAE) leaves it masked.
	aer = postAER()
	require.EqualValues(t, 4, add())
	require.False(t, noticed(aer, quiet), "masked: the host has not read the list")
	st, _ := raw(t, q, func(cm nvme.Command, _ []byte) int {
		nvme.NewAdmin(cm, nvme.AdminGetLogPage, 0, 0xffffffff, nvme.LogChangedNS|1<<15|1023<<16, 0)
		cm.SGL().SetKeyed(0, 4096, 0, false)
		return 0
	})
	require.Equal(t, nvme.StatusSuccess, st)
	require.EqualValues(t, 5, add())
	require.False(t, noticed(aer, quiet), "still masked after a read with RAE")
	require.Equal(t, []uint32{5}, changed(), "the RAE read emptied the list too, as nvmet's does")
	require.EqualValues(t, 6, add())
	require.True(t, noticed(aer, 5*time.Second), "unmasked by the read without RAE")

	// Raised with no AER held: the next AER takes it at once.
	require.Equal(t, []uint32{6}, changed())
	require.EqualValues(t, 7, add())
	require.True(t, noticed(postAER(), 5*time.Second))

	// The host finds the new namespaces and uses one.
	list := make([]byte, nvme.IdentifySize)
	require.NoError(t, c.Identify(ctx, nvme.CNSActiveNSList, 0, list))
	for i := range 7 {
		require.EqualValues(t, i+1, binary.LittleEndian.Uint32(list[4*i:]), "active namespace %d", i)
	}
	ns, err := c.Namespace(ctx, 7)
	require.NoError(t, err)
	w := make([]byte, 4096)
	fill(w, 7)
	_, err = ns.WriteAt(w, 8192)
	require.NoError(t, err)
	r := make([]byte, len(w))
	_, err = ns.ReadAt(r, 8192)
	require.NoError(t, err)
	require.Equal(t, w, r)
}

// The Go host's side (Config.WatchNamespaces): it enables the notice
// and keeps an AER outstanding; WaitNamespaceChange returns the NSIDs the
// Changed Namespace List gave; Close does not wait for the standing AER
// (the admin queue still ends in order); a host that does not watch gets
// ErrNoWatch.
func TestHostWatchesNamespaces(t *testing.T) {
	checkRoutines(t)
	var mu sync.Mutex
	var logs []string
	_, sub, addr := newTestTarget(t, 1<<20, target.Config{Logf: func(f string, a ...any) {
		mu.Lock()
		logs = append(logs, fmt.Sprintf(f, a...))
		mu.Unlock()
	}})
	c, err := Connect(testCtx(t), "tcp", addr, testNQN, Config{IOQueues: 1, WatchNamespaces: true})
	require.NoError(t, err)
	ctx := testCtx(t)
	v, err := c.GetFeatures(ctx, nvme.FeatAsyncEvent)
	require.NoError(t, err)
	require.EqualValues(t, nvme.AECNSAttr, v, "the host enabled the notice")

	add := func() uint32 {
		t.Helper()
		ns, err := sub.AddNamespace(target.NewMemBackend(1<<20), 512)
		require.NoError(t, err)
		return ns.ID
	}
	require.EqualValues(t, 2, add())
	ids, err := c.WaitNamespaceChange(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint32{2}, ids)
	// Two in a row: the second is listed with the first or noticed after.
	add()
	add()
	var seen []uint32
	for len(seen) < 2 {
		ids, err := c.WaitNamespaceChange(ctx)
		require.NoError(t, err)
		seen = append(seen, ids...)
	}
	require.Equal(t, []uint32{3, 4}, seen)
	ns, err := c.Namespace(ctx, 4)
	require.NoError(t, err)
	_, err = ns.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = c.WaitNamespaceChange(short)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "nothing changed since")

	start := time.Now()
	require.NoError(t, c.Close())
	// Not a measure of speed: a drain that waited for the AER would take
	// all of shutdownWait and then end the admin queue abruptly.
	require.Less(t, time.Since(start), shutdownWait/2, "Close waited for the standing AER")
	_, err = c.WaitNamespaceChange(ctx)
	require.Error(t, err, "the controller has ended")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range logs {
			if strings.Contains(l, "q0 ctrl") && strings.HasSuffix(l, ": disconnected") {
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond, "the admin queue ended in order, its AER outstanding")

	other := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	_, err = other.WaitNamespaceChange(ctx)
	require.ErrorIs(t, err, ErrNoWatch)
}

// A read of the Changed Namespace List that the target refuses (an offset,
// a length other than the whole 4 KiB) leaves the list as it was: reading
// it empties it.
func TestChangedNSRefusedReadKeepsList(t *testing.T) {
	checkRoutines(t)
	_, sub, addr := newTestTarget(t, 1<<20, target.Config{})
	c := connectHost(t, addr, testNQN, Config{IOQueues: 1})
	ns, err := sub.AddNamespace(target.NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	for _, tc := range []struct {
		name      string
		numd, lpo uint32
	}{{"offset 2", 1023, 2}, {"offset 4", 1022, 4}, {"512 octets", 127, 0}} {
		st, _ := raw(t, c.admin, func(cm nvme.Command, _ []byte) int {
			nvme.NewAdmin(cm, nvme.AdminGetLogPage, 0, 0xffffffff, nvme.LogChangedNS|tc.numd<<16, 0)
			cm.SetCDW(12, tc.lpo)
			cm.SGL().SetKeyed(0, (tc.numd+1)*4, 0, false)
			return 0
		})
		require.Equal(t, nvme.StatusInvalidField|nvme.DNR, st, tc.name)
	}
	log := make([]byte, 4096)
	require.NoError(t, c.GetLogPage(testCtx(t), nvme.LogChangedNS, 0xffffffff, 0, log))
	require.EqualValues(t, ns.ID, binary.LittleEndian.Uint32(log), "the refused reads left the list")
}
