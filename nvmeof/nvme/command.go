package nvme

import "encoding/binary"

// CommandSize is the size of a submission queue entry (SQE), the first
// part of every command capsule.
const CommandSize = 64

// Command is a view of a 64-octet submission queue entry (NVMe base 2.0
// figure 88, NVMe-oF 1.1 figure 19 for Fabrics commands); all multi-octet
// fields are little endian.
//
//	 0       opcode
//	 1       flags (bits 7:6 PSDT: 01 = SGL, which Fabrics requires)
//	 2-3     command identifier (CID)
//	 4-7     NSID (Fabrics: 4 = FCTYPE)
//	 8-23    CDW2, CDW3, metadata pointer
//	24-39    data pointer: SGL descriptor 1
//	40-63    CDW10 .. CDW15
//
// A Command built over a shorter slice panics; use ParseCommand on input.
type Command []byte

// SQE offsets.
const (
	offOpcode = 0
	offFlags  = 1
	offCID    = 2
	offNSID   = 4
	offSGL    = 24
	offCDW10  = 40
)

// NSIDAll is the broadcast namespace ID (NVMe base 2.0 section 3.2.1.2):
// every attached namespace, where a command allows it; in a Changed
// Namespace List log page, more changed than the list holds.
const NSIDAll = 0xffffffff

// FlagSGL is the PSDT value 01b in the flags octet: data described by SGLs
// (metadata pointer an address). NVMe over Fabrics uses nothing else.
const FlagSGL = 0x40

// Admin command opcodes.
const (
	AdminGetLogPage  = 0x02
	AdminIdentify    = 0x06
	AdminAbort       = 0x08
	AdminSetFeatures = 0x09
	AdminGetFeatures = 0x0a
	AdminAER         = 0x0c
	AdminKeepAlive   = 0x18
	OpFabrics        = 0x7f // admin and I/O queues
)

// NVM command set (I/O) opcodes.
const (
	IOFlush        = 0x00
	IOWrite        = 0x01
	IORead         = 0x02
	IOWriteZeroes  = 0x08
	IODSM          = 0x09
	IOResvRegister = 0x0d
	IOResvReport   = 0x0e
	IOResvAcquire  = 0x11
	IOResvRelease  = 0x15
)

// Fabrics command types (FCTYPE, octet 4 of a Fabrics command).
const (
	FabricsPropertySet = 0x00
	FabricsConnect     = 0x01
	FabricsPropertyGet = 0x04
)

// ParseCommand returns the SQE at the start of b, or false if b is shorter
// than 64 octets.
func ParseCommand(b []byte) (Command, bool) {
	if len(b) < CommandSize {
		return nil, false
	}
	return Command(b[:CommandSize:CommandSize]), true
}

func (c Command) Opcode() uint8   { return c[offOpcode] }
func (c Command) Flags() uint8    { return c[offFlags] }
func (c Command) CID() uint16     { return binary.LittleEndian.Uint16(c[offCID:]) }
func (c Command) NSID() uint32    { return binary.LittleEndian.Uint32(c[offNSID:]) }
func (c Command) FCType() uint8   { return c[offNSID] }
func (c Command) SGL() SGL        { return SGL(c[offSGL : offSGL+SGLSize]) }
func (c Command) IsFabrics() bool { return c[offOpcode] == OpFabrics }

// CDW returns command dword n (10..15).
func (c Command) CDW(n int) uint32 { return binary.LittleEndian.Uint32(c[offCDW10+4*(n-10):]) }

// SetCDW sets command dword n (10..15).
func (c Command) SetCDW(n int, v uint32) {
	binary.LittleEndian.PutUint32(c[offCDW10+4*(n-10):], v)
}

func (c Command) SetOpcode(op uint8) { c[offOpcode] = op }
func (c Command) SetFlags(f uint8)   { c[offFlags] = f }
func (c Command) SetCID(id uint16)   { binary.LittleEndian.PutUint16(c[offCID:], id) }
func (c Command) SetNSID(n uint32)   { binary.LittleEndian.PutUint32(c[offNSID:], n) }
func (c Command) SetFCType(t uint8)  { c[offNSID] = t }

// SLBA and NLB are the starting LBA (CDW10-11) and the 0's based number of
// logical blocks (CDW12 bits 15:0) of Read, Write and Write Zeroes.
func (c Command) SLBA() uint64 { return binary.LittleEndian.Uint64(c[offCDW10:]) }
func (c Command) NLB() uint16  { return uint16(c.CDW(12)) }

// RWFUA is Force Unit Access in a Read's, Write's or Write Zeroes'
// CDW12: the command completes once its data is on non-volatile media.
const RWFUA = 1 << 30

// FUA reports whether a Write or Write Zeroes asks for Force Unit Access.
func (c Command) FUA() bool { return c.CDW(12)&RWFUA != 0 }
func (c Command) SetSLBA(lba uint64) {
	binary.LittleEndian.PutUint64(c[offCDW10:], lba)
}

