// Package golden holds NVMe/RDMA capsules, completions and CM private data
// captured from Linux's host and target, the byte-exact vectors that the
// wire tests check and the fuzzers start from.
package golden

import (
	"encoding/binary"
	"encoding/hex"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// Golden capsules from a capture of Linux 6.1's nvme-rdma host and
// nvmet-rdma target over siw (nvme-loop.pcap, with nvme-loop.decoded.txt
// showing them decoded, in the workplace's shared/nvmeof/ beside this
// repository).
const (
	// Admin queue Connect: keyed SGL with invalidate, 1024 octets at
	// 0xff41b2d082271000, key 0x38ef3401; SQSIZE 31, KATO 0.
	AdminConnect = "7f400000010000000000000000000000000000000000000000102782d0b241ff0004000134ef384f000000001f00000000000000000000000000000000000000"
	// The NVM admin queue's Connect, KATO 5000 ms.
	AdminConnectKATO = "7f400000010000000000000000000000000000000000000000082782d0b241ff000400010c41cb4f000000001f00000088130000000000000000000000000000"
	// Property Get CAP (8 octets), CID 1, keyed SGL of length 0.
	PropGetCAP = "7f400100040000000000000000000000000000000000000000000000000000000000000000000040010000000000000000000000000000000000000000000000"
	// Property Set CC = 0x460060, CID 4096.
	PropSetCC = "7f400010000000000000000000000000000000000000000000000000000000000000000000000040000000001400000060004600000000000000000000000000"
	// Identify CNS 1, CID 14, 4096 octets, key 0x38ef3402 with invalidate.
	Identify = "06400e00000000000000000000000000000000000000000000501d84d0b241ff0010000234ef384f010000000000000000000000000000000000000000000000"
	// Get Log Page 0x70, RAE, NUMDL 255 (1024 octets).
	GetLogDisc = "02401100000000000000000000000000000000000000000030304584d0b241ff0004000434ef384f7080ff000000000000000000000000000000000000000000"
	// I/O queue 1 Connect with the 1024 octets of data in the capsule.
	IOConnect = "7f400000010000000000000000000000000000000000000000000000000000000004000000000001000001007f00000000000000000000000000000000000000"
	// Write of one block at LBA 16, 4096 octets in the capsule.
	WriteInCap = "01400100010000000000000000000000000000000000000000000000000000000010000000000001100000000000000000000000000000000000000000000000"
	// Write of 32 blocks at LBA 32, 128 KiB by keyed SGL 0xdfad1b04.
	WriteKeyed = "01402400010000000000000000000000000000000000000000f04c84d0b241ff000002041baddf4f20000000000000001f000000000000000000000000000000"
	// Read of one block at LBA 0, keyed 0xdfad1b01.
	Read = "0240210001000000000000000000000000000000000000000090a6bbd0b241ff001000011baddf4f000000000000000000000000000000000000000000000000"

	CQEConnect   = "01000000000000000100000000000000" // result 1 (cntlid), SQHD 1
	CQECAP       = "7f00000f200800000200000001000000" // CAP 0x820_0f00_007f, SQHD 2, CID 1
	CQEIOConnect = "01000000000000000100010000000000" // SQID 1
	CQEQ2        = "00000000000000000300020002000000" // SQHD 3, SQID 2, CID 2

	// RDMA CM private data after the MPA rev 2 IRD/ORD word.
	CMReqAdmin = "0000000020001f00000000000000000000000000000000000000000000000000"
	CMReqIO1   = "0000010080007f00000000000000000000000000000000000000000000000000"
	CMRepAdmin = "0000200000000000000000000000000000000000000000000000000000000000"
)

// Bytes decodes one of the hex vectors above.
func Bytes(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic("golden: " + err.Error())
	}
	return b
}

