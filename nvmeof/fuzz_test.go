package nvmeof

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func goldenSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, h := range []string{goldAdminConnect, goldAdminConnectKATO, goldPropGetCAP, goldPropSetCC, goldIdentify,
		goldGetLogDisc, goldWriteKeyed, goldRead} {
		seeds = append(seeds, unhex(f, h))
	}
	// Reservation commands to the fuzz target's second namespace (data in
	// the capsule), its report and the ANA log (keyed, pointed at the
	// host's buffer by FuzzTargetCommands).
	resv := func(op uint8, cdw10 uint32, keys ...uint64) []byte {
		b := unhex(f, goldWriteInCap)
		c := Command(b)
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
		resv(IOResvRegister, resvRegister, 0, 7),
		resv(IOResvAcquire, resvAcquire|uint32(ResvWriteExclusive)<<8, 7, 0),
		resv(IOResvAcquire, resvPreemptAbort|uint32(ResvExclusiveAccessAllRegs)<<8, 7, 7),
		resv(IOResvRelease, resvRelease|uint32(ResvWriteExclusive)<<8, 7),
		resv(IOResvRelease, resvClear, 7))
	rep := unhex(f, goldGetLogDisc)
	Command(rep).SetOpcode(IOResvReport)
	Command(rep).SetNSID(2)
	Command(rep).SetCDW(10, 1024/4-1) // the descriptor's 1 KiB
	Command(rep).SetCDW(11, cdw11EDS)
	ana := unhex(f, goldGetLogDisc)
	Command(ana).SetCDW(10, Command(ana).CDW(10)&^0xff|LogANA)
	seeds = append(seeds, rep, ana)
	ioc := unhex(f, goldIOConnect)
	ioc = ConnectData{CntlID: 1, SubNQN: testNQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:5eed0000-0000-4000-8000-000000000001"}.Append(ioc)
	w := append(unhex(f, goldWriteInCap), make([]byte, 4096)...)
	// Write protection on namespace 1, the host ID (keyed, 16 octets), a
	// FUA write, and Dataset Management with Linux's 4 KiB range buffer.
	wp := unhex(f, goldIdentify)
	NewAdmin(Command(wp), AdminSetFeatures, Command(wp).CID(), 1, FeatWriteProtect, 1)
	hid := unhex(f, goldIdentify)
	NewAdmin(Command(hid), AdminGetFeatures, Command(hid).CID(), 0, FeatHostID, 1)
	Command(hid).SGL().SetKeyed(0, 16, 1, false)
	fua := append(unhex(f, goldWriteInCap), make([]byte, 4096)...)
	Command(fua).SetCDW(12, Command(fua).CDW(12)|RWFUA)
	dsm := append(unhex(f, goldWriteInCap), make([]byte, 4096)...)
	NewAdmin(Command(dsm), IODSM, Command(dsm).CID(), 1, 0, 1<<2)
	Command(dsm).SGL().SetInCapsule(0, 4096)
	binary.LittleEndian.PutUint32(dsm[CommandSize+4:], 8)
	return append(seeds, ioc, w, hid, fua, dsm, wp)
}

// FuzzCapsule: the SQE and SGL parsers on any capsule never panic, a
// failure always carries DNR, in-capsule data stays inside what arrived
// and IOCCSZ, and a descriptor that parses re-encodes to the same octets.
func FuzzCapsule(f *testing.F) {
	for _, s := range goldenSeeds(f) {
		f.Add(s, uint16(4096))
	}
	f.Fuzz(func(t *testing.T, b []byte, maxInCap uint16) {
		c, ok := ParseCommand(b)
		if !ok {
			require.Less(t, len(b), CommandSize)
			return
		}
		inCap := len(b) - CommandSize
		d, st := ParseData(c, inCap, int(maxInCap))
		if !st.OK() {
			require.NotZero(t, st&DNR, "%v", st)
			return
		}
		s := make(SGL, SGLSize)
		if d.InCap {
			require.LessOrEqual(t, d.Addr+uint64(d.Len), uint64(inCap))
			require.LessOrEqual(t, d.Addr+uint64(d.Len), uint64(maxInCap))
			s.SetInCapsule(d.Addr, d.Len)
			require.Equal(t, []byte(c.SGL()[:12]), []byte(s[:12]))
			require.Equal(t, c.SGL()[15], s[15])
			if c.IsFabrics() && c.FCType() == FabricsConnect && d.Len >= ConnectDataSize {
				cd, err := ParseConnectData(b[CommandSize+d.Addr:])
				require.NoError(t, err)
				again, err := ParseConnectData(cd.Append(nil))
				require.NoError(t, err)
				if len(cd.SubNQN) < 256 && len(cd.HostNQN) < 256 {
					require.Equal(t, cd, again)
				}
			}
			return
		}
		require.Less(t, d.Len, uint32(1<<24))
		s.SetKeyed(d.Addr, d.Len, d.Key, d.Inval)
		require.Equal(t, []byte(c.SGL()), []byte(s))
	})
}

