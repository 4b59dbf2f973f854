package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/goiwarp/iwarp/nvmeof/target"
)

// nvmetConfig is a saved configuration of Linux's nvmet as nvmetcli's
// saveconfig writes it (/etc/nvmet/config.json) and its restore reads it:
// the configfs tree under /sys/kernel/config/nvmet as JSON, each
// attribute a string as configfs shows it.
type nvmetConfig struct {
	Hosts      []nvmetHost      `json:"hosts"`
	Ports      []nvmetPort      `json:"ports"`
	Subsystems []nvmetSubsystem `json:"subsystems"`
}

type nvmetHost struct {
	NQN string `json:"nqn"`
}

type nvmetPort struct {
	PortID     cfsValue            `json:"portid"`
	Addr       map[string]cfsValue `json:"addr"` // adrfam, traddr, treq, trsvcid, trtype
	Subsystems []string            `json:"subsystems"`
	ANAGroups  []nvmetANAGroup     `json:"ana_groups"`
	Referrals  []nvmetReferral     `json:"referrals"`
}

// nvmetReferral is a port's referrals/<name> directory: another discovery
// service (addr: adrfam, portid, traddr, treq, trsvcid, trtype), listed
// once enabled.
type nvmetReferral struct {
	Name   string              `json:"name"`
	Addr   map[string]cfsValue `json:"addr"`
	Enable cfsValue            `json:"enable"`
}

// nvmetANAGroup is a port's ana_groups/<grpid> directory: the group's
// state through the port (ana.state).
type nvmetANAGroup struct {
	GrpID cfsValue            `json:"grpid"`
	ANA   map[string]cfsValue `json:"ana"`
}

type nvmetSubsystem struct {
	NQN          string              `json:"nqn"`
	Attr         map[string]cfsValue `json:"attr"` // allow_any_host, serial, model, ...
	AllowedHosts []string            `json:"allowed_hosts"`
	Namespaces   []nvmetNamespace    `json:"namespaces"`
	Passthru     []json.RawMessage   `json:"passthru"`
}

type nvmetNamespace struct {
	NSID     cfsValue            `json:"nsid"`
	Enable   cfsValue            `json:"enable"`
	Device   map[string]cfsValue `json:"device"`    // path, nguid, uuid, ...
	ANAGrpID cfsValue            `json:"ana_grpid"` // 0 or none: 1
	Resv     map[string]cfsValue `json:"resv"`      // enable: reservations (nvmet's resv_enable); ptpl_file: ours
}

// cfsValue is a configfs attribute: nvmetcli writes strings, and numbers
// for nsid, portid and enable; a configuration written by hand may use
// either, or true and false.
type cfsValue string

func (v *cfsValue) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*v = cfsValue(s)
		return nil
	}
	var n json.Number
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&n); err == nil {
		*v = cfsValue(n)
		return nil
	}
	var f bool
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("want a string, number or boolean, not %s", b)
	}
	*v = "0"
	if f {
		*v = "1"
	}
	return nil
}

// on reads a configfs boolean ("1", "Y", "y", as the kernel's kstrtobool).
func (v cfsValue) on() bool {
	s := strings.TrimSpace(string(v))
	return s == "1" || strings.EqualFold(s, "y") || strings.EqualFold(s, "yes") || strings.EqualFold(s, "on") ||
		strings.EqualFold(s, "true")
}

// plan is what a configuration asks iwarp-nvmet to serve, checked.
type plan struct {
	ports []portPlan // the RDMA ports
	subs  []subPlan
	notes []string // what the configuration has that is not applied
}

// portPlan is an RDMA port: its ID, host:port, the subsystems linked to
// it (sorted), the only ones a host reaches through it, and the states of
// the ANA groups the file sets through it.
type portPlan struct {
	id   uint16
	addr string
	subs []string
	ana  map[uint32]nvme.ANAState
	refs []target.Referral
}

type subPlan struct {
	nqn, serial, model string
	anyHost            bool
	hosts              []string
	ns                 []nsPlan // enabled namespaces, by NSID
}

type nsPlan struct {
	id          uint32
	path        string
	nguid, uuid [16]byte
	anaGroup    uint32 // changed by a reload without taking the namespace away
	resv        bool   // reservations
	ptplFile    string // where they persist through power loss ("": they do not)
}

// maxNSID is the target's NN: the highest NSID a namespace may have.
const maxNSID = 1024

