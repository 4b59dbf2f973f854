package target

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// Persist Through Power Loss (PTPL): a namespace with a reservation file
// (NamespaceConfig.ReservationFile) keeps its registrations and
// reservation there while a host has asked for it (Reservation Register's
// CPTPL, or the Reservation Persistence feature, 83h), so that they
// outlive the target: a node fenced before a restart is still fenced
// after it. Linux's nvmet has no PTPL; SPDK keeps a file per namespace
// too (ptpl_file).
//
// The file is written whole (a temporary file, synced, renamed over it,
// and the directory synced) before the change it records completes; a
// change that cannot be written fails with Internal Error and is undone.

// resvState is a reservation file's content.
type resvState struct {
	PTPL        bool                 `json:"ptpl"`
	Gen         uint32               `json:"generation,omitempty"`
	Type        nvme.ReservationType `json:"type,omitempty"`
	Holder      string               `json:"holder,omitempty"` // host identifier, hex
	Registrants []resvStateReg       `json:"registrants,omitempty"`
}

type resvStateReg struct {
	HostID string `json:"hostid"` // hex
	Key    uint64 `json:"key"`
}

// stateLocked returns r's state (r.mu held); without PTPL, only that.
func (r *resv) stateLocked() resvState {
	if !r.ptpl {
		return resvState{}
	}
	st := resvState{PTPL: true, Gen: r.gen, Type: r.rtype}
	if r.rtype != nvme.ResvNone {
		st.Holder = hex.EncodeToString(r.holder[:])
	}
	for _, h := range r.order {
		st.Registrants = append(st.Registrants, resvStateReg{hex.EncodeToString(h[:]), r.keys[h]})
	}
	return st
}

// snapshot is what change restores when a change cannot be written.
type resvSnapshot struct {
	ptpl   bool
	gen    uint32
	keys   map[[16]byte]uint64
	order  [][16]byte
	holder [16]byte
	rtype  nvme.ReservationType
}

func (r *resv) snapshotLocked() resvSnapshot {
	keys := make(map[[16]byte]uint64, len(r.keys))
	for h, k := range r.keys {
		keys[h] = k
	}
	return resvSnapshot{r.ptpl, r.gen, keys, append([][16]byte(nil), r.order...), r.holder, r.rtype}
}

func (r *resv) restoreLocked(s resvSnapshot) {
	r.ptpl, r.gen, r.keys, r.order, r.holder, r.rtype = s.ptpl, s.gen, s.keys, s.order, s.holder, s.rtype
}

// change runs f, a reservation change (r.mu held); with a reservation
// file, and PTPL on before or after it, writes the state down, or undoes
// the change if it cannot. The notifications the change made are
// delivered once it stands.
func (r *resv) change(f func() nvme.Status) (nvme.Status, error) {
	var snap resvSnapshot
	if r.file != "" {
		snap = r.snapshotLocked()
	}
	st := f()
	var err error
	if r.file != "" && st.OK() && (r.ptpl || snap.ptpl) {
		if err = r.save(r.stateLocked()); err != nil {
			r.restoreLocked(snap)
			r.pending = nil
			st = nvme.StatusInternalError
		}
	}
	pending := r.pending
	r.pending = nil
	for _, n := range pending {
		r.notify(n.t, n.hosts)
	}
	return st, err
}

// errDetached is a change's error on a namespace taken out: the file is
// another's now, or no one's.
var errDetached = errors.New("the namespace was removed")

// save writes the state to the reservation file, unless the namespace
// was taken out (detach).
func (r *resv) save(st resvState) error {
	r.fileMu.Lock()
	defer r.fileMu.Unlock()
	if r.detached {
		return errDetached
	}
	return saveResvState(r.file, st)
}

// detach stops r from writing its file: the namespace was taken out. It
// waits for a write under way, so that a namespace added in its place
// reads the file after it.
func (r *resv) detach() {
	r.fileMu.Lock()
	r.detached = true
	r.fileMu.Unlock()
}