// Connect fields (NVMe-oF 1.1 figure 20).
func (c Command) RecFmt() uint16 { return binary.LittleEndian.Uint16(c[40:]) }
func (c Command) QID() uint16    { return binary.LittleEndian.Uint16(c[42:]) }
func (c Command) SQSize() uint16 { return binary.LittleEndian.Uint16(c[44:]) } // 0's based
func (c Command) CATTR() uint8   { return c[46] }
func (c Command) KATO() uint32   { return binary.LittleEndian.Uint32(c[48:]) } // ms

// Property Get/Set fields (NVMe-oF 1.1 figures 27, 30): ATTRIB bits 2:0
// give the size (0: 4 octets, 1: 8), OFST the register offset, VALUE
// the value to set.
func (c Command) PropSize() int {
	if c[40]&7 == 1 {
		return 8
	}
	if c[40]&7 == 0 {
		return 4
	}
	return 0
}
func (c Command) PropOffset() uint32 { return binary.LittleEndian.Uint32(c[44:]) }
func (c Command) PropValue() uint64  { return binary.LittleEndian.Uint64(c[48:]) }

// NewConnect fills c (64 octets, zeroed first) with a Fabrics Connect:
// sqsize is 0's based, kato in milliseconds.
func NewConnect(c Command, cid, qid, sqsize uint16, kato uint32) {
	clear(c)
	c.SetOpcode(OpFabrics)
	c.SetFlags(FlagSGL)
	c.SetCID(cid)
	c.SetFCType(FabricsConnect)
	binary.LittleEndian.PutUint16(c[42:], qid)
	binary.LittleEndian.PutUint16(c[44:], sqsize)
	binary.LittleEndian.PutUint32(c[48:], kato)
}

// NewPropertyGet fills c with a Property Get of size octets (4 or 8) at
// register offset off, with a zero keyed SGL descriptor (no data), as
// Linux sends it.
func NewPropertyGet(c Command, cid uint16, off uint32, size int) {
	clear(c)
	c.SetOpcode(OpFabrics)
	c.SetFlags(FlagSGL)
	c.SetCID(cid)
	c.SetFCType(FabricsPropertyGet)
	if size == 8 {
		c[40] = 1
	}
	binary.LittleEndian.PutUint32(c[44:], off)
	c.SGL().SetKeyed(0, 0, 0, false)
}

// NewPropertySet fills c with a Property Set of a 4-octet register.
func NewPropertySet(c Command, cid uint16, off uint32, v uint32) {
	clear(c)
	c.SetOpcode(OpFabrics)
	c.SetFlags(FlagSGL)
	c.SetCID(cid)
	c.SetFCType(FabricsPropertySet)
	binary.LittleEndian.PutUint32(c[44:], off)
	binary.LittleEndian.PutUint64(c[48:], uint64(v))
	c.SGL().SetKeyed(0, 0, 0, false)
}

// NewRW fills c with a Read or Write (op) of nlb+1 blocks at slba.
func NewRW(c Command, op uint8, cid uint16, nsid uint32, slba uint64, nlb uint16) {
	clear(c)
	c.SetOpcode(op)
	c.SetFlags(FlagSGL)
	c.SetCID(cid)
	c.SetNSID(nsid)
	c.SetSLBA(slba)
	c.SetCDW(12, uint32(nlb))
}

// NewAdmin fills c with an admin or I/O command of the given opcode, nsid
// and CDW10 and CDW11, with a zero (no data) keyed SGL descriptor.
func NewAdmin(c Command, op uint8, cid uint16, nsid, cdw10, cdw11 uint32) {
	clear(c)
	c.SetOpcode(op)
	c.SetFlags(FlagSGL)
	c.SetCID(cid)
	c.SetNSID(nsid)
	c.SetCDW(10, cdw10)
	c.SetCDW(11, cdw11)
	c.SGL().SetKeyed(0, 0, 0, false)
}

// LogLen returns a Get Log Page's length in octets (NUMDL and NUMDU, 0's
// based dwords).
func (c Command) LogLen() uint64 {
	return (uint64(c.CDW(11)&0xffff)<<16 | uint64(c.CDW(10)>>16) + 1) * 4
}

// DSMRangeSize is the size of a Dataset Management range.
const DSMRangeSize = 16

var ioNames = map[uint8]string{IORead: "Read", IOWrite: "Write", IOFlush: "Flush", IOWriteZeroes: "Write Zeroes",
	IODSM: "Dataset Management", IOResvRegister: "Reservation Register", IOResvAcquire: "Reservation Acquire",
	IOResvRelease: "Reservation Release", IOResvReport: "Reservation Report"}

// IOCommandName returns the name of NVM command set opcode op, or "" for
// one not known here.
func IOCommandName(op uint8) string { return ioNames[op] }
