package datadir

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/testutil"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	etcddatadir "go.etcd.io/etcd/server/v3/storage/datadir"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

func TestReadRaftLogAndCommitLog(t *testing.T) {
	dir := t.TempDir()
	walDir := etcddatadir.ToWALDir(dir)
	w, err := wal.Create(zap.NewNop(), walDir, walMetadata(t, 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	// Entries 1..5 of term 2; the hard state says only 3 is committed.
	var ents []raftpb.Entry
	for i := uint64(1); i <= 5; i++ {
		ents = append(ents, raftpb.Entry{Term: 2, Index: i, Data: []byte{byte(i)}})
	}
	if err := w.Save(raftpb.HardState{Term: 3, Vote: 1, Commit: 3}, ents); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	want := RaftLog{Term: 3, Vote: 1, Commit: 3, LastIndex: 5, LastTerm: 2}
	got, err := ReadRaftLog(dir)
	if err != nil || got != want {
		t.Fatalf("ReadRaftLog = %+v, %v; want %+v", got, err, want)
	}

	before, after, err := CommitLog(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantAfter := want
	wantAfter.Commit = 5
	if before != want || after != wantAfter {
		t.Fatalf("CommitLog: before %+v after %+v; want %+v and %+v", before, after, want, wantAfter)
	}
	if got, err := ReadRaftLog(dir); err != nil || got != wantAfter {
		t.Fatalf("after CommitLog, ReadRaftLog = %+v, %v; want %+v", got, err, wantAfter)
	}
	// A second call has nothing left to commit and writes nothing.
	if before, after, err := CommitLog(dir, nil); err != nil || before != wantAfter || after != wantAfter {
		t.Fatalf("second CommitLog: %+v %+v %v", before, after, err)
	}
}

func TestRaftLogErrorsNameTheDir(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadRaftLog(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("ReadRaftLog of an empty dir: %v", err)
	}
	if _, _, err := CommitLog(dir, nil); err == nil || !strings.Contains(err.Error(), "no WAL") {
		t.Fatalf("CommitLog of an empty dir: %v", err)
	}
}

// ackedWrite is the write the lost majority acknowledged and the survivor holds only above
// its commit index.
const ackedWrite = "/acknowledged-by-the-lost-majority"

// TestForceNewClusterKeepsEntriesAboveCommit reproduces the window of a quorum loss in which
// a write was acknowledged (its entry on the leader and a second voter), while the third
// voter, the survivor, holds the entry but never learned that it was committed.
//
// Real members produce the entry; the survivor's state is then made exactly as it is in the
// window: the leader's entries above the survivor's last index are appended to its WAL, and
// its hard state (commit index) is left as it was. The network timing that produces this
// state cannot be hit on demand; the resulting WAL is the same.
//
// Control: etcd's force-new-cluster on that WAL drops the write. With CommitLog first, as
// Steward's seed does, it is kept.
func TestForceNewClusterKeepsEntriesAboveCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three etcd members")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfgs := threeMembers(t)
	// The members start together: none is ready before a quorum is.
	started := make([]chan *stoppable, 3)
	for i := range cfgs {
		started[i] = make(chan *stoppable, 1)
		go func() { started[i] <- startEmbedded(t, cfgs[i]) }()
	}
	members := make([]*stoppable, 3)
	for i := range started {
		if members[i] = <-started[i]; members[i] == nil {
			t.FailNow()
		}
	}
	var leader, follower, survivor int
	testutil.Eventually(t, 30*time.Second, "a leader elected", func() error {
		for i, m := range members {
			if m.Server.Leader() == m.Server.MemberID() {
				leader = i
				return nil
			}
		}
		return fmt.Errorf("no leader yet")
	})
	follower, survivor = (leader+1)%3, (leader+2)%3
	c := clientTo(t, cfgs[leader])
	for i := 0; i < 10; i++ {
		if _, err := c.Put(ctx, fmt.Sprintf("/before/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	// Every member has applied the writes before the survivor stops.
	rev := members[leader].Server.KV().Rev()
	testutil.Eventually(t, 30*time.Second, "the survivor caught up", func() error {
		if r := members[survivor].Server.KV().Rev(); r < rev {
			return fmt.Errorf("survivor at revision %d, leader at %d", r, rev)
		}
		return nil
	})
	members[survivor].Close()
	if _, err := c.Put(ctx, ackedWrite, "v"); err != nil {
		t.Fatalf("the write was not acknowledged by the leader and the follower: %v", err)
	}
	members[leader].Close()
	members[follower].Close()

	survivorDir := cfgs[survivor].Dir
	if got := appliedMembers(t, cfgs[leader].Dir); got != "m0,m1,m2" {
		t.Fatalf("the leader's database lists the voters %q, want m0,m1,m2", got)
	}
	appendLeaderEntries(t, cfgs[leader].Dir, survivorDir)
	log, err := ReadRaftLog(survivorDir)
	if err != nil {
		t.Fatal(err)
	}
	if at := entryIndexOf(t, survivorDir, ackedWrite); at <= log.Commit || at > log.LastIndex {
		t.Fatalf("the survivor's WAL holds the write at index %d; want it above the commit index %d (last %d)", at, log.Commit, log.LastIndex)
	}

	control := *cfgs[survivor]
	control.Dir = t.TempDir()
	testutil.CopyDir(t, survivorDir, control.Dir)
	if has := forceNewClusterHas(t, &control, ackedWrite); has {
		t.Fatal("control: etcd's force-new-cluster kept an entry above the commit index; the window does not reproduce")
	}
	if _, _, err := CommitLog(survivorDir, nil); err != nil {
		t.Fatal(err)
	}
	if has := forceNewClusterHas(t, cfgs[survivor], ackedWrite); !has {
		t.Fatal("the acknowledged write was lost by force-new-cluster after CommitLog")
	}
	if got := appliedMembers(t, survivorDir); got != cfgs[survivor].Name {
		t.Fatalf("after force-new-cluster the database lists the voters %q, want only %s", got, cfgs[survivor].Name)
	}
}

// appliedMembers lists the names of the voters in a stopped member's database.
func appliedMembers(t *testing.T, dataDir string) string {
	t.Helper()
	a, err := ReadApplied(DBPath(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	if a.Index == 0 {
		t.Fatalf("no applied index in %s", dataDir)
	}
	var names []string
	for _, m := range a.Members {
		if !m.Learner {
			names = append(names, m.Name)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func threeMembers(t *testing.T) []*embed.Config {
	var cfgs []*embed.Config
	var initial []string
	for i := 0; i < 3; i++ {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(t.TempDir(), cfg.Name)
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		clientURL, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)))
		peerURL, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)))
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*clientURL}, []url.URL{*clientURL}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peerURL}, []url.URL{*peerURL}
		initial = append(initial, cfg.Name+"="+peerURL.String())
		cfgs = append(cfgs, cfg)
	}
	for _, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
	}
	return cfgs
}

// stoppable is an embedded member that may be closed before the test's cleanup closes it.
type stoppable struct {
	*embed.Etcd
	once sync.Once
}

func (s *stoppable) Close() { s.once.Do(s.Etcd.Close) }

func startEmbedded(t *testing.T, cfg *embed.Config) *stoppable {
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Error(err)
		return nil
	}
	s := &stoppable{Etcd: e}
	t.Cleanup(s.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Errorf("member %s did not start", cfg.Name)
	}
	return s
}