// loadState reads a reservation file into r (not yet shared); a file
// that does not exist is none. The file's directory must take a new
// file (the next change is written so), and what an interrupted write
// left there is removed.
func (r *resv) loadState(file string) error {
	r.file = file
	dir, base := filepath.Split(file)
	if dir == "" {
		dir = "."
	}
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), base+".tmp") {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	f, err := os.CreateTemp(dir, base+".tmp*")
	if err != nil {
		return fmt.Errorf("nvmeof: reservation file %s cannot be written: %w", file, err)
	}
	f.Close()
	os.Remove(f.Name())
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var st resvState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("nvmeof: reservation file %s: %w", file, err)
	}
	if !st.PTPL {
		return nil
	}
	host := func(s string) ([16]byte, error) {
		var h [16]byte
		b, err := hex.DecodeString(s)
		if err != nil || len(b) != 16 {
			return h, fmt.Errorf("nvmeof: reservation file %s: host identifier %q", file, s)
		}
		copy(h[:], b)
		return h, nil
	}
	r.ptpl, r.gen = true, st.Gen
	for _, g := range st.Registrants {
		h, err := host(g.HostID)
		if err != nil {
			return err
		}
		if _, dup := r.keys[h]; dup {
			return fmt.Errorf("nvmeof: reservation file %s: host %s twice", file, g.HostID)
		}
		r.keys[h] = g.Key
		r.order = append(r.order, h)
	}
	if st.Type != nvme.ResvNone {
		h, err := host(st.Holder)
		if err != nil {
			return err
		}
		if _, reg := r.keys[h]; !reg || st.Type > nvme.MaxResvType {
			return fmt.Errorf("nvmeof: reservation file %s: a reservation of type %d held by %s, not a registrant", file, st.Type, st.Holder)
		}
		r.holder, r.rtype = h, st.Type
	}
	return nil
}

// saveResvState writes a reservation file whole, or not at all.
func saveResvState(file string, st resvState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(file)
	f, err := os.CreateTemp(dir, filepath.Base(file)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, file)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir) // the rename itself, durable
}

// setPTPL serves Set Features, Reservation Persistence, on one namespace.
func (r *resv) setPTPL(on bool) (nvme.Status, error) {
	if on && r.file == "" {
		return nvme.StatusInvalidField | nvme.DNR, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.change(func() nvme.Status {
		r.ptpl = on
		return nvme.StatusSuccess
	})
}

// ptplOn reports whether the namespace's registrations and reservation
// persist through power loss now.
func (r *resv) ptplOn() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.ptpl
}

// resvDone logs why a reservation change could not be written down, and
// returns its status.
func (c *controller) resvDone(ns *Namespace, st nvme.Status, err error) nvme.Status {
	if err != nil {
		c.t.logf("nvmeof: namespace %d: reservation file %s: %v (the change is undone)", ns.ID, ns.resv.file, err)
	}
	return st
}

// resvNamespace returns namespace nsid if it has reservations, or the
// status for a feature of one that does not.
func (c *controller) resvNamespace(nsid uint32) (*Namespace, nvme.Status) {
	ns := c.sub.Namespace(nsid)
	switch {
	case nsid == nvme.NSIDAll:
		return nil, nvme.StatusInvalidField | nvme.DNR
	case ns == nil:
		return nil, noNamespace(nsid)
	case ns.resv == nil:
		return nil, nvme.StatusInvalidField | nvme.DNR
	}
	return ns, nvme.StatusSuccess
}

// setResvPersist serves Set Features, Reservation Persistence: PTPL (bit
// 0) of one namespace, on only where it has a reservation file; or of
// every namespace with reservations (FFFFFFFFh), on for those with a
// file (and refused if none has one).
func (c *controller) setResvPersist(nsid, v uint32) (uint64, nvme.Status) {
	if v&^1 != 0 {
		return 0, nvme.StatusInvalidField | nvme.DNR
	}
	on := v&1 != 0
	var nss []*Namespace
	if nsid == nvme.NSIDAll {
		for _, ns := range c.sub.Namespaces() {
			if ns.resv != nil && (ns.resv.file != "" || !on) {
				nss = append(nss, ns)
			}
		}
		if len(nss) == 0 {
			return 0, nvme.StatusInvalidField | nvme.DNR
		}
	} else {
		ns, st := c.resvNamespace(nsid)
		if !st.OK() {
			return 0, st
		}
		nss = []*Namespace{ns}
	}
	for _, ns := range nss {
		st, err := ns.resv.setPTPL(on)
		if st = c.resvDone(ns, st, err); !st.OK() {
			return 0, st
		}
	}
	return uint64(v), nvme.StatusSuccess
}

// getResvPersist serves Get Features, Reservation Persistence.
func (c *controller) getResvPersist(nsid uint32) (uint64, nvme.Status) {
	ns, st := c.resvNamespace(nsid)
	if !st.OK() {
		return 0, st
	}
	if ns.resv.ptplOn() {
		return 1, nvme.StatusSuccess
	}
	return 0, nvme.StatusSuccess
}

// resvFileFree reports an error if a namespace of s has reservation file
// file (an absolute path): two writing one file would each lose the
// other's registrations.
func (s *Subsystem) resvFileFree(file string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.resvFileFreeLocked(file)
}

func (s *Subsystem) resvFileFreeLocked(file string) error {
	for _, ns := range s.ns {
		if ns != nil && ns.resv != nil && ns.resv.file == file {
			return fmt.Errorf("nvmeof: %s: reservation file %s is namespace %d's", s.NQN, file, ns.ID)
		}
	}
	return nil
}
