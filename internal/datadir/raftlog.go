package datadir

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	etcddatadir "go.etcd.io/etcd/server/v3/storage/datadir"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

// RaftLog sums up a member's raft log as its WAL holds it: the hard state (current term,
// vote, commit index) and the last entry (its term and index; the snapshot's when no entry
// follows it). Which log would win an election, and what a recovery keeps, is read from it.
type RaftLog struct {
	Term          uint64 `json:"term"`
	Vote          uint64 `json:"vote,omitempty"`
	Commit        uint64 `json:"commit"`
	LastIndex     uint64 `json:"lastIndex"`
	LastTerm      uint64 `json:"lastTerm"`
	SnapshotIndex uint64 `json:"snapshotIndex,omitempty"`
	SnapshotTerm  uint64 `json:"snapshotTerm,omitempty"`
}

// ReadRaftLog reads the raft log of the data dir the way etcd does on start (every record
// after the newest snapshot the snap dir holds), read-only.
func ReadRaftLog(dataDir string) (RaftLog, error) {
	lg := zap.NewNop()
	at, err := walSnapshot(lg, dataDir)
	if err != nil {
		return RaftLog{}, fmt.Errorf("raft log of %s: %w", dataDir, err)
	}
	w, err := wal.OpenForRead(lg, etcddatadir.ToWALDir(dataDir), at)
	if err != nil {
		return RaftLog{}, fmt.Errorf("raft log of %s: open the WAL: %w", dataDir, err)
	}
	defer w.Close()
	_, st, ents, err := w.ReadAll()
	if err != nil {
		return RaftLog{}, fmt.Errorf("raft log of %s: read the WAL: %w", dataDir, err)
	}
	return summarise(at, st, ents), nil
}

// CommitLog marks every entry of the data dir's raft log as committed: it appends a hard
// state whose commit index is the last entry's, synced. etcd must not run on the dir.
//
// Why: force-new-cluster drops the entries above the member's own commit index. A write the
// lost majority acknowledged may be among them (this member stored it but never heard that
// it was committed), and invariant 9 forbids losing it. An entry whose outcome its client
// never learned may then take effect; that is linearizable. before and after are the log
// before and after (equal when every entry was already committed). An interrupted call leaves
// either the old hard state or the new one as the WAL's last record: etcd reads either.
func CommitLog(dataDir string, lg *zap.Logger) (before, after RaftLog, err error) {
	if lg == nil {
		lg = zap.NewNop()
	}
	walDir := etcddatadir.ToWALDir(dataDir)
	if !wal.Exist(walDir) {
		return before, after, fmt.Errorf("commit the raft log of %s: no WAL in %s", dataDir, walDir)
	}
	at, err := walSnapshot(lg, dataDir)
	if err != nil {
		return before, after, fmt.Errorf("commit the raft log of %s: %w", dataDir, err)
	}
	w, err := wal.Open(lg, walDir, at)
	if err != nil {
		return before, after, fmt.Errorf("commit the raft log of %s: open the WAL (is etcd still running on it?): %w", dataDir, err)
	}
	defer w.Close()
	_, st, ents, err := w.ReadAll()
	if err != nil {
		return before, after, fmt.Errorf("commit the raft log of %s: read the WAL: %w", dataDir, err)
	}
	before = summarise(at, st, ents)
	if st.Commit >= before.LastIndex {
		return before, before, nil
	}
	st.Commit = before.LastIndex
	if err := w.Save(st, nil); err != nil {
		return before, after, fmt.Errorf("commit the raft log of %s: append the hard state: %w", dataDir, err)
	}
	// Save syncs only when the term or vote changed or entries were added.
	if err := w.Sync(); err != nil {
		return before, after, fmt.Errorf("commit the raft log of %s: sync the WAL: %w", dataDir, err)
	}
	after = before
	after.Commit = st.Commit
	return before, after, nil
}