// loadConfig reads and checks an nvmetcli configuration. Anything it
// cannot serve is an error, so that a typo is not served as something
// else; what it can ignore (attributes with no meaning here, TCP ports)
// goes into the plan's notes.
func loadConfig(path string) (*plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg nvmetConfig
	d := json.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p, err := cfg.plan()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

func (cfg *nvmetConfig) plan() (*plan, error) {
	p := &plan{}
	linked := map[string]bool{}
	ids := map[uint64]bool{}
	addrs := map[string]uint16{}
	for _, pt := range cfg.Ports {
		id, err := strconv.ParseUint(string(pt.PortID), 10, 16)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("portid %q: want 1 to 65535", pt.PortID)
		}
		if ids[id] {
			return nil, fmt.Errorf("port %d twice", id)
		}
		ids[id] = true
		tr := string(pt.Addr["trtype"])
		if tr != "rdma" {
			p.notes = append(p.notes, fmt.Sprintf("port %s: transport %q is not served (iwarp-nvmet is NVMe/RDMA)", pt.PortID, tr))
			continue
		}
		fam := string(pt.Addr["adrfam"])
		if fam != "ipv4" && fam != "ipv6" {
			return nil, fmt.Errorf("port %s: address family %q: want ipv4 or ipv6", pt.PortID, fam)
		}
		addr, svc := string(pt.Addr["traddr"]), string(pt.Addr["trsvcid"])
		if svc == "" {
			svc = "4420"
		}
		ip := net.ParseIP(addr)
		if ip == nil || (ip.To4() != nil) != (fam == "ipv4") {
			return nil, fmt.Errorf("port %s: traddr %q is not an %s address", pt.PortID, addr, fam)
		}
		if n, err := strconv.Atoi(svc); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("port %s: trsvcid %q is not a TCP port", pt.PortID, svc)
		}
		pp := portPlan{id: uint16(id), addr: net.JoinHostPort(addr, svc),
			subs: slices.Compact(slices.Sorted(slices.Values(pt.Subsystems))), ana: map[uint32]nvme.ANAState{}}
		for _, g := range pt.ANAGroups {
			grp, err := anaGroup(g.GrpID)
			if err != nil || g.GrpID == "" || grp == 0 {
				return nil, fmt.Errorf("port %d: ANA group %q: want 1 to %d", id, g.GrpID, nvme.MaxANAGroup)
			}
			if _, ok := pp.ana[grp]; ok {
				return nil, fmt.Errorf("port %d: ANA group %d twice", id, grp)
			}
			st, err := nvme.ParseANAState(string(g.ANA["state"]))
			if err != nil {
				return nil, fmt.Errorf("port %d: ANA group %d: %w", id, grp, err)
			}
			pp.ana[grp] = st
		}
		names := map[string]bool{}
		for _, r := range pt.Referrals {
			if names[r.Name] {
				return nil, fmt.Errorf("port %d: referral %q twice", id, r.Name)
			}
			names[r.Name] = true
			ref, err := referral(r)
			switch {
			case err != nil:
				return nil, fmt.Errorf("port %d: referral %q: %w", id, r.Name, err)
			case !r.Enable.on():
				p.notes = append(p.notes, fmt.Sprintf("port %d: referral %q is not enabled", id, r.Name))
			case ref == nil:
				p.notes = append(p.notes, fmt.Sprintf("port %d: referral %q: %s/%s is not listed (NVMe/RDMA over IP only)",
					id, r.Name, r.Addr["trtype"], r.Addr["adrfam"]))
			default:
				pp.refs = append(pp.refs, *ref)
			}
		}
		if other, dup := addrs[pp.addr]; dup {
			return nil, fmt.Errorf("ports %d and %d are both on %s", other, id, pp.addr)
		}
		addrs[pp.addr] = pp.id
		for _, s := range pp.subs {
			linked[s] = true
		}
		p.ports = append(p.ports, pp)
	}
	if len(p.ports) == 0 {
		return nil, errors.New("no port with trtype rdma")
	}
	seen := map[string]bool{}
	ptplFiles := map[string]string{} // absolute path → the namespace it is
	for _, s := range cfg.Subsystems {
		if s.NQN == "" {
			return nil, errors.New("a subsystem without an nqn")
		}
		if seen[s.NQN] {
			return nil, fmt.Errorf("subsystem %s twice", s.NQN)
		}
		seen[s.NQN] = true
		if len(s.Passthru) > 0 {
			return nil, fmt.Errorf("subsystem %s: passthru controllers are not served", s.NQN)
		}
		sp := subPlan{nqn: s.NQN, serial: string(s.Attr["serial"]), model: string(s.Attr["model"]),
			anyHost: s.Attr["allow_any_host"].on(), hosts: slices.Compact(slices.Sorted(slices.Values(s.AllowedHosts)))}
		if !sp.anyHost && len(sp.hosts) == 0 {
			p.notes = append(p.notes, fmt.Sprintf("subsystem %s admits no host (allow_any_host 0, no allowed_hosts)", s.NQN))
		}
		if !linked[s.NQN] {
			p.notes = append(p.notes, fmt.Sprintf("subsystem %s is linked to no RDMA port: no host can reach it", s.NQN))
		}
		ids := map[uint32]bool{}
		for _, n := range s.Namespaces {
			id, err := strconv.ParseUint(string(n.NSID), 10, 32)
			if err != nil || id == 0 || id > maxNSID {
				return nil, fmt.Errorf("subsystem %s: nsid %q: want 1 to %d", s.NQN, n.NSID, maxNSID)
			}
			if ids[uint32(id)] {
				return nil, fmt.Errorf("subsystem %s: namespace %d twice", s.NQN, id)
			}
			ids[uint32(id)] = true
			if !n.Enable.on() {
				p.notes = append(p.notes, fmt.Sprintf("subsystem %s: namespace %d is not enabled", s.NQN, id))
				continue
			}
			np := nsPlan{id: uint32(id), path: string(n.Device["path"])}
			if np.anaGroup, err = anaGroup(n.ANAGrpID); err != nil {
				return nil, fmt.Errorf("subsystem %s: namespace %d: ana_grpid %q: want 1 to %d", s.NQN, id, n.ANAGrpID, nvme.MaxANAGroup)
			}
			np.anaGroup = max(np.anaGroup, 1)
			np.resv = n.Resv["enable"].on()
			np.ptplFile = string(n.Resv["ptpl_file"])
			if np.ptplFile != "" && !np.resv {
				return nil, fmt.Errorf("subsystem %s: namespace %d: resv.ptpl_file without resv.enable", s.NQN, id)
			}
			if np.ptplFile != "" {
				abs, err := filepath.Abs(np.ptplFile)
				if err != nil {
					return nil, fmt.Errorf("subsystem %s: namespace %d: resv.ptpl_file: %w", s.NQN, id, err)
				}
				here := fmt.Sprintf("subsystem %s namespace %d", s.NQN, id)
				if other, dup := ptplFiles[abs]; dup {
					return nil, fmt.Errorf("%s: resv.ptpl_file %s is %s's too", here, np.ptplFile, other)
				}
				ptplFiles[abs] = here
			}
			if np.path == "" {
				return nil, fmt.Errorf("subsystem %s: namespace %d is enabled with no device path", s.NQN, id)
			}
			if np.nguid, err = parseID(string(n.Device["nguid"])); err != nil {
				return nil, fmt.Errorf("subsystem %s: namespace %d: nguid: %w", s.NQN, id, err)
			}
			if np.uuid, err = parseID(string(n.Device["uuid"])); err != nil {
				return nil, fmt.Errorf("subsystem %s: namespace %d: uuid: %w", s.NQN, id, err)
			}
			sp.ns = append(sp.ns, np)
		}
		slices.SortFunc(sp.ns, func(a, b nsPlan) int { return int(a.id) - int(b.id) })
		p.subs = append(p.subs, sp)
	}
	for _, pp := range p.ports {
		for _, nqn := range pp.subs {
			if !seen[nqn] {
				return nil, fmt.Errorf("port %d links subsystem %s, which the file does not define", pp.id, nqn)
			}
		}
	}
	return p, nil
}

