package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/require"
)

// reloadConfig writes an nvmetcli configuration: one RDMA port, with every
// subsystem given (JSON objects, subJSON) linked to it.
func reloadConfig(t *testing.T, path, addr string, subs ...string) {
	t.Helper()
	var nqns []string
	for _, s := range subs {
		var v struct{ NQN string }
		require.NoError(t, json.Unmarshal([]byte(s), &v))
		nqns = append(nqns, v.NQN)
	}
	reloadConfigLinks(t, path, addr, nqns, subs...)
}

// reloadConfigLinks is reloadConfig with the port linking the subsystems
// named in links only.
func reloadConfigLinks(t *testing.T, path, addr string, links []string, subs ...string) {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	if links == nil {
		links = []string{}
	}
	linked, _ := json.Marshal(links)
	text := fmt.Sprintf(`{"hosts": [], "ports": [{"addr": {"adrfam": "ipv4", "traddr": %q, "treq": "not specified", "trsvcid": %q, "trtype": "rdma"},
"portid": 1, "referrals": [], "subsystems": %s}], "subsystems": [%s]}`, host, port, linked, strings.Join(subs, ","))
	require.NoError(t, os.WriteFile(path+".tmp", []byte(text), 0o644))
	require.NoError(t, os.Rename(path+".tmp", path))
}

func nsJSON(id int, enable int, path, nguid string) string {
	return fmt.Sprintf(`{"ana_grpid": 1, "device": {"nguid": %q, "path": %q, "uuid": ""}, "enable": %d, "nsid": %d}`, nguid, path, enable, id)
}

func subJSON(nqn string, anyHost int, hosts []string, ns ...string) string {
	if hosts == nil {
		hosts = []string{}
	}
	h, _ := json.Marshal(hosts)
	return fmt.Sprintf(`{"allowed_hosts": %s, "attr": {"allow_any_host": "%d", "model": "Linux", "serial": "0123456789abcdef"}, "namespaces": [%s], "nqn": %q}`,
		h, anyHost, strings.Join(ns, ","), nqn)
}

func discovered(t *testing.T, ctx context.Context, addr, hostNQN string) []string {
	t.Helper()
	ents, err := host.Discover(ctx, "tcp", addr, host.Config{HostNQN: hostNQN})
	require.NoError(t, err)
	var nqns []string
	for _, e := range ents {
		nqns = append(nqns, e.SubNQN)
	}
	slices.Sort(nqns)
	return nqns
}

