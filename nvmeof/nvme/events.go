package nvme

// Asynchronous Event Configuration bits (feature 0Bh; OAES in Identify
// Controller announces the same bits) and the completion dword 0 of the
// Asynchronous Event Request each notice completes: event type (bits 2:0),
// event information (15:8) and the log page to read (23:16).
const (
	// AECSMART enables the SMART / health critical warnings (spare,
	// temperature, reliability, read only, volatile memory backup).
	AECSMART = 0x1f
	// AECNSAttr enables Namespace Attribute Notices; AERNSChanged is the
	// notice: type 2 (notice), information 0 (namespace attribute
	// changed), log page 04h.
	AECNSAttr    = uint32(1) << 8
	AERNSChanged = 2 | 0<<8 | LogChangedNS<<16
	// AECANAChange enables ANA Change Notices; AERANAChanged is the
	// notice: type 2, information 03h, log page 0Ch.
	AECANAChange  = uint32(1) << 11
	AERANAChanged = 2 | 0x03<<8 | LogANA<<16
	// AECDiscChange enables Discovery Log Page Change Notices on a
	// discovery controller; AERDiscChanged is the notice: type 2,
	// information F0h, log page 70h (the discovery log).
	AECDiscChange  = uint32(1) << 31
	AERDiscChanged = 2 | 0xf0<<8 | LogDiscovery<<16
	// AERResvLog is the Reservation Log Page Available notice: type 6
	// (I/O command specific status), information 0, log page 80h.
	AERResvLog = 6 | 0<<8 | LogResvNotice<<16
)
