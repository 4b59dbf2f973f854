package verbs

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's "Using it" program is Example, word for word, so that what
// a newcomer copies compiles and runs.
func TestReadmeUsingIt(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	ex, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	s := string(readme)
	i := strings.Index(s, "## Using it")
	require.NotEqual(t, -1, i, "README has a Using it section")
	s = s[i:]
	start := strings.Index(s, "```go\n")
	require.NotEqual(t, -1, start)
	s = s[start+len("```go\n"):]
	code := s[:strings.Index(s, "```")]
	e := string(ex)
	j := strings.Index(e, "func Example() {")
	require.NotEqual(t, -1, j)
	body := e[j : j+strings.Index(e[j:], "\n}\n")+3]
	require.Equal(t, body, code, "README's Using it and Example differ")
}
