package rsocket

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/pion/transport/v3/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pair returns two connected Conns over loopback: the dialer's and the
// listener's, closed when t ends.
func pair(t *testing.T, o Options) (*Conn, *Conn) {
	t.Helper()
	lc := ListenConfig{Options: o}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.AcceptRsocket()
		ch <- res{c, err}
	}()
	d := Dialer{Options: o}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c1, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	require.NoError(t, err)
	r := <-ch
	require.NoError(t, r.err)
	t.Cleanup(func() { c1.Close(); r.c.Close() })
	return c1, r.c
}

func leakCheck(t *testing.T) { t.Cleanup(test.CheckRoutines(t)) }

// A stream of many sizes arrives whole and in order, both ways at once,
// through a small ring (so that it wraps, and the SGL updates and credits
// are exercised many times over).
func TestStreamBothWays(t *testing.T) {
	leakCheck(t)
	for _, o := range []Options{{}, {RecvBuffer: 4 << 10, SendBuffer: 3 << 10, Credits: 4, SendQueue: 8}} {
		c1, c2 := pair(t, o)
		const total = 4 << 20
		src1, src2 := make([]byte, total), make([]byte, total)
		rand.Read(src1)
		rand.Read(src2)
		errc := make(chan error, 4)
		send := func(c *Conn, src []byte) {
			for off, n := 0, 1; off < len(src); n = (n*3 + 1) % 1000003 {
				k := min(n%70000+1, len(src)-off)
				if _, err := c.Write(src[off : off+k]); err != nil {
					errc <- err
					return
				}
				off += k
			}
			errc <- nil
		}
		recv := func(c *Conn, want []byte) {
			got := make([]byte, len(want))
			_, err := io.ReadFull(c, got)
			if err == nil && !bytes.Equal(got, want) {
				err = errors.New("data differs")
			}
			errc <- err
		}
		go send(c1, src1)
		go send(c2, src2)
		go recv(c2, src1)
		go recv(c1, src2)
		for range 4 {
			require.NoError(t, <-errc)
		}
		require.NoError(t, c1.Close())
		require.NoError(t, c2.Close())
	}
}

// Close after Write: the peer reads everything, then io.EOF; its Writes
// then fail with ECONNRESET, as rsend's after a disconnect.
func TestCloseDeliversThenEOF(t *testing.T) {
	leakCheck(t)
	c1, c2 := pair(t, Options{})
	msg := bytes.Repeat([]byte("rsockets "), 50000) // more than the ring: Write waits for the reader
	errc := make(chan error, 1)
	go func() {
		_, err := c1.Write(msg)
		errc <- errors.Join(err, c1.Close())
	}()
	got, err := io.ReadAll(c2)
	require.NoError(t, err)
	require.Equal(t, msg, got)
	require.NoError(t, <-errc)
	_, err = c2.Write([]byte("x"))
	require.ErrorIs(t, err, ErrPeerReset)
	require.ErrorIs(t, err, syscall.ECONNRESET)
	require.ErrorIs(t, c1.Close(), net.ErrClosed)
	_, err = c1.Read(make([]byte, 1))
	require.ErrorIs(t, err, net.ErrClosed)
}

// CloseWrite half-closes: the peer reads io.EOF and can still answer.
func TestCloseWrite(t *testing.T) {
	leakCheck(t)
	c1, c2 := pair(t, Options{})
	_, err := c1.Write([]byte("request"))
	require.NoError(t, err)
	require.NoError(t, c1.CloseWrite())
	_, err = c1.Write([]byte("more"))
	require.ErrorIs(t, err, ErrWriteClosed)
	require.ErrorIs(t, err, syscall.EPIPE)
	got, err := io.ReadAll(c2)
	require.NoError(t, err)
	require.Equal(t, "request", string(got))
	_, err = c2.Write([]byte("response"))
	require.NoError(t, err)
	require.NoError(t, c2.Close())
	got, err = io.ReadAll(c1)
	require.NoError(t, err)
	require.Equal(t, "response", string(got))
}

// A Write the peer does not read blocks once the ring and credits are
// used up, and its deadline ends it with a timeout; the data written so
// far still arrives.
func TestWriteBlocksOnFlowControl(t *testing.T) {
	leakCheck(t)
	c1, c2 := pair(t, Options{RecvBuffer: 8 << 10})
	c1.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	n, err := c1.Write(make([]byte, 1<<20))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
	assert.Equal(t, 8<<10, n, "the peer's whole ring, no more")
	got := make([]byte, n)
	_, err = io.ReadFull(c2, got)
	require.NoError(t, err)
	c2.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err = c2.Read(got)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
}

// Credits bound the messages: with 2 credits and tiny writes, the writer
// waits for the reader's SGL update after two messages.
func TestCreditsBoundMessages(t *testing.T) {
	leakCheck(t)
	c1, c2 := pair(t, Options{Credits: 2})
	c1.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	sent := 0
	for {
		if _, err := c1.Write([]byte{byte(sent)}); err != nil {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			break
		}
		sent++
	}
	require.Equal(t, 2, sent)
	c1.SetWriteDeadline(time.Time{})
	buf := make([]byte, 2)
	_, err := io.ReadFull(c2, buf)
	require.NoError(t, err)
	_, err = c1.Write([]byte{2})
	require.NoError(t, err)
}

// Close racing busy Reads and Writes: they end with net.ErrClosed (or the
// peer's end), never touch freed buffers, and nothing leaks.
func TestCloseRacesReadWrite(t *testing.T) {
	leakCheck(t)
	for range 10 {
		c1, c2 := pair(t, Options{RecvBuffer: 8 << 10})
		go io.Copy(c2, c2) // echo
		done := make(chan error, 2)
		go func() {
			buf := make([]byte, 3000)
			for {
				if _, err := c1.Write(buf); err != nil {
					done <- err
					return
				}
			}
		}()
		go func() {
			buf := make([]byte, 1000)
			for {
				if _, err := c1.Read(buf); err != nil {
					done <- err
					return
				}
			}
		}()
		time.Sleep(20 * time.Millisecond)
		require.NoError(t, c1.Close())
		for range 2 {
			require.ErrorIs(t, <-done, net.ErrClosed)
		}
		c2.Close()
	}
}
