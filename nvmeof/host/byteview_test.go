package host

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// io.ReadFull over an io.SectionReader and fmt.Fprintf to an
// io.OffsetWriter, as a program new to block devices writes them: they
// fail on a Namespace (ErrUnaligned) and work on its ByteView, which
// changes only the octets written.
func TestByteViewUnalignedUse(t *testing.T) {
	checkRoutines(t)
	const size = 1 << 20
	_, ns := hostNS(t, size, Config{IOQueues: 2})
	want := make([]byte, size)
	fill(want, 3)
	_, err := ns.WriteAt(want, 0)
	require.NoError(t, err)

	got := make([]byte, 5000)
	_, err = io.ReadFull(io.NewSectionReader(ns, 100, 5000), got)
	require.ErrorIs(t, err, ErrUnaligned, "the Namespace itself")
	_, err = fmt.Fprintf(io.NewOffsetWriter(ns, 1234), "hello %d", 42)
	require.ErrorIs(t, err, ErrUnaligned)

	v := ns.Bytes()
	_, err = io.ReadFull(io.NewSectionReader(v, 100, 5000), got)
	require.NoError(t, err)
	require.Equal(t, want[100:5100], got)

	_, err = fmt.Fprintf(io.NewOffsetWriter(v, 1234), "hello %d", 42)
	require.NoError(t, err)
	copy(want[1234:], "hello 42")
	// Across blocks: a head, whole blocks and a tail.
	long := bytes.Repeat([]byte("0123456789"), 300)
	k, err := v.WriteAt(long, 511)
	require.NoError(t, err)
	require.Equal(t, len(long), k)
	copy(want[511:], long)
	all := make([]byte, size)
	_, err = ns.ReadAt(all, 0)
	require.NoError(t, err)
	require.Equal(t, want, all, "only the octets written changed")

	// One octet, the last; past the end.
	_, err = v.WriteAt([]byte{0xee}, size-1)
	require.NoError(t, err)
	one := make([]byte, 4)
	n, err := v.ReadAt(one, size-1)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, 1, n)
	require.Equal(t, byte(0xee), one[0])
	_, err = v.WriteAt([]byte{1, 2}, size-1)
	require.ErrorIs(t, err, ErrRange)
	_, err = v.ReadAt(one, -1)
	require.ErrorIs(t, err, ErrRange)
}

// Writes through one ByteView to neighbouring octets of one block do not
// undo each other.
func TestByteViewSharedBlock(t *testing.T) {
	checkRoutines(t)
	_, ns := hostNS(t, 1<<20, Config{IOQueues: 2})
	v := ns.Bytes()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := v.WriteAt([]byte{byte(i + 1)}, int64(i*7))
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	blk := make([]byte, 512)
	_, err := ns.ReadAt(blk, 0)
	require.NoError(t, err)
	for i := range 64 {
		require.Equal(t, byte(i+1), blk[i*7], "octet %d", i*7)
	}
}
