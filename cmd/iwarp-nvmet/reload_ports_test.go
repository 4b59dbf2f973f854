package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
)

// portJSON is a port of an nvmetcli configuration: its ID, address, the
// subsystems linked to it, and its ana_groups (group: state).
type portJSON struct {
	id    int
	addr  string
	links []string
	ana   map[int]string
}

func (p portJSON) String() string {
	host, port, _ := strings.Cut(p.addr, ":")
	links, _ := json.Marshal(p.links)
	var groups []string
	for g, s := range p.ana {
		groups = append(groups, fmt.Sprintf(`{"ana": {"state": %q}, "grpid": %d}`, s, g))
	}
	sort.Strings(groups)
	return fmt.Sprintf(`{"addr": {"adrfam": "ipv4", "traddr": %q, "treq": "not specified", "trsvcid": %q, "trtype": "rdma"},
"ana_groups": [%s], "param": {}, "portid": %d, "referrals": [], "subsystems": %s}`, host, port, strings.Join(groups, ","), p.id, links)
}

func writePortsConfig(t *testing.T, path string, ports []portJSON, subs ...string) {
	t.Helper()
	var ps []string
	for _, p := range ports {
		ps = append(ps, p.String())
	}
	text := fmt.Sprintf(`{"hosts": [], "ports": [%s], "subsystems": [%s]}`, strings.Join(ps, ","), strings.Join(subs, ","))
	require.NoError(t, os.WriteFile(path+".tmp", []byte(text), 0o644))
	require.NoError(t, os.Rename(path+".tmp", path))
}

func nsJSONGroup(id int, path string, group int) string {
	return fmt.Sprintf(`{"ana_grpid": %d, "device": {"nguid": "", "path": %q, "uuid": ""}, "enable": 1, "nsid": %d}`, group, path, id)
}

// The binary's ports and ANA states changed by SIGHUP, as an administrator
// changes nvmet's: a path taken out of service (its ANA group made
// inaccessible: the host's I/O there gets the path status, the log says
// so) while a new port opens as the other path; a namespace moved to
// another group; then a port removed (its host disconnected) and another
// moved to a new address.
func TestServeConfigReloadPortsANA(t *testing.T) {
	t.Cleanup(test.CheckRoutines(t))
	bin := build(t)
	dir := t.TempDir()
	d1, d2 := filepath.Join(dir, "d1.img"), filepath.Join(dir, "d2.img")
	for _, d := range []string{d1, d2} {
		require.NoError(t, os.WriteFile(d, make([]byte, 4<<20), 0o644))
	}
	const nqn = "nqn.2024-01.io.goiwarp:ana"
	addr1, addr2, addr3 := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := filepath.Join(dir, "config.json")
	sub := func(g2 int) string { return subJSON(nqn, 1, nil, nsJSONGroup(1, d1, 1), nsJSONGroup(2, d2, g2)) }
	writePortsConfig(t, cfg, []portJSON{{1, addr1, []string{nqn}, map[int]string{1: "optimized", 2: "non-optimized"}}}, sub(2))

	var out lockedBuf
	srv := exec.Command(bin, "--config", cfg)
	srv.Stdout, srv.Stderr = &out, &out
	require.NoError(t, srv.Start())
	defer srv.Process.Kill()
	waitFor(t, &out, "serving 1 subsystems from "+cfg)
	hup := func() {
		t.Helper()
		n := strings.Count(out.String(), "reloaded "+cfg)
		require.NoError(t, srv.Process.Signal(syscall.SIGHUP))
		require.Eventually(t, func() bool { return strings.Count(out.String(), "reloaded "+cfg) > n }, 20*time.Second, 10*time.Millisecond,
			"no reload in:\n%s", out.String())
		require.NotContains(t, out.String(), "not all of it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c1, err := host.Connect(ctx, "tcp", addr1, nqn, host.Config{IOQueues: 1})
	require.NoError(t, err)
	defer c1.Close()
	l, err := c1.ANALog(ctx)
	require.NoError(t, err)
	require.Equal(t, []nvme.ANAGroupDesc{{ID: 1, State: nvme.ANAOptimized, NSIDs: []uint32{1}},
		{ID: 2, State: nvme.ANANonOptimized, NSIDs: []uint32{2}}}, l.Groups)
	n1, err := c1.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = n1.WriteAt(make([]byte, 4096), 0)
	require.NoError(t, err)

	// Port 1 out of service (group 1 inaccessible, group 2 back to the
	// default), port 2 opened as the other path; namespace 2 to group 3.
	writePortsConfig(t, cfg, []portJSON{
		{1, addr1, []string{nqn}, map[int]string{1: "inaccessible"}},
		{2, addr2, []string{nqn}, map[int]string{1: "optimized", 3: "non-optimized"}},
	}, sub(3))
	hup()
	l, err = c1.ANALog(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, l.ChangeCount, "two states and a group changed")
	require.Equal(t, []nvme.ANAGroupDesc{{ID: 1, State: nvme.ANAInaccessible, ChangeCount: 3, NSIDs: []uint32{1}},
		{ID: 3, State: nvme.ANAInaccessible, ChangeCount: 3, NSIDs: []uint32{2}}}, l.Groups, "through port 1, after the reload")
	_, err = n1.WriteAt(make([]byte, 4096), 0)
	var se *nvme.StatusError
	require.True(t, errors.As(err, &se), "%v", err)
	require.Equal(t, nvme.StatusANAInaccessible, se.Status)
	c2, err := host.Connect(ctx, "tcp", addr2, nqn, host.Config{IOQueues: 1})
	require.NoError(t, err, "the port opened by the reload")
	defer c2.Close()
	l, err = c2.ANALog(ctx)
	require.NoError(t, err)
	require.Equal(t, nvme.ANAOptimized, l.Groups[0].State)
	require.Equal(t, nvme.ANANonOptimized, l.Groups[1].State)
	m1, err := c2.Namespace(ctx, 1)
	require.NoError(t, err)
	w := []byte(strings.Repeat("path 2 ", 4096/7+1)[:4096])
	_, err = m1.WriteAt(w, 8192)
	require.NoError(t, err)
	require.NoError(t, m1.Flush(ctx))
	got, err := os.ReadFile(d1)
	require.NoError(t, err)
	require.Equal(t, w, got[8192:8192+4096])

	// Port 1 removed, port 2 moved: both hosts lose their queues; the
	// subsystem is on the new address only.
	writePortsConfig(t, cfg, []portJSON{{2, addr3, []string{nqn}, nil}}, sub(3))
	hup()
	for _, c := range []*host.Controller{c1, c2} {
		select {
		case <-c.IOQueueDone(0):
		case <-time.After(10 * time.Second):
			t.Fatal("a host kept its queue through a port closed")
		}
	}
	for _, a := range []string{addr1, addr2} {
		_, err := host.Connect(ctx, "tcp", a, nqn, host.Config{})
		require.Error(t, err, "nothing listens on %s", a)
	}
	c3, err := host.Connect(ctx, "tcp", addr3, nqn, host.Config{})
	require.NoError(t, err)
	l, err = c3.ANALog(ctx)
	require.NoError(t, err)
	require.Equal(t, nvme.ANAOptimized, l.Groups[0].State, "a port with no ana_groups: nvmet's default")
	require.NoError(t, c3.Close())

	require.NoError(t, srv.Process.Signal(syscall.SIGTERM))
	require.NoError(t, srv.Wait(), "exit status after SIGTERM:\n%s", out.String())
	t.Logf("target log:\n%s", out.String())
}
