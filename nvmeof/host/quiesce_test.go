package host

import (
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

// A host that resets its controller in place (CC.EN 1 → 0 on the same
// admin queue) while a write of its is in the Backend sees CSTS.RDY clear
// only once the write has left it: after RDY it may connect I/O queues
// again and send the write anew.
func TestResetInPlaceWaitsForBackend(t *testing.T) {
	checkRoutines(t)
	ctx := testCtx(t)
	be, _, addr := gatedTarget(t, 4096)
	c := connectHost(t, addr, testNQN, quiesceHost)
	_, wrote := stuckWrite(t, be, c, 4096)
	cc, err := c.propertyGet(ctx, nvme.PropCC, 4)
	require.NoError(t, err)
	reset := make(chan error, 1)
	go func() { reset <- c.propertySet(ctx, nvme.PropCC, uint32(cc)&^nvme.CCEnable) }()
	stillWaiting(t, reset, be.open, "CC.EN 0 answered")
	be.open()
	require.NoError(t, <-reset)
	csts, err := c.propertyGet(ctx, nvme.PropCSTS, 4)
	require.NoError(t, err)
	require.Zero(t, csts&nvme.CSTSReady, "RDY clear once the write has landed")
	<-wrote
}
