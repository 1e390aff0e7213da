package restore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/storage/schema"
)

// restored is a data dir made by RestoreSnapshot for member "restored" at peerURL.
type restored struct {
	dir     string
	peerURL string
}

func restoreFixture(t *testing.T, f *fixture) restored {
	t.Helper()
	r := restored{dir: filepath.Join(t.TempDir(), "restored.etcd"), peerURL: freeURL(t)}
	err := RestoreSnapshot(testCtx(t), SnapshotRestoreConfig{
		SnapshotPath:        f.snapshot,
		DataDir:             r.dir,
		Name:                "restored",
		InitialCluster:      "restored=" + r.peerURL,
		InitialClusterToken: "steward-test",
		PeerURLs:            []string{r.peerURL},
	})
	if err != nil {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	rev, _, err := ReadRevision(r.dir)
	if err != nil {
		t.Fatalf("ReadRevision after snapshot restore: %v", err)
	}
	if rev != f.snapRev {
		t.Fatalf("restored snapshot is at revision %d, the source took it at %d", rev, f.snapRev)
	}
	return r
}

func (r restored) start(t *testing.T) *member {
	t.Helper()
	return startMember(t, r.dir, "restored", r.peerURL)
}

// consistentIndex reads raft's applied index and term from the meta bucket.
func consistentIndex(t *testing.T, dataDir string) (index, term uint64) {
	t.Helper()
	db, err := bolt.Open(DBPath(dataDir), 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open db: %v", err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		mb := tx.Bucket(schema.Meta.Name())
		if v := mb.Get(schema.MetaConsistentIndexKeyName); len(v) == 8 {
			index = uint64FromBytes(v)
		}
		if v := mb.Get(schema.MetaTermKeyName); len(v) == 8 {
			term = uint64FromBytes(v)
		}
		return nil
	})
	return index, term
}

func uint64FromBytes(b []byte) uint64 {
	var n uint64
	for _, c := range b {
		n = n<<8 | uint64(c)
	}
	return n
}

// checkState compares the member's key space at rev with the source's.
func checkState(t *testing.T, m *member, f *fixture, rev int64) {
	t.Helper()
	resp, err := m.cli.Get(testCtx(t), "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatalf("read restored member at revision %d: %v", rev, err)
	}
	if diff := diffKVs(f.states[rev], resp.Kvs); diff != "" {
		t.Fatalf("restored key space at revision %d differs from the source:\n%s", rev, diff)
	}
}

func diffKVs(want, got []*mvccpb.KeyValue) string {
	var b strings.Builder
	w, g := map[string]*mvccpb.KeyValue{}, map[string]*mvccpb.KeyValue{}
	for _, kv := range want {
		w[string(kv.Key)] = kv
	}
	for _, kv := range got {
		g[string(kv.Key)] = kv
	}
	for k, wk := range w {
		gk, ok := g[k]
		switch {
		case !ok:
			fmt.Fprintf(&b, "  %q missing\n", k)
		case !bytes.Equal(wk.Value, gk.Value) || wk.CreateRevision != gk.CreateRevision ||
			wk.ModRevision != gk.ModRevision || wk.Version != gk.Version || wk.Lease != gk.Lease:
			fmt.Fprintf(&b, "  %q: want value=%q create=%d mod=%d version=%d lease=%x, got value=%q create=%d mod=%d version=%d lease=%x\n",
				k, wk.Value, wk.CreateRevision, wk.ModRevision, wk.Version, wk.Lease,
				gk.Value, gk.CreateRevision, gk.ModRevision, gk.Version, gk.Lease)
		}
	}
	for k := range g {
		if _, ok := w[k]; !ok {
			fmt.Fprintf(&b, "  %q should not exist\n", k)
		}
	}
	return b.String()
}

// eventsThrough counts the fixture's events with revision <= rev.
func eventsThrough(f *fixture, rev int64) int64 {
	var n int64
	for _, ev := range f.events {
		if ev.Kv.ModRevision <= rev {
			n++
		}
	}
	return n
}

