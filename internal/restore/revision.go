package restore

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/etcd-steward/steward/internal/datadir"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
)

// lockTimeout bounds how long we wait for bbolt's file lock: a held lock means a running etcd
// (or another restore) owns the database.
const lockTimeout = 2 * time.Second

// DBPath returns the bbolt database of an etcd data dir.
func DBPath(dataDir string) string { return datadir.DBPath(dataDir) }

// ReadRevision reads the revision and the compacted revision that etcd will report when it
// starts on dataDir, from the database itself (read-only): datadir.ReadDBRevision.
func ReadRevision(dataDir string) (rev, compactRev int64, err error) {
	return readDBRevision(DBPath(dataDir))
}

func readDBRevision(path string) (rev, compactRev int64, err error) {
	rev, compactRev, err = datadir.ReadDBRevision(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, fmt.Errorf("read revision: %w (restore a snapshot into the data dir first)", err)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read revision: %w", err)
	}
	return rev, compactRev, nil
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
		rev, _, err := datadir.TxRevision(tx)
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
