//go:build unix && !solaris && !aix

package mpa

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// smallBufPair returns both ends of a loopback TCP connection whose sender has
// a small send buffer and whose receiver reads nothing until asked.
func smallBufPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	s := <-acc
	require.NotNil(t, s)
	tx, rx := c.(*net.TCPConn), s.(*net.TCPConn)
	require.NoError(t, tx.SetWriteBuffer(8<<10))
	require.NoError(t, rx.SetReadBuffer(8<<10))
	t.Cleanup(func() { tx.Close(); rx.Close() })
	return tx, rx
}

// TryFlush writes what the socket takes and never waits for the rest: a
// peer that reads nothing fills the socket, TryFlush then reports octets
// left and returns at once, and once the peer reads, TryFlush and Flush
// deliver the stream whole and in order (what remained of a cut iovec,
// arena and referenced payloads alike, and FPDUs appended after it). With
// small FPDUs only, all of them sit in one piece of the arena, which goes
// out with write(2) rather than writev: the socket fills in that path too.
func TestTryFlushNeverWaits(t *testing.T) {
	for _, maxLen := range []int{6000, 1000} {
		t.Run(fmt.Sprintf("maxLen=%d", maxLen), func(t *testing.T) { testTryFlushNeverWaits(t, maxLen) })
	}
}

func testTryFlushNeverWaits(t *testing.T, maxLen int) {
	tx, rx := smallBufPair(t)
	w := NewWriter(tx, true, false)
	rng := rand.New(rand.NewPCG(7, 8))
	msgs := randMsgs(rng, 2000, maxLen) // payloads above copyMax are referenced, not copied
	partial := false
	for i, m := range msgs {
		require.NoError(t, w.Append(m[0], m[1]))
		if i%3 != 2 {
			continue
		}
		before, queued := w.Written(), w.Buffered()
		if maxLen <= copyMax {
			require.Len(t, w.vecs, 1, "small FPDUs queue as one piece of the arena")
		}
		start := time.Now()
		all, err := w.TryFlush()
		require.NoError(t, err)
		require.Less(t, time.Since(start), time.Second, "TryFlush waited")
		if !all {
			partial = true
			require.Positive(t, w.Buffered(), "FPDU %d", i)
		} else {
			require.Zero(t, w.Buffered())
		}
		require.Equal(t, before+uint64(queued-w.Buffered()), w.Written(), "Written counts what went")
		if partial {
			msgs = msgs[:i+1]
			break
		}
	}
	require.True(t, partial, "the socket never filled: nothing was left to keep")
	// FPDUs appended after the cut go out after what it left (the
	// arena has room: only what the last TryFlush left is in it).
	for _, m := range randMsgs(rng, 3, 100) {
		require.NoError(t, w.Append(m[0], m[1]))
		msgs = append(msgs, m)
	}

	got := make(chan error, 1)
	go func() {
		r := NewReader(rx, true, false, 0, nil)
		defer func() { got <- nil }()
		readMsgs(t, r, msgs)
	}()
	for w.Buffered() > 0 {
		all, err := w.TryFlush()
		require.NoError(t, err)
		if !all {
			time.Sleep(time.Millisecond)
		}
	}
	require.NoError(t, w.Flush())
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader did not get every FPDU")
	}
	require.False(t, t.Failed())
}

// On a stream that is not a socket TryFlush writes nothing and says so;
// Flush then writes it all.
func TestTryFlushNotASocket(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out, true, false)
	all, err := w.TryFlush()
	require.NoError(t, err)
	require.True(t, all, "nothing queued")
	require.NoError(t, w.Append([]byte("hdr"), []byte("payload")))
	all, err = w.TryFlush()
	require.NoError(t, err)
	require.False(t, all)
	require.Zero(t, out.Len())
	require.NoError(t, w.Flush())
	require.Equal(t, FPDULen(10), out.Len())
}

// consumed cuts the queue where a write stopped: inside the first iovec,
// at an iovec's end, and across several.
func TestWriterConsumed(t *testing.T) {
	w := &Writer{}
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{0, []string{"abc", "de", "fghi"}},
		{1, []string{"bc", "de", "fghi"}},
		{3, []string{"de", "fghi"}},
		{4, []string{"e", "fghi"}},
		{5, []string{"fghi"}},
		{8, []string{"i"}},
	} {
		w.vecs = [][]byte{[]byte("abc"), []byte("de"), []byte("fghi")}
		w.queued = 9
		w.consumed(tc.n)
		var got []string
		for _, v := range w.vecs {
			got = append(got, string(v))
		}
		require.Equal(t, tc.want, got, "n=%d", tc.n)
		require.Equal(t, 9-tc.n, w.queued)
	}
}
