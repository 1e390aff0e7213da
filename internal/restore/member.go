package restore

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/config"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/etcdserver/cindex"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
)

// memberSpec is the identity a restored member dir is given: a new cluster of the members of
// initialCluster, its ID derived from them and token, as etcd bootstraps one.
type memberSpec struct {
	name           string
	initialCluster string
	token          string
	peerURLs       []string
	mmapSize       uint64 // bbolt's initial mmap; 0: etcd's default
}

// newCluster checks the spec as etcd's bootstrap does and builds the cluster it describes.
func newCluster(lg *zap.Logger, m memberSpec) (*membership.RaftCluster, error) {
	peers, err := types.NewURLs(m.peerURLs)
	if err != nil {
		return nil, fmt.Errorf("peer URLs %v: %w", m.peerURLs, err)
	}
	urls, err := types.NewURLsMap(m.initialCluster)
	if err != nil {
		return nil, fmt.Errorf("initial cluster %q: %w", m.initialCluster, err)
	}
	sc := config.ServerConfig{Logger: lg, Name: m.name, PeerURLs: peers, InitialPeerURLsMap: urls, InitialClusterToken: m.token}
	if err := sc.VerifyBootstrap(); err != nil {
		return nil, fmt.Errorf("member %q with peer URLs %v does not fit initial cluster %q: %w", m.name, m.peerURLs, m.initialCluster, err)
	}
	cl, err := membership.NewClusterFromURLsMap(lg, m.token, urls)
	if err != nil {
		return nil, fmt.Errorf("initial cluster %q: %w", m.initialCluster, err)
	}
	return cl, nil
}

// writeMember turns the database in place at DBPath(dataDir) (a snapshot's, without its
// SHA-256 trailer) into the member dir of m in a new cluster, as `etcdutl snapshot restore`
// does once it has copied the database:
//   - the database forgets the source cluster's members and removed members, and records the
//     new cluster's members;
//   - a WAL whose metadata names this member and the new cluster, holding one committed
//     configuration change per member (term 1, indexes 1..n) and a raft snapshot at index n;
//   - a .snap file of that raft snapshot carrying the membership;
//   - the database's consistent index and term set to n and 1, so etcd applies nothing twice.
//
// The database is not fsynced: the caller syncs the whole dir once it is done with it.
// etcd's storage panics (and logs Fatal) where it cannot go on; that becomes an error.
func writeMember(lg *zap.Logger, dataDir string, m memberSpec) (err error) {
	lg = lg.WithOptions(zap.WithFatalHook(zapcore.WriteThenPanic))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("etcd's storage failed on the restored database %s: %v", DBPath(dataDir), p)
		}
	}()
	cl, err := newCluster(lg, m)
	if err != nil {
		return err
	}
	ids := cl.MemberIDs() // sorted: raft's log lists them in this order, as etcdutl's does
	index, term := uint64(len(ids)), uint64(1)
	if err := rewriteMembership(lg, DBPath(dataDir), m.mmapSize, cl, index, term); err != nil {
		return err
	}
	return writeRaftState(lg, dataDir, cl, cl.MemberByName(m.name).ID, ids, index, term)
}

// rewriteMembership replaces the membership stored in the database with cl's and sets the
// consistent index, in one commit.
func rewriteMembership(lg *zap.Logger, dbPath string, mmapSize uint64, cl *membership.RaftCluster, index, term uint64) error {
	bcfg := backend.DefaultBackendConfig(lg)
	bcfg.Path = dbPath
	if mmapSize > 0 {
		bcfg.MmapSize = mmapSize
	}
	// One commit, made here (not by the backend's timer, whose failure could not be recovered);
	// no fsync: the caller syncs the dir once.
	bcfg.BatchInterval, bcfg.BatchLimit = 24*time.Hour, math.MaxInt32
	bcfg.BackendFreelistType = bolt.FreelistMapType
	bcfg.UnsafeNoFsync = true
	be := backend.New(bcfg)
	closeBE := true
	defer func() {
		if closeBE {
			be.Close()
		}
	}()
	mb := schema.NewMembershipBackend(lg, be)
	mb.MustCreateBackendBuckets()
	if err := mb.TrimMembershipFromBackend(); err != nil {
		return fmt.Errorf("remove the snapshot's members from %s: %w", dbPath, err)
	}
	for _, mem := range cl.Members() {
		mb.MustSaveMemberToBackend(mem)
	}
	cindex.UpdateConsistentIndexForce(be.BatchTx(), index, term)
	// A panic inside the commit leaves the backend's lock held, and Close would wait for it
	// forever: the backend is then left open (the caller removes the file).
	closeBE = false
	be.ForceCommit()
	closeBE = true
	return nil
}

// writeRaftState writes the WAL and the .snap file of a new cluster whose members ids were
// all added, as committed configuration changes, at term 1.
func writeRaftState(lg *zap.Logger, dataDir string, cl *membership.RaftCluster, self types.ID, ids []types.ID, index, term uint64) (err error) {
	memberDir := filepath.Join(dataDir, "member")
	md, err := (&etcdserverpb.Metadata{NodeID: uint64(self), ClusterID: uint64(cl.ID())}).Marshal()
	if err != nil {
		return fmt.Errorf("encode WAL metadata: %w", err)
	}
	ents := make([]raftpb.Entry, len(ids))
	voters := make([]uint64, len(ids))
	for i, id := range ids {
		ctx, err := json.Marshal(cl.Member(id))
		if err != nil {
			return fmt.Errorf("encode member %s: %w", id, err)
		}
		cc, err := (&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: uint64(id), Context: ctx}).Marshal()
		if err != nil {
			return fmt.Errorf("encode the addition of member %s: %w", id, err)
		}
		ents[i] = raftpb.Entry{Type: raftpb.EntryConfChange, Term: term, Index: uint64(i) + 1, Data: cc}
		voters[i] = uint64(id)
	}
	walDir := filepath.Join(memberDir, "wal")
	w, err := wal.Create(lg, walDir, md)
	if err != nil {
		return fmt.Errorf("create WAL %s: %w", walDir, err)
	}
	defer func() {
		if cerr := w.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close WAL %s: %w", walDir, cerr)
		}
	}()
	if err := w.Save(raftpb.HardState{Term: term, Vote: voters[0], Commit: index}, ents); err != nil {
		return fmt.Errorf("write WAL %s: %w", walDir, err)
	}
	cs := raftpb.ConfState{Voters: voters}
	rs := raftpb.Snapshot{
		Data:     etcdserver.GetMembershipInfoInV2Format(lg, cl),
		Metadata: raftpb.SnapshotMetadata{Index: index, Term: term, ConfState: cs},
	}
	snapDir := filepath.Join(memberDir, "snap")
	if err := snap.New(lg, snapDir).SaveSnap(rs); err != nil {
		return fmt.Errorf("write the raft snapshot in %s: %w", snapDir, err)
	}
	if err := w.SaveSnapshot(walpb.Snapshot{Index: index, Term: term, ConfState: &cs}); err != nil {
		return fmt.Errorf("write WAL %s: %w", walDir, err)
	}
	return nil
}