// FuzzConnectData: Connect data parses, and re-encodes to itself.
func FuzzConnectData(f *testing.F) {
	f.Add(ConnectData{CntlID: 0xffff, SubNQN: testNQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:x"}.Append(nil))
	f.Add(make([]byte, 1023))
	f.Fuzz(func(t *testing.T, b []byte) {
		cd, err := ParseConnectData(b)
		if err != nil {
			require.Less(t, len(b), ConnectDataSize)
			return
		}
		again, err := ParseConnectData(cd.Append(nil))
		require.NoError(t, err)
		require.Equal(t, cd.HostID, again.HostID)
		require.Equal(t, cd.CntlID, again.CntlID)
		if len(cd.SubNQN) < 256 && len(cd.HostNQN) < 256 {
			require.Equal(t, cd, again)
		}
	})
}

// FuzzDiscoveryLog: any log page parses without panic into no more
// entries than it holds, and entries re-encode to themselves.
func FuzzDiscoveryLog(f *testing.F) {
	f.Add(appendDiscoveryLog(nil, 1, []DiscoveryEntry{{TrType: 1, AdrFam: 1, SubType: 2, TrSvcID: "4420", TrAddr: "10.0.2.2", SubNQN: testNQN}}))
	f.Add(make([]byte, 1024))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, n, ents, err := ParseDiscoveryLog(b)
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(ents)*discEntrySize+discHeaderSize, len(b))
		require.LessOrEqual(t, uint64(len(ents)), n)
		for _, e := range ents {
			if len(e.SubNQN) == 256 || bytes.ContainsAny([]byte(e.TrAddr+e.TrSvcID), "\x00") {
				return
			}
		}
		g2, _, ents2, err := ParseDiscoveryLog(appendDiscoveryLog(nil, g, ents))
		require.NoError(t, err)
		require.Equal(t, g, g2)
		require.Equal(t, len(ents), len(ents2))
	})
}

// FuzzTargetCommands sends any capsule to a live target, on its admin
// queue or an I/O queue: every one is answered (with its CID) and both
// queues live on. Keyed descriptors are pointed at the host's buffer, and
// the commands that end a controller by design (Property Set: CC.EN=0 or
// shutdown; a short keep-alive timeout; held AERs) become Property Gets
// and Keep Alives.
func FuzzTargetCommands(f *testing.F) {
	for _, s := range goldenSeeds(f) {
		f.Add(byte(0), s)
		f.Add(byte(1), s)
	}
	tg, sub, addr := fuzzTarget(f)
	_ = tg
	c, err := Connect(context.Background(), "tcp", addr, testNQN, HostConfig{IOQueues: 1, QueueDepth: 4, KATO: -1})
	require.NoError(f, err)
	defer c.Close()
	f.Fuzz(func(t *testing.T, which byte, b []byte) {
		if len(b) < CommandSize {
			return
		}
		// An input that write-protected a namespace would keep every
		// later one from the write path.
		for _, ns := range sub.namespaces() {
			ns.wp.Store(false)
		}
		q := c.admin
		if which&1 == 1 {
			q = c.io[0]
		}
		b = b[:min(len(b), CommandSize+q.inCap)]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		i, err := q.acquire(ctx)
		require.NoError(t, err)
		s := &q.slots[i]
		n := copy(s.capsule, b)
		cmd := Command(s.capsule[:CommandSize])
		switch {
		case cmd.IsFabrics() && cmd.FCType() == FabricsPropertySet:
			cmd.SetFCType(FabricsPropertyGet)
		case q.qid == 0 && (cmd.Opcode() == AdminAER || cmd.Opcode() == AdminSetFeatures && uint8(cmd.CDW(10)) == FeatKATO):
			cmd.SetOpcode(AdminKeepAlive)
		}
		if sgl := cmd.SGL(); sgl.Keyed() {
			sgl.SetKeyed(s.mr.Addr(), min(sgl.Length(), uint32(s.mr.Len())), s.mr.RKey(), false)
		}
		require.NoError(t, q.submit(i, n-CommandSize))
		require.NoError(t, q.wait(ctx, i), "the target did not answer")
		q.releaseSlot(i)
	})
	require.NoError(f, c.Err())
}

func fuzzTarget(f *testing.F) (*Target, *Subsystem, string) {
	sub, err := NewSubsystem(testNQN)
	require.NoError(f, err)
	_, err = sub.AddNamespace(NewMemBackend(1<<20), 512)
	require.NoError(f, err)
	// The second: reservations on, in ANA group 2 (non-optimized below).
	_, err = sub.AddNamespaceConfig(NewMemBackend(1<<20), NamespaceConfig{ID: 2, ANAGroup: 2, Reservations: true})
	require.NoError(f, err)
	tg, err := NewTarget(TargetConfig{}, sub)
	require.NoError(f, err)
	f.Cleanup(func() { tg.Close() })
	a, err := tg.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(f, err)
	require.NoError(f, tg.Ports()[0].SetANAState(2, ANANonOptimized))
	return tg, sub, a.String()
}
