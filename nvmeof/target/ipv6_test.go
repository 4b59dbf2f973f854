package target

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"
)

// NVMe-oF over IPv6: a port on [::1] lists itself in the discovery log as
// address family IPv6 with the address as text (::1), DiscoverAll follows
// it, and a host connects through the entry's address and moves data.
func TestIPv6(t *testing.T) {
	if !nettest.SupportsIPv6() {
		t.Skip("IPv6 is not available on this machine (no ::1 to listen on)")
	}
	checkRoutines(t)
	ctx := testCtx(t)
	tg, _, _ := newTestTarget(t, 1<<20, Config{})
	a, err := tg.Listen(context.Background(), "tcp6", "[::1]:0")
	require.NoError(t, err)
	port := strconv.Itoa(a.(*net.TCPAddr).Port)

	ents, err := host.DiscoverAll(ctx, "tcp", a.String(), host.Config{})
	require.NoError(t, err)
	require.Len(t, ents, 1)
	e := ents[0]
	require.Equal(t, nvme.DiscoveryEntry{TrType: nvme.TrTypeRDMA, AdrFam: nvme.AdrFamIPv6, SubType: nvme.SubTypeNVM, TReq: e.TReq, PortID: e.PortID,
		CntlID: e.CntlID, ASQSZ: e.ASQSZ, TrSvcID: port, TrAddr: "::1", SubNQN: testNQN}, e)

	c := connectHost(t, net.JoinHostPort(e.TrAddr, e.TrSvcID), testNQN, host.Config{IOQueues: 1})
	ns, err := c.Namespace(ctx, 1)
	require.NoError(t, err)
	w := bytes.Repeat([]byte("v6"), 4096)
	_, err = ns.WriteAt(w, 0)
	require.NoError(t, err)
	r := make([]byte, len(w))
	_, err = ns.ReadAt(r, 0)
	require.NoError(t, err)
	require.Equal(t, w, r)
}
