package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/fnv"
)

// bbolt's on-disk layout (go.etcd.io/bbolt, internal/common): a database begins with meta page
// 0, a 16-byte page header (id, flags, count, overflow) then the meta (magic, version, page
// size, flags, root bucket, freelist page, page count, transaction ID, then an FNV-64a of the
// meta's first 56 bytes). bbolt writes it in the machine's byte order.
const (
	boltPageHeader  = 16
	boltMetaPage    = 0x04
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	boltMetaSummed  = 56 // the meta bytes the checksum covers
	boltMetaEnd     = boltPageHeader + boltMetaSummed + 8
	boltMinPageSize = 512
	boltMaxPageSize = 1 << 20
)

// SnapshotCheck checks, as a full snapshot's payload is written to it, that it is what etcd's
// Maintenance.Snapshot sends (and what Steward writes): a bbolt database, whose first meta page
// is sound and which holds at least the pages that meta page counts, followed by etcd's SHA-256
// of it. Every full snapshot Steward writes carries that SHA-256, so one without it is refused.
// Write fails as soon as the first page is not a database, so a planted object is refused
// before it is written anywhere; Done checks the end.
type SnapshotCheck struct {
	key    string
	h      hash.Hash
	head   []byte // the first boltMetaEnd bytes, until the meta is checked
	dbSize uint64 // from the meta: page count times page size
	tail   []byte // the last sha256.Size bytes seen
	n      int64
	err    error
}

// NewSnapshotCheck starts checking the payload of full snapshot key.
func NewSnapshotCheck(key string) *SnapshotCheck {
	return &SnapshotCheck{key: key, h: sha256.New(), head: make([]byte, 0, boltMetaEnd), tail: make([]byte, 0, 2*sha256.Size)}
}

func (c *SnapshotCheck) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if len(c.head) < boltMetaEnd {
		c.head = append(c.head, p[:min(len(p), boltMetaEnd-len(c.head))]...)
		if len(c.head) == boltMetaEnd {
			if c.err = c.checkMeta(); c.err != nil {
				return 0, c.err
			}
		}
	}
	c.n += int64(len(p))
	// Hash everything but the last sha256.Size bytes, which are kept.
	if len(p) >= sha256.Size {
		c.h.Write(c.tail)
		c.h.Write(p[:len(p)-sha256.Size])
		c.tail = append(c.tail[:0], p[len(p)-sha256.Size:]...)
		return len(p), nil
	}
	c.tail = append(c.tail, p...)
	if extra := len(c.tail) - sha256.Size; extra > 0 {
		c.h.Write(c.tail[:extra])
		c.tail = append(c.tail[:0], c.tail[extra:]...)
	}
	return len(p), nil
}

// checkMeta checks meta page 0, as bbolt does when it opens a file.
func (c *SnapshotCheck) checkMeta() error {
	page, meta := c.head[:boltPageHeader], c.head[boltPageHeader:]
	le := binary.NativeEndian
	sum := fnv.New64a()
	sum.Write(meta[:boltMetaSummed])
	pageSize := le.Uint32(meta[8:])
	switch {
	case le.Uint64(page) != 0 || le.Uint16(page[8:]) != boltMetaPage || le.Uint32(meta) != boltMagic:
		return c.notDatabase("it does not begin with a bbolt database's meta page")
	case le.Uint32(meta[4:]) != boltVersion:
		return c.notDatabase(fmt.Sprintf("its bbolt format version is %d, not %d", le.Uint32(meta[4:]), boltVersion))
	case le.Uint64(meta[boltMetaSummed:]) != sum.Sum64():
		return c.notDatabase("its bbolt meta page's checksum does not match")
	case pageSize < boltMinPageSize || pageSize > boltMaxPageSize || pageSize&(pageSize-1) != 0:
		return c.notDatabase(fmt.Sprintf("its bbolt page size %d is not a power of two from %d to %d", pageSize, boltMinPageSize, boltMaxPageSize))
	}
	pages := le.Uint64(meta[40:])
	if pages < 2 || pages > 1<<62/uint64(pageSize) {
		return c.notDatabase(fmt.Sprintf("its bbolt meta page counts %d pages", pages))
	}
	c.dbSize = pages * uint64(pageSize)
	return nil
}

// Done checks, after the last byte, the database's size against its meta page and etcd's
// SHA-256 at the end.
func (c *SnapshotCheck) Done() error {
	if c.err != nil {
		return c.err
	}
	db := c.n - sha256.Size
	switch {
	case len(c.head) < boltMetaEnd:
		return c.notDatabase(fmt.Sprintf("it holds %d bytes, too few for a database", c.n))
	case c.n%512 != sha256.Size:
		return c.notDatabase(fmt.Sprintf("its %d bytes are not whole pages followed by etcd's SHA-256 of them", c.n))
	case uint64(db) < c.dbSize:
		return c.notDatabase(fmt.Sprintf("its database is %d bytes, fewer than the %d its meta page counts", db, c.dbSize))
	case !bytes.Equal(c.h.Sum(nil), c.tail):
		return fmt.Errorf("backup object %s: %w: the etcd snapshot's own SHA-256 does not match its data", c.key, ErrCorrupt)
	}
	return nil
}

func (c *SnapshotCheck) notDatabase(why string) error {
	return fmt.Errorf("backup object %s: %w: not an etcd snapshot: %s", c.key, ErrCorrupt, why)
}
