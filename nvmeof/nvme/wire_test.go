package nvme_test

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/internal/golden"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

func unhex(t testing.TB, s string) []byte {
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}

func TestGoldenCommands(t *testing.T) {
	c, ok := nvme.ParseCommand(unhex(t, golden.AdminConnect))
	require.True(t, ok)
	require.True(t, c.IsFabrics())
	require.EqualValues(t, nvme.FabricsConnect, c.FCType())
	require.EqualValues(t, nvme.FlagSGL, c.Flags())
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
	b := make([]byte, nvme.CommandSize)
	nvme.NewConnect(b, 0, 0, 31, 0)
	nvme.Command(b).SGL().SetKeyed(0xff41b2d082271000, 1024, 0x38ef3401, true)
	require.Equal(t, golden.AdminConnect, hex.EncodeToString(b))
	nvme.NewConnect(b, 0, 0, 31, 5000)
	nvme.Command(b).SGL().SetKeyed(0xff41b2d082270800, 1024, 0xcb410c01, true)
	require.Equal(t, golden.AdminConnectKATO, hex.EncodeToString(b))

	c, _ = nvme.ParseCommand(unhex(t, golden.PropGetCAP))
	require.Equal(t, 8, c.PropSize())
	require.EqualValues(t, nvme.PropCAP, c.PropOffset())
	nvme.NewPropertyGet(b, 1, nvme.PropCAP, 8)
	nvme.Command(b).SGL().SetKeyed(0, 0, 0, false)
	require.Equal(t, golden.PropGetCAP, hex.EncodeToString(b))

	c, _ = nvme.ParseCommand(unhex(t, golden.PropSetCC))
	require.EqualValues(t, 4096, c.CID())
	require.Equal(t, 4, c.PropSize())
	require.EqualValues(t, nvme.PropCC, c.PropOffset())
	require.EqualValues(t, 0x460060, c.PropValue())
	nvme.NewPropertySet(b, 4096, nvme.PropCC, 0x460060)
	nvme.Command(b).SGL().SetKeyed(0, 0, 0, false)
	require.Equal(t, golden.PropSetCC, hex.EncodeToString(b))

	c, _ = nvme.ParseCommand(unhex(t, golden.Identify))
	require.EqualValues(t, nvme.AdminIdentify, c.Opcode())
	require.EqualValues(t, 14, c.CID())
	require.EqualValues(t, nvme.CNSController, c.CDW(10))
	require.EqualValues(t, 4096, c.SGL().Length())

	c, _ = nvme.ParseCommand(unhex(t, golden.GetLogDisc))
	require.EqualValues(t, 1024, c.LogLen())
	require.EqualValues(t, nvme.LogDiscovery, uint8(c.CDW(10)))

	c, _ = nvme.ParseCommand(unhex(t, golden.IOConnect))
	require.EqualValues(t, 1, c.QID())
	require.EqualValues(t, 127, c.SQSize())
	d, st := nvme.ParseData(c, 1024, 4096)
	require.Equal(t, nvme.StatusSuccess, st)
	require.Equal(t, nvme.Data{Len: 1024, InCap: true, Received: 1024}, d)
	nvme.NewConnect(b, 0, 1, 127, 0)
	nvme.Command(b).SGL().SetInCapsule(0, 1024)
	require.Equal(t, golden.IOConnect, hex.EncodeToString(b))

	c, _ = nvme.ParseCommand(unhex(t, golden.WriteInCap))
	require.EqualValues(t, nvme.IOWrite, c.Opcode())
	require.EqualValues(t, 16, c.SLBA())
	require.EqualValues(t, 0, c.NLB())
	d, st = nvme.ParseData(c, 4096, 4096)
	require.Equal(t, nvme.StatusSuccess, st)
	require.True(t, d.InCap)
	nvme.NewRW(b, nvme.IOWrite, 1, 1, 16, 0)
	nvme.Command(b).SGL().SetInCapsule(0, 4096)
	require.Equal(t, golden.WriteInCap, hex.EncodeToString(b))

	c, _ = nvme.ParseCommand(unhex(t, golden.WriteKeyed))
	require.EqualValues(t, 32, c.SLBA())
	require.EqualValues(t, 31, c.NLB())
	d, st = nvme.ParseData(c, 0, 4096)
	require.Equal(t, nvme.StatusSuccess, st)
	require.Equal(t, nvme.Data{Len: 128 << 10, Addr: 0xff41b2d0844cf000, Key: 0xdfad1b04, Inval: true}, d)
	nvme.NewRW(b, nvme.IOWrite, 36, 1, 32, 31)
	nvme.Command(b).SGL().SetKeyed(0xff41b2d0844cf000, 128<<10, 0xdfad1b04, true)
	require.Equal(t, golden.WriteKeyed, hex.EncodeToString(b))

	nvme.NewRW(b, nvme.IORead, 33, 1, 0, 0)
	nvme.Command(b).SGL().SetKeyed(0xff41b2d0bba69000, 4096, 0xdfad1b01, true)
	require.Equal(t, golden.Read, hex.EncodeToString(b))
}

