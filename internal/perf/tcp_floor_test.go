package perf

import (
	"bytes"
	"context"
	"hash/crc32"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func castagnoliOf(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// The sender takes the CRC of every piece; the receiver places every
// message, whatever the reads' sizes, and takes the CRC of what it copies.
func TestFloorWork(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	msg := make([]byte, 2500)
	for i := range msg {
		msg[i] = byte(r.Uint32())
	}
	f := &floor{crc: true, piece: 1000}
	f.sent(msg)
	require.Equal(t, castagnoliOf(msg[:1000])^castagnoliOf(msg[1000:2000])^castagnoliOf(msg[2000:]), f.sum)
	off := &floor{piece: 1000}
	off.sent(msg)
	require.Zero(t, off.sum, "--crc=off: no CRC")

	// Three messages read one at a time, pieces as long as a message: the
	// CRCs of three equal messages fold to one.
	f = &floor{crc: true, piece: len(msg), dst: make([]byte, len(msg))}
	for range 3 {
		f.received(msg)
	}
	require.Equal(t, castagnoliOf(msg), f.sum)
	require.Equal(t, msg, f.dst)

	// Pieces lie where the message's FPDUs do, whatever the reads: five
	// messages in one read are five pairs of pieces (1428 and 1072
	// octets), and an odd number of equal CRCs folds to one.
	f = &floor{crc: true, piece: 1428, dst: make([]byte, len(msg))}
	f.received(bytes.Repeat(msg, 5))
	require.Equal(t, castagnoliOf(msg[:1428])^castagnoliOf(msg[1428:]), f.sum)
	// A read that ends inside a piece splits it; the next piece starts
	// where the FPDU boundary is, not where the read ended.
	f = &floor{crc: true, piece: 1428, dst: make([]byte, len(msg))}
	f.received(msg[:1000])
	f.received(msg[1000:])
	require.Equal(t, castagnoliOf(msg[:1000])^castagnoliOf(msg[1000:1428])^castagnoliOf(msg[1428:]), f.sum)

	// Reads of any size: every message lands where it belongs.
	for _, crc := range []bool{true, false} {
		f = &floor{crc: crc, piece: 1428, dst: make([]byte, len(msg))}
		stream := bytes.Repeat(msg, 5)
		for len(stream) > 0 {
			n := min(1+r.IntN(4000), len(stream))
			f.received(stream[:n])
			stream = stream[n:]
		}
		require.Equal(t, msg, f.dst, "crc %v", crc)
		require.Equal(t, crc, f.sum != 0, "crc %v", crc)
	}
}

// tcp_bw --floor over loopback: both sides do the floor's work on every
// octet the table counts, and say so in the banner.
func TestFloorRun(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		banner string
	}{
		{nil, "CRC32c of each FPDU payload"},
		{[]string{"--crc", "off"}, "no CRC"},
	} {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		before := floorOctets.Load()
		args := append([]string{"tcp_bw", "--loopback", "--floor", "-n", "50", "-s", "100000", "-q", "2"}, tc.args...)
		code := MainContext(ctx, args, &out, &errb)
		cancel()
		require.Equal(t, 0, code, "stderr: %s", errb.String())
		require.Contains(t, out.String(), "MPA floor       : ")
		require.Contains(t, out.String(), tc.banner)
		require.Equal(t, int64(2*2*50*100000), floorOctets.Load()-before, "sent and received, two connections")
	}

	_, _, err := Parse([]string{"write_bw", "--floor"})
	require.ErrorContains(t, err, "--floor is for tcp_bw")
	a, _, err := Parse([]string{"tcp_bw", "--floor"})
	require.NoError(t, err)
	b, _, err := Parse([]string{"tcp_bw"})
	require.NoError(t, err)
	c, _, err := Parse([]string{"tcp_bw", "--floor", "--crc=off"})
	require.NoError(t, err)
	require.Contains(t, a.symmetric().mismatch(b.symmetric()), "MPA floor (--floor, --crc) mismatch: local=crc, remote=")
	require.Contains(t, a.symmetric().mismatch(c.symmetric()), "local=crc, remote=copy")
}
