package nvmeof

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// FileBackend's durable writes go through a descriptor opened O_DSYNC
// (the kernel's fdinfo says so), to the same file.
func TestFileBackendFUA(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	require.NoError(t, os.WriteFile(path, make([]byte, 1<<20), 0o644))
	b, err := OpenFileBackend(path)
	require.NoError(t, err)
	defer b.Close()
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", b.dsync.Fd()))
	require.NoError(t, err)
	var flags int64
	for _, l := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(l, "flags:"); ok {
			flags, err = strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			require.NoError(t, err)
		}
	}
	require.NotZero(t, flags&syscall.O_DSYNC, "fdinfo flags %o", flags)
	_, err = b.WriteAtFUA([]byte("durable"), 4096)
	require.NoError(t, err)
	got := make([]byte, 7)
	_, err = b.ReadAt(got, 4096)
	require.NoError(t, err)
	require.Equal(t, "durable", string(got))
}
