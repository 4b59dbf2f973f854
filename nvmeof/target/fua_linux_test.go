package target

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FileBackend's durable write (pwritev2 with RWF_DSYNC) writes where
// WriteAt would, all of a write larger than one call may take, and fails
// as a write fails on a descriptor that cannot write.
func TestFileBackendFUA(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	require.NoError(t, os.WriteFile(path, make([]byte, 4<<20), 0o644))
	b, err := OpenFileBackend(path)
	require.NoError(t, err)
	defer b.Close()
	p := make([]byte, 3<<20)
	for i := range p {
		p[i] = byte(i * 7)
	}
	n, err := b.WriteAtFUA(p, 4096)
	require.NoError(t, err)
	require.Equal(t, len(p), n)
	got := make([]byte, len(p))
	_, err = b.ReadAt(got, 4096)
	require.NoError(t, err)
	require.Equal(t, p, got)

	ro, err := os.Open(path)
	require.NoError(t, err)
	defer ro.Close()
	_, err = writeDSync(ro, []byte("x"), 0)
	require.Error(t, err, "a read-only descriptor")
}