// TestReplayMatchesSource restores the snapshot, replays to several targets and starts a real
// etcd member on each result: the revision and every key (value, create_revision,
// mod_revision, version, lease) must equal the source's at the target, and so must every
// revision of history between the source's compaction and the target.
func TestReplayMatchesSource(t *testing.T) {
	f := getFixture(t)
	mid := (f.compactRev + f.lastRev) / 2
	cases := []struct {
		name   string
		target int64
		opts   ReplayOptions
	}{
		{name: "at-source-compaction", target: f.compactRev},
		{name: "middle-small-batches", target: mid, opts: ReplayOptions{BatchEvents: 7}},
		{name: "middle-streamed-revisions", target: mid + 1, opts: ReplayOptions{BatchBytes: 1}},
		{name: "newest", target: f.lastRev},
		{name: "all-events", target: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.target
			if want == 0 {
				want = f.lastRev
			}
			r := restoreFixture(t, f)
			ci, term := consistentIndex(t, r.dir)
			var progress []int64
			opts := tc.opts
			opts.ToRevision = tc.target
			opts.Progress = func(rev int64) { progress = append(progress, rev) }
			res, err := Replay(testCtx(t), r.dir, &sliceSource{evs: f.events}, opts)
			if err != nil {
				t.Fatalf("Replay: %v", err)
			}
			wantRes := ReplayResult{FromRevision: f.snapRev, ToRevision: want, Revisions: want - f.snapRev, Events: eventsThrough(f, want)}
			if res != wantRes {
				t.Fatalf("Replay result %+v, want %+v", res, wantRes)
			}
			if len(progress) == 0 || progress[len(progress)-1] != want {
				t.Fatalf("progress reports %v, want it to end at %d", progress, want)
			}
			if rev, _, err := ReadRevision(r.dir); err != nil || rev != want {
				t.Fatalf("ReadRevision after replay = %d, %v; want %d", rev, err, want)
			}
			// Raft's applied index must stay what etcdutl wrote, matching the WAL it created.
			if ci2, term2 := consistentIndex(t, r.dir); ci2 != ci || term2 != term {
				t.Fatalf("consistent index/term changed from %d/%d to %d/%d", ci, term, ci2, term2)
			}

			m := r.start(t)
			resp, err := m.cli.Get(testCtx(t), "", clientv3.WithPrefix())
			if err != nil {
				t.Fatalf("read restored member: %v", err)
			}
			if resp.Header.Revision != want {
				t.Fatalf("restored member is at revision %d, want %d", resp.Header.Revision, want)
			}
			if diff := diffKVs(f.states[want], resp.Kvs); diff != "" {
				t.Fatalf("restored key space differs from the source at %d:\n%s", want, diff)
			}
			for rev := f.compactRev; rev <= want; rev++ {
				checkState(t, m, f, rev)
			}
			// The member takes writes at the next revision.
			put, err := m.cli.Put(testCtx(t), "after-restore", "x")
			if err != nil || put.Header.Revision != want+1 {
				t.Fatalf("put after restore: revision %v, err %v; want %d", put, err, want+1)
			}
		})
	}
}

// TestReplayReportsHole drops one revision's events: Replay must stop before it with an error
// naming it, keep everything before it, and a later Replay with the full events completes.
func TestReplayReportsHole(t *testing.T) {
	f := getFixture(t)
	hole := (f.snapRev + f.lastRev) / 2
	var evs []*mvccpb.Event
	for _, ev := range f.events {
		if ev.Kv.ModRevision != hole {
			evs = append(evs, ev)
		}
	}
	r := restoreFixture(t, f)
	res, err := Replay(testCtx(t), r.dir, &sliceSource{evs: evs}, ReplayOptions{BatchEvents: 5})
	if !errors.Is(err, ErrMissingRevisions) {
		t.Fatalf("Replay over a hole: err %v, want ErrMissingRevisions", err)
	}
	if want := fmt.Sprintf("revisions %d..%d", hole, hole); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name the missing revision %q", err, want)
	}
	if res.ToRevision != hole-1 {
		t.Fatalf("result ends at %d, want %d", res.ToRevision, hole-1)
	}
	if rev, _, err := ReadRevision(r.dir); err != nil || rev != hole-1 {
		t.Fatalf("database after the hole is at %d (%v), want %d", rev, err, hole-1)
	}

	// A target beyond the end of the events is a hole at the end.
	_, err = Replay(testCtx(t), r.dir, &sliceSource{evs: f.events[:0]}, ReplayOptions{ToRevision: hole + 3})
	if !errors.Is(err, ErrMissingRevisions) || !strings.Contains(err.Error(), fmt.Sprintf("%d..%d", hole, hole+3)) {
		t.Fatalf("Replay past the end of the events: err %v, want ErrMissingRevisions naming %d..%d", err, hole, hole+3)
	}

	res, err = Replay(testCtx(t), r.dir, &sliceSource{evs: f.events}, ReplayOptions{})
	if err != nil {
		t.Fatalf("resume after the hole: %v", err)
	}
	if res.FromRevision != hole-1 || res.ToRevision != f.lastRev || res.Skipped != eventsThrough(f, hole-1) {
		t.Fatalf("resume result %+v: want from %d to %d skipping %d", res, hole-1, f.lastRev, eventsThrough(f, hole-1))
	}
	m := r.start(t)
	checkState(t, m, f, f.lastRev)
}