// anaGroup reads an ANA group ID: 0 .. nvme.MaxANAGroup (nvmet's range;
// 0, or none, is what nvmetcli writes for a kernel without ANA).
func anaGroup(v cfsValue) (uint32, error) {
	if v == "" {
		return 0, nil
	}
	g, err := strconv.ParseUint(string(v), 10, 32)
	if err != nil || g > nvme.MaxANAGroup {
		return 0, fmt.Errorf("ANA group %q", v)
	}
	return uint32(g), nil
}

// parseID reads an NGUID or UUID as configfs shows them
// (5e0f0f7e-1a2b-...): 32 hex digits, dashes or colons anywhere between
// pairs. Empty is zero (the target derives one).
func parseID(s string) ([16]byte, error) {
	var id [16]byte
	if s == "" {
		return id, nil
	}
	h := strings.NewReplacer("-", "", ":", "").Replace(s)
	if len(h) != 32 {
		return id, fmt.Errorf("%q: want 16 octets in hex", s)
	}
	if _, err := hex.Decode(id[:], []byte(h)); err != nil {
		return id, fmt.Errorf("%q: %w", s, err)
	}
	return id, nil
}

// referral reads a referral's address, or nil for a transport or address
// family the discovery log here does not list (nvmet would).
func referral(r nvmetReferral) (*target.Referral, error) {
	if r.Name == "" {
		return nil, errors.New("without a name")
	}
	fam, addr, svc := string(r.Addr["adrfam"]), string(r.Addr["traddr"]), string(r.Addr["trsvcid"])
	if tr := string(r.Addr["trtype"]); tr != "rdma" || fam != "ipv4" && fam != "ipv6" {
		return nil, nil
	}
	if svc == "" {
		svc = "4420"
	}
	if ip := net.ParseIP(addr); ip == nil || (ip.To4() != nil) != (fam == "ipv4") {
		return nil, fmt.Errorf("traddr %q is not an %s address", addr, fam)
	}
	if n, err := strconv.Atoi(svc); err != nil || n <= 0 || n > 65535 {
		return nil, fmt.Errorf("trsvcid %q is not a TCP port", svc)
	}
	var portID uint64 // nvmet's default: 0
	if s := string(r.Addr["portid"]); s != "" {
		var err error
		if portID, err = strconv.ParseUint(s, 10, 16); err != nil {
			return nil, fmt.Errorf("portid %q: want 0 to 65535", s)
		}
	}
	treq, ok := map[string]uint8{"": 0, "not specified": 0, "required": 1, "not required": 2}[string(r.Addr["treq"])]
	if !ok {
		return nil, fmt.Errorf("treq %q: want not specified, required or not required", r.Addr["treq"])
	}
	return &target.Referral{Addr: net.JoinHostPort(addr, svc), PortID: uint16(portID), TReq: treq}, nil
}