func TestGoldenCompletions(t *testing.T) {
	c, ok := nvme.ParseCompletion(unhex(t, golden.CQECAP))
	require.True(t, ok)
	require.EqualValues(t, uint64(0x8200f00007f), c.Result())
	require.EqualValues(t, 2, c.SQHead())
	require.EqualValues(t, 1, c.CID())
	require.Equal(t, nvme.StatusSuccess, c.Status())
	for _, g := range []struct {
		hex             string
		res             uint64
		sqhd, sqid, cid uint16
	}{
		{golden.CQEConnect, 1, 1, 0, 0},
		{golden.CQECAP, 0x8200f00007f, 2, 0, 1},
		{golden.CQEIOConnect, 1, 1, 1, 0},
		{golden.CQEQ2, 0, 3, 2, 2},
	} {
		require.Equal(t, g.hex, hex.EncodeToString(nvme.AppendCompletion(nil, g.res, g.sqhd, g.sqid, g.cid, nvme.StatusSuccess)))
	}
	// Status bits: 15:1, phase in bit 0.
	b := nvme.AppendCompletion(nil, 0, 0, 0, 7, nvme.StatusLBARange|nvme.DNR)
	require.Equal(t, "00000000000000000000000007000081", hex.EncodeToString(b)[:32])
	c, _ = nvme.ParseCompletion(b)
	require.Equal(t, nvme.StatusLBARange|nvme.DNR, c.Status())
	require.Equal(t, nvme.StatusLBARange, c.Status().Code())
	require.Equal(t, "LBA Out of Range (DNR)", c.Status().String())
}

func TestGoldenCM(t *testing.T) {
	r, err := nvme.ParseCMRequest(unhex(t, golden.CMReqAdmin))
	require.NoError(t, err)
	require.Equal(t, nvme.CMRequest{QID: 0, HRQSize: 32, HSQSize: 31}, r)
	require.Equal(t, golden.CMReqAdmin, hex.EncodeToString(r.Append(nil)))
	r, err = nvme.ParseCMRequest(unhex(t, golden.CMReqIO1))
	require.NoError(t, err)
	require.Equal(t, nvme.CMRequest{QID: 1, HRQSize: 128, HSQSize: 127}, r)
	require.Equal(t, golden.CMReqIO1, hex.EncodeToString(r.Append(nil)))
	p, err := nvme.ParseCMReply(unhex(t, golden.CMRepAdmin))
	require.NoError(t, err)
	require.Equal(t, nvme.CMReply{CRQSize: 32}, p)
	require.Equal(t, golden.CMRepAdmin, hex.EncodeToString(p.Append(nil)))
	j, err := nvme.ParseCMReject(nvme.CMReject{Status: nvme.CMRejectInvalidHSQSize}.Append(nil))
	require.NoError(t, err)
	require.EqualValues(t, nvme.CMRejectInvalidHSQSize, j.Status)
}

