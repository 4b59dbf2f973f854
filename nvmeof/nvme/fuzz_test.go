package nvme_test

import (
	"bytes"
	"testing"

	"github.com/goiwarp/iwarp/nvmeof/internal/golden"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
	"github.com/stretchr/testify/require"
)

const testNQN = "nqn.2024-01.io.goiwarp:test"

// FuzzCapsule: the SQE and SGL parsers on any capsule never panic, a
// failure always carries DNR, in-capsule data stays inside what arrived
// and IOCCSZ, and a descriptor that parses re-encodes to the same octets.
func FuzzCapsule(f *testing.F) {
	for _, s := range golden.Seeds(testNQN) {
		f.Add(s, uint16(4096))
	}
	f.Fuzz(func(t *testing.T, b []byte, maxInCap uint16) {
		c, ok := nvme.ParseCommand(b)
		if !ok {
			require.Less(t, len(b), nvme.CommandSize)
			return
		}
		inCap := len(b) - nvme.CommandSize
		d, st := nvme.ParseData(c, inCap, int(maxInCap))
		if !st.OK() {
			require.NotZero(t, st&nvme.DNR, "%v", st)
			return
		}
		s := make(nvme.SGL, nvme.SGLSize)
		if d.InCap {
			require.LessOrEqual(t, d.Addr+uint64(d.Len), uint64(inCap))
			require.LessOrEqual(t, d.Addr+uint64(d.Len), uint64(maxInCap))
			s.SetInCapsule(d.Addr, d.Len)
			require.Equal(t, []byte(c.SGL()[:12]), []byte(s[:12]))
			require.Equal(t, c.SGL()[15], s[15])
			if c.IsFabrics() && c.FCType() == nvme.FabricsConnect && d.Len >= nvme.ConnectDataSize {
				cd, err := nvme.ParseConnectData(b[nvme.CommandSize+d.Addr:])
				require.NoError(t, err)
				again, err := nvme.ParseConnectData(cd.Append(nil))
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
	f.Add(nvme.ConnectData{CntlID: 0xffff, SubNQN: testNQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:x"}.Append(nil))
	f.Add(make([]byte, 1023))
	f.Fuzz(func(t *testing.T, b []byte) {
		cd, err := nvme.ParseConnectData(b)
		if err != nil {
			require.Less(t, len(b), nvme.ConnectDataSize)
			return
		}
		again, err := nvme.ParseConnectData(cd.Append(nil))
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
	f.Add(nvme.AppendDiscoveryLog(nil, 1, []nvme.DiscoveryEntry{{TrType: 1, AdrFam: 1, SubType: 2, TrSvcID: "4420", TrAddr: "10.0.2.2", SubNQN: testNQN}}))
	f.Add(make([]byte, 1024))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, n, ents, err := nvme.ParseDiscoveryLog(b)
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(ents)*nvme.DiscEntrySize+nvme.DiscHeaderSize, len(b))
		require.LessOrEqual(t, uint64(len(ents)), n)
		for _, e := range ents {
			if len(e.SubNQN) == 256 || bytes.ContainsAny([]byte(e.TrAddr+e.TrSvcID), "\x00") {
				return
			}
		}
		g2, _, ents2, err := nvme.ParseDiscoveryLog(nvme.AppendDiscoveryLog(nil, g, ents))
		require.NoError(t, err)
		require.Equal(t, g, g2)
		require.Equal(t, len(ents), len(ents2))
	})
}
