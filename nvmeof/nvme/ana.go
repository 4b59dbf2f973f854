package nvme

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ANAState is the state of an ANA group through a port.
type ANAState uint8

// ANA states.
const (
	ANAOptimized      ANAState = 0x01
	ANANonOptimized   ANAState = 0x02
	ANAInaccessible   ANAState = 0x03
	ANAPersistentLoss ANAState = 0x04
	ANAChange         ANAState = 0x0f
)

// anaNames are nvmet's names of the states (configfs ana_state).
var anaNames = map[ANAState]string{
	ANAOptimized: "optimized", ANANonOptimized: "non-optimized", ANAInaccessible: "inaccessible",
	ANAPersistentLoss: "persistent-loss", ANAChange: "change",
}

func (s ANAState) String() string {
	if n, ok := anaNames[s]; ok {
		return n
	}
	return fmt.Sprintf("ANA state %#x", uint8(s))
}

func (s ANAState) Valid() bool { _, ok := anaNames[s]; return ok }

// ParseANAState returns the state nvmet's configfs (and nvmetcli's
// configuration) names name: optimized, non-optimized, inaccessible,
// persistent-loss or change.
func ParseANAState(name string) (ANAState, error) {
	for s, n := range anaNames {
		if n == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("nvmeof: %q is not an ANA state", name)
}

// ANAGroupDesc is a group of an ANA log page: its ID, state through the
// controller's port, change count, and its namespaces (none if the log
// was read with Return Groups Only).
type ANAGroupDesc struct {
	ID          uint32
	State       ANAState
	ChangeCount uint64
	NSIDs       []uint32
}

// ANALog is an ANA log page (log page 0Ch).
type ANALog struct {
	ChangeCount uint64
	Groups      []ANAGroupDesc
}

var errANALog = errors.New("nvmeof: ANA log page cut short")

// ParseANALog decodes an ANA log page, checked as Linux's host checks it:
// every descriptor inside b, group IDs 1 to maxGroup (the controller's
// ANAGRPMAX), states known.
func ParseANALog(b []byte, maxGroup uint32) (ANALog, error) {
	le := binary.LittleEndian
	if len(b) < ANAHeaderSize {
		return ANALog{}, errANALog
	}
	log := ANALog{ChangeCount: le.Uint64(b[0:])}
	n, off := int(le.Uint16(b[8:])), ANAHeaderSize
	for range n {
		if len(b)-off < ANADescSize {
			return log, errANALog
		}
		d := ANAGroupDesc{ID: le.Uint32(b[off:]), ChangeCount: le.Uint64(b[off+8:]), State: ANAState(b[off+16] & 0xf)}
		nn := uint64(le.Uint32(b[off+4:]))
		off += ANADescSize
		if d.ID == 0 || d.ID > maxGroup {
			return log, fmt.Errorf("nvmeof: ANA log: group %d outside 1 .. %d", d.ID, maxGroup)
		}
		if !d.State.Valid() {
			return log, fmt.Errorf("nvmeof: ANA log: group %d: %v", d.ID, d.State)
		}
		if nn > uint64(len(b)-off)/4 {
			return log, errANALog
		}
		for range nn {
			d.NSIDs = append(d.NSIDs, le.Uint32(b[off:]))
			off += 4
		}
		log.Groups = append(log.Groups, d)
	}
	return log, nil
}

const (
	// MaxANAGroup is the highest ANA group ID (ANAGRPMAX, and NANAGRPID:
	// any of them may be in use), as nvmet's.
	MaxANAGroup = 128

	ANAHeaderSize = 16 // CHGCNT, NGRPS, reserved
	ANADescSize   = 32 // ANAGRPID, NNSID, CHGCNT, ANAS, reserved; then the NSIDs
)