// The I/O Connect data of the capture: host ID, controller 1, the NQNs.
func TestGoldenConnectData(t *testing.T) {
	b := make([]byte, nvme.ConnectDataSize)
	copy(b, unhex(t, "3f95df11d2074837a20dc7d47ee24f820100"))
	copy(b[256:], "nqn.2024-01.io.goiwarp:siwtest")
	copy(b[512:], "nqn.2014-08.org.nvmexpress:uuid:5eed0000-0000-4000-8000-000000000001")
	d, err := nvme.ParseConnectData(b)
	require.NoError(t, err)
	require.EqualValues(t, 1, d.CntlID)
	require.Equal(t, "3f95df11d2074837a20dc7d47ee24f82", hex.EncodeToString(d.HostID[:]))
	require.Equal(t, "nqn.2024-01.io.goiwarp:siwtest", d.SubNQN)
	require.Equal(t, "nqn.2014-08.org.nvmexpress:uuid:5eed0000-0000-4000-8000-000000000001", d.HostNQN)
	require.Equal(t, b, d.Append(nil))
}

// Every truncated prefix fails cleanly.
func TestTruncated(t *testing.T) {
	cmd := unhex(t, golden.AdminConnect)
	for i := range cmd {
		_, ok := nvme.ParseCommand(cmd[:i])
		require.False(t, ok, "%d octets", i)
	}
	cqe := unhex(t, golden.CQECAP)
	for i := range cqe {
		_, ok := nvme.ParseCompletion(cqe[:i])
		require.False(t, ok)
	}
	cm := unhex(t, golden.CMReqAdmin)
	for i := range cm {
		_, err := nvme.ParseCMRequest(cm[:i])
		require.Error(t, err)
		_, err = nvme.ParseCMReply(cm[:i])
		require.Error(t, err)
	}
	cd := nvme.ConnectData{CntlID: 0xffff, SubNQN: testNQN, HostNQN: "h"}.Append(nil)
	for _, i := range []int{0, 1, 17, 255, 256, 600, 1023} {
		_, err := nvme.ParseConnectData(cd[:i])
		require.Error(t, err)
	}
	ci := (&nvme.ControllerInfo{CntlID: 3}).Append(nil)
	for _, i := range []int{0, 100, 1802, 4095} {
		_, err := nvme.ParseControllerInfo(ci[:i])
		require.Error(t, err)
		_, err = nvme.ParseNamespaceInfo(ci[:i])
		require.Error(t, err)
	}
	dl := nvme.AppendDiscoveryLog(nil, 3, []nvme.DiscoveryEntry{{SubNQN: testNQN, TrAddr: "10.0.0.1", TrSvcID: "4420"}})
	for _, i := range []int{0, 1, 1023} {
		_, _, _, err := nvme.ParseDiscoveryLog(dl[:i])
		require.Error(t, err)
	}
	// A log cut inside its entries yields the whole entries only.
	_, n, ents, err := nvme.ParseDiscoveryLog(dl[:2000])
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Empty(t, ents)
}

func TestParseData(t *testing.T) {
	mk := func(f func(nvme.SGL)) nvme.Command {
		c := make(nvme.Command, nvme.CommandSize)
		f(c.SGL())
		return c
	}
	for _, tc := range []struct {
		name       string
		sgl        func(nvme.SGL)
		inCap, max int
		st         nvme.Status
	}{
		{"keyed address", func(s nvme.SGL) { s.SetKeyed(0x1000, 4096, 7, false) }, 0, 4096, nvme.StatusSuccess},
		{"keyed invalidate", func(s nvme.SGL) { s.SetKeyed(0x1000, 4096, 7, true) }, 0, 4096, nvme.StatusSuccess},
		{"keyed offset subtype", func(s nvme.SGL) { s.SetKeyed(0, 1, 7, false); s[15] = 0x41 }, 0, 4096, nvme.StatusSGLInvalidType | nvme.DNR},
		{"data block address", func(s nvme.SGL) { s.SetInCapsule(0, 10); s[15] = 0x00 }, 10, 4096, nvme.StatusSGLInvalidType | nvme.DNR},
		{"segment", func(s nvme.SGL) { s[15] = 0x20 }, 0, 4096, nvme.StatusSGLInvalidType | nvme.DNR},
		{"last segment", func(s nvme.SGL) { s[15] = 0x30 }, 0, 4096, nvme.StatusSGLInvalidType | nvme.DNR},
		{"bit bucket", func(s nvme.SGL) { s[15] = 0x10 }, 0, 4096, nvme.StatusSGLInvalidType | nvme.DNR},
		{"in capsule", func(s nvme.SGL) { s.SetInCapsule(16, 100) }, 116, 4096, nvme.StatusSuccess},
		{"in capsule, offset beyond the data", func(s nvme.SGL) { s.SetInCapsule(200, 1) }, 116, 4096, nvme.StatusSGLInvalidOffset | nvme.DNR},
		{"in capsule, longer than the data", func(s nvme.SGL) { s.SetInCapsule(16, 101) }, 116, 4096, nvme.StatusSGLInvalidData | nvme.DNR},
		{"in capsule, beyond IOCCSZ", func(s nvme.SGL) { s.SetInCapsule(0, 5000) }, 5000, 4096, nvme.StatusSGLInvalidData | nvme.DNR},
		{"in capsule, huge offset", func(s nvme.SGL) { s.SetInCapsule(1<<63, 1) }, 116, 4096, nvme.StatusSGLInvalidOffset | nvme.DNR},
		{"in capsule, length wraps", func(s nvme.SGL) { s.SetInCapsule(16, 0xffffffff) }, 116, 4096, nvme.StatusSGLInvalidData | nvme.DNR},
	} {
		_, st := nvme.ParseData(mk(tc.sgl), tc.inCap, tc.max)
		require.Equal(t, tc.st, st, tc.name)
	}
}

