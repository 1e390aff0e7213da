package restore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"os"
	"sync/atomic"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
)

// copyBuffer is the chunk size between the decompressor and the scratch file: large writes
// keep the syscall count low.
const copyBuffer = 1 << 20

// downloadFull streams the full snapshot o from s into f (decompressed), verifying the
// object's SHA-256 and etcd's own SHA-256 at the end of the snapshot. It returns the object's
// header and the bytes read from the store. Memory is constant whatever the size.
func downloadFull(ctx context.Context, s *store.Store, o backup.Object, f *os.File, progress func(done int64)) (backup.Header, int64, error) {
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
	eh := newEtcdHash(f)
	if err := pipeCopy(eh, or); err != nil {
		if eh.werr != nil {
			return hdr, cr.n, fmt.Errorf("restore: write the snapshot of %s to scratch file %s: %w", o.Key, f.Name(), eh.werr)
		}
		return hdr, cr.n, fmt.Errorf("restore: %w", err)
	}
	if err := eh.verify(); err != nil {
		return hdr, cr.n, fmt.Errorf("restore: backup object %s: %w: %v", o.Key, backup.ErrCorrupt, err)
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

// etcdHash writes a snapshot stream through while hashing all but its last 32 bytes, which
// (when the size says the stream carries one) are etcd's SHA-256 of the database.
type etcdHash struct {
	w    io.Writer
	werr error
	h    hash.Hash
	tail []byte
	n    int64
}

func newEtcdHash(w io.Writer) *etcdHash {
	return &etcdHash{w: w, h: sha256.New(), tail: make([]byte, 0, 2*sha256.Size)}
}

func (e *etcdHash) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		e.werr = err
		return n, err
	}
	e.n += int64(n)
	if len(p) >= sha256.Size {
		e.h.Write(e.tail)
		e.h.Write(p[:len(p)-sha256.Size])
		e.tail = append(e.tail[:0], p[len(p)-sha256.Size:]...)
		return n, nil
	}
	e.tail = append(e.tail, p...)
	if extra := len(e.tail) - sha256.Size; extra > 0 {
		e.h.Write(e.tail[:extra])
		e.tail = append(e.tail[:0], e.tail[extra:]...)
	}
	return n, nil
}

// verify checks the trailing SHA-256 when etcd's rule says there is one (size mod 512 is 32:
// the database is whole pages). A stream without it was verified by the object's own SHA-256.
func (e *etcdHash) verify() error {
	if e.n%512 != sha256.Size {
		return nil
	}
	if !bytes.Equal(e.h.Sum(nil), e.tail) {
		return fmt.Errorf("the etcd snapshot's own SHA-256 does not match its database")
	}
	return nil
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
