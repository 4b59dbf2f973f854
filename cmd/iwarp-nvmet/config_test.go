package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
	"github.com/stretchr/testify/require"
)

// A configuration as nvmetcli's saveconfig writes it: the RDMA ports are
// listened on, the TCP one is noted and skipped, the disabled namespace
// is noted and left out, the rest is read as nvmet would serve it.
func TestLoadConfig(t *testing.T) {
	p, err := loadConfig("testdata/nvmetcli.json")
	require.NoError(t, err)
	require.Equal(t, []portPlan{
		{1, "192.168.7.1:4420", []string{"nqn.2024-01.io.example:disk"}, map[uint32]nvme.ANAState{1: nvme.ANAOptimized},
			[]target.Referral{{Addr: "192.168.7.9:4420", PortID: 5}, {Addr: "192.168.7.12:4420", TReq: 1}}},
		{2, "[fd00::7]:4421", []string{"nqn.2024-01.io.example:disk"},
			map[uint32]nvme.ANAState{1: nvme.ANANonOptimized, 2: nvme.ANAOptimized}, nil},
	}, p.ports, "the TCP port 3 is left out")
	require.Len(t, p.subs, 2)
	disk := p.subs[0]
	require.Equal(t, "nqn.2024-01.io.example:disk", disk.nqn)
	require.Equal(t, "8bf1b0c7a3e5d2f4", disk.serial)
	require.Equal(t, "Linux", disk.model)
	require.False(t, disk.anyHost)
	require.Equal(t, []string{"nqn.2014-08.org.nvmexpress:uuid:7d6e1c2a-3b4f-4a5e-9c8d-112233445566"}, disk.hosts)
	require.Len(t, disk.ns, 2, "namespace 7 is disabled")
	require.EqualValues(t, 1, disk.ns[0].id)
	require.Equal(t, "/dev/nvme0n1", disk.ns[0].path)
	require.Equal(t, [16]byte{}, disk.ns[0].nguid, "nvmet's zero NGUID: the target derives one")
	require.Equal(t, [16]byte{0x5c, 0x2b, 0x6a, 0x1e, 0x0d, 0x4f, 0x4e, 0x3a, 0x8b, 0x7c, 0x9d, 0x0e, 0x1f, 0x2a, 0x3b, 0x4c}, disk.ns[0].uuid)
	require.EqualValues(t, 1, disk.ns[0].anaGroup)
	require.EqualValues(t, 3, disk.ns[1].id, "sorted by NSID")
	require.EqualValues(t, 2, disk.ns[1].anaGroup)
	require.False(t, disk.ns[0].resv)
	require.True(t, disk.ns[1].resv, "resv enable 1: reservations")
	require.Empty(t, disk.ns[0].ptplFile)
	require.Equal(t, "/var/lib/iwarp-nvmet/disk-3.resv", disk.ns[1].ptplFile, "ours: resv.ptpl_file")
	require.Equal(t, [16]byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01}, disk.ns[1].nguid)
	scratch := p.subs[1]
	require.True(t, scratch.anyHost)
	require.Empty(t, scratch.ns)
	notes := strings.Join(p.notes, "\n")
	require.Contains(t, notes, `port 3: transport "tcp" is not served`)
	require.Contains(t, notes, "namespace 7 is not enabled")
	require.Contains(t, notes, `port 1: referral "spare" is not enabled`)
	require.Contains(t, notes, `port 1: referral "tcp-site": tcp/ipv4 is not listed`)
	require.Contains(t, notes, "subsystem nqn.2024-01.io.example:scratch is linked to no RDMA port: no host can reach it")
	require.Contains(t, notes, `port 1: referral "infiniband": rdma/ib is not listed`)
	require.Len(t, p.notes, 6, "%s", notes)
}