// TestReplayIsIdempotent replays in pieces, repeats pieces and feeds overlapping event
// streams: events at or below the database's revision are skipped and the result is exact.
func TestReplayIsIdempotent(t *testing.T) {
	f := getFixture(t)
	mid := (f.compactRev + f.lastRev) / 2
	r := restoreFixture(t, f)
	ctx := testCtx(t)
	if _, err := Replay(ctx, r.dir, &sliceSource{evs: f.events}, ReplayOptions{ToRevision: mid}); err != nil {
		t.Fatalf("first replay: %v", err)
	}
	res, err := Replay(ctx, r.dir, &sliceSource{evs: f.events}, ReplayOptions{ToRevision: mid})
	if err != nil || res.Revisions != 0 || res.Events != 0 || res.ToRevision != mid {
		t.Fatalf("repeated replay to %d: %+v, %v; want nothing applied", mid, res, err)
	}
	// Overlap in the middle of the stream, as two delta objects written around a leader
	// hand-off would give: the second copy is skipped.
	var overlapped []*mvccpb.Event
	cut := len(f.events) * 3 / 4
	overlapped = append(overlapped, f.events[:cut]...)
	overlapped = append(overlapped, f.events[cut/2:]...)
	res, err = Replay(ctx, r.dir, &sliceSource{evs: overlapped}, ReplayOptions{})
	if err != nil {
		t.Fatalf("replay with overlap: %v", err)
	}
	if res.FromRevision != mid || res.ToRevision != f.lastRev || res.Events != int64(len(f.events))-eventsThrough(f, mid) {
		t.Fatalf("replay with overlap: %+v", res)
	}
	m := r.start(t)
	checkState(t, m, f, f.lastRev)
	checkState(t, m, f, mid)
}

// TestReplaySourceFailureKeepsRevisionBoundary fails the source inside a multi-event revision:
// nothing of that revision may reach the database, so a later Replay can continue.
func TestReplaySourceFailureKeepsRevisionBoundary(t *testing.T) {
	f := getFixture(t)
	fail := -1
	for i := 1; i < len(f.events); i++ {
		if f.events[i].Kv.ModRevision == f.events[i-1].Kv.ModRevision {
			fail = i
			break
		}
	}
	if fail < 0 {
		t.Fatal("fixture has no multi-event revision")
	}
	rev := f.events[fail].Kv.ModRevision
	r := restoreFixture(t, f)
	_, err := Replay(testCtx(t), r.dir, &sliceSource{evs: f.events, failAt: fail}, ReplayOptions{})
	if err == nil || errors.Is(err, ErrPartialRevision) {
		t.Fatalf("Replay with a failing source: err %v, want a resumable read error", err)
	}
	if got, _, _ := ReadRevision(r.dir); got != rev-1 {
		t.Fatalf("database after the failure is at %d, want %d (the revision before the failure)", got, rev-1)
	}
	if _, err := Replay(testCtx(t), r.dir, &sliceSource{evs: f.events}, ReplayOptions{}); err != nil {
		t.Fatalf("resume: %v", err)
	}
	m := r.start(t)
	checkState(t, m, f, f.lastRev)
}

