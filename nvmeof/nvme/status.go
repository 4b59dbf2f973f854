package nvme

import "fmt"

// Status is an NVMe completion status as the CQE's Status field carries it
// without the phase bit: bits 7:0 the Status Code (SC), 10:8 the Status
// Code Type (SCT), 13 More, 14 Do Not Retry (the layout Linux's nvme
// driver uses, NVMe base 2.0 figure 93).
type Status uint16

// Status code types.
const (
	SCTGeneric         = 0x0
	SCTCommandSpecific = 0x1
	SCTMediaError      = 0x2
	SCTPath            = 0x3
)

// DNR is the Do Not Retry bit.
const DNR Status = 0x4000

// Generic command status (SCT 0).
const (
	StatusSuccess              Status = 0x00
	StatusInvalidOpcode        Status = 0x01
	StatusInvalidField         Status = 0x02
	StatusCIDConflict          Status = 0x03
	StatusDataTransferError    Status = 0x04
	StatusInternalError        Status = 0x06
	StatusAbortRequested       Status = 0x07
	StatusSQDeleted            Status = 0x08
	StatusInvalidNamespace     Status = 0x0b
	StatusCommandSequenceError Status = 0x0c
	StatusSGLInvalidLast       Status = 0x0d
	StatusSGLInvalidCount      Status = 0x0e
	StatusSGLInvalidData       Status = 0x0f // Data SGL Length Invalid
	StatusSGLInvalidType       Status = 0x11 // SGL Descriptor Type Invalid
	StatusSGLInvalidOffset     Status = 0x16
	StatusKATOExpired          Status = 0x19
	StatusHostIDInconsistent   Status = 0x18 // Host Identifier Inconsistent Format: a report without EDS
	StatusKATOInvalid          Status = 0x1a
	StatusNSWriteProtected     Status = 0x20
	StatusCommandInterrupted   Status = 0x21
	StatusLBARange             Status = 0x80 // LBA Out of Range
	StatusCapacityExceeded     Status = 0x81
	StatusNSNotReady           Status = 0x82
	StatusReservationConflict  Status = 0x83
)

// Command specific status (SCT 1), including the Fabrics Connect ones.
const (
	StatusInvalidQID           Status = 0x101
	StatusInvalidQueueSize     Status = 0x102
	StatusAERLimitExceeded     Status = 0x105
	StatusInvalidLogPage       Status = 0x109
	StatusFeatureNotSaveable   Status = 0x10d
	StatusFeatureNotChangeable Status = 0x10e
	StatusConnectIncompatFmt   Status = 0x180 // Incompatible Format
	StatusConnectCtrlBusy      Status = 0x181 // Controller Busy
	StatusConnectInvalidParm   Status = 0x182 // Connect Invalid Parameters
	StatusConnectInvalidHost   Status = 0x184 // Connect Invalid Host
)

// SCT returns the Status Code Type.
func (s Status) SCT() uint8 { return uint8(s>>8) & 7 }

// SC returns the Status Code.
func (s Status) SC() uint8 { return uint8(s) }

// Code returns the status without the DNR and More bits: SCT and SC, to
// compare with the constants.
func (s Status) Code() Status { return s & 0x7ff }

// OK reports whether the status is Success.
func (s Status) OK() bool { return s.Code() == StatusSuccess }

var statusNames = map[Status]string{
	StatusSuccess:              "Success",
	StatusInvalidOpcode:        "Invalid Command Opcode",
	StatusInvalidField:         "Invalid Field in Command",
	StatusCIDConflict:          "Command ID Conflict",
	StatusDataTransferError:    "Data Transfer Error",
	StatusInternalError:        "Internal Error",
	StatusAbortRequested:       "Command Abort Requested",
	StatusSQDeleted:            "Command Aborted due to SQ Deletion",
	StatusInvalidNamespace:     "Invalid Namespace or Format",
	StatusCommandSequenceError: "Command Sequence Error",
	StatusSGLInvalidLast:       "Invalid SGL Segment Descriptor",
	StatusSGLInvalidCount:      "Invalid Number of SGL Descriptors",
	StatusSGLInvalidData:       "Data SGL Length Invalid",
	StatusSGLInvalidType:       "SGL Descriptor Type Invalid",
	StatusSGLInvalidOffset:     "SGL Offset Invalid",
	StatusKATOExpired:          "Keep Alive Timer Expired",
	StatusKATOInvalid:          "Keep Alive Timeout Invalid",
	StatusNSWriteProtected:     "Namespace is Write Protected",
	StatusCommandInterrupted:   "Command Interrupted",
	StatusLBARange:             "LBA Out of Range",
	StatusCapacityExceeded:     "Capacity Exceeded",
	StatusNSNotReady:           "Namespace Not Ready",
	StatusInvalidQID:           "Invalid Queue Identifier",
	StatusInvalidQueueSize:     "Invalid Queue Size",
	StatusAERLimitExceeded:     "Asynchronous Event Request Limit Exceeded",
	StatusInvalidLogPage:       "Invalid Log Page",
	StatusFeatureNotSaveable:   "Feature Identifier Not Saveable",
	StatusFeatureNotChangeable: "Feature Not Changeable",
	StatusConnectIncompatFmt:   "Incompatible Format",
	StatusConnectCtrlBusy:      "Controller Busy",
	StatusConnectInvalidParm:   "Connect Invalid Parameters",
	StatusConnectInvalidHost:   "Connect Invalid Host",
	StatusReservationConflict:  "Reservation Conflict",
	StatusWriteFault:           "Write Fault",
	StatusUnrecoveredRead:      "Unrecovered Read Error",
	StatusHostIDInconsistent:   "Host Identifier Inconsistent Format",
	StatusANAPersistentLoss:    "Asymmetric Access Persistent Loss",
	StatusANAInaccessible:      "Asymmetric Access Inaccessible",
	StatusANATransition:        "Asymmetric Access Transition",
}

func (s Status) String() string {
	n, ok := statusNames[s.Code()]
	if !ok {
		n = fmt.Sprintf("SCT %d SC %#02x", s.SCT(), s.SC())
	}
	if s&DNR != 0 {
		n += " (DNR)"
	}
	return n
}

// StatusError is a command that completed with a status other than
// Success, as a Go error; Result is the CQE's DW0 (for a failed Connect,
// the offset and kind of the invalid parameter).
type StatusError struct {
	Op     string
	Status Status
	Result uint64
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("nvmeof: %s: %v (status %#x)", e.Op, e.Status, uint16(e.Status))
}

// Media and data integrity errors (SCT 2).
const (
	StatusWriteFault      Status = 0x280
	StatusUnrecoveredRead Status = 0x281 // Unrecovered Read Error
)

// Path related status (SCT 3): what an I/O command gets through a port
// where its namespace's group is not accessible. No DNR: the host is to
// retry on another path.
const (
	StatusANAPersistentLoss Status = 0x301
	StatusANAInaccessible   Status = 0x302
	StatusANATransition     Status = 0x303
)
