package perftest

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Sizes of the control messages.
const (
	VersionLen  = 16 // NUL-padded version string
	SysDataLen  = 4  // page size, cache line size: big-endian int
	MTULen      = 2  // "%d" of the ibv_mtu enum, NUL-terminated
	DestLen     = 56 // struct pingpong_dest up to perftest 6.28
	DestLen629  = 64 // perftest 6.29 adds tail_markers_vaddr
	ReportField = 8  // each of the five bandwidth report fields
	RecvBufLen  = DestLen
	MinVersion  = 5.70 // perftest refuses older peers
	OurVersion  = "6.06"
	PageSize    = 4096
	CacheLine   = 64
	MTUEnum1024 = "3" // siw reports IBV_MTU_1024
)

// Version returns the 16-octet version message.
func Version(v string) []byte {
	b := make([]byte, VersionLen)
	copy(b, v)
	return b
}

// ParseVersion reads a peer's version message and applies perftest's own
// check (atof of the string, at least 5.70).
func ParseVersion(b []byte) (string, error) {
	s := strings.TrimRight(string(b), "\x00")
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	f, _ := strconv.ParseFloat(strings.TrimSpace(leadingFloat(s)), 64)
	if f < MinVersion {
		return s, fmt.Errorf("perftest: peer version %q is older than %.2f", s, MinVersion)
	}
	return s, nil
}

// leadingFloat returns the prefix of s that atof would read.
func leadingFloat(s string) string {
	end := 0
	dot := false
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' && !dot) {
		if s[end] == '.' {
			dot = true
		}
		end++
	}
	return s[:end]
}

// Int returns a 4-octet big-endian int message (page size, cache line).
func Int(v int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

// ParseInt reads a 4-octet big-endian int message.
func ParseInt(b []byte) (int, error) {
	if len(b) < SysDataLen {
		return 0, fmt.Errorf("perftest: int message of %d octets", len(b))
	}
	return int(int32(binary.BigEndian.Uint32(b))), nil
}

// MTU returns the 2-octet MTU message.
func MTU(enum string) []byte {
	b := make([]byte, MTULen)
	copy(b, enum)
	return b
}

// Dest is struct pingpong_dest: what each side tells the other about a
// test QP. In -R mode only RKey and VAddr are used.
type Dest struct {
	LID, OutReads, QPN, PSN uint32
	RKey                    uint32
	VAddr                   uint64
	TailVAddr               uint64 // 6.29 only
	GID                     [16]byte
	SRQN, GIDIndex          uint32
}

// Marshal encodes d in the 56-octet layout (size DestLen) or 6.29's
// 64-octet one (DestLen629).
func (d Dest) Marshal(size int) []byte {
	b := make([]byte, size)
	be := binary.BigEndian
	be.PutUint32(b[0:], d.LID)
	be.PutUint32(b[4:], d.OutReads)
	be.PutUint32(b[8:], d.QPN)
	be.PutUint32(b[12:], d.PSN)
	be.PutUint32(b[16:], d.RKey)
	// b[20:24] is padding in the C struct.
	be.PutUint64(b[24:], d.VAddr)
	off := 32
	if size == DestLen629 {
		be.PutUint64(b[32:], d.TailVAddr)
		off = 40
	}
	copy(b[off:], d.GID[:])
	be.PutUint32(b[off+16:], d.SRQN)
	be.PutUint32(b[off+20:], d.GIDIndex)
	return b
}

// ParseDest decodes a destination record of DestLen or DestLen629 octets.
func ParseDest(b []byte) (Dest, error) {
	if len(b) != DestLen && len(b) != DestLen629 {
		return Dest{}, fmt.Errorf("perftest: destination record of %d octets, want %d or %d", len(b), DestLen, DestLen629)
	}
	be := binary.BigEndian
	d := Dest{LID: be.Uint32(b[0:]), OutReads: be.Uint32(b[4:]), QPN: be.Uint32(b[8:]), PSN: be.Uint32(b[12:]),
		RKey: be.Uint32(b[16:]), VAddr: be.Uint64(b[24:])}
	off := 32
	if len(b) == DestLen629 {
		d.TailVAddr = be.Uint64(b[32:])
		off = 40
	}
	copy(d.GID[:], b[off:])
	d.SRQN, d.GIDIndex = be.Uint32(b[off+16:]), be.Uint32(b[off+20:])
	return d, nil
}

// Report is the bandwidth report a write_bw/read_bw client sends the
// server: five 8-octet fields.
type Report struct {
	Size, Iters            uint64
	BWPeak, BWAvg, MsgRate float64
}

// Messages returns the report as its five messages.
func (r Report) Messages() [5][]byte {
	be := binary.BigEndian
	return [5][]byte{
		be.AppendUint64(nil, r.Size),
		be.AppendUint64(nil, r.Iters),
		be.AppendUint64(nil, math.Float64bits(r.BWPeak)),
		be.AppendUint64(nil, math.Float64bits(r.BWAvg)),
		be.AppendUint64(nil, math.Float64bits(r.MsgRate)),
	}
}

// ParseReport decodes the five report messages.
func ParseReport(m [5][]byte) (Report, error) {
	for i, b := range m {
		if len(b) < ReportField {
			return Report{}, fmt.Errorf("perftest: report field %d has %d octets", i, len(b))
		}
	}
	be := binary.BigEndian
	return Report{Size: be.Uint64(m[0]), Iters: be.Uint64(m[1]),
		BWPeak: math.Float64frombits(be.Uint64(m[2])), BWAvg: math.Float64frombits(be.Uint64(m[3])),
		MsgRate: math.Float64frombits(be.Uint64(m[4]))}, nil
}