func summarise(at walpb.Snapshot, st raftpb.HardState, ents []raftpb.Entry) RaftLog {
	l := RaftLog{Term: st.Term, Vote: st.Vote, Commit: st.Commit, SnapshotIndex: at.Index, SnapshotTerm: at.Term,
		LastIndex: at.Index, LastTerm: at.Term}
	if n := len(ents); n > 0 {
		l.LastIndex, l.LastTerm = ents[n-1].Index, ents[n-1].Term
	}
	return l
}

// walSnapshot is the newest snapshot that both the snap dir and the WAL hold: where etcd
// starts reading its WAL.
func walSnapshot(lg *zap.Logger, dataDir string) (walpb.Snapshot, error) {
	walSnaps, err := wal.ValidSnapshotEntries(lg, etcddatadir.ToWALDir(dataDir))
	if err != nil {
		return walpb.Snapshot{}, fmt.Errorf("read the WAL's snapshot entries: %w", err)
	}
	s, err := newestSnapshot(lg, etcddatadir.ToSnapDir(dataDir), walSnaps)
	switch {
	case err == nil:
		return walpb.Snapshot{Index: s.Metadata.Index, Term: s.Metadata.Term, ConfState: &s.Metadata.ConfState}, nil
	case errors.Is(err, snap.ErrNoSnapshot), errors.Is(err, fs.ErrNotExist):
		// etcd creates a missing snap dir on start and reads the whole WAL.
		return walpb.Snapshot{}, nil
	}
	return walpb.Snapshot{}, fmt.Errorf("load the newest snapshot: %w", err)
}

// newestSnapshot is the newest snap file in dir that the WAL's snapshot entries name, as
// etcd's Snapshotter.LoadNewestAvailable finds it, but reading only. The Snapshotter deletes
// every db.tmp* file and renames unreadable snap files: on a member that runs, those are the
// database a defragmentation is writing (etcd exits when it is gone) and a snap file being
// written.
func newestSnapshot(lg *zap.Logger, dir string, walSnaps []walpb.Snapshot) (*raftpb.Snapshot, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".snap") {
			names = append(names, e.Name())
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names))) // newest first: names are term-index in hex
	for _, name := range names {
		s, err := snap.Read(lg, filepath.Join(dir, name))
		if err != nil {
			continue // being written, or broken: etcd falls back to an older one too
		}
		for _, w := range walSnaps {
			if s.Metadata.Term == w.Term && s.Metadata.Index == w.Index {
				return s, nil
			}
		}
	}
	return nil, snap.ErrNoSnapshot
}

// Member is one entry of the member list a database holds (as applied by its member).
type Member struct {
	ID      string `json:"id"`             // hex, as etcdctl prints it
	Name    string `json:"name,omitempty"` // empty while the member has never started
	Learner bool   `json:"learner,omitempty"`
}

// Applied is what a database says its member applied: the raft index (etcd's consistent
// index) and the member list as of that index.
type Applied struct {
	Index   uint64
	Members []Member
}

// ReadApplied reads, read-only, the applied index and the member list of the database at
// path. etcd must not hold it open.
func ReadApplied(path string) (Applied, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if err != nil {
		return Applied{}, err
	}
	defer db.Close()
	var a Applied
	err = db.View(func(tx *bolt.Tx) error {
		if mb := tx.Bucket(schema.Meta.Name()); mb != nil {
			if v := mb.Get(schema.MetaConsistentIndexKeyName); len(v) == 8 {
				a.Index = binary.BigEndian.Uint64(v)
			}
		}
		b := tx.Bucket(schema.Members.Name())
		if b == nil {
			return nil
		}
		removed := tx.Bucket(schema.MembersRemoved.Name())
		return b.ForEach(func(k, v []byte) error {
			if removed != nil && removed.Get(k) != nil {
				return nil
			}
			var m struct {
				Name      string `json:"name"`
				IsLearner bool   `json:"isLearner"`
			}
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("member %s: %w", k, err)
			}
			a.Members = append(a.Members, Member{ID: string(k), Name: m.Name, Learner: m.IsLearner})
			return nil
		})
	})
	if err != nil {
		return Applied{}, fmt.Errorf("read the applied index and members of %s: %w", path, err)
	}
	return a, nil
}