// The binary serving a saved nvmetcli configuration, changed under it: on
// SIGHUP a namespace disabled and another enabled reach the connected Go
// host as namespace notices, with the data where the files are; a new
// subsystem admits only its allowed host; a file that does not parse
// changes nothing; a subsystem taken out disconnects its host; SIGTERM
// ends it all.
func TestServeConfigReload(t *testing.T) {
	t.Cleanup(test.CheckRoutines(t))
	bin := build(t)
	dir := t.TempDir()
	disk := func(name string, size int) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, make([]byte, size), 0o644))
		return p
	}
	d1, d2, d3, d4 := disk("d1.img", 8<<20), disk("d2.img", 4<<20), disk("d3.img", 4<<20), disk("d4.img", 4<<20)
	bs, err := deviceBlockSize(d3)
	require.NoError(t, err)
	const nqnA, nqnB = "nqn.2024-01.io.goiwarp:cfg-a", "nqn.2024-01.io.goiwarp:cfg-b"
	const hostX = "nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-0000-4000-8000-00000000000c"
	const nguid3 = "11223344-5566-7788-99aa-bbccddeeff03"
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := filepath.Join(dir, "config.json")
	reloadConfig(t, cfg, addr, subJSON(nqnA, 1, nil, nsJSON(1, 1, d1, ""), nsJSON(3, 1, d3, nguid3)))

	var out lockedBuf
	srv := exec.Command(bin, "--config", cfg)
	srv.Stdout, srv.Stderr = &out, &out
	require.NoError(t, srv.Start())
	defer srv.Process.Kill()
	waitFor(t, &out, "serving 1 subsystems from "+cfg)
	require.Contains(t, out.String(), fmt.Sprintf("namespace 3: %d blocks of %d octets (%s)", (4<<20)/bs, bs, d3))
	hup := func(want string) {
		t.Helper()
		n := strings.Count(out.String(), want)
		require.NoError(t, srv.Process.Signal(syscall.SIGHUP))
		require.Eventually(t, func() bool { return strings.Count(out.String(), want) > n }, 20*time.Second, 10*time.Millisecond,
			"waiting for %q in:\n%s", want, out.String())
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := host.Connect(ctx, "tcp", addr, nqnA, host.Config{IOQueues: 1, WatchNamespaces: true})
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, []uint32{1, 3}, active(t, ctx, c))
	h3, err := c.Namespace(ctx, 3)
	require.NoError(t, err)
	id, _ := parseID(nguid3)
	require.Equal(t, id, h3.Info.NGUID, "the configuration's NGUID")
	w := bytes.Repeat([]byte("ns3"), 2*bs/3+1)[:2*bs]
	_, err = h3.WriteAt(w, int64(bs))
	require.NoError(t, err)
	require.NoError(t, h3.Flush(ctx))
	got, err := os.ReadFile(d3)
	require.NoError(t, err)
	require.Equal(t, w, got[bs:3*bs])

	// Namespace 3 disabled, 2 enabled; subsystem B for host X only.
	reloadConfig(t, cfg, addr,
		subJSON(nqnA, 1, nil, nsJSON(1, 1, d1, ""), nsJSON(2, 1, d2, ""), nsJSON(3, 0, d3, nguid3)),
		subJSON(nqnB, 0, []string{hostX}, nsJSON(1, 1, d4, "")))
	hup("reloaded " + cfg)
	changed := map[uint32]bool{}
	for !changed[2] || !changed[3] {
		ids, err := c.WaitNamespaceChange(ctx)
		require.NoError(t, err, "changes so far %v", changed)
		for _, id := range ids {
			changed[id] = true
		}
	}
	require.Equal(t, []uint32{1, 2}, active(t, ctx, c))
	_, err = h3.ReadAt(make([]byte, bs), 0)
	require.Error(t, err, "namespace 3 is gone")
	require.Equal(t, []string{nqnA, nqnB}, discovered(t, ctx, addr, hostX))
	require.Equal(t, []string{nqnA}, discovered(t, ctx, addr, ""), "B admits host X only")
	_, err = host.Connect(ctx, "tcp", addr, nqnB, host.Config{})
	require.Error(t, err)
	cB, err := host.Connect(ctx, "tcp", addr, nqnB, host.Config{HostNQN: hostX, IOQueues: 1})
	require.NoError(t, err)
	defer cB.Close()
	hB, err := cB.Namespace(ctx, 1)
	require.NoError(t, err)
	_, err = hB.WriteAt(w, 0)
	require.NoError(t, err)

	// A file cut short: nothing changes.
	require.NoError(t, os.WriteFile(cfg, []byte(`{"ports": [`), 0o644))
	hup("nothing changed")
	require.Equal(t, []string{nqnA, nqnB}, discovered(t, ctx, addr, hostX))

	// Subsystem B taken out: its host loses its queues; A carries on.
	reloadConfig(t, cfg, addr, subJSON(nqnA, 1, nil, nsJSON(1, 1, d1, ""), nsJSON(2, 1, d2, "")))
	hup("reloaded " + cfg)
	require.Contains(t, out.String(), "removed subsystem "+nqnB)
	select {
	case <-cB.IOQueueDone(0):
	case <-time.After(10 * time.Second):
		t.Fatal("the removed subsystem's host kept its queue")
	}
	require.Equal(t, []string{nqnA}, discovered(t, ctx, addr, hostX))
	got, err = os.ReadFile(d4)
	require.NoError(t, err)
	require.Equal(t, w, got[:len(w)], "B's write reached its file")
	h2, err := c.Namespace(ctx, 2)
	require.NoError(t, err)
	_, err = h2.WriteAt(w, 0)
	require.NoError(t, err)

	// Subsystem A unlinked from the port: its host is disconnected, as
	// nvmet disconnects the controllers of a subsystem unlinked from the
	// port they came through.
	reloadConfigLinks(t, cfg, addr, nil, subJSON(nqnA, 1, nil, nsJSON(1, 1, d1, ""), nsJSON(2, 1, d2, "")))
	hup("reloaded " + cfg)
	require.Contains(t, out.String(), "port 1 now links")
	select {
	case <-c.IOQueueDone(0):
	case <-time.After(10 * time.Second):
		t.Fatal("the host of the unlinked subsystem kept its queue")
	}
	require.Empty(t, discovered(t, ctx, addr, hostX))
	_, err = host.Connect(ctx, "tcp", addr, nqnA, host.Config{})
	require.Error(t, err, "A is on no port")

	require.NoError(t, srv.Process.Signal(syscall.SIGTERM))
	require.NoError(t, srv.Wait(), "exit status after SIGTERM:\n%s", out.String())
	require.Contains(t, out.String(), "stopped")
	got, err = os.ReadFile(d2)
	require.NoError(t, err)
	require.Equal(t, w, got[:len(w)])
	t.Logf("target log:\n%s", out.String())
}

func active(t *testing.T, ctx context.Context, c *host.Controller) []uint32 {
	t.Helper()
	list := make([]byte, nvme.IdentifySize)
	require.NoError(t, c.Identify(ctx, nvme.CNSActiveNSList, 0, list))
	var ids []uint32
	for i := 0; i < len(list) && binary.LittleEndian.Uint32(list[i:]) != 0; i += 4 {
		ids = append(ids, binary.LittleEndian.Uint32(list[i:]))
	}
	return ids
}
