package datadir

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"go.etcd.io/etcd/server/v3/storage/schema"
)

// revBytesLen is the length of an mvcc revision key (8-byte main, '_', 8-byte sub); tombstones
// carry one more byte.
const revBytesLen = 8 + 1 + 8

// lockTimeout bounds how long we wait for bbolt's file lock: a held lock means a running etcd
// (or a restore) owns the database.
const lockTimeout = 2 * time.Second

// ReadDBRevision reads, read-only, the revision and the compacted revision that etcd will
// report when it starts on the bbolt database at path. It mirrors the mvcc store's start-up:
// the newest revision in the key bucket (1 for an empty store), raised to the compaction
// revisions when compaction removed the newest tombstones. compactRev is the newest of the
// finished and the scheduled compaction (etcd resumes a scheduled one at start-up); 0 if none.
// It reads a few pages only: the meta pages and the paths to the newest key and the meta
// bucket's compaction records.
func ReadDBRevision(path string) (rev, compactRev int64, err error) {
	return readDB(path, false, false)
}

// CheckDB is the database part of Inspect: ReadDBRevision that also requires etcd's meta
// bucket and, when deep, checks every page of the database (bbolt's tx.Check: page
// references, freelist, bucket and key ordering), as after an unclean shutdown.
//
// The deep check maps the file with MAP_POPULATE (Linux), as etcd's backend maps its
// database: the kernel reads the file in one pass with read-ahead before the walk, where the
// read-only mapping bbolt marks MADV_RANDOM would otherwise fault it in one 4 KiB page at a
// time in tree order (about 5× slower on a cold page cache). The pages stay in the page
// cache, where etcd, started right after, finds them. The quick check does not populate: it
// touches a few pages of a file that may be many GiB.
func CheckDB(path string, deep bool) (rev, compactRev int64, err error) {
	return readDB(path, true, deep)
}

// ErrInUse is the error for a database whose lock another process holds: an etcd runs on it.
// It says nothing of the database's contents.
var ErrInUse = errors.New("in use by a running etcd (its lock is held)")

// InUse reports whether an etcd holds the lock of the database in dataDir now.
func InUse(dataDir string) bool {
	db, err := bolt.Open(DBPath(dataDir), 0o400, &bolt.Options{ReadOnly: true, Timeout: inUseTimeout})
	if err != nil {
		return errors.Is(err, bolterrors.ErrTimeout)
	}
	_ = db.Close()
	return false
}

// inUseTimeout is how long InUse waits for the lock: etcd holds it for as long as it runs.
const inUseTimeout = 100 * time.Millisecond

func readDB(path string, requireMeta, deep bool) (rev, compactRev int64, err error) {
	if _, err := os.Stat(path); err != nil {
		return 0, 0, fmt.Errorf("no etcd database at %s: %w", path, err)
	}
	opts := &bolt.Options{ReadOnly: true, Timeout: lockTimeout}
	if deep {
		opts.MmapFlags = mmapPopulate
	}
	db, err := bolt.Open(path, 0o400, opts)
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return 0, 0, fmt.Errorf("database %s: %w (stop the etcd member using it)", path, ErrInUse)
		}
		return 0, 0, fmt.Errorf("open database %s: %w", path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		if requireMeta && tx.Bucket(schema.Meta.Name()) == nil {
			return fmt.Errorf("no %q bucket: not an etcd v3 database", schema.Meta.Name())
		}
		var err error
		if rev, compactRev, err = TxRevision(tx); err != nil {
			return err
		}
		if deep {
			var first error
			n := 0
			for err := range tx.Check() { // drain: the checker stops only when it is done
				if first == nil {
					first = err
				}
				n++
			}
			if first != nil {
				return fmt.Errorf("integrity check: %d problems, the first: %w", n, first)
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("read database %s: %w", path, err)
	}
	return rev, compactRev, nil
}

// TxRevision computes the store revision and the compacted revision in tx the way mvcc's
// restore does (see ReadDBRevision). It needs the key bucket; the meta bucket is optional.
func TxRevision(tx *bolt.Tx) (rev, compactRev int64, err error) {
	rev = 1 // an empty store is at revision 1
	kb := tx.Bucket(schema.Key.Name())
	if kb == nil {
		return 0, 0, fmt.Errorf("no %q bucket: not an etcd v3 database", schema.Key.Name())
	}
	if k, _ := kb.Cursor().Last(); k != nil {
		main, err := revMain(k)
		if err != nil {
			return 0, 0, fmt.Errorf("newest key in the key bucket: %w", err)
		}
		rev = main
	}
	var finished, scheduled int64
	if mb := tx.Bucket(schema.Meta.Name()); mb != nil {
		if v := mb.Get(schema.FinishedCompactKeyName); v != nil {
			if finished, err = revMain(v); err != nil {
				return 0, 0, fmt.Errorf("finished compaction revision: %w", err)
			}
		}
		if v := mb.Get(schema.ScheduledCompactKeyName); v != nil {
			if scheduled, err = revMain(v); err != nil {
				return 0, 0, fmt.Errorf("scheduled compaction revision: %w", err)
			}
		}
	}
	rev = max(rev, finished, scheduled)
	return rev, max(finished, scheduled), nil
}

func revMain(b []byte) (int64, error) {
	if len(b) != revBytesLen && len(b) != revBytesLen+1 {
		return 0, fmt.Errorf("malformed revision %x: %d bytes, want %d or %d", b, len(b), revBytesLen, revBytesLen+1)
	}
	return int64(binary.BigEndian.Uint64(b[:8])), nil
}
