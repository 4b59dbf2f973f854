package nvmeof

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Golden capsules from /work/shared/nvmeof/nvme-loop.pcap (Linux 6.1's
// nvme-rdma host and nvmet-rdma target over siw; nvme-loop.decoded.txt
// shows them decoded).
const (
	// Admin queue Connect: keyed SGL with invalidate, 1024 octets at
	// 0xff41b2d082271000, key 0x38ef3401; SQSIZE 31, KATO 0.
	goldAdminConnect = "7f400000010000000000000000000000000000000000000000102782d0b241ff0004000134ef384f000000001f00000000000000000000000000000000000000"
	// The NVM admin queue's Connect, KATO 5000 ms.
	goldAdminConnectKATO = "7f400000010000000000000000000000000000000000000000082782d0b241ff000400010c41cb4f000000001f00000088130000000000000000000000000000"
	// Property Get CAP (8 octets), CID 1, keyed SGL of length 0.
	goldPropGetCAP = "7f400100040000000000000000000000000000000000000000000000000000000000000000000040010000000000000000000000000000000000000000000000"
	// Property Set CC = 0x460060, CID 4096.
	goldPropSetCC = "7f400010000000000000000000000000000000000000000000000000000000000000000000000040000000001400000060004600000000000000000000000000"
	// Identify CNS 1, CID 14, 4096 octets, key 0x38ef3402 with invalidate.
	goldIdentify = "06400e00000000000000000000000000000000000000000000501d84d0b241ff0010000234ef384f010000000000000000000000000000000000000000000000"
	// Get Log Page 0x70, RAE, NUMDL 255 (1024 octets).
	goldGetLogDisc = "02401100000000000000000000000000000000000000000030304584d0b241ff0004000434ef384f7080ff000000000000000000000000000000000000000000"
	// I/O queue 1 Connect with the 1024 octets of data in the capsule.
	goldIOConnect = "7f400000010000000000000000000000000000000000000000000000000000000004000000000001000001007f00000000000000000000000000000000000000"
	// Write of one block at LBA 16, 4096 octets in the capsule.
	goldWriteInCap = "01400100010000000000000000000000000000000000000000000000000000000010000000000001100000000000000000000000000000000000000000000000"
	// Write of 32 blocks at LBA 32, 128 KiB by keyed SGL 0xdfad1b04.
	goldWriteKeyed = "01402400010000000000000000000000000000000000000000f04c84d0b241ff000002041baddf4f20000000000000001f000000000000000000000000000000"
	// Read of one block at LBA 0, keyed 0xdfad1b01.
	goldRead = "0240210001000000000000000000000000000000000000000090a6bbd0b241ff001000011baddf4f000000000000000000000000000000000000000000000000"

	goldCQEConnect   = "01000000000000000100000000000000" // result 1 (cntlid), SQHD 1
	goldCQECAP       = "7f00000f200800000200000001000000" // CAP 0x820_0f00_007f, SQHD 2, CID 1
	goldCQEIOConnect = "01000000000000000100010000000000" // SQID 1
	goldCQEQ2        = "00000000000000000300020002000000" // SQHD 3, SQID 2, CID 2

	// RDMA CM private data after the MPA rev 2 IRD/ORD word.
	goldCMReqAdmin = "0000000020001f00000000000000000000000000000000000000000000000000"
	goldCMReqIO1   = "0000010080007f00000000000000000000000000000000000000000000000000"
	goldCMRepAdmin = "0000200000000000000000000000000000000000000000000000000000000000"
)

func unhex(t testing.TB, s string) []byte {
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}

func TestGoldenCommands(t *testing.T) {
	c, ok := ParseCommand(unhex(t, goldAdminConnect))
	require.True(t, ok)
	require.True(t, c.IsFabrics())
	require.EqualValues(t, FabricsConnect, c.FCType())
	require.EqualValues(t, FlagSGL, c.Flags())
	require.EqualValues(t, 0, c.QID())
	require.EqualValues(t, 31, c.SQSize())
	require.EqualValues(t, 0, c.KATO())
	s := c.SGL()
	require.True(t, s.Keyed())
	require.True(t, s.Invalidate())
	require.Equal(t, uint64(0xff41b2d082271000), s.Addr())
	require.EqualValues(t, 1024, s.Length())
	require.EqualValues(t, 0x38ef3401, s.Key())
	// Encoders give the same octets.
	b := make([]byte, CommandSize)
	NewConnect(b, 0, 0, 31, 0)
	Command(b).SGL().SetKeyed(0xff41b2d082271000, 1024, 0x38ef3401, true)
	require.Equal(t, goldAdminConnect, hex.EncodeToString(b))
	NewConnect(b, 0, 0, 31, 5000)
	Command(b).SGL().SetKeyed(0xff41b2d082270800, 1024, 0xcb410c01, true)
	require.Equal(t, goldAdminConnectKATO, hex.EncodeToString(b))

	c, _ = ParseCommand(unhex(t, goldPropGetCAP))
	require.Equal(t, 8, c.PropSize())
	require.EqualValues(t, PropCAP, c.PropOffset())
	NewPropertyGet(b, 1, PropCAP, 8)
	Command(b).SGL().SetKeyed(0, 0, 0, false)
	require.Equal(t, goldPropGetCAP, hex.EncodeToString(b))

	c, _ = ParseCommand(unhex(t, goldPropSetCC))
	require.EqualValues(t, 4096, c.CID())
	require.Equal(t, 4, c.PropSize())
	require.EqualValues(t, PropCC, c.PropOffset())
	require.EqualValues(t, 0x460060, c.PropValue())
	NewPropertySet(b, 4096, PropCC, 0x460060)
	Command(b).SGL().SetKeyed(0, 0, 0, false)
	require.Equal(t, goldPropSetCC, hex.EncodeToString(b))

	c, _ = ParseCommand(unhex(t, goldIdentify))
	require.EqualValues(t, AdminIdentify, c.Opcode())
	require.EqualValues(t, 14, c.CID())
	require.EqualValues(t, CNSController, c.CDW(10))
	require.EqualValues(t, 4096, c.SGL().Length())

	c, _ = ParseCommand(unhex(t, goldGetLogDisc))
	require.EqualValues(t, 1024, logLen(c))
	require.EqualValues(t, LogDiscovery, uint8(c.CDW(10)))

	c, _ = ParseCommand(unhex(t, goldIOConnect))
	require.EqualValues(t, 1, c.QID())
	require.EqualValues(t, 127, c.SQSize())
	d, st := ParseData(c, 1024, 4096)
	require.Equal(t, StatusSuccess, st)
	require.Equal(t, Data{Len: 1024, InCap: true, Received: 1024}, d)
	NewConnect(b, 0, 1, 127, 0)
	Command(b).SGL().SetInCapsule(0, 1024)
	require.Equal(t, goldIOConnect, hex.EncodeToString(b))

	c, _ = ParseCommand(unhex(t, goldWriteInCap))
	require.EqualValues(t, IOWrite, c.Opcode())
	require.EqualValues(t, 16, c.SLBA())
	require.EqualValues(t, 0, c.NLB())
	d, st = ParseData(c, 4096, 4096)
	require.Equal(t, StatusSuccess, st)
	require.True(t, d.InCap)
	NewRW(b, IOWrite, 1, 1, 16, 0)
	Command(b).SGL().SetInCapsule(0, 4096)
	require.Equal(t, goldWriteInCap, hex.EncodeToString(b))

	c, _ = ParseCommand(unhex(t, goldWriteKeyed))
	require.EqualValues(t, 32, c.SLBA())
	require.EqualValues(t, 31, c.NLB())
	d, st = ParseData(c, 0, 4096)
	require.Equal(t, StatusSuccess, st)
	require.Equal(t, Data{Len: 128 << 10, Addr: 0xff41b2d0844cf000, Key: 0xdfad1b04, Inval: true}, d)
	NewRW(b, IOWrite, 36, 1, 32, 31)
	Command(b).SGL().SetKeyed(0xff41b2d0844cf000, 128<<10, 0xdfad1b04, true)
	require.Equal(t, goldWriteKeyed, hex.EncodeToString(b))

	NewRW(b, IORead, 33, 1, 0, 0)
	Command(b).SGL().SetKeyed(0xff41b2d0bba69000, 4096, 0xdfad1b01, true)
	require.Equal(t, goldRead, hex.EncodeToString(b))
}

func TestGoldenCompletions(t *testing.T) {
	c, ok := ParseCompletion(unhex(t, goldCQECAP))
	require.True(t, ok)
	require.EqualValues(t, uint64(0x8200f00007f), c.Result())
	require.EqualValues(t, 2, c.SQHead())
	require.EqualValues(t, 1, c.CID())
	require.Equal(t, StatusSuccess, c.Status())
	for _, g := range []struct {
		hex             string
		res             uint64
		sqhd, sqid, cid uint16
	}{
		{goldCQEConnect, 1, 1, 0, 0},
		{goldCQECAP, 0x8200f00007f, 2, 0, 1},
		{goldCQEIOConnect, 1, 1, 1, 0},
		{goldCQEQ2, 0, 3, 2, 2},
	} {
		require.Equal(t, g.hex, hex.EncodeToString(AppendCompletion(nil, g.res, g.sqhd, g.sqid, g.cid, StatusSuccess)))
	}
	// Status bits: 15:1, phase in bit 0.
	b := AppendCompletion(nil, 0, 0, 0, 7, StatusLBARange|DNR)
	require.Equal(t, "00000000000000000000000007000081", hex.EncodeToString(b)[:32])
	c, _ = ParseCompletion(b)
	require.Equal(t, StatusLBARange|DNR, c.Status())
	require.Equal(t, StatusLBARange, c.Status().Code())
	require.Equal(t, "LBA Out of Range (DNR)", c.Status().String())
}

func TestGoldenCM(t *testing.T) {
	r, err := ParseCMRequest(unhex(t, goldCMReqAdmin))
	require.NoError(t, err)
	require.Equal(t, CMRequest{QID: 0, HRQSize: 32, HSQSize: 31}, r)
	require.Equal(t, goldCMReqAdmin, hex.EncodeToString(r.Append(nil)))
	r, err = ParseCMRequest(unhex(t, goldCMReqIO1))
	require.NoError(t, err)
	require.Equal(t, CMRequest{QID: 1, HRQSize: 128, HSQSize: 127}, r)
	require.Equal(t, goldCMReqIO1, hex.EncodeToString(r.Append(nil)))
	p, err := ParseCMReply(unhex(t, goldCMRepAdmin))
	require.NoError(t, err)
	require.Equal(t, CMReply{CRQSize: 32}, p)
	require.Equal(t, goldCMRepAdmin, hex.EncodeToString(p.Append(nil)))
	j, err := ParseCMReject(CMReject{Status: CMRejectInvalidHSQSize}.Append(nil))
	require.NoError(t, err)
	require.EqualValues(t, CMRejectInvalidHSQSize, j.Status)
}

// The I/O Connect data of the capture: host ID, controller 1, the NQNs.
func TestGoldenConnectData(t *testing.T) {
	b := make([]byte, ConnectDataSize)
	copy(b, unhex(t, "3f95df11d2074837a20dc7d47ee24f820100"))
	copy(b[256:], "nqn.2024-01.io.goiwarp:siwtest")
	copy(b[512:], "nqn.2014-08.org.nvmexpress:uuid:5eed0000-0000-4000-8000-000000000001")
	d, err := ParseConnectData(b)
	require.NoError(t, err)
	require.EqualValues(t, 1, d.CntlID)
	require.Equal(t, "3f95df11d2074837a20dc7d47ee24f82", hex.EncodeToString(d.HostID[:]))
	require.Equal(t, "nqn.2024-01.io.goiwarp:siwtest", d.SubNQN)
	require.Equal(t, "nqn.2014-08.org.nvmexpress:uuid:5eed0000-0000-4000-8000-000000000001", d.HostNQN)
	require.Equal(t, b, d.Append(nil))
}

// Every truncated prefix fails cleanly.
func TestTruncated(t *testing.T) {
	cmd := unhex(t, goldAdminConnect)
	for i := range cmd {
		_, ok := ParseCommand(cmd[:i])
		require.False(t, ok, "%d octets", i)
	}
	cqe := unhex(t, goldCQECAP)
	for i := range cqe {
		_, ok := ParseCompletion(cqe[:i])
		require.False(t, ok)
	}
	cm := unhex(t, goldCMReqAdmin)
	for i := range cm {
		_, err := ParseCMRequest(cm[:i])
		require.Error(t, err)
		_, err = ParseCMReply(cm[:i])
		require.Error(t, err)
	}
	cd := ConnectData{CntlID: 0xffff, SubNQN: testNQN, HostNQN: "h"}.Append(nil)
	for _, i := range []int{0, 1, 17, 255, 256, 600, 1023} {
		_, err := ParseConnectData(cd[:i])
		require.Error(t, err)
	}
	ci := (&ControllerInfo{CntlID: 3}).Append(nil)
	for _, i := range []int{0, 100, 1802, 4095} {
		_, err := ParseControllerInfo(ci[:i])
		require.Error(t, err)
		_, err = ParseNamespaceInfo(ci[:i])
		require.Error(t, err)
	}
	dl := appendDiscoveryLog(nil, 3, []DiscoveryEntry{{SubNQN: testNQN, TrAddr: "10.0.0.1", TrSvcID: "4420"}})
	for _, i := range []int{0, 1, 1023} {
		_, _, _, err := ParseDiscoveryLog(dl[:i])
		require.Error(t, err)
	}
	// A log cut inside its entries yields the whole entries only.
	_, n, ents, err := ParseDiscoveryLog(dl[:2000])
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Empty(t, ents)
}

func TestParseData(t *testing.T) {
	mk := func(f func(SGL)) Command {
		c := make(Command, CommandSize)
		f(c.SGL())
		return c
	}
	for _, tc := range []struct {
		name       string
		sgl        func(SGL)
		inCap, max int
		st         Status
	}{
		{"keyed address", func(s SGL) { s.SetKeyed(0x1000, 4096, 7, false) }, 0, 4096, StatusSuccess},
		{"keyed invalidate", func(s SGL) { s.SetKeyed(0x1000, 4096, 7, true) }, 0, 4096, StatusSuccess},
		{"keyed offset subtype", func(s SGL) { s.SetKeyed(0, 1, 7, false); s[15] = 0x41 }, 0, 4096, StatusSGLInvalidType | DNR},
		{"data block address", func(s SGL) { s.SetInCapsule(0, 10); s[15] = 0x00 }, 10, 4096, StatusSGLInvalidType | DNR},
		{"segment", func(s SGL) { s[15] = 0x20 }, 0, 4096, StatusSGLInvalidType | DNR},
		{"last segment", func(s SGL) { s[15] = 0x30 }, 0, 4096, StatusSGLInvalidType | DNR},
		{"bit bucket", func(s SGL) { s[15] = 0x10 }, 0, 4096, StatusSGLInvalidType | DNR},
		{"in capsule", func(s SGL) { s.SetInCapsule(16, 100) }, 116, 4096, StatusSuccess},
		{"in capsule, offset beyond the data", func(s SGL) { s.SetInCapsule(200, 1) }, 116, 4096, StatusSGLInvalidOffset | DNR},
		{"in capsule, longer than the data", func(s SGL) { s.SetInCapsule(16, 101) }, 116, 4096, StatusSGLInvalidData | DNR},
		{"in capsule, beyond IOCCSZ", func(s SGL) { s.SetInCapsule(0, 5000) }, 5000, 4096, StatusSGLInvalidData | DNR},
		{"in capsule, huge offset", func(s SGL) { s.SetInCapsule(1<<63, 1) }, 116, 4096, StatusSGLInvalidOffset | DNR},
		{"in capsule, length wraps", func(s SGL) { s.SetInCapsule(16, 0xffffffff) }, 116, 4096, StatusSGLInvalidData | DNR},
	} {
		_, st := ParseData(mk(tc.sgl), tc.inCap, tc.max)
		require.Equal(t, tc.st, st, tc.name)
	}
}

func TestStatusNames(t *testing.T) {
	require.Equal(t, "Connect Invalid Host (DNR)", (StatusConnectInvalidHost | DNR).String())
	require.EqualValues(t, SCTCommandSpecific, StatusConnectInvalidHost.SCT())
	require.True(t, strings.HasPrefix(Status(0x2ff).String(), "SCT 2"))
	e := &StatusError{Op: "Read", Status: StatusLBARange | DNR}
	require.Contains(t, e.Error(), "LBA Out of Range")
}

func TestIdentifyRoundTrip(t *testing.T) {
	ci := ControllerInfo{VID: 1, Serial: "s", Model: "m", Firmware: "f", CMIC: 3, MDTS: 5, CntlID: 0x1234, Version: Version13,
		OAES: 1 << 8, CTRATT: 4, CtrlType: 1, AERL: 3, LPA: 4, KAS: 1, SQES: 0x66, CQES: 0x44, MaxCmd: 128, NN: 1024,
		ONCS: 0xc, VWC: 1, SGLS: 0x100005, SubNQN: testNQN, IOCCSZ: 260, IORCSZ: 1, MSDBD: 1}
	got, err := ParseControllerInfo(ci.Append(nil))
	require.NoError(t, err)
	require.Equal(t, ci, got)
	ni := NamespaceInfo{Size: 100, Capacity: 100, Utilization: 100, LBADS: 12, NMIC: 1, NGUID: [16]byte{1, 2}}
	gotn, err := ParseNamespaceInfo(ni.Append(nil))
	require.NoError(t, err)
	require.Equal(t, ni, gotn)
	require.Equal(t, 4096, gotn.BlockSize())
	ents := []DiscoveryEntry{{TrType: 1, AdrFam: 1, SubType: 2, PortID: 1, CntlID: 0xffff, ASQSZ: 32, TrSvcID: "4420", TrAddr: "10.0.2.2", SubNQN: testNQN}}
	g, n, got2, err := ParseDiscoveryLog(appendDiscoveryLog(nil, 9, ents))
	require.NoError(t, err)
	require.EqualValues(t, 9, g)
	require.EqualValues(t, 1, n)
	require.Equal(t, ents, got2)
}
