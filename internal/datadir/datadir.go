// Package datadir inspects an etcd data directory without starting etcd: who it belongs to
// (WAL metadata), whether its database opens and at which revision, and how etcd last stopped.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	etcddatadir "go.etcd.io/etcd/server/v3/storage/datadir"
	"go.etcd.io/etcd/server/v3/storage/wal"
)

// State is what an inspection found. Fields are zero when the corresponding part is missing.
type State struct {
	Dir string `json:"dir"`
	// HasWAL is true when the WAL directory exists and holds WAL files.
	HasWAL bool `json:"hasWAL"`
	// WALValid is true when the WAL's metadata (member and cluster ID) could be read from the
	// newest WAL file's head and, after an unclean shutdown, the whole WAL read as etcd does.
	WALValid  bool   `json:"walValid"`
	MemberID  uint64 `json:"memberID,omitempty"`
	ClusterID uint64 `json:"clusterID,omitempty"`
	// HasDB is true when the bbolt database file exists.
	HasDB bool `json:"hasDB"`
	// DBValid is true when the database opens read-only and carries etcd's buckets.
	DBValid bool `json:"dbValid"`
	// InUse is true when a running etcd holds the database's lock: its contents were not read,
	// and say nothing of whether it is damaged.
	InUse bool `json:"inUse,omitempty"`
	// Revision is the revision etcd will report when it starts on the database (ReadDBRevision).
	Revision int64 `json:"revision,omitempty"`
	// CompactRevision is the database's compacted revision (finished or scheduled), 0 if none.
	CompactRevision int64 `json:"compactRevision,omitempty"`
	// ConsistentIndex is the raft index applied to the database; Members the member list
	// applied with it.
	ConsistentIndex uint64   `json:"consistentIndex,omitempty"`
	Members         []Member `json:"members,omitempty"`
	// Problems lists what made the WAL or the database invalid, for logs and the init API.
	Problems []string `json:"problems,omitempty"`
	// Identity is the recorded owner of the data, if any.
	Identity *Identity `json:"identity,omitempty"`
	// SupersededBy is the epoch of the restore that the data dir records replaces its data
	// (WriteSuperseded; 0: none). See Superseded.
	SupersededBy int64 `json:"supersededBy,omitempty"`
	// CleanShutdown is true when etcd last stopped cleanly (then the deep check is skipped).
	CleanShutdown bool `json:"cleanShutdown"`
	// PartialRestore is true when an unfinished restore (<dir>.part) lies beside the data dir.
	PartialRestore bool `json:"partialRestore,omitempty"`
	// DeepChecked is true when every page of the database was checked (and the whole WAL read).
	DeepChecked bool `json:"deepChecked,omitempty"`
	// Took is how long the inspection took.
	Took time.Duration `json:"took"`
}

// Valid reports whether the directory holds a member's metadata and a usable database.
func (s State) Valid() bool { return s.WALValid && s.DBValid }

// Empty reports whether nothing of an etcd member is in the directory.
func (s State) Empty() bool { return !s.HasWAL && !s.HasDB }

// Superseded reports whether the data in the directory is superseded: it records that a
// restore replaces it (SupersededBy), and it did not carry that restore out since (its
// identity's RecoveryEpoch is older). Such data is never started on, adopted or counted: it
// is treated as if the directory were empty. A record in an empty directory marks nothing.
func (s State) Superseded() bool {
	if s.SupersededBy == 0 || s.Empty() {
		return false
	}
	return s.Identity == nil || s.SupersededBy > s.Identity.RecoveryEpoch
}

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
//
// The quick check, after a clean shutdown (the marker MarkCleanShutdown writes), reads the
// member and cluster ID from the head of the newest WAL file and the database's meta pages,
// buckets and revision: a few pages and records, whatever the size of the database and the
// WAL. After an unclean shutdown (or none recorded) the deep check adds what a crash can
// leave damaged: it reads the whole WAL after the newest snapshot as etcd does on start, and
// checks every page of the database (see CheckDB); the two run concurrently.
//
// A clean shutdown means etcd synced the WAL and the database and nothing wrote them since;
// damage appearing after that (the disk's) is not looked for by the quick check. etcd would
// then fail on start, and since the marker is removed as etcd starts, the next inspection is
// a deep one.
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
	_, st.CleanShutdown, _ = ReadShutdown(dataDir)
	walDir := etcddatadir.ToWALDir(dataDir)
	dbPath := DBPath(dataDir)
	st.HasWAL = wal.Exist(walDir)
	if _, err := os.Stat(dbPath); err == nil {
		st.HasDB = true
	}
	deep := !st.CleanShutdown && !st.Empty()
	// After an unclean stop the whole WAL is read, concurrently with the database check.
	var walFull chan error
	if st.HasWAL {
		member, cluster, head, err := readWALMetadata(walDir)
		if err != nil {
			st.Problems = append(st.Problems, fmt.Sprintf("WAL in %s is unreadable: %v", walDir, err))
		} else if !deep {
			st.WALValid, st.MemberID, st.ClusterID = true, member, cluster
		} else {
			st.MemberID, st.ClusterID = member, cluster
			walFull = make(chan error, 1)
			go func() { walFull <- checkWALFull(dataDir, head) }()
		}
	}
	if id, ok, err := ReadIdentity(dataDir); err != nil {
		st.Problems = append(st.Problems, err.Error())
	} else if ok {
		st.Identity = &id
	}
	if epoch, err := ReadSuperseded(dataDir); err != nil {
		// A record that cannot be read may say that the data is superseded: it counts as
		// superseded by a restore newer than any this dir carried out.
		st.Problems = append(st.Problems, err.Error())
		st.SupersededBy = 1
		if st.Identity != nil {
			st.SupersededBy = st.Identity.RecoveryEpoch + 1
		}
	} else {
		st.SupersededBy = epoch
	}
	if st.HasDB {
		st.DeepChecked = deep
		rev, compactRev, err := CheckDB(dbPath, deep)
		if errors.Is(err, ErrInUse) {
			st.InUse = true
			st.Problems = append(st.Problems, err.Error())
		} else if err != nil {
			st.Problems = append(st.Problems, fmt.Sprintf("database %s is damaged: %v", dbPath, err))
		} else {
			st.DBValid, st.Revision, st.CompactRevision = true, rev, compactRev
			if a, err := ReadApplied(dbPath); err == nil {
				st.ConsistentIndex, st.Members = a.Index, a.Members
			}
		}
	} else if st.HasWAL {
		st.Problems = append(st.Problems, fmt.Sprintf("database %s is missing", dbPath))
	}
	if walFull != nil {
		if err := <-walFull; err != nil {
			st.MemberID, st.ClusterID = 0, 0
			st.Problems = append(st.Problems, fmt.Sprintf("WAL in %s is unreadable: %v", walDir, err))
		} else {
			st.WALValid = true
		}
	}
	return st, nil
}
