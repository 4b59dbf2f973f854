package target

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// Referrals: a port's discovery log lists them after its subsystems (the
// discovery NQN, subtype 1, the referral's address and port ID);
// DiscoverAll follows them, across targets and round a loop, to every
// subsystem once; SetReferrals tells the discovery controllers through
// the port; an address that is not host:port is refused.
func TestReferrals(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	serve := func(nqn string) (*Target, *Subsystem) {
		sub, err := NewSubsystem(nqn)
		require.NoError(t, err)
		_, err = sub.AddNamespace(NewMemBackend(1<<20), 512)
		require.NoError(t, err)
		tg, err := New(Config{Logf: t.Logf}, sub)
		require.NoError(t, err)
		t.Cleanup(func() { tg.Close() })
		return tg, sub
	}
	tgA, subA := serve(testNQN + "-a")
	tgB, subB := serve(testNQN + "-b")
	pb, err := tgB.ListenPort(ctx, "tcp", "127.0.0.1:0", PortConfig{ID: 7, Subsystems: []string{subB.NQN}})
	require.NoError(t, err)
	pa, err := tgA.ListenPort(ctx, "tcp", "127.0.0.1:0", PortConfig{Subsystems: []string{subA.NQN},
		Referrals: []Referral{{Addr: pb.Addr().String(), PortID: 7}}})
	require.NoError(t, err)
	require.NoError(t, pb.SetReferrals(Referral{Addr: pa.Addr().String(), PortID: 1})) // a loop

	log, err := host.Discover(ctx, "tcp", pa.Addr().String(), host.Config{})
	require.NoError(t, err)
	require.Len(t, log, 2)
	require.Equal(t, subA.NQN, log[0].SubNQN)
	_, port, _ := net.SplitHostPort(pb.Addr().String())
	require.Equal(t, nvme.DiscoveryEntry{TrType: nvme.TrTypeRDMA, AdrFam: nvme.AdrFamIPv4, SubType: nvme.SubTypeDisc, TReq: nvme.TReqNotSpecific,
		PortID: 7, CntlID: nvme.DynamicCntlID, ASQSZ: adminQueueSize, TrSvcID: port, TrAddr: "127.0.0.1", SubNQN: nvme.DiscoveryNQN}, log[1])

	all, err := host.DiscoverAll(ctx, "tcp", pa.Addr().String(), host.Config{})
	require.NoError(t, err)
	var nqns []string
	for _, e := range all {
		nqns = append(nqns, e.SubNQN)
	}
	slices.Sort(nqns)
	require.Equal(t, []string{subA.NQN, subB.NQN}, nqns, "each subsystem once, the loop ended")

	// A referral added while a host watches the log: it is told, and
	// the log's generation counter moves.
	c := connectHost(t, pb.Addr().String(), nvme.DiscoveryNQN, host.Config{WatchDiscovery: true})
	gen := func() uint64 {
		hdr := make([]byte, nvme.DiscHeaderSize)
		require.NoError(t, c.GetLogPage(ctx, nvme.LogDiscovery, 0, 0, hdr))
		g, _, _, err := nvme.ParseDiscoveryLog(hdr)
		require.NoError(t, err)
		return g
	}
	gen0 := gen()
	dead := Referral{Addr: "127.0.0.1:1", PortID: 9, TReq: 1}
	require.NoError(t, pb.SetReferrals(Referral{Addr: pa.Addr().String(), PortID: 1}, dead))
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ents, err := c.WaitDiscoveryChange(wctx)
	require.NoError(t, err)
	require.Len(t, ents, 3)
	require.Equal(t, "1", ents[2].TrSvcID)
	require.EqualValues(t, 1, ents[2].TReq, "its TREQ")
	require.Greater(t, gen(), gen0)
	require.Equal(t, []Referral{{Addr: pa.Addr().String(), PortID: 1}, dead}, pb.Referrals())

	all, err = host.DiscoverAll(ctx, "tcp", pa.Addr().String(), host.Config{})
	require.ErrorContains(t, err, "127.0.0.1:1", "the referral nobody answers")
	require.Len(t, all, 2, "what the others gave")

	require.Error(t, pb.SetReferrals(Referral{Addr: "127.0.0.1:4420", TReq: 3}))
	for _, bad := range []string{"127.0.0.1", "host.example:4420", "127.0.0.1:0", "127.0.0.1:99999"} {
		require.Error(t, pb.SetReferrals(Referral{Addr: bad}), bad)
		_, err := tgA.ListenPort(ctx, "tcp", "127.0.0.1:0", PortConfig{Referrals: []Referral{{Addr: bad}}})
		require.Error(t, err, bad)
	}
}

// A discovery service reached by two names (localhost, and the address
// its own referral gives) is read twice: its subsystems are returned once.
func TestDiscoverAllOnce(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	sub, err := NewSubsystem(testNQN)
	require.NoError(t, err)
	_, err = sub.AddNamespace(NewMemBackend(1<<20), 512)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a port number for the advertised address
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	tg, err := New(Config{Logf: t.Logf, AdvertiseAddr: addr}, sub)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	_, err = tg.ListenPort(ctx, "tcp", addr, PortConfig{Subsystems: []string{sub.NQN}, Referrals: []Referral{{Addr: addr}}})
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(addr)
	all, err := host.DiscoverAll(ctx, "tcp", net.JoinHostPort("localhost", port), host.Config{})
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, sub.NQN, all[0].SubNQN)
}