func clientTo(t *testing.T, cfg *embed.Config) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{cfg.AdvertiseClientUrls[0].String()},
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// openWAL opens a stopped member's WAL where etcd would, for reading or for appending, and
// reads it; the caller closes it.
func openWAL(t *testing.T, dataDir string, write bool) (*wal.WAL, raftpb.HardState, []raftpb.Entry) {
	t.Helper()
	at, err := walSnapshot(zap.NewNop(), dataDir)
	if err != nil {
		t.Fatal(err)
	}
	open := wal.OpenForRead
	if write {
		open = wal.Open
	}
	w, err := open(zap.NewNop(), etcddatadir.ToWALDir(dataDir), at)
	if err != nil {
		t.Fatal(err)
	}
	_, st, ents, err := w.ReadAll()
	if err != nil {
		w.Close()
		t.Fatal(err)
	}
	return w, st, ents
}

// walEntries reads a stopped member's log entries.
func walEntries(t *testing.T, dataDir string) []raftpb.Entry {
	t.Helper()
	w, _, ents := openWAL(t, dataDir, false)
	w.Close()
	return ents
}

// appendLeaderEntries appends to the survivor's WAL the leader's entries above the
// survivor's last index (as its MsgApp would have), keeping the survivor's commit index.
func appendLeaderEntries(t *testing.T, leaderDir, survivorDir string) {
	t.Helper()
	leaderEnts := walEntries(t, leaderDir)
	w, st, ents := openWAL(t, survivorDir, true)
	defer w.Close()
	last := ents[len(ents)-1]
	var more []raftpb.Entry
	for _, e := range leaderEnts {
		switch {
		case e.Index == last.Index && e.Term != last.Term:
			t.Fatalf("the leader's entry %d has term %d, the survivor's %d: the logs diverge", e.Index, e.Term, last.Term)
		case e.Index > last.Index:
			more = append(more, e)
			st.Term = max(st.Term, e.Term)
		}
	}
	if len(more) == 0 {
		t.Fatal("the leader holds no entry the survivor lacks")
	}
	if err := w.Save(st, more); err != nil {
		t.Fatal(err)
	}
}

