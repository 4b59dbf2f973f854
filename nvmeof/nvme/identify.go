package nvme

import (
	"encoding/binary"
	"errors"
	"strings"
)

// IdentifySize is the size of every Identify data structure.
const IdentifySize = 4096

// Identify CNS values.
const (
	CNSNamespace      = 0x00
	CNSController     = 0x01
	CNSActiveNSList   = 0x02
	CNSNSDescriptors  = 0x03
	CNSIOCtrlCSI      = 0x06 // I/O command set specific Identify Controller
	CSINVM            = 0x00
	ControllerIO      = 1 // CNTRLTYPE
	ControllerDisc    = 2
	SGLSSupported     = 1 << 0
	SGLSKeyed         = 1 << 2
	SGLSOffset        = 1 << 20 // in-capsule data by offset
	ONCSDSM           = 1 << 2
	ONCSWriteZeroes   = 1 << 3
	CMICMultiPort     = 1 << 0
	CMICMultiCtrl     = 1 << 1
	NMICShared        = 1 << 0
	LPAExtendedData   = 1 << 2
	ctrattrDynamicCtl = 0 // FCATT bit 0 clear: dynamic controller model
)

// ControllerInfo is the part of the Identify Controller data structure
// (NVMe base 2.0 figure 275, NVMe-oF 1.1 figure 28) this package fills and
// reads.
type ControllerInfo struct {
	VID, SSVID   uint16
	Serial       string // SN, 20 ASCII
	Model        string // MN, 40 ASCII
	Firmware     string // FR, 8 ASCII
	CMIC         uint8  // multi-path I/O and namespace sharing: bit 0 ports, bit 1 controllers
	MDTS         uint8  // max data transfer: 2^MDTS pages of 4 KiB, 0 = no limit
	CntlID       uint16
	Version      uint32
	OAES         uint32
	CTRATT       uint32
	CtrlType     uint8
	AERL         uint8 // 0's based
	LPA          uint8
	ELPE         uint8 // 0's based
	KAS          uint16
	SQES, CQES   uint8
	MaxCmd       uint16
	NN           uint32
	MNAN         uint32 // maximum number of allocated namespaces; Linux sizes its ANA log by it
	ANATT        uint8  // ANA transition time, seconds
	ANACAP       uint8  // ANA states reported
	ANAGRPMAX    uint32 // highest ANA group ID
	NANAGRPID    uint32 // number of ANA group IDs
	ONCS         uint16
	VWC          uint8
	NWPC         uint8 // namespace write protection capabilities
	SGLS         uint32
	SubNQN       string
	IOCCSZ       uint32 // in 16-octet units
	IORCSZ       uint32
	ICDOFF       uint16
	MSDBD        uint8
	FabricsAttrs uint8
}

// AppendIdentifyController appends c as a 4096-octet Identify Controller
// data structure to b.
func (c *ControllerInfo) Append(b []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, IdentifySize)...)
	p := b[start:]
	le := binary.LittleEndian
	le.PutUint16(p[0:], c.VID)
	le.PutUint16(p[2:], c.SSVID)
	PutASCII(p[4:24], c.Serial)
	PutASCII(p[24:64], c.Model)
	PutASCII(p[64:72], c.Firmware)
	p[76], p[77] = c.CMIC, c.MDTS
	le.PutUint16(p[78:], c.CntlID)
	le.PutUint32(p[80:], c.Version)
	le.PutUint32(p[92:], c.OAES)
	le.PutUint32(p[96:], c.CTRATT)
	p[111] = c.CtrlType
	p[259] = c.AERL
	p[261] = c.LPA
	p[262] = c.ELPE
	le.PutUint16(p[320:], c.KAS)
	p[343], p[344] = c.ANATT, c.ANACAP
	le.PutUint32(p[348:], c.ANAGRPMAX)
	le.PutUint32(p[352:], c.NANAGRPID)
	p[512], p[513] = c.SQES, c.CQES
	le.PutUint16(p[514:], c.MaxCmd)
	le.PutUint32(p[516:], c.NN)
	le.PutUint16(p[520:], c.ONCS)
	p[525] = c.VWC
	p[531] = c.NWPC
	le.PutUint32(p[536:], c.SGLS)
	le.PutUint32(p[540:], c.MNAN)
	copy(p[768:1024], c.SubNQN)
	le.PutUint32(p[1792:], c.IOCCSZ)
	le.PutUint32(p[1796:], c.IORCSZ)
	le.PutUint16(p[1800:], c.ICDOFF)
	p[1802] = c.FabricsAttrs
	p[1803] = c.MSDBD
	return b
}

var errShortIdentify = errors.New("nvmeof: Identify data shorter than 4096 octets")

