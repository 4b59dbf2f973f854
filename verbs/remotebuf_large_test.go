//go:build linux && (amd64 || arm64 || ppc64le || riscv64 || s390x || loong64 || mips64 || mips64le || ppc64)

package verbs

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// mmapLarge maps n octets of address space that take no memory until
// touched (MAP_NORESERVE), for regions of 4 GiB and more.
func mmapLarge(t *testing.T, n int) []byte {
	t.Helper()
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		t.Skipf("cannot map %d octets of address space: %v", n, err)
	}
	t.Cleanup(func() { syscall.Munmap(b) })
	return b
}

// A region of 4 GiB or more has its whole length in RemoteBuffer.Len (it
// was clamped to 32 bits), rping's wire form says the most its 32 bits
// can, and a Read at an offset past 4 GiB, addressed as RemoteAddr = Addr
// + offset, fetches the octets there over TCP.
func TestRemoteBufferLargeRegion(t *testing.T) {
	checkRoutines(t)
	const size = 4<<30 + 8192
	const off = 4<<30 + 100
	c, s := connect(t, pairOpts{})
	big := mmapLarge(t, size)
	want := []byte("beyond four gibibytes")
	copy(big[off:], want)
	src, err := s.pd.RegMR(big, LocalWrite|RemoteRead)
	require.NoError(t, err)
	defer src.Dereg()
	rb := src.RemoteBuffer()
	require.Equal(t, uint64(size), rb.Len)
	w := rb.Append(nil)
	require.Equal(t, []byte{0xff, 0xff, 0xff, 0xff}, w[12:], "rping's 32-bit length, saturated")
	got, err := ParseRemoteBuffer(w)
	require.NoError(t, err)
	require.Equal(t, uint64(1<<32-1), got.Len)

	sink := c.regMR(t, len(want), LocalWrite)
	_, err = c.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMARead, Flags: Signaled,
		SGL: []SGE{sink.SGE(0, len(want))}, RemoteAddr: rb.Addr + off, RKey: rb.RKey})
	require.NoError(t, err)
	wc := waitWC(t, c.scq)
	require.Equal(t, wcString(1, WCRDMARead, Success), wcOf(wc), "QP: %v", c.qp.Err())
	require.True(t, bytes.Equal(want, sink.Buf()), "read %q", sink.Buf())
}
