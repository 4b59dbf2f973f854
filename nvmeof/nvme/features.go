package nvme

import "fmt"

// WPState is a namespace's write protection state, the value of feature
// 84h.
type WPState uint8

// The write protection states.
const (
	WPNone            WPState = 0 // No Write Protect
	WPOn              WPState = 1 // Write Protect
	WPUntilPowerCycle WPState = 2 // Write Protect Until Power Cycle
	WPPermanent       WPState = 3 // Permanent Write Protect (not offered here)
)

func (s WPState) String() string {
	switch s {
	case WPNone:
		return "no write protect"
	case WPOn:
		return "write protect"
	case WPUntilPowerCycle:
		return "write protect until power cycle"
	case WPPermanent:
		return "permanent write protect"
	}
	return fmt.Sprintf("write protection state %d", uint8(s))
}

// Feature identifiers.
const (
	FeatArbitration = 0x01
	FeatPowerMgmt   = 0x02
	FeatVWC         = 0x06
	FeatNumQueues   = 0x07
	FeatAsyncEvent  = 0x0b
	FeatKATO        = 0x0f
	FeatHostID      = 0x81
)

// Features of namespaces and reservations.
const (
	FeatResvMask     = 0x82 // Reservation Notification Mask
	FeatResvPersist  = 0x83 // Reservation Persistence
	FeatWriteProtect = 0x84 // Namespace Write Protection Config
)

// Write protection bits of Identify.
const (
	NWPCWriteProtect    = 1 << 0 // NWPC: No Write Protect and Write Protect
	NWPCUntilPowerCycle = 1 << 1 // NWPC: Write Protect Until Power Cycle
	NSATTRWriteProtect  = 1 << 0 // NSATTR: the namespace is write protected
)