// TestReplayRejectsForeignEvents feeds events that cannot follow the snapshot.
func TestReplayRejectsForeignEvents(t *testing.T) {
	f := getFixture(t)
	clone := func(ev *mvccpb.Event) *mvccpb.Event {
		kv := *ev.Kv
		return &mvccpb.Event{Type: ev.Type, Kv: &kv}
	}
	var firstPut, firstDelete int = -1, -1
	for i, ev := range f.events {
		if ev.Type == mvccpb.PUT && firstPut < 0 {
			firstPut = i
		}
		if ev.Type == mvccpb.DELETE && firstDelete < 0 {
			firstDelete = i
		}
	}
	t.Run("wrong-version", func(t *testing.T) {
		evs := append([]*mvccpb.Event(nil), f.events...)
		evs[firstPut] = clone(evs[firstPut])
		evs[firstPut].Kv.Version += 5
		r := restoreFixture(t, f)
		_, err := Replay(testCtx(t), r.dir, &sliceSource{evs: evs}, ReplayOptions{})
		if !errors.Is(err, ErrEventMismatch) || !strings.Contains(err.Error(), string(evs[firstPut].Kv.Key)) {
			t.Fatalf("err %v, want ErrEventMismatch naming %q", err, evs[firstPut].Kv.Key)
		}
	})
	t.Run("delete-missing-key", func(t *testing.T) {
		evs := append([]*mvccpb.Event(nil), f.events...)
		evs[firstDelete] = clone(evs[firstDelete])
		evs[firstDelete].Kv.Key = []byte("never-existed")
		r := restoreFixture(t, f)
		_, err := Replay(testCtx(t), r.dir, &sliceSource{evs: evs}, ReplayOptions{})
		if !errors.Is(err, ErrEventMismatch) || !strings.Contains(err.Error(), "never-existed") {
			t.Fatalf("err %v, want ErrEventMismatch naming the key", err)
		}
	})
	t.Run("target-below-snapshot", func(t *testing.T) {
		r := restoreFixture(t, f)
		_, err := Replay(testCtx(t), r.dir, &sliceSource{evs: f.events}, ReplayOptions{ToRevision: f.snapRev - 1})
		if !errors.Is(err, ErrPastTarget) {
			t.Fatalf("err %v, want ErrPastTarget", err)
		}
	})
}

// TestBumpRevision replays, then bumps and marks compacted; etcd must start at the bumped
// revision, refuse older reads as compacted and serve the replayed keys.
func TestBumpRevision(t *testing.T) {
	f := getFixture(t)
	r := restoreFixture(t, f)
	if _, err := Replay(testCtx(t), r.dir, &sliceSource{evs: f.events}, ReplayOptions{}); err != nil {
		t.Fatalf("Replay: %v", err)
	}
	const bump = 1000
	newRev, err := BumpRevision(r.dir, bump)
	if err != nil || newRev != f.lastRev+bump {
		t.Fatalf("BumpRevision = %d, %v; want %d", newRev, err, f.lastRev+bump)
	}
	if rev, compact, err := ReadRevision(r.dir); err != nil || rev != newRev || compact != newRev {
		t.Fatalf("ReadRevision after bump = %d, %d, %v; want %d, %d", rev, compact, err, newRev, newRev)
	}
	m := r.start(t)
	resp, err := m.cli.Get(testCtx(t), "", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if resp.Header.Revision != newRev {
		t.Fatalf("member at revision %d, want %d", resp.Header.Revision, newRev)
	}
	// Values and versions are the replayed ones; only the store's revision moved.
	if diff := diffKVs(f.states[f.lastRev], resp.Kvs); diff != "" {
		t.Fatalf("key space after bump differs:\n%s", diff)
	}
	if _, err := m.cli.Get(testCtx(t), "k0", clientv3.WithRev(f.lastRev)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("read below the bumped revision: err %v, want compacted", err)
	}
	put, err := m.cli.Put(testCtx(t), "after-bump", "x")
	if err != nil || put.Header.Revision != newRev+1 {
		t.Fatalf("put after bump: %v, %v; want revision %d", put, err, newRev+1)
	}
}

func TestRestoreSnapshotErrors(t *testing.T) {
	f := getFixture(t)
	peer := freeURL(t)
	cfg := func(dir, snap string) SnapshotRestoreConfig {
		return SnapshotRestoreConfig{SnapshotPath: snap, DataDir: dir, Name: "m", InitialCluster: "m=" + peer, PeerURLs: []string{peer}}
	}
	t.Run("non-empty-dir-untouched", func(t *testing.T) {
		dir := t.TempDir()
		keep := filepath.Join(dir, "keep")
		if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := RestoreSnapshot(testCtx(t), cfg(dir, f.snapshot)); err == nil {
			t.Fatal("restore into a non-empty dir succeeded")
		}
		if _, err := os.Stat(keep); err != nil {
			t.Fatalf("existing file was touched: %v", err)
		}
	})
	t.Run("corrupt-snapshot-cleans-up", func(t *testing.T) {
		data, err := os.ReadFile(f.snapshot)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0xff
		bad := filepath.Join(t.TempDir(), "bad.db")
		if err := os.WriteFile(bad, data, 0o600); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "new")
		if err := RestoreSnapshot(testCtx(t), cfg(dir, bad)); err == nil {
			t.Fatal("restore of a corrupt snapshot succeeded")
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("failed restore left %s behind (%v)", dir, err)
		}
	})
	t.Run("missing-fields", func(t *testing.T) {
		err := RestoreSnapshot(testCtx(t), SnapshotRestoreConfig{SnapshotPath: f.snapshot})
		if err == nil || !strings.Contains(err.Error(), "DataDir") {
			t.Fatalf("err %v, want it to name the missing fields", err)
		}
	})
	t.Run("read-revision-no-db", func(t *testing.T) {
		if _, _, err := ReadRevision(t.TempDir()); err == nil {
			t.Fatal("ReadRevision of an empty dir succeeded")
		}
	})
}

