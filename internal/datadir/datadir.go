// Package datadir inspects an etcd data directory without starting etcd: who it belongs to
// (WAL metadata), whether its database opens and at which revision, and how etcd last stopped.
package datadir

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	etcddatadir "go.etcd.io/etcd/server/v3/storage/datadir"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.uber.org/zap"
)

// State is what an inspection found. Fields are zero when the corresponding part is missing.
type State struct {
	Dir string `json:"dir"`
	// HasWAL is true when the WAL directory exists and holds WAL files.
	HasWAL bool `json:"hasWAL"`
	// WALValid is true when the WAL's metadata (member and cluster ID) could be read.
	WALValid  bool   `json:"walValid"`
	MemberID  uint64 `json:"memberID,omitempty"`
	ClusterID uint64 `json:"clusterID,omitempty"`
	// HasDB is true when the bbolt database file exists.
	HasDB bool `json:"hasDB"`
	// DBValid is true when the database opens read-only and carries etcd's buckets.
	DBValid bool `json:"dbValid"`
	// Revision is the newest revision stored in the database.
	Revision int64 `json:"revision,omitempty"`
	// Problems lists what made the WAL or the database invalid, for logs and the init API.
	Problems []string `json:"problems,omitempty"`
	// Identity is the recorded owner of the data, if any.
	Identity *Identity `json:"identity,omitempty"`
	// CleanShutdown is true when etcd last stopped cleanly (then the deep check is skipped).
	CleanShutdown bool `json:"cleanShutdown"`
	// PartialRestore is true when an unfinished restore (<dir>.part) lies beside the data dir.
	PartialRestore bool `json:"partialRestore,omitempty"`
	// DeepChecked is true when every page of the database was checked.
	DeepChecked bool `json:"deepChecked,omitempty"`
	// Took is how long the inspection took.
	Took time.Duration `json:"took"`
}

// Valid reports whether the directory holds a member's metadata and a usable database.
func (s State) Valid() bool { return s.WALValid && s.DBValid }

// Empty reports whether nothing of an etcd member is in the directory.
func (s State) Empty() bool { return !s.HasWAL && !s.HasDB }

// MemberIDHex is the WAL's member ID as etcdctl prints it ("" if unknown).
func (s State) MemberIDHex() string {
	if s.MemberID == 0 {
		return ""
	}
	return fmt.Sprintf("%x", s.MemberID)
}

// ClusterIDHex is the WAL's cluster ID as etcdctl prints it ("" if unknown).
func (s State) ClusterIDHex() string {
	if s.ClusterID == 0 {
		return ""
	}
	return fmt.Sprintf("%x", s.ClusterID)
}

// DBPath is where etcd keeps its bbolt database inside a data dir.
func DBPath(dataDir string) string {
	return filepath.Join(etcddatadir.ToSnapDir(dataDir), "db")
}

// Inspect reads what is in dataDir. It never modifies the directory and never fails on
// damaged contents: damage is reported in State.Problems. An error means the directory
// itself could not be read.
func Inspect(dataDir string) (st State, err error) {
	start := time.Now()
	st.Dir = dataDir
	// A named result: the deferred assignment must reach the caller.
	defer func() { st.Took = time.Since(start) }()
	if _, err := os.Stat(PartDir(dataDir)); err == nil {
		st.PartialRestore = true
	}
	if _, err := os.Stat(dataDir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return st, nil
		}
		return st, fmt.Errorf("inspect data dir %s: %w", dataDir, err)
	}
	walDir := etcddatadir.ToWALDir(dataDir)
	if wal.Exist(walDir) {
		st.HasWAL = true
		member, cluster, err := readWALMetadata(dataDir)
		if err != nil {
			st.Problems = append(st.Problems, fmt.Sprintf("WAL in %s is unreadable: %v", walDir, err))
		} else {
			st.WALValid, st.MemberID, st.ClusterID = true, member, cluster
		}
	}
	if id, ok, err := ReadIdentity(dataDir); err != nil {
		st.Problems = append(st.Problems, err.Error())
	} else if ok {
		st.Identity = &id
	}
	_, st.CleanShutdown, _ = ReadShutdown(dataDir)
	dbPath := DBPath(dataDir)
	if _, err := os.Stat(dbPath); err == nil {
		st.HasDB = true
		// After an unclean stop every page is checked; after a clean one the quick check
		// (meta pages, buckets, newest revision) is enough.
		st.DeepChecked = !st.CleanShutdown
		rev, err := readDBRevision(dbPath, st.DeepChecked)
		if err != nil {
			st.Problems = append(st.Problems, fmt.Sprintf("database %s is damaged: %v", dbPath, err))
		} else {
			st.DBValid, st.Revision = true, rev
		}
	} else if st.HasWAL {
		st.Problems = append(st.Problems, fmt.Sprintf("database %s is missing", dbPath))
	}
	return st, nil
}

// readWALMetadata reads the member and cluster ID the way etcd does on start: from the WAL
// records after the newest snapshot that the snap directory still holds.
func readWALMetadata(dataDir string) (memberID, clusterID uint64, err error) {
	lg := zap.NewNop()
	walDir := etcddatadir.ToWALDir(dataDir)
	walSnaps, err := wal.ValidSnapshotEntries(lg, walDir)
	if err != nil {
		return 0, 0, err
	}
	var at walpb.Snapshot
	if s, err := snap.New(lg, etcddatadir.ToSnapDir(dataDir)).LoadNewestAvailable(walSnaps); err == nil {
		at = walpb.Snapshot{Index: s.Metadata.Index, Term: s.Metadata.Term}
	} else if !errors.Is(err, snap.ErrNoSnapshot) {
		return 0, 0, err
	}
	w, err := wal.OpenForRead(lg, walDir, at)
	if err != nil {
		return 0, 0, err
	}
	defer w.Close()
	raw, _, _, err := w.ReadAll()
	if err != nil {
		return 0, 0, err
	}
	var md etcdserverpb.Metadata
	if err := md.Unmarshal(raw); err != nil {
		return 0, 0, fmt.Errorf("decode WAL metadata: %w", err)
	}
	if md.NodeID == 0 || md.ClusterID == 0 {
		return 0, 0, errors.New("WAL metadata has no member or cluster ID")
	}
	return md.NodeID, md.ClusterID, nil
}

// readDBRevision opens the database read-only and returns the newest revision in its key
// bucket (0 for a fresh database).
func readDBRevision(path string, deep bool) (int64, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var rev int64
	err = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("meta")) == nil {
			return errors.New("no meta bucket: not an etcd database")
		}
		keys := tx.Bucket([]byte("key"))
		if keys == nil {
			return errors.New("no key bucket: not an etcd database")
		}
		if deep {
			var first error
			for err := range tx.Check() { // drain: the checker stops only when it is done
				if first == nil {
					first = err
				}
			}
			if first != nil {
				return fmt.Errorf("integrity check: %w", first)
			}
		}
		k, _ := keys.Cursor().Last()
		if k == nil {
			return nil
		}
		// Key bucket keys are 8-byte big-endian main revision, '_', 8-byte sub revision.
		if len(k) < 17 {
			return fmt.Errorf("malformed revision key %x", k)
		}
		rev = int64(binary.BigEndian.Uint64(k[:8]))
		return nil
	})
	return rev, err
}
