package rmem

import (
	"context"
	"io"
)

// IO is a Buffer as an io.ReaderAt and io.WriterAt whose calls run under
// one context (Buffer.IO).
type IO struct {
	b   *Buffer
	ctx context.Context
}

// IO returns b as an io.ReaderAt and io.WriterAt whose calls use ctx
// (context.Background() for calls that end only with the QP or Close):
// io.NewSectionReader(b.IO(ctx), 0, b.Size()) reads the remote buffer as
// a stream, io.NewOffsetWriter(b.IO(ctx), 0) writes it.
func (b *Buffer) IO(ctx context.Context) IO { return IO{b: b, ctx: ctx} }

// ReadAt reads as io.ReaderAt: at the end of the remote buffer it reads
// what there is and returns io.EOF.
func (a IO) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &RangeError{Off: off, Len: len(p), Size: a.b.size}
	}
	if off >= a.b.size {
		return 0, io.EOF
	}
	q := p
	if int64(len(p)) > a.b.size-off {
		q = p[:a.b.size-off]
	}
	n, err := a.b.ReadAt(a.ctx, q, off)
	if err == nil && len(q) < len(p) {
		err = io.EOF
	}
	return n, err
}

// WriteAt writes as io.WriterAt; it writes nothing of a p that would
// reach past the end of the remote buffer (a *RangeError).
func (a IO) WriteAt(p []byte, off int64) (int, error) {
	return a.b.WriteAt(a.ctx, p, off)
}

// Size returns the remote buffer's length.
func (a IO) Size() int64 { return a.b.size }

var (
	_ io.ReaderAt = IO{}
	_ io.WriterAt = IO{}
)
