package verbs

import (
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// An RDMA Write into a region registered RemoteRead only: the Terminate
// stays what Linux siw sends (DDP tagged buffer error, invalid STag: RFC
// 5041 has no code for access rights), but the side that checked says the
// rights were wrong, and the writer's error says the code means either.
// Before, both sides said only "invalid STag", which suggests a wrong key.
func TestWriteWithoutRemoteWriteSaysRights(t *testing.T) {
	checkRoutines(t)
	c, s := connect(t, pairOpts{})
	src := c.regMR(t, 64, LocalWrite)
	dst := s.regMR(t, 64, LocalWrite|RemoteRead)
	_, err := c.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMAWrite, Flags: Signaled,
		SGL: []SGE{src.SGE(0, 64)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	require.NoError(t, err)
	waitDone(t, s.qp, peerTimeout)
	waitDone(t, c.qp, peerTimeout)

	wire := rdmap.Cause{Layer: rdmap.LayerDDP, EType: uint8(ddp.ETypeTagged), Code: ddp.CodeInvalidSTag}
	local := termErr(t, s.qp)
	require.False(t, local.Remote)
	require.Equal(t, wire, local.Terminate.Cause(), "the wire says what siw says")
	require.ErrorIs(t, local, &ddp.Error{EType: ddp.ETypeTagged, Code: ddp.CodeInvalidSTag})
	require.Contains(t, local.Error(), "access rights violation")
	require.Contains(t, local.Error(), "registered LocalWrite|RemoteRead, without RemoteWrite")

	remote := termErr(t, c.qp)
	require.True(t, remote.Remote)
	require.Equal(t, wire, remote.Terminate.Cause())
	require.Contains(t, remote.Error(), "or a region registered without the access the operation needs")
	t.Logf("target: %v", local)
	t.Logf("writer: %v", remote)
}
