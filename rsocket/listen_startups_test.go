package rsocket

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// evict ends the oldest start-up still under way, with errEvicted, and
// none once they have all ended.
func TestStartupsEvictOldest(t *testing.T) {
	var tb startups
	a, actx := tb.add(context.Background())
	b, bctx := tb.add(context.Background())
	_, cctx := tb.add(context.Background())
	tb.done(a) // ended on its own: not a victim
	require.ErrorIs(t, context.Cause(actx), context.Canceled)
	require.True(t, tb.evict())
	require.ErrorIs(t, context.Cause(bctx), errEvicted)
	require.NoError(t, cctx.Err())
	tb.done(b) // the evicted start-up's goroutine ends: nothing more to do
	require.Equal(t, 1, tb.len())
	require.True(t, tb.evict())
	require.ErrorIs(t, context.Cause(cctx), errEvicted)
	require.False(t, tb.evict())
	require.Equal(t, 0, tb.len())
}
