package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
)

// The binary's referrals: listed after the port's subsystems in its
// discovery log, and changed by SIGHUP.
func TestServeConfigReferrals(t *testing.T) {
	t.Cleanup(test.CheckRoutines(t))
	bin, _, disk, addr, cfg := configFixture(t)
	const nqn = "nqn.2024-01.io.goiwarp:ref"
	write := func(refs ...string) {
		reloadConfig(t, cfg, addr, subJSON(nqn, 1, nil, nsJSON(1, 1, disk, "")))
		b, err := os.ReadFile(cfg)
		require.NoError(t, err)
		b = []byte(strings.Replace(string(b), `"referrals": []`, `"referrals": [`+strings.Join(refs, ",")+`]`, 1))
		require.NoError(t, os.WriteFile(cfg, b, 0o644))
	}
	ref := func(name, traddr string, portid int) string {
		return fmt.Sprintf(`{"name": %q, "enable": 1, "addr": {"adrfam": "ipv4", "portid": "%d", "traddr": %q, "treq": "not specified", "trsvcid": "4420", "trtype": "rdma"}}`,
			name, portid, traddr)
	}
	write(ref("b", "10.0.0.2", 2))
	srv, out := startConfigured(t, bin, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	referrals := func() []string {
		ents, err := host.Discover(ctx, "tcp", addr, host.Config{})
		require.NoError(t, err)
		require.Equal(t, nqn, ents[0].SubNQN)
		var rs []string
		for _, e := range ents[1:] {
			require.Equal(t, nvme.DiscoveryNQN, e.SubNQN)
			rs = append(rs, fmt.Sprintf("%s:%s port %d", e.TrAddr, e.TrSvcID, e.PortID))
		}
		return rs
	}
	require.Equal(t, []string{"10.0.0.2:4420 port 2"}, referrals())

	write(ref("b", "10.0.0.2", 2), ref("c", "10.0.0.3", 3))
	require.NoError(t, srv.Process.Signal(syscall.SIGHUP))
	waitFor(t, out, "port 1 now refers to 2 discovery services")
	require.Equal(t, []string{"10.0.0.2:4420 port 2", "10.0.0.3:4420 port 3"}, referrals())
}

// configFixture builds the binary and makes a directory with a 4 MiB disk
// file, a free address and the path of a configuration in it.
func configFixture(t *testing.T) (bin, dir, disk, addr, cfg string) {
	t.Helper()
	bin, dir = build(t), t.TempDir()
	disk = filepath.Join(dir, "d1.img")
	require.NoError(t, os.WriteFile(disk, make([]byte, 4<<20), 0o644))
	return bin, dir, disk, fmt.Sprintf("127.0.0.1:%d", freePort(t)), filepath.Join(dir, "config.json")
}

// startConfigured starts the binary on configuration cfg (one subsystem) and
// waits until it serves; the test's end kills it.
func startConfigured(t *testing.T, bin, cfg string) (*exec.Cmd, *lockedBuf) {
	t.Helper()
	out := &lockedBuf{}
	srv := exec.Command(bin, "--config", cfg)
	srv.Stdout, srv.Stderr = out, out
	require.NoError(t, srv.Start())
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	waitFor(t, out, "serving 1 subsystems from "+cfg)
	return srv, out
}