// Seeds are capsules to seed fuzzers with: the golden ones, reservation
// commands to namespace 2 (data in the capsule), its report, the ANA log,
// an I/O Connect to subNQN, writes, write protection, the host ID, a FUA
// write and Dataset Management.
func Seeds(subNQN string) [][]byte {
	var seeds [][]byte
	for _, h := range []string{AdminConnect, AdminConnectKATO, PropGetCAP, PropSetCC, Identify,
		GetLogDisc, WriteKeyed, Read} {
		seeds = append(seeds, Bytes(h))
	}
	// Reservation commands to the fuzz target's second namespace (data in
	// the capsule), its report and the ANA log (keyed, pointed at the
	// host's buffer by FuzzTargetCommands).
	resv := func(op uint8, cdw10 uint32, keys ...uint64) []byte {
		b := Bytes(WriteInCap)
		c := nvme.Command(b)
		c.SetOpcode(op)
		c.SetNSID(2)
		for n := 10; n <= 15; n++ {
			c.SetCDW(n, 0)
		}
		c.SetCDW(10, cdw10)
		c.SGL().SetInCapsule(0, uint32(8*len(keys)))
		for _, k := range keys {
			b = binary.LittleEndian.AppendUint64(b, k)
		}
		return b
	}
	seeds = append(seeds,
		resv(nvme.IOResvRegister, nvme.ResvRegister, 0, 7),
		resv(nvme.IOResvAcquire, nvme.ResvAcquire|uint32(nvme.ResvWriteExclusive)<<8, 7, 0),
		resv(nvme.IOResvAcquire, nvme.ResvPreemptAbort|uint32(nvme.ResvExclusiveAccessAllRegs)<<8, 7, 7),
		resv(nvme.IOResvRelease, nvme.ResvRelease|uint32(nvme.ResvWriteExclusive)<<8, 7),
		resv(nvme.IOResvRelease, nvme.ResvClear, 7))
	rep := Bytes(GetLogDisc)
	nvme.Command(rep).SetOpcode(nvme.IOResvReport)
	nvme.Command(rep).SetNSID(2)
	nvme.Command(rep).SetCDW(10, 1024/4-1) // the descriptor's 1 KiB
	nvme.Command(rep).SetCDW(11, nvme.ResvReportEDS)
	ana := Bytes(GetLogDisc)
	nvme.Command(ana).SetCDW(10, nvme.Command(ana).CDW(10)&^0xff|nvme.LogANA)
	seeds = append(seeds, rep, ana)
	ioc := Bytes(IOConnect)
	ioc = nvme.ConnectData{CntlID: 1, SubNQN: subNQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:5eed0000-0000-4000-8000-000000000001"}.Append(ioc)
	w := append(Bytes(WriteInCap), make([]byte, 4096)...)
	// Write protection on namespace 1, the host ID (keyed, 16 octets), a
	// FUA write, and Dataset Management with Linux's 4 KiB range buffer.
	wp := Bytes(Identify)
	nvme.NewAdmin(nvme.Command(wp), nvme.AdminSetFeatures, nvme.Command(wp).CID(), 1, nvme.FeatWriteProtect, 1)
	hid := Bytes(Identify)
	nvme.NewAdmin(nvme.Command(hid), nvme.AdminGetFeatures, nvme.Command(hid).CID(), 0, nvme.FeatHostID, 1)
	nvme.Command(hid).SGL().SetKeyed(0, 16, 1, false)
	fua := append(Bytes(WriteInCap), make([]byte, 4096)...)
	nvme.Command(fua).SetCDW(12, nvme.Command(fua).CDW(12)|nvme.RWFUA)
	dsm := append(Bytes(WriteInCap), make([]byte, 4096)...)
	nvme.NewAdmin(nvme.Command(dsm), nvme.IODSM, nvme.Command(dsm).CID(), 1, 0, 1<<2)
	nvme.Command(dsm).SGL().SetInCapsule(0, 4096)
	binary.LittleEndian.PutUint32(dsm[nvme.CommandSize+4:], 8)
	return append(seeds, ioc, w, hid, fua, dsm, wp)
}
