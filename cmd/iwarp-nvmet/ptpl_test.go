package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
)

// The binary with a namespace's resv.ptpl_file: a host asks for
// persistence, fences another, and the target is killed (SIGKILL, no
// shutdown) and started again on the same configuration: the fence holds.
func TestServePTPL(t *testing.T) {
	t.Cleanup(test.CheckRoutines(t))
	bin, dir, disk, addr, cfg := configFixture(t)
	const nqn = "nqn.2024-01.io.goiwarp:ptpl"
	state := filepath.Join(dir, "d1.resv")
	ns := fmt.Sprintf(`{"device": {"path": %q}, "enable": 1, "nsid": 1, "resv": {"enable": 1, "ptpl_file": %q}}`, disk, state)
	reloadConfig(t, cfg, addr, subJSON(nqn, 1, nil, ns))
	start := func() *exec.Cmd {
		srv, _ := startConfigured(t, bin, cfg)
		return srv
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func(id byte) (*host.Controller, *host.Namespace) {
		c, err := host.Connect(ctx, "tcp", addr, nqn, host.Config{IOQueues: 1, HostID: [16]byte{id}})
		require.NoError(t, err)
		n, err := c.Namespace(ctx, 1)
		require.NoError(t, err)
		return c, n
	}
	srv := start()
	ca, a := open(0xa)
	cb, b := open(0xb)
	require.EqualValues(t, 1, a.Info.RESCAP&1, "PTPL capable")
	require.NoError(t, a.RegisterKey(ctx, 0xa))
	require.NoError(t, b.RegisterKey(ctx, 0xb))
	require.NoError(t, a.Reserve(ctx, 0xa, nvme.ResvWriteExclusiveRegsOnly))
	require.NoError(t, b.SetPersistence(ctx, true))
	require.NoError(t, b.Preempt(ctx, 0xb, 0xa, nvme.ResvWriteExclusiveRegsOnly, true))
	require.NoError(t, srv.Process.Kill())
	srv.Wait()
	ca.Close()
	cb.Close()

	start()
	ca, a = open(0xa)
	defer ca.Close()
	cb, b = open(0xb)
	defer cb.Close()
	st, err := a.ReservationReport(ctx)
	require.NoError(t, err)
	require.True(t, st.PTPL)
	require.Equal(t, nvme.ResvWriteExclusiveRegsOnly, st.Type)
	require.Len(t, st.Registrants, 1)
	require.Equal(t, [16]byte{0xb}, st.Registrants[0].HostID)
	_, err = a.WriteAt(make([]byte, a.BlockSize()), 0)
	var se *nvme.StatusError
	require.ErrorAs(t, err, &se, "fenced across the restart")
	require.Equal(t, nvme.StatusReservationConflict|nvme.DNR, se.Status)
	_, err = b.WriteAt(make([]byte, b.BlockSize()), 0)
	require.NoError(t, err)
}