// TestReplayCreatesMissingLeases: leases granted after the snapshot are not in its lease
// bucket; with MissingLeaseTTL the restored member knows them and expires their keys.
func TestReplayCreatesMissingLeases(t *testing.T) {
	f := getFixture(t)
	r := restoreFixture(t, f)
	const ttl = 3
	res, err := Replay(testCtx(t), r.dir, &sliceSource{evs: f.events}, ReplayOptions{MissingLeaseTTL: ttl})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if res.LeasesCreated == 0 {
		t.Fatal("no lease created; the fixture should have live keys on leases granted after the snapshot")
	}
	m := r.start(t)
	ctx := testCtx(t)
	created := map[int64]bool{}
	for _, kv := range f.states[f.lastRev] {
		if kv.Lease == 0 {
			continue
		}
		ttlResp, err := m.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil || ttlResp.TTL <= 0 {
			t.Fatalf("lease %x of key %q on the restored member: %+v, %v", kv.Lease, kv.Key, ttlResp, err)
		}
		if ttlResp.GrantedTTL == ttl {
			created[kv.Lease] = true
		}
	}
	if int64(len(created)) != res.LeasesCreated {
		t.Fatalf("member has %d leases with TTL %d, Replay created %d", len(created), ttl, res.LeasesCreated)
	}
	// The created leases expire (nobody keeps them alive) and take their keys with them; the
	// snapshot's own leases (TTL 3600) keep theirs.
	deadline := time.Now().Add(45 * time.Second)
	for {
		resp, err := m.cli.Get(ctx, "", clientv3.WithPrefix())
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var left []string
		for _, kv := range resp.Kvs {
			if created[kv.Lease] {
				left = append(left, string(kv.Key))
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys %q on created leases did not expire", left)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestReplayCancelled stops at a revision boundary when the context ends.
func TestReplayCancelled(t *testing.T) {
	f := getFixture(t)
	r := restoreFixture(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := Replay(ctx, r.dir, &sliceSource{evs: f.events}, ReplayOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if rev, _, _ := ReadRevision(r.dir); rev != f.snapRev || res.ToRevision != f.snapRev {
		t.Fatalf("cancelled replay left the database at %d (result %d), want %d", rev, res.ToRevision, f.snapRev)
	}
}

// TestReplayWritesEtcdsRecords: Replay writes, for every event, the key bucket record the
// source's etcd wrote for it, byte for byte: revision, sub-revision, tombstone mark, and the
// key-value with its create_revision, mod_revision, version and lease. Compared from the
// source's compaction on (the source dropped older records; its compaction left the newest of
// each key, which the snapshot holds too).
func TestReplayWritesEtcdsRecords(t *testing.T) {
	f := getFixture(t)
	r := restoreFixture(t, f)
	if _, err := Replay(testCtx(t), r.dir, &sliceSource{evs: f.events}, ReplayOptions{BatchEvents: 5}); err != nil {
		t.Fatalf("Replay: %v", err)
	}
	want, got := keyRecordsAfter(t, f.sourceDB, f.compactRev), keyRecordsAfter(t, DBPath(r.dir), f.compactRev)
	if len(want) == 0 || len(want) != len(got) {
		t.Fatalf("the source holds %d records after revision %d, the replayed database %d", len(want), f.compactRev, len(got))
	}
	for i := range want {
		if !bytes.Equal(want[i][0], got[i][0]) || !bytes.Equal(want[i][1], got[i][1]) {
			t.Fatalf("record %d: the source has %x = %x, the replay wrote %x = %x", i, want[i][0], want[i][1], got[i][0], got[i][1])
		}
	}
}

// keyRecordsAfter reads the key bucket records of the database at path whose main revision
// is above rev, in order.
func keyRecordsAfter(t *testing.T, path string, rev int64) [][2][]byte {
	t.Helper()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	var recs [][2][]byte
	_ = db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(schema.Key.Name()).Cursor()
		for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, uint64(rev+1))); k != nil; k, v = c.Next() {
			recs = append(recs, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
		}
		return nil
	})
	return recs
}
