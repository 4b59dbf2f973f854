//go:build unix

package perf

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// A terminal is told from a pipe and from /dev/null, a character device
// that is not a terminal.
func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	require.False(t, isTerminal(w))
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer null.Close()
	require.False(t, isTerminal(null))
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal to check the positive case: %v", err)
	}
	defer ptmx.Close()
	require.True(t, isTerminal(ptmx))
}
