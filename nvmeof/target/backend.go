package target

import (
	"errors"
	"io"
	"os"
	"sync"
)

// Backend is a namespace's storage: ReadAt and WriteAt at octet offsets
// (always whole blocks, inside Size), Flush to make written data durable.
// The target calls them from several queues at once.
type Backend interface {
	io.ReaderAt
	io.WriterAt
	Size() int64
	Flush() error
}

// Zeroer is a Backend that zeroes a range itself, faster than being
// written zeros: Write Zeroes (deallocate false: the range stays
// allocated) and Deallocate (true: its storage may be freed) use it when
// the Backend has it, and write zeros when Zero returns
// errors.ErrUnsupported.
type Zeroer interface {
	Zero(off, n int64, deallocate bool) error
}

// FUAWriter is a Backend that writes durably by itself: WriteAtFUA
// returns once p is on stable storage, for a Write with Force Unit Access
// or one to a controller whose volatile write cache the host turned off.
// Without it the target follows WriteAt with Flush.
type FUAWriter interface {
	WriteAtFUA(p []byte, off int64) (int, error)
}

// MemBackend is a Backend in memory.
type MemBackend struct {
	mu  sync.RWMutex // writes exclusive, so that overlapping I/O from two queues is no data race
	buf []byte
}

// NewMemBackend returns a zeroed in-memory backend of size octets.
func NewMemBackend(size int64) *MemBackend { return &MemBackend{buf: make([]byte, size)} }

func (m *MemBackend) Size() int64  { return int64(len(m.buf)) }
func (m *MemBackend) Flush() error { return nil }

func (m *MemBackend) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m.buf)) {
		return 0, io.EOF
	}
	m.mu.RLock()
	n := copy(p, m.buf[off:])
	m.mu.RUnlock()
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *MemBackend) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || int64(len(p)) > int64(len(m.buf))-off {
		return 0, errors.New("nvmeof: write beyond the end of the memory backend")
	}
	m.mu.Lock()
	copy(m.buf[off:], p)
	m.mu.Unlock()
	return len(p), nil
}

// Zero clears n octets at off.
func (m *MemBackend) Zero(off, n int64, _ bool) error {
	if off < 0 || n < 0 || off+n > int64(len(m.buf)) {
		return errors.New("nvmeof: zeroing beyond the end of the memory backend")
	}
	m.mu.Lock()
	clear(m.buf[off : off+n])
	m.mu.Unlock()
	return nil
}

// FileBackend is a Backend over a file or block device: pread, pwrite and
// fsync; Zero is fallocate on Linux, as Linux's nvmet does: a range zeroed
// in place for Write Zeroes, a hole punched for Deallocate. A write that
// must be durable is written with RWF_DSYNC on Linux, as nvmet's
// IOCB_DSYNC: the kernel syncs that write's range, not the whole file
// (elsewhere, the write and a sync).
type FileBackend struct {
	f    *os.File
	size int64
}

// OpenFileBackend opens path for reading and writing; the namespace is
// the file's size (for a block device, its capacity).
func OpenFileBackend(path string) (*FileBackend, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &FileBackend{f: f, size: size}, nil
}

func (b *FileBackend) Size() int64                              { return b.size }
func (b *FileBackend) Flush() error                             { return b.f.Sync() }
func (b *FileBackend) ReadAt(p []byte, off int64) (int, error)  { return b.f.ReadAt(p, off) }
func (b *FileBackend) WriteAt(p []byte, off int64) (int, error) { return b.f.WriteAt(p, off) }

// WriteAtFUA is WriteAt that returns once p is on stable storage.
func (b *FileBackend) WriteAtFUA(p []byte, off int64) (int, error) { return writeDSync(b.f, p, off) }

// Zero makes n octets at off read as zeros, freeing their blocks if
// deallocate (errors.ErrUnsupported where the system or file system
// cannot).
func (b *FileBackend) Zero(off, n int64, deallocate bool) error {
	return fileZero(b.f, off, n, deallocate)
}

// Close closes the file.
func (b *FileBackend) Close() error { return b.f.Close() }