// entryIndexOf is the index of the WAL entry that puts key, 0 when there is none.
func entryIndexOf(t *testing.T, dataDir, key string) uint64 {
	t.Helper()
	ents := walEntries(t, dataDir)
	for _, e := range ents {
		if e.Type != raftpb.EntryNormal || len(e.Data) == 0 {
			continue
		}
		var r etcdserverpb.InternalRaftRequest
		if r.Unmarshal(e.Data) == nil && r.Put != nil && string(r.Put.Key) == key {
			return e.Index
		}
	}
	return 0
}

// forceNewClusterHas starts the member alone with force-new-cluster and says whether key is
// there once it serves.
func forceNewClusterHas(t *testing.T, cfg *embed.Config, key string) bool {
	t.Helper()
	cfg.ForceNewCluster = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("force-new-cluster on %s: %v", cfg.Dir, err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatalf("force-new-cluster on %s: not ready", cfg.Dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := clientTo(t, cfg).Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Kvs) > 0
}

// TestReadingALiveDataDirChangesNothing: the sidecar reads its member's raft log while etcd
// runs. Reading must leave the snap dir as it is: a db.tmp* file there is the database a
// defragmentation is writing (etcd exits if it disappears), and a snap file that does not
// read yet is being written. Under defragmentations the member keeps serving.
func TestReadingALiveDataDirChangesNothing(t *testing.T) {
	dir := t.TempDir()
	_, cli, endpoint, _ := testutil.EtcdOn(t, dir)
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("k%d", i%20), strings.Repeat("v", 4096)); err != nil {
			t.Fatal(err)
		}
	}
	snapDir := etcddatadir.ToSnapDir(dir)
	planted := []string{"db.tmp.123456", "0000000000000002-0000000000000010.snap"}
	for _, name := range planted {
		if err := os.WriteFile(filepath.Join(snapDir, name), []byte("in progress"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := ReadRaftLog(dir); err != nil {
				t.Errorf("ReadRaftLog of a live member: %v", err)
				return
			}
		}
	}()
	for i := 0; i < 5; i++ {
		if _, err := cli.Defragment(ctx, endpoint); err != nil {
			t.Fatalf("defragmentation %d while the data dir is read: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	for _, name := range planted {
		if _, err := os.Stat(filepath.Join(snapDir, name)); err != nil {
			t.Errorf("reading the raft log touched %s: %v", name, err)
		}
	}
	if _, err := cli.Put(ctx, "after", "ok"); err != nil {
		t.Fatalf("the member stopped serving: %v", err)
	}
}