// ParseControllerInfo decodes an Identify Controller data structure.
func ParseControllerInfo(p []byte) (ControllerInfo, error) {
	if len(p) < IdentifySize {
		return ControllerInfo{}, errShortIdentify
	}
	le := binary.LittleEndian
	return ControllerInfo{
		VID: le.Uint16(p[0:]), SSVID: le.Uint16(p[2:]),
		Serial: getASCII(p[4:24]), Model: getASCII(p[24:64]), Firmware: getASCII(p[64:72]),
		CMIC: p[76], MDTS: p[77], CntlID: le.Uint16(p[78:]), Version: le.Uint32(p[80:]), OAES: le.Uint32(p[92:]),
		CTRATT:   le.Uint32(p[96:]),
		CtrlType: p[111], AERL: p[259], LPA: p[261], ELPE: p[262], KAS: le.Uint16(p[320:]),
		ANATT: p[343], ANACAP: p[344], ANAGRPMAX: le.Uint32(p[348:]), NANAGRPID: le.Uint32(p[352:]), MNAN: le.Uint32(p[540:]),
		SQES: p[512], CQES: p[513], MaxCmd: le.Uint16(p[514:]), NN: le.Uint32(p[516:]),
		ONCS: le.Uint16(p[520:]), VWC: p[525], NWPC: p[531], SGLS: le.Uint32(p[536:]),
		SubNQN: cstring(p[768:1024]), IOCCSZ: le.Uint32(p[1792:]), IORCSZ: le.Uint32(p[1796:]),
		ICDOFF: le.Uint16(p[1800:]), FabricsAttrs: p[1802], MSDBD: p[1803],
	}, nil
}

// NamespaceInfo is the part of the Identify Namespace data structure (NVMe
// base 2.0 figure 114 of the NVM command set) this package uses: one LBA
// format.
type NamespaceInfo struct {
	Size, Capacity, Utilization uint64 // in logical blocks
	LBADS                       uint8  // log2 of the block size
	NMIC                        uint8  // bit 0: the namespace may be attached to several controllers
	RESCAP                      uint8  // reservation capabilities: bits 1-6 the types, 7 IEKEY
	NSATTR                      uint8  // bit 0: write protected
	ANAGroup                    uint32 // ANAGRPID
	NGUID                       [16]byte
}

// BlockSize returns the logical block size in octets.
func (n *NamespaceInfo) BlockSize() int { return 1 << n.LBADS }

// Append appends n as a 4096-octet Identify Namespace structure to b.
func (n *NamespaceInfo) Append(b []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, IdentifySize)...)
	p := b[start:]
	le := binary.LittleEndian
	le.PutUint64(p[0:], n.Size)
	le.PutUint64(p[8:], n.Capacity)
	le.PutUint64(p[16:], n.Utilization)
	p[25] = 0 // NLBAF: one format
	p[26] = 0 // FLBAS: format 0
	p[30], p[31] = n.NMIC, n.RESCAP
	p[99] = n.NSATTR
	le.PutUint32(p[92:], n.ANAGroup)
	copy(p[104:120], n.NGUID[:])
	p[128+2] = n.LBADS // LBAF0: MS 0, LBADS, RP 0
	return b
}

// ParseNamespaceInfo decodes an Identify Namespace structure (format
// FLBAS selects).
func ParseNamespaceInfo(p []byte) (NamespaceInfo, error) {
	if len(p) < IdentifySize {
		return NamespaceInfo{}, errShortIdentify
	}
	le := binary.LittleEndian
	n := NamespaceInfo{Size: le.Uint64(p[0:]), Capacity: le.Uint64(p[8:]), Utilization: le.Uint64(p[16:]), NMIC: p[30], RESCAP: p[31],
		NSATTR: p[99], ANAGroup: le.Uint32(p[92:])}
	f := int(p[26] & 0xf)
	n.LBADS = p[128+4*f+2]
	copy(n.NGUID[:], p[104:120])
	if n.LBADS < 9 || n.LBADS > 16 {
		return n, errors.New("nvmeof: namespace block size outside 512 octets .. 64 KiB")
	}
	return n, nil
}

// Namespace identification descriptor types (CNS 3).
const (
	NIDTNGUID = 2
	NIDTUUID  = 3
)

// AppendNSDescriptors appends the CNS 3 list: an NGUID and a UUID
// descriptor, then zeros to 4096 octets.
func AppendNSDescriptors(b []byte, nguid, uuid [16]byte) []byte {
	start := len(b)
	b = append(b, NIDTNGUID, 16, 0, 0)
	b = append(b, nguid[:]...)
	b = append(b, NIDTUUID, 16, 0, 0)
	b = append(b, uuid[:]...)
	return append(b, make([]byte, IdentifySize-(len(b)-start))...)
}

// PutASCII fills dst with s padded with spaces, as Identify's strings are.
func PutASCII(dst []byte, s string) {
	n := copy(dst, s)
	for i := n; i < len(dst); i++ {
		dst[i] = ' '
	}
}

func getASCII(b []byte) string { return strings.TrimRight(cstring(b), " ") }

// Capability bits of Identify that ANA and reservations use.
const (
	CMICANA  = 1 << 3 // CMIC: ANA reporting
	ONCSResv = 1 << 5 // ONCS: reservations
)
