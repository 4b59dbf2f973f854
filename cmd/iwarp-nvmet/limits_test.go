package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
)

// --max-queues and --max-host-controllers reach the target: a host NQN's
// next controller is Controller Busy, the queue past the bound is refused
// at the RDMA CM, and the target serves on.
func TestLimitFlags(t *testing.T) {
	t.Cleanup(test.CheckRoutines(t))
	bin := build(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	const nqn = "nqn.2024-01.io.goiwarp:limits"
	var out lockedBuf
	srv := exec.Command(bin, "--listen", addr, "--ram", "1MiB", "--nqn", nqn, "--max-queues", "4", "--max-host-controllers", "1")
	srv.Stdout, srv.Stderr = &out, &out
	require.NoError(t, srv.Start())
	defer srv.Process.Kill()
	waitFor(t, &out, "serving "+nqn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	a := host.Config{IOQueues: 1, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0000000a-0000-4000-8000-00000000000a"}
	ca, err := host.Connect(ctx, "tcp", addr, nqn, a)
	require.NoError(t, err)
	defer ca.Close()
	_, err = host.Connect(ctx, "tcp", addr, nqn, a)
	var se *nvme.StatusError
	require.True(t, errors.As(err, &se), "%v", err)
	require.Equal(t, nvme.StatusConnectCtrlBusy, se.Status, "--max-host-controllers 1")
	cb, err := host.Connect(ctx, "tcp", addr, nqn, host.Config{IOQueues: 1}) // queues 3 and 4
	require.NoError(t, err)
	defer cb.Close()
	_, err = host.Connect(ctx, "tcp", addr, nqn, host.Config{IOQueues: 1})
	require.ErrorContains(t, err, "No Resources", "--max-queues 4")
	ns, err := cb.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = ns.WriteAt(make([]byte, 4096), 0)
	require.NoError(t, err)
	require.NoError(t, ca.Err())
	require.Contains(t, out.String(), "MaxControllersPerHost")
	require.Contains(t, out.String(), "MaxQueues (4) reached")
}
