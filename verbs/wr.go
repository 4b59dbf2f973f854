package verbs

import "fmt"

// SGE is a scatter/gather element: Length octets at Addr of the memory region
// whose local key is LKey. Addr is the MR's Addr() plus an offset.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendOpcode is the operation of a SendWR.
type SendOpcode uint8

// Send work request opcodes.
const (
	OpSend SendOpcode = iota
	OpSendWithInv
	OpRDMAWrite
	OpRDMARead
	OpLocalInv
	opRegMR // fast registration: QP.PostRegMR, not PostSend

	// RFC 7306 extensions, on connections that enabled them on both sides
	// (ConnConfig.RFC7306; MPA has no bit to negotiate them).
	OpRDMAWriteWithImm // an RDMA Write followed by an Immediate Data message
	OpImmediate        // an Immediate Data message alone
	OpAtomicFetchAdd   // 64-bit fetch-and-add at RemoteAddr; the original value lands in the 8-octet SGL
	OpAtomicCmpSwap    // 64-bit compare-and-swap at RemoteAddr; likewise
)

var sendOpNames = [...]string{"SEND", "SEND_WITH_INV", "RDMA_WRITE", "RDMA_READ", "LOCAL_INV", "REG_MR",
	"RDMA_WRITE_WITH_IMM", "IMMEDIATE", "ATOMIC_FETCH_AND_ADD", "ATOMIC_CMP_AND_SWP"}

func (o SendOpcode) String() string {
	if int(o) < len(sendOpNames) {
		return sendOpNames[o]
	}
	return fmt.Sprintf("SendOpcode(%d)", uint8(o))
}

// SendFlags modify a SendWR.
type SendFlags uint8

// Send flags, as IBV_SEND_*.
const (
	// Signaled asks for a completion even on a QP created with SigAll false.
	Signaled SendFlags = 1 << iota
	// Fence makes the WR wait until every earlier RDMA Read has completed.
	Fence
	// Solicited sets the Solicited Event bit of a Send.
	Solicited
	// Inline copies the data at post time; the buffers need no MR.
	Inline
)

var sendFlagNames = [...]string{"SIGNALED", "FENCE", "SOLICITED", "INLINE"}

func (f SendFlags) String() string { return flagString(uint8(f), sendFlagNames[:]) }

// flagString names the bits of f, "|"-separated, "0" for none.
func flagString(f uint8, names []string) string {
	if f == 0 {
		return "0"
	}
	var b []byte
	for i := range 8 {
		if f&(1<<i) == 0 {
			continue
		}
		if len(b) > 0 {
			b = append(b, '|')
		}
		if i < len(names) {
			b = append(b, names[i]...)
		} else {
			b = fmt.Appendf(b, "%#x", 1<<i)
		}
	}
	return string(b)
}

// SendWR is a send-queue work request.
type SendWR struct {
	ID     uint64
	Opcode SendOpcode
	Flags  SendFlags
	SGL    []SGE // gather list; at most one element for RDMA Read (the sink)
	// Inline data for Inline sends and writes (at most MaxInline octets),
	// copied at post time. An Inline WR has InlineData or, as ibverbs'
	// IBV_SEND_INLINE, an SGL whose data is copied at post time; not both.
	InlineData []byte
	// RemoteAddr and RKey address the peer's memory for RDMA Write and Read.
	RemoteAddr uint64
	RKey       uint32
	// InvalidateRKey is the peer's STag that Send with Invalidate invalidates,
	// and the local STag that LocalInv invalidates.
	InvalidateRKey uint32
	// ImmData is the 8 octets of an Immediate Data message (RFC 7306).
	ImmData uint64
	// CompareAdd is the value a fetch-and-add adds, or the value a
	// compare-and-swap compares with; Swap the value it swaps in. The masks
	// are RFC 7306's: a zero CompareMask or SwapMask means all 64 bits; a
	// non-zero AddMask splits the addition into fields.
	CompareAdd, Swap               uint64
	CompareMask, SwapMask, AddMask uint64
}

// RecvWR is a receive-queue work request.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WCOpcode says which operation a work completion is for.
type WCOpcode uint8

// Work completion opcodes.
const (
	WCSend WCOpcode = iota
	WCRDMAWrite
	WCRDMARead
	WCLocalInv
	WCRecv
	WCRegMR
	WCRecvImm // an Immediate Data message arrived (RFC 7306); ImmData holds it
	WCAtomicFetchAdd
	WCAtomicCmpSwap
)

var wcOpNames = [...]string{"SEND", "RDMA_WRITE", "RDMA_READ", "LOCAL_INV", "RECV", "REG_MR", "RECV_IMM",
	"ATOMIC_FETCH_AND_ADD", "ATOMIC_CMP_AND_SWP"}

func (o WCOpcode) String() string {
	if int(o) < len(wcOpNames) {
		return wcOpNames[o]
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCStatus is a work completion status, with the names of ibv_wc_status.
type WCStatus uint8

// Work completion statuses (the subset an iWARP RC QP produces).
const (
	Success WCStatus = iota
	LocLenErr
	LocQPOpErr
	LocProtErr
	WRFlushErr
	RemAccessErr
	RemOpErr
	RemInvReqErr
	FatalErr
	GeneralErr
	// RetryExcErr (IBV_WC_RETRY_EXC_ERR): a Read or atomic got no
	// response within ConnConfig.ResponseTimeout.
	RetryExcErr
)

var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local protection error",
	"work request flushed error", "remote access error", "remote operation error",
	"remote invalid request error", "fatal error", "general error", "transport retry counter exceeded",
}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// WCFlags describe a receive completion.
type WCFlags uint8

// Work completion flags.
const (
	// WithInv: the Send carried an invalidation; InvalidatedRKey holds it.
	WithInv WCFlags = 1 << iota
	// SolicitedEvent: the Send carried the Solicited Event bit.
	SolicitedEvent
	// WithImm: ImmData holds Immediate Data.
	WithImm
)

var wcFlagNames = [...]string{"WITH_INV", "SOLICITED", "WITH_IMM"}

func (f WCFlags) String() string { return flagString(uint8(f), wcFlagNames[:]) }

// WC is a work completion. Its Status is data, not a Go error.
type WC struct {
	ID              uint64
	Status          WCStatus
	Opcode          WCOpcode
	Flags           WCFlags
	ByteLen         uint32
	InvalidatedRKey uint32
	ImmData         uint64
	QP              *QP
}

func (wc WC) String() string {
	return fmt.Sprintf("wc{id %d %s %s len %d}", wc.ID, wc.Opcode, wc.Status, wc.ByteLen)
}
