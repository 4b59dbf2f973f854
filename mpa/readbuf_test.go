//go:build unix

package mpa

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	s, err := ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// On TCP a Reader gives its buffer back when the socket runs dry, between
// FPDUs or inside one, and takes one as large again when data arrives.
func TestReaderIdleBuffer(t *testing.T) {
	c, s := tcpPair(t)
	r := NewReader(s, true, true, DefaultReadBuffer, nil)
	require.Nil(t, r.buf, "no buffer before the first octet")
	rng := rand.New(rand.NewPCG(7, 8))

	// The stream goes out in pieces of random size with pauses, so that
	// the socket runs dry between FPDUs and inside them (payloads up to
	// 20000 octets: some are read straight into place).
	msgs := randMsgs(rng, 300, 20000)
	var stream bytes.Buffer
	sw := NewWriter(&stream, true, true)
	for _, m := range msgs {
		require.NoError(t, sw.Append(m[0], m[1]))
	}
	require.NoError(t, sw.Flush())
	done := make(chan error, 1)
	go func() {
		done <- writeChopped(c, stream.Bytes(), rng, 8000, 4, func() time.Duration { return time.Millisecond })
	}()
	readMsgs(t, r, msgs)
	require.NoError(t, <-done)
	require.Equal(t, DefaultReadBuffer, cap(r.buf), "8000 octets at once fill the small buffer: the buffer grew")

	// Idle: Next waits with no buffer (the deadline ends the wait).
	s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := r.Next()
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "read", oe.Op, "as net.Conn's Read says")
	require.Nil(t, r.buf)
	s.SetReadDeadline(time.Time{})

	// The stream goes on where it was, in a buffer as large as before.
	more := randMsgs(rng, 20, 200)
	stream.Reset()
	for _, m := range more {
		require.NoError(t, sw.Append(m[0], m[1])) // the same Writer: markers go by stream offset
	}
	require.NoError(t, sw.Flush())
	_, err = c.Write(stream.Bytes())
	require.NoError(t, err)
	readMsgs(t, r, more)
	require.Equal(t, DefaultReadBuffer, cap(r.buf))

	// An orderly close between FPDUs is the end of the stream.
	require.NoError(t, c.CloseWrite())
	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF)
}

// Errors from read(2) arrive as net.Conn's Read reports them.
func TestReaderRawErrors(t *testing.T) {
	c, s := tcpPair(t)
	r := NewReader(s, true, false, DefaultReadBuffer, nil)
	// The length field of a 100-octet ULPDU and 10 octets of it.
	_, err := c.Write(append([]byte{0, 100}, make([]byte, 10)...))
	require.NoError(t, err)
	_, err = r.Next()
	require.NoError(t, err)
	require.NoError(t, c.SetLinger(0))
	require.NoError(t, c.Close()) // a reset inside the FPDU
	err = r.ReadFull(make([]byte, 100))
	require.ErrorIs(t, err, ErrStreamLost)
	var oe *net.OpError
	require.True(t, errors.As(err, &oe), "%v", err)
	require.Equal(t, "read", oe.Op)
	require.ErrorIs(t, err, syscall.ECONNRESET)
}

// Readers on TCP connections, without markers, so that FPDUs buffered
// whole take the fast path and the others the piece-by-piece one, read the
// way verbs reads them (Peek, the header, the payload in pieces) while the
// sender cuts its stream anywhere and pauses: every octet and every CRC
// checks out. Several connections at once share the buffer pools, which
// the Readers give back whenever their sockets run dry.
func TestReaderTCPChopped(t *testing.T) {
	conns, count := 4, 1500
	if raceEnabled {
		count = 300
	}
	errs := make(chan error, 2*conns)
	for conn := range conns {
		c, s := tcpPair(t)
		require.NoError(t, c.SetNoDelay(true))
		rng := rand.New(rand.NewPCG(uint64(conn), 77))
		msgs := make([][2][]byte, count)
		for i := range msgs {
			// Small, an Ethernet MSS, around fuseRxMin, and up to 20000
			// octets (read straight from the socket when not buffered).
			n := [4]int{rng.IntN(64), 1400 + rng.IntN(60), 1000 + rng.IntN(100), rng.IntN(20000)}[rng.IntN(4)]
			h, p := make([]byte, 14+4*rng.IntN(4)), make([]byte, n)
			for j := range h {
				h[j] = byte(rng.Uint32())
			}
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			msgs[i] = [2][]byte{h, p}
		}
		var stream bytes.Buffer
		w := NewWriter(&stream, true, false)
		for _, m := range msgs {
			require.NoError(t, w.Append(m[0], m[1]))
		}
		require.NoError(t, w.Flush())
		go func() {
			errs <- writeChopped(c, stream.Bytes(), rng, 3000, 8, func() time.Duration { return time.Duration(rng.IntN(200)) * time.Microsecond })
		}()
		go func() { errs <- readChopped(NewReader(s, true, false, DefaultReadBuffer, nil), msgs, uint64(conn)) }()
	}
	for range 2 * conns {
		require.NoError(t, <-errs)
	}
}

// writeChopped writes b to c in pieces of 1 to most octets, pausing for
// pause() after one piece in every (at random).
func writeChopped(c net.Conn, b []byte, rng *rand.Rand, most, every int, pause func() time.Duration) error {
	for len(b) > 0 {
		n := min(len(b), 1+rng.IntN(most))
		if _, err := c.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
		if rng.IntN(every) == 0 {
			time.Sleep(pause())
		}
	}
	return nil
}

// readChopped reads msgs as verbs does: a Peek at the header's first
// octet, the header, then the payload in random pieces.
func readChopped(r *Reader, msgs [][2][]byte, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 79))
	var hdr [MaxHeader]byte
	for i, m := range msgs {
		n, err := r.Next()
		if err != nil {
			return fmt.Errorf("FPDU %d: %w", i, err)
		}
		k := len(m[0])
		r.Peek(1)
		if err := r.ReadFull(hdr[:k]); err != nil {
			return fmt.Errorf("FPDU %d header: %w", i, err)
		}
		p := make([]byte, n-k)
		for off := 0; off < len(p); {
			q := len(p) - off
			if rng.IntN(2) == 0 {
				q = 1 + rng.IntN(q)
			}
			if err := r.ReadFull(p[off : off+q]); err != nil {
				return fmt.Errorf("FPDU %d payload: %w", i, err)
			}
			off += q
		}
		if !bytes.Equal(hdr[:k], m[0]) || !bytes.Equal(p, m[1]) {
			return fmt.Errorf("FPDU %d: octets differ", i)
		}
		if err := r.Finish(); err != nil {
			return fmt.Errorf("FPDU %d (ULPDU %d octets): %w", i, n, err)
		}
	}
	return nil
}
