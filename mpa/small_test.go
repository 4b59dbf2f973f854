//go:build unix

package mpa

import (
	"bytes"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A Reader reads small FPDUs into its own small buffer, with no pool's
// buffer before or after an idle spell, until a read fills it; then it
// takes one of its full size from the pool, and after an idle spell one as
// large again.
func TestReaderSmallBuffer(t *testing.T) {
	c, s := tcpPair(t)
	r := NewReader(s, true, false, DefaultReadBuffer, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	send := func(msgs [][2][]byte) {
		var stream bytes.Buffer
		sw := NewWriter(&stream, true, false)
		for _, m := range msgs {
			require.NoError(t, sw.Append(m[0], m[1]))
		}
		require.NoError(t, sw.Flush())
		_, err := c.Write(stream.Bytes())
		require.NoError(t, err)
	}
	idle := func() {
		s.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		_, err := r.Next()
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		s.SetReadDeadline(time.Time{})
		require.Nil(t, r.buf, "idle: no buffer")
	}
	own := func() bool { return r.bufRef == nil && len(r.buf) == smallReadBuffer && &r.buf[0] == &r.small[0] }
	for range 3 {
		msgs := randMsgs(rng, 1, 100)
		send(msgs)
		readMsgs(t, r, msgs)
		require.True(t, own(), "a small FPDU is read into the Reader's own buffer")
		idle()
	}
	msgs := randMsgs(rng, 40, 400) // some 8 KiB at once
	send(msgs)
	readMsgs(t, r, msgs)
	require.NotNil(t, r.bufRef, "a read filled the small buffer: one from the pool")
	require.Equal(t, DefaultReadBuffer, len(r.buf))
	idle()
	msgs = randMsgs(rng, 1, 100)
	send(msgs)
	readMsgs(t, r, msgs)
	require.Equal(t, DefaultReadBuffer, len(r.buf), "after an idle spell, one as large as before")
}

// A Writer with no arena puts a small FPDU into its own small arena, and
// moves on to a pool's arena when the next FPDU does not fit, leaving what
// is queued in the small one where it is; a large FPDU takes a pool's
// arena at once. Every stream reads back whole, with markers or without.
func TestWriterSmallArena(t *testing.T) {
	for _, markers := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(3, 4))
		var stream bytes.Buffer
		w := NewWriter(&stream, true, markers)
		var all [][2][]byte
		add := func(msgs [][2][]byte) {
			for _, m := range msgs {
				require.NoError(t, w.Append(m[0], m[1]))
			}
			all = append(all, msgs...)
		}
		own := func() bool { return w.arenaRef == nil && cap(w.arena) == smallArena && &w.arena[:1][0] == &w.small[0] }

		add(randMsgs(rng, 1, 40))
		require.True(t, own(), "markers %v: a small FPDU goes into the Writer's own arena", markers)
		require.NoError(t, w.Flush())
		w.Idle()
		require.Nil(t, w.arena)

		// Small FPDUs queued past the small arena's end: on to a pool's
		// arena, nothing flushed on the way.
		written := w.Written()
		add(randMsgs(rng, 30, 60))
		require.NotNil(t, w.arenaRef, "markers %v", markers)
		require.Equal(t, written, w.Written(), "markers %v: moving on flushed nothing", markers)
		require.NoError(t, w.Flush())
		w.Idle()

		add([][2][]byte{{make([]byte, 18), make([]byte, smallArena)}})
		require.NotNil(t, w.arenaRef, "markers %v: an FPDU larger than the small arena takes a pool's", markers)
		add(randMsgs(rng, 20, 3000))
		require.NoError(t, w.Flush())
		w.Idle()
		add(randMsgs(rng, 2, 20))
		require.True(t, own(), "markers %v: after Idle, the small arena again", markers)
		require.NoError(t, w.Flush())

		r := NewReader(&stream, true, markers, DefaultReadBuffer, nil)
		readMsgs(t, r, all)
	}
}
