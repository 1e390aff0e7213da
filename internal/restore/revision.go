package restore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
)

// revBytesLen is the length of an mvcc revision key (8-byte main, '_', 8-byte sub); tombstones
// carry one more byte.
const revBytesLen = 8 + 1 + 8

// lockTimeout bounds how long we wait for bbolt's file lock: a held lock means a running etcd
// (or another restore) owns the database.
const lockTimeout = 2 * time.Second

// DBPath returns the bbolt database of an etcd data dir.
func DBPath(dataDir string) string {
	return filepath.Join(dataDir, "member", "snap", "db")
}

// ReadRevision reads the revision and the compacted revision that etcd will report when it
// starts on dataDir, from the database itself (read-only). It mirrors the mvcc store's
// start-up: the newest revision in the key bucket, raised to the compaction revisions when
// compaction removed the newest tombstones. compactRev is the newest of the finished and the
// scheduled compaction (etcd resumes a scheduled one at start-up); 0 if none.
func ReadRevision(dataDir string) (rev, compactRev int64, err error) {
	return readDBRevision(DBPath(dataDir))
}

func readDBRevision(path string) (rev, compactRev int64, err error) {
	if _, err := os.Stat(path); err != nil {
		return 0, 0, fmt.Errorf("read revision: no etcd database at %s (restore a snapshot into the data dir first): %w", path, err)
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return 0, 0, fmt.Errorf("read revision: database %s is locked; stop the etcd member using it: %w", path, err)
		}
		return 0, 0, fmt.Errorf("read revision: open database %s: %w", path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		var err error
		rev, compactRev, err = unsafeRevision(tx)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("read revision of %s: %w", path, err)
	}
	return rev, compactRev, nil
}

// unsafeRevision computes the store revision the way mvcc's restore does.
func unsafeRevision(tx *bolt.Tx) (rev, compactRev int64, err error) {
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

// BumpRevision raises the database's revision by amount and marks the new revision compacted,
// as `etcdutl snapshot restore --bump-revision --mark-compacted` does: clients that cached
// revisions from the old cluster see revisions only grow, and watchers from older revisions get
// "compacted" and re-list instead of silently missing changes. Call it after Replay (a bumped
// database would make Replay skip every event). It returns the new revision.
func BumpRevision(dataDir string, amount int64) (newRev int64, err error) {
	if amount <= 0 {
		return 0, fmt.Errorf("bump revision: amount must be positive, got %d", amount)
	}
	path := DBPath(dataDir)
	if _, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("bump revision: no etcd database at %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return 0, fmt.Errorf("bump revision: open database %s (stop the etcd member using it): %w", path, err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		rev, _, err := unsafeRevision(tx)
		if err != nil {
			return err
		}
		newRev = rev + amount
		// Same records as etcdutl: an empty key-bucket entry at the new revision, which the
		// mvcc store takes as its current revision, and a scheduled compaction there, which
		// etcd carries out when it starts.
		k := mvcc.RevToBytes(mvcc.Revision{Main: newRev}, mvcc.NewRevBytes())
		if err := tx.Bucket(schema.Key.Name()).Put(k, []byte{}); err != nil {
			return fmt.Errorf("write revision %d: %w", newRev, err)
		}
		mb, err := tx.CreateBucketIfNotExists(schema.Meta.Name())
		if err != nil {
			return fmt.Errorf("meta bucket: %w", err)
		}
		v := mvcc.RevToBytes(mvcc.Revision{Main: newRev}, mvcc.NewRevBytes())
		if err := mb.Put(schema.ScheduledCompactKeyName, v); err != nil {
			return fmt.Errorf("mark revision %d compacted: %w", newRev, err)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("bump revision of %s by %d: %w", path, amount, err)
	}
	return newRev, nil
}