// What cannot be served as written is refused, with the place it is in.
func TestConfigErrors(t *testing.T) {
	port := `{"portid": 1, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": "4420"}}`
	sub := func(ns string) string {
		return `{"nqn": "nqn.2024-01.io.example:a", "attr": {"allow_any_host": "1"}, "namespaces": [` + ns + `]}`
	}
	cfg := func(ports, subs string) string { return `{"ports": [` + ports + `], "subsystems": [` + subs + `]}` }
	for want, text := range map[string]string{
		"no port with trtype rdma": cfg(`{"portid": 1, "addr": {"trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1"}}`, ""),
		"address family \"ib\"":    cfg(`{"portid": 1, "addr": {"trtype": "rdma", "adrfam": "ib", "traddr": "1"}}`, ""),
		"is not an ipv4 address":   cfg(`{"portid": 1, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "fd00::1"}}`, ""),
		"trsvcid \"99999\"":        cfg(`{"portid": 1, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "10.0.0.1", "trsvcid": "99999"}}`, ""),
		"without an nqn":           cfg(port, `{"namespaces": []}`),
		"twice":                    cfg(port, sub("")+","+sub("")),
		"nsid \"0\"":               cfg(port, sub(`{"nsid": 0, "enable": 1, "device": {"path": "/x"}}`)),
		"nsid \"1025\"":            cfg(port, sub(`{"nsid": 1025, "enable": 1, "device": {"path": "/x"}}`)),
		"namespace 2 twice":        cfg(port, sub(`{"nsid": 2, "device": {"path": "/x"}}, {"nsid": 2, "device": {"path": "/y"}}`)),
		"with no device path":      cfg(port, sub(`{"nsid": 2, "enable": 1, "device": {}}`)),
		"nguid: \"12\"":            cfg(port, sub(`{"nsid": 2, "enable": 1, "device": {"path": "/x", "nguid": "12"}}`)),
		"uuid: \"zz":               cfg(port, sub(`{"nsid": 2, "enable": 1, "device": {"path": "/x", "uuid": "zz000000-0000-0000-0000-000000000000"}}`)),
		"passthru":                 cfg(port, `{"nqn": "nqn.2024-01.io.example:a", "passthru": [{"device": {"path": "/dev/nvme0"}}]}`),
		"portid \"0\"":             cfg(`{"portid": 0, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "127.0.0.1"}}`, ""),
		"port 1 twice":             cfg(port+","+port, ""),
		"ports 1 and 2 are both on 127.0.0.1:4420": cfg(port+","+strings.Replace(port, `"portid": 1`, `"portid": 2`, 1), ""),
		"which the file does not define":           cfg(`{"portid": 1, "subsystems": ["nqn.2024-01.io.example:nope"], "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "127.0.0.1"}}`, ""),
		"want a string, number":                    cfg(port, sub(`{"nsid": [1]}`)),
		"unexpected EOF":                           `{"ports": [`,
		"ana_grpid \"129\"":                        cfg(port, sub(`{"nsid": 2, "enable": 1, "ana_grpid": 129, "device": {"path": "/x"}}`)),
		"referral \"r\": traddr \"10.0.0.x\"":      cfg(`{"portid": 1, "referrals": [{"name": "r", "enable": 1, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "10.0.0.x", "portid": "2"}}], "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "127.0.0.1"}}`, ""),
		"referral \"r\": portid \"x\"":             cfg(`{"portid": 1, "referrals": [{"name": "r", "enable": 1, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "10.0.0.1", "portid": "x"}}], "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "127.0.0.1"}}`, ""),
		"referral \"r\": treq \"maybe\"":           cfg(`{"portid": 1, "referrals": [{"name": "r", "enable": 1, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "10.0.0.1", "treq": "maybe"}}], "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "127.0.0.1"}}`, ""),
		"referral \"r\" twice":                     cfg(`{"portid": 1, "referrals": [{"name": "r", "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "10.0.0.1"}}, {"name": "r", "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "10.0.0.2"}}], "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "127.0.0.1"}}`, ""),
		"referral \"\": without a name":            cfg(`{"portid": 1, "referrals": [{"enable": 1, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "10.0.0.1", "portid": "2"}}], "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "127.0.0.1"}}`, ""),
		"ptpl_file without resv.enable":            cfg(port, sub(`{"nsid": 2, "enable": 1, "device": {"path": "/x"}, "resv": {"ptpl_file": "/y"}}`)),
		"resv.ptpl_file /y is subsystem nqn.2024-01.io.example:a namespace 2's too": cfg(port, sub(`{"nsid": 2, "enable": 1, "device": {"path": "/x"}, "resv": {"enable": 1, "ptpl_file": "/y"}},
			{"nsid": 3, "enable": 1, "device": {"path": "/x"}, "resv": {"enable": 1, "ptpl_file": "/y"}}`)),
		"ANA group \"0\"":                 cfg(`{"portid": 1, "ana_groups": [{"grpid": 0, "ana": {"state": "optimized"}}], "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "127.0.0.1"}}`, ""),
		"ANA group 2 twice":               cfg(`{"portid": 1, "ana_groups": [{"grpid": 2, "ana": {"state": "optimized"}}, {"grpid": 2, "ana": {"state": "change"}}], "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "127.0.0.1"}}`, ""),
		"\"standby\" is not an ANA state": cfg(`{"portid": 1, "ana_groups": [{"grpid": 3, "ana": {"state": "standby"}}], "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "127.0.0.1"}}`, ""),
	} {
		path := filepath.Join(t.TempDir(), "config.json")
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
		_, err := loadConfig(path)
		require.ErrorContains(t, err, want, "%s", text)
		require.ErrorContains(t, err, path, "the error names the file")
	}
	_, err := loadConfig(filepath.Join(t.TempDir(), "none.json"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// Values as configfs and hand-written files give them.
func TestConfigValues(t *testing.T) {
	for _, v := range []cfsValue{"1", "Y", "y", "yes", "on", "true", " 1\n"} {
		require.True(t, v.on(), "%q", v)
	}
	for _, v := range []cfsValue{"0", "", "N", "no", "2"} {
		require.False(t, v.on(), "%q", v)
	}
	var v cfsValue
	for in, want := range map[string]cfsValue{`"7"`: "7", `7`: "7", `true`: "1", `false`: "0"} {
		require.NoError(t, v.UnmarshalJSON([]byte(in)))
		require.Equal(t, want, v, in)
	}
	id, err := parseID("5c2b6a1e:0d4f:4e3a:8b7c:9d0e1f2a3b4c")
	require.NoError(t, err)
	require.EqualValues(t, 0x5c, id[0])
	require.EqualValues(t, 0x4c, id[15])
	_, err = parseID("5c2b6a1e-0d4f-4e3a-8b7c-9d0e1f2a3b4c00")
	require.Error(t, err, "17 octets")
}

// Any file: a clear error or a plan that keeps the checks' promises, never
// a panic.
func FuzzConfig(f *testing.F) {
	seed, err := os.ReadFile("testdata/nvmetcli.json")
	require.NoError(f, err)
	f.Add(seed)
	f.Add([]byte(`{"ports": [{"portid": 1, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "10.0.0.1"}}],
"subsystems": [{"nqn": "nqn.2024-01.io.example:a", "attr": {"allow_any_host": true},
"namespaces": [{"nsid": "2", "enable": "1", "device": {"path": "/x", "nguid": "00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff"}}]}]}`))
	f.Add([]byte(`{"ports": [{"portid": 1, "addr": {"trtype": "rdma", "adrfam": "ipv6", "traddr": "::1", "trsvcid": 7}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var cfg nvmetConfig
		if json.Unmarshal(b, &cfg) != nil {
			return
		}
		p, err := cfg.plan()
		if err != nil {
			return
		}
		require.NotEmpty(t, p.ports)
		defined := map[string]bool{}
		for _, s := range p.subs {
			defined[s.nqn] = true
		}
		ids := map[uint16]bool{}
		for _, pp := range p.ports {
			require.NotZero(t, pp.id)
			require.False(t, ids[pp.id], "port %d twice", pp.id)
			ids[pp.id] = true
			for _, nqn := range pp.subs {
				require.True(t, defined[nqn], "port %d links %s", pp.id, nqn)
			}
			for g, s := range pp.ana {
				require.True(t, g >= 1 && g <= nvme.MaxANAGroup, "ANA group %d", g)
				_, err := nvme.ParseANAState(s.String())
				require.NoError(t, err, "a state nvmet names")
			}
		}
		nqns := map[string]bool{}
		for _, s := range p.subs {
			require.NotEmpty(t, s.nqn)
			require.False(t, nqns[s.nqn], "subsystem %s twice", s.nqn)
			nqns[s.nqn] = true
			require.True(t, slices.IsSorted(s.hosts))
			for i, n := range s.ns {
				require.True(t, n.id >= 1 && n.id <= maxNSID, "nsid %d", n.id)
				require.True(t, n.anaGroup >= 1 && n.anaGroup <= nvme.MaxANAGroup, "ANA group %d", n.anaGroup)
				require.NotEmpty(t, n.path)
				if i > 0 {
					require.Greater(t, n.id, s.ns[i-1].id, "NSIDs in order, once each")
				}
			}
		}
	})
}
