package restore

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
)

// copyBuffer is the chunk size between the decompressor and the database file: large writes
// keep the syscall count low.
const copyBuffer = 1 << 20

// downloadFull streams the full snapshot o from s into f, the restored member's database file
// (decompressed), verifying the object's SHA-256 and that it is an etcd snapshot
// (backup.SnapshotCheck: a bbolt database followed by etcd's SHA-256 of it) on the way; a
// payload that is not one is refused at its first page, and one that decompresses to more than
// raw bytes (its trailer's, read ahead) as soon as it does, so no more is ever written. Once
// the whole snapshot checks out, etcd's SHA-256 is cut off the end of f, which then holds the
// database alone. It returns the object's header and the bytes read from the store. Memory is
// constant whatever the size.
func downloadFull(ctx context.Context, s *store.Store, o backup.Object, raw int64, f *os.File, progress func(done int64)) (backup.Header, int64, error) {
	sr, err := s.NewReader(ctx, o.Key)
	if err != nil {
		return backup.Header{}, 0, fmt.Errorf("restore: full snapshot: %w", err)
	}
	defer sr.Close()
	cr := &countingReader{r: sr, progress: progress}
	hdr, or, err := backup.NewObjectReader(cr, o.Key, s.Keys())
	if err != nil {
		return backup.Header{}, cr.n, fmt.Errorf("restore: %w", err)
	}
	defer or.Close()
	if err := backup.CheckHeader(o, hdr); err != nil {
		return hdr, cr.n, fmt.Errorf("restore: %w", err)
	}
	or.LimitRaw(raw)
	check := backup.NewSnapshotCheck(o.Key)
	fw := &fileWriter{f: f}
	// The check first: what is not a database never reaches the file.
	if err := pipeCopy(io.MultiWriter(check, fw), or); err != nil {
		if fw.err != nil {
			return hdr, cr.n, fmt.Errorf("restore: write the snapshot of %s to %s: %w", o.Key, f.Name(), fw.err)
		}
		return hdr, cr.n, fmt.Errorf("restore: %w", err)
	}
	if err := check.Done(); err != nil {
		return hdr, cr.n, fmt.Errorf("restore: %w", err)
	}
	if err := f.Truncate(fw.n - sha256.Size); err != nil {
		return hdr, cr.n, fmt.Errorf("restore: cut etcd's SHA-256 off %s: %w", f.Name(), err)
	}
	return hdr, cr.n, nil
}

// pipeCopy copies r to w with reading and writing in two goroutines, so that reading (the
// store, the object's SHA-256, zstd) and writing (etcd's SHA-256, the file) use two cores. A
// few fixed buffers circulate between them: memory stays constant.
func pipeCopy(w io.Writer, r io.Reader) error {
	const buffers = 4
	full := make(chan []byte, buffers)
	free := make(chan []byte, buffers)
	for i := 0; i < buffers; i++ {
		free <- make([]byte, copyBuffer)
	}
	werr := make(chan error, 1)
	var failed atomic.Bool
	go func() {
		var err error
		for b := range full {
			if err == nil {
				if _, err = w.Write(b); err != nil {
					failed.Store(true)
				}
			}
			free <- b[:cap(b)]
		}
		werr <- err
	}()
	var rerr error
	for {
		b := <-free
		n, err := io.ReadFull(r, b)
		if n > 0 {
			full <- b[:n]
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			rerr = err
			break
		}
		// Stop reading early once the writer failed (a full disk).
		if failed.Load() {
			break
		}
	}
	close(full)
	if err := <-werr; err != nil {
		return err
	}
	return rerr
}

// writebackChunk is how much of the database is written before the kernel is asked to start
// writing it to disk.
const writebackChunk = 32 << 20

// fileWriter keeps the error of a write to the file apart from the reader's, and counts. It
// starts the disk writes of each chunk written (sync_file_range, which does not wait for
// them), so that they overlap the decompression instead of all waiting for the final fsync,
// which remains what makes the file durable and reports its errors.
type fileWriter struct {
	f       *os.File
	n       int64
	started int64 // bytes whose writeback was started
	err     error
}

func (w *fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.n += int64(n)
	if err != nil {
		w.err = err
	}
	if w.n-w.started >= writebackChunk {
		_ = unix.SyncFileRange(int(w.f.Fd()), w.started, w.n-w.started, unix.SYNC_FILE_RANGE_WRITE)
		w.started = w.n
	}
	return n, err
}

type countingReader struct {
	r        io.Reader
	n        int64
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if n > 0 && c.progress != nil {
		c.progress(c.n)
	}
	return n, err
}
