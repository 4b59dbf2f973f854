package nvme

import (
	"encoding/binary"
	"fmt"
)

// ReservationType is the type of a reservation (RTYPE).
type ReservationType uint8

// Reservation types: who may read and write while one is held (the
// holder always may).
const (
	ResvWriteExclusive          ReservationType = 1 // others read
	ResvExclusiveAccess         ReservationType = 2 // others neither read nor write
	ResvWriteExclusiveRegsOnly  ReservationType = 3 // registrants write, others read
	ResvExclusiveAccessRegsOnly ReservationType = 4 // registrants read and write, others nothing
	ResvWriteExclusiveAllRegs   ReservationType = 5 // as 3, every registrant a holder
	ResvExclusiveAccessAllRegs  ReservationType = 6 // as 4, every registrant a holder

	ResvNone    = ReservationType(0)
	MaxResvType = ResvExclusiveAccessAllRegs
)

// The commands' actions (CDW10 bits 2:0) and flags.
const (
	ResvRegister, ResvUnregister, ResvReplace  = 0, 1, 2 // RREGA
	ResvAcquire, ResvPreempt, ResvPreemptAbort = 0, 1, 2 // RACQA
	ResvRelease, ResvClear                     = 0, 1    // RRELA

	ResvIEKEY     = 1 << 3 // Ignore Existing Key
	ResvReportEDS = 1 << 0 // Extended Data Structure

	ResvKeysDataSize = 16 // CRKEY and NRKEY or PRKEY
	ResvKeyDataSize  = 8  // CRKEY
)

var resvTypeNames = map[ReservationType]string{
	ResvWriteExclusive: "Write Exclusive", ResvExclusiveAccess: "Exclusive Access",
	ResvWriteExclusiveRegsOnly: "Write Exclusive - Registrants Only", ResvExclusiveAccessRegsOnly: "Exclusive Access - Registrants Only",
	ResvWriteExclusiveAllRegs: "Write Exclusive - All Registrants", ResvExclusiveAccessAllRegs: "Exclusive Access - All Registrants",
}

func (t ReservationType) String() string {
	if n, ok := resvTypeNames[t]; ok {
		return n
	}
	if t == ResvNone {
		return "none"
	}
	return fmt.Sprintf("reservation type %d", uint8(t))
}

func (t ReservationType) AllRegistrants() bool {
	return t == ResvWriteExclusiveAllRegs || t == ResvExclusiveAccessAllRegs
}

// Registrant is a registrant in a Reservation Report.
type Registrant struct {
	CntlID uint16 // 0xFFFF: any controller of the host (the dynamic model)
	Holder bool
	Key    uint64
	HostID [16]byte
}

// ReservationStatus is a Reservation Report (extended data structure).
type ReservationStatus struct {
	Gen         uint32
	Type        ReservationType // 0: none held
	PTPL        bool            // the registrations and reservation persist through power loss (PTPLS)
	Registrants []Registrant
	Count       int // REGCTL: every registrant, even those the report had no room for
}

// ParseReservationStatus decodes an extended Reservation Status data
// structure.
func ParseReservationStatus(b []byte) (ReservationStatus, error) {
	if len(b) < ResvStatusEntrySize {
		return ReservationStatus{}, fmt.Errorf("nvmeof: a reservation report of %d octets", len(b))
	}
	le := binary.LittleEndian
	st := ReservationStatus{Gen: le.Uint32(b[0:]), Type: ReservationType(b[4]), Count: int(le.Uint16(b[5:])), PTPL: b[9]&1 != 0}
	for i := range st.Count {
		e := b[ResvStatusEntrySize*(i+1):]
		if len(e) < ResvStatusEntrySize {
			break
		}
		rg := Registrant{CntlID: le.Uint16(e[0:]), Holder: e[2]&1 != 0, Key: le.Uint64(e[8:])}
		copy(rg.HostID[:], e[16:32])
		st.Registrants = append(st.Registrants, rg)
	}
	return st, nil
}

// ReservationNoticeType is what a reservation notification reports.
type ReservationNoticeType uint8

// Reservation notification types; each is also the bit of the
// Reservation Notification Mask that silences it.
const (
	ResvNoticeRegPreempted ReservationNoticeType = 1 // this host's registration was preempted
	ResvNoticeReleased     ReservationNoticeType = 2 // the reservation was released
	ResvNoticePreempted    ReservationNoticeType = 3 // the reservation was preempted (cleared)
)

func (t ReservationNoticeType) String() string {
	switch t {
	case ResvNoticeRegPreempted:
		return "Registration Preempted"
	case ResvNoticeReleased:
		return "Reservation Released"
	case ResvNoticePreempted:
		return "Reservation Preempted"
	}
	return fmt.Sprintf("reservation notice %d", uint8(t))
}

// ReservationNotice is one Reservation Notification log page.
type ReservationNotice struct {
	// Count is the page's number: it counts every notification the
	// controller recorded since it was reset, so a gap says pages were
	// lost (the controller keeps 64).
	Count uint64
	Type  ReservationNoticeType
	NSID  uint32
	// More is how many more pages wait (at most 255).
	More int
}

// ParseReservationNotice decodes a Reservation Notification log page; a
// Count of 0 is an empty page (no notification waited).
func ParseReservationNotice(b []byte) (ReservationNotice, error) {
	if len(b) < 16 {
		return ReservationNotice{}, fmt.Errorf("nvmeof: a reservation notification log page of %d octets", len(b))
	}
	le := binary.LittleEndian
	return ReservationNotice{Count: le.Uint64(b), Type: ReservationNoticeType(b[8]), More: int(b[9]), NSID: le.Uint32(b[12:])}, nil
}

const (
	// ResvStatusEntrySize is the size of the extended Reservation Status
	// header and of each extended registrant entry.
	ResvStatusEntrySize = 64
	// ResvNoticeSize is the size of a Reservation Notification log page:
	// count, type, pages left, NSID.
	ResvNoticeSize = 64
	// ResvMaskAll is the Reservation Notification Mask bits a host may
	// set (REGPRE, RESREL, RESPRE).
	ResvMaskAll = 1<<ResvNoticeRegPreempted | 1<<ResvNoticeReleased | 1<<ResvNoticePreempted
)

// Persist Through Power Loss: RESCAP's bit, and the Change PTPL state
// values of Reservation Register's CDW10 bits 31:30.
const (
	RESCAPPTPL                                      = 1 << 0
	ResvCPTPLNoChange, ResvCPTPLClear, ResvCPTPLSet = 0, 2, 3
)