func TestStatusNames(t *testing.T) {
	require.Equal(t, "Connect Invalid Host (DNR)", (nvme.StatusConnectInvalidHost | nvme.DNR).String())
	require.EqualValues(t, nvme.SCTCommandSpecific, nvme.StatusConnectInvalidHost.SCT())
	require.True(t, strings.HasPrefix(nvme.Status(0x2ff).String(), "SCT 2"))
	require.Equal(t, "Write Fault (DNR)", (nvme.StatusWriteFault | nvme.DNR).String())
	require.EqualValues(t, nvme.SCTMediaError, nvme.StatusUnrecoveredRead.SCT())
	require.EqualValues(t, nvme.SCTPath, nvme.StatusANAInaccessible.SCT())
	require.Equal(t, "Reservation Report", nvme.IOCommandName(nvme.IOResvReport))
	e := &nvme.StatusError{Op: "Read", Status: nvme.StatusLBARange | nvme.DNR}
	require.Contains(t, e.Error(), "LBA Out of Range")
}

func TestIdentifyRoundTrip(t *testing.T) {
	ci := nvme.ControllerInfo{VID: 1, Serial: "s", Model: "m", Firmware: "f", CMIC: 3, MDTS: 5, CntlID: 0x1234, Version: nvme.Version13,
		OAES: 1 << 8, CTRATT: 4, CtrlType: 1, AERL: 3, LPA: 4, KAS: 1, SQES: 0x66, CQES: 0x44, MaxCmd: 128, NN: 1024,
		ONCS: 0xc, VWC: 1, SGLS: 0x100005, SubNQN: testNQN, IOCCSZ: 260, IORCSZ: 1, MSDBD: 1}
	got, err := nvme.ParseControllerInfo(ci.Append(nil))
	require.NoError(t, err)
	require.Equal(t, ci, got)
	ni := nvme.NamespaceInfo{Size: 100, Capacity: 100, Utilization: 100, LBADS: 12, NMIC: 1, NGUID: [16]byte{1, 2}}
	gotn, err := nvme.ParseNamespaceInfo(ni.Append(nil))
	require.NoError(t, err)
	require.Equal(t, ni, gotn)
	require.Equal(t, 4096, gotn.BlockSize())
	ents := []nvme.DiscoveryEntry{{TrType: 1, AdrFam: 1, SubType: 2, PortID: 1, CntlID: 0xffff, ASQSZ: 32, TrSvcID: "4420", TrAddr: "10.0.2.2", SubNQN: testNQN}}
	g, n, got2, err := nvme.ParseDiscoveryLog(nvme.AppendDiscoveryLog(nil, 9, ents))
	require.NoError(t, err)
	require.EqualValues(t, 9, g)
	require.EqualValues(t, 1, n)
	require.Equal(t, ents, got2)
}
