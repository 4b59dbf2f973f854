package host

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// ByteView is a namespace for code that does I/O at any offset and length
// (io.SectionReader, io.OffsetWriter, encoders writing a few octets at a
// time): io.ReaderAt and io.WriterAt without the block-size rule.
//
// A write that starts or ends inside a block reads that block, changes
// its part and writes it back: it is not atomic. A crash or a failed
// command between the two may leave the block half old; a write by
// another host, or through another ByteView or Namespace, that lands
// between them is lost. Writes through one ByteView do not lose each
// other's octets in a block they share (the read-modify-write of partial
// blocks is serialized), but overlapping writes still land in no defined
// order. Aligned parts of a call go to the namespace directly, as
// Namespace's do.
type ByteView struct {
	n  blockDevice
	bs int64
	mu sync.Mutex // partial blocks' read-modify-write
}

// blockDevice is what a ByteView reads and writes: a Namespace or a
// MultipathNamespace.
type blockDevice interface {
	Size() int64
	BlockSize() int
	ReadAtContext(ctx context.Context, p []byte, off int64) (int, error)
	WriteAtContext(ctx context.Context, p []byte, off int64) (int, error)
}

// Bytes returns a ByteView of the namespace.
func (n *Namespace) Bytes() *ByteView { return &ByteView{n: n, bs: n.bs} }

// Bytes returns a ByteView of the namespace.
func (n *MultipathNamespace) Bytes() *ByteView { return &ByteView{n: n, bs: int64(n.BlockSize())} }

// Size returns the namespace's size in octets.
func (v *ByteView) Size() int64 { return v.n.Size() }

// ReadAt reads len(p) octets at off (io.ReaderAt).
func (v *ByteView) ReadAt(p []byte, off int64) (int, error) {
	return v.ReadAtContext(context.Background(), p, off)
}

// WriteAt writes p at off (io.WriterAt).
func (v *ByteView) WriteAt(p []byte, off int64) (int, error) {
	return v.WriteAtContext(context.Background(), p, off)
}

// ReadAtContext is ReadAt bounded by ctx.
func (v *ByteView) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	size := v.n.Size()
	if off < 0 {
		return 0, ErrRange
	}
	if off > size || off == size && len(p) > 0 {
		return 0, io.EOF
	}
	var eof error
	if int64(len(p)) > size-off {
		p, eof = p[:size-off], io.EOF
	}
	done := 0
	err := v.split(p, off, func(b []byte, at int64, whole bool) error {
		var err error
		if whole {
			_, err = v.n.ReadAtContext(ctx, b, at)
		} else {
			err = v.partial(ctx, b, at, false)
		}
		if err == nil {
			done += len(b)
		}
		return err
	})
	if err == nil {
		err = eof
	}
	return done, err
}

// WriteAtContext is WriteAt bounded by ctx.
func (v *ByteView) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 || int64(len(p)) > v.n.Size()-off {
		return 0, fmt.Errorf("%w: a write of %d octets at %d, the namespace's %d", ErrRange, len(p), off, v.n.Size())
	}
	done := 0
	err := v.split(p, off, func(b []byte, at int64, whole bool) error {
		var err error
		if whole {
			_, err = v.n.WriteAtContext(ctx, b, at)
		} else {
			err = v.partial(ctx, b, at, true)
		}
		if err == nil {
			done += len(b)
		}
		return err
	})
	return done, err
}

// split cuts p (at off) into a partial head block, whole blocks and a
// partial tail block, and calls do for each in order until one fails.
func (v *ByteView) split(p []byte, off int64, do func(b []byte, at int64, whole bool) error) error {
	bs := v.bs
	for len(p) > 0 {
		in := off % bs
		if in != 0 || int64(len(p)) < bs {
			k := min(int64(len(p)), bs-in) // up to the block's end
			if err := do(p[:k], off, false); err != nil {
				return err
			}
			p, off = p[k:], off+k
			continue
		}
		k := int64(len(p)) / bs * bs
		if err := do(p[:k], off, true); err != nil {
			return err
		}
		p, off = p[k:], off+k
	}
	return nil
}

// partial reads, or read-modify-writes, b inside one block at off.
func (v *ByteView) partial(ctx context.Context, b []byte, off int64, write bool) error {
	bs := v.bs
	start := off / bs * bs
	blk := make([]byte, bs)
	if write {
		v.mu.Lock()
		defer v.mu.Unlock()
	}
	if _, err := v.n.ReadAtContext(ctx, blk, start); err != nil {
		return err
	}
	if !write {
		copy(b, blk[off-start:])
		return nil
	}
	copy(blk[off-start:], b)
	_, err := v.n.WriteAtContext(ctx, blk, start)
	return err
}
