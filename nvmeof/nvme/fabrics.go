package nvme

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// ConnectDataSize is the size of the Connect command's data.
const ConnectDataSize = 1024

// ConnectData is the data of a Fabrics Connect (NVMe-oF 1.1 figure 21):
//
//	0-15     HOSTID (a UUID)
//	16-17    CNTLID (0xFFFF: any, the dynamic controller model)
//	256-511  SUBNQN, NUL terminated
//	512-767  HOSTNQN, NUL terminated
type ConnectData struct {
	HostID  [16]byte
	CntlID  uint16
	SubNQN  string
	HostNQN string
}

// DynamicCntlID in a Connect asks for any controller (dynamic model).
const DynamicCntlID = 0xffff

// Offsets in the Connect data, for the Invalid Parameter Offset of a
// failed Connect.
const (
	ConnectOffCntlID  = 16
	ConnectOffSubNQN  = 256
	ConnectOffHostNQN = 512
	nqnMax            = 223 // NVMe base: an NQN is at most 223 octets
)

var errConnectData = errors.New("nvmeof: Connect data shorter than 1024 octets")

// Append appends the 1024 octets of d to b. NQNs longer than 255 octets
// are cut (they are invalid anyway).
func (d ConnectData) Append(b []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, ConnectDataSize)...)
	p := b[start:]
	copy(p, d.HostID[:])
	binary.LittleEndian.PutUint16(p[ConnectOffCntlID:], d.CntlID)
	copy(p[ConnectOffSubNQN:ConnectOffSubNQN+255], d.SubNQN)
	copy(p[ConnectOffHostNQN:ConnectOffHostNQN+255], d.HostNQN)
	return b
}

// ParseConnectData decodes Connect data.
func ParseConnectData(b []byte) (ConnectData, error) {
	if len(b) < ConnectDataSize {
		return ConnectData{}, errConnectData
	}
	var d ConnectData
	copy(d.HostID[:], b)
	d.CntlID = binary.LittleEndian.Uint16(b[ConnectOffCntlID:])
	d.SubNQN = cstring(b[ConnectOffSubNQN : ConnectOffSubNQN+256])
	d.HostNQN = cstring(b[ConnectOffHostNQN : ConnectOffHostNQN+256])
	return d, nil
}

// cstring returns b up to its first NUL.
func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// ValidNQN reports whether s may be an NQN: non-empty, at most 223
// octets, printable ASCII.
func ValidNQN(s string) bool {
	if len(s) == 0 || len(s) > nqnMax {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Controller properties (NVMe base 2.0 figure 35), the registers of a PCIe
// controller that Property Get and Set reach on fabrics.
const (
	PropCAP  = 0x00 // 8 octets
	PropVS   = 0x08
	PropCC   = 0x14
	PropCSTS = 0x1c
)

// CC and CSTS fields.
const (
	CCEnable     = 1 << 0
	CCShnMask    = 3 << 14
	CSTSReady    = 1 << 0
	CSTSFatal    = 1 << 1
	CSTSShstMask = 3 << 2
	CSTSShstDone = 2 << 2 // shutdown processing complete
)

// CCIOSQES and CCIOCQES return the entry sizes CC asks for (log2).
func CCIOSQES(cc uint32) uint32 { return cc >> 16 & 0xf }
func CCIOCQES(cc uint32) uint32 { return cc >> 20 & 0xf }

// NVMe versions as VS holds them.
const (
	Version13 = 0x010300
)

// DiscoveryNQN is the well-known NQN of discovery controllers.
const DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"
