package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/prometheus/client_golang/prometheus"
)

func TestDeltasToCheck(t *testing.T) {
	at := time.Unix(1700000000, 0)
	obj := func(key string) backup.Object {
		o, err := backup.ParseKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	for _, tc := range []struct {
		name string
		keys []string
		want []string
	}{
		{"no delta", []string{backup.FullKey(1, 100, at)}, nil},
		{"the deltas past the newest full snapshot, not those it covers",
			[]string{backup.FullKey(1, 10, at), backup.DeltaKey(1, 11, 50), backup.FullKey(1, 60, at), backup.DeltaKey(1, 51, 70), backup.DeltaKey(1, 71, 90)},
			[]string{backup.DeltaKey(1, 51, 70), backup.DeltaKey(1, 71, 90)}},
		{"no full snapshot: every delta", []string{backup.DeltaKey(1, 11, 50), backup.DeltaKey(1, 51, 70)},
			[]string{backup.DeltaKey(1, 11, 50), backup.DeltaKey(1, 51, 70)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []backup.Object
			for _, k := range tc.keys {
				objs = append(objs, obj(k))
			}
			var got []string
			for _, o := range deltasToCheck(backup.NewChain(objs)) {
				got = append(got, o.Key)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("deltasToCheck = %v, want %v", got, tc.want)
			}
		})
	}
}

// damage flips a byte in the middle of the file store's object key.
func damage(t *testing.T, s *store.Store, key string) {
	t.Helper()
	path := filepath.Join(strings.TrimPrefix(s.String(), "file://"), key)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	o, _ := backup.ParseKey(key)
	if err := backup.VerifyObject(context.Background(), s, o); !errors.Is(err, backup.ErrCorrupt) {
		t.Fatalf("damaged %s reads back with %v", key, err)
	}
}

// chainWithMiddleDelta backs up the member at ep in several deltas after the full snapshot and
// returns a delta from the middle of them.
func chainWithMiddleDelta(t *testing.T, s *store.Store, cli *clientv3.Client, ep string) backup.Object {
	t.Helper()
	a, stop := startBackups(t, s, ep)
	waitStored(t, a, cli, ep, 1)
	for i := range 3 {
		testutil.Write(t, cli, fmt.Sprint("batch", i), 20)
		waitStored(t, a, cli, ep, 1)
	}
	stop()
	ds := deltasToCheck(checkTimelines(t, s, 1))
	if len(ds) < 3 {
		t.Fatalf("%d deltas after the full snapshot, want 3 or more", len(ds))
	}
	return ds[len(ds)/2]
}

// TestDamagedDeltaInTheMiddleIsRecaptured: a delta in the middle of the chain found damaged
// when backups start is written again from the member's history, and the chain restores to
// the member's state.
func TestDamagedDeltaInTheMiddleIsRecaptured(t *testing.T) {
	s := openTestStore(t)
	_, cli, ep := testutil.EmbeddedEtcd(t)
	mid := chainWithMiddleDelta(t, s, cli, ep)
	damage(t, s, mid.Key)

	a, _ := startBackups(t, s, ep)
	testutil.Eventually(t, 30*time.Second, mid.Key+" written again", func() error {
		return backup.VerifyObject(context.Background(), s, mid)
	})
	waitStored(t, a, cli, ep, 1)
	want, rev := testutil.State(t, cli)
	got, gotRev, _ := restored(t, restore.Options{Store: s})
	if gotRev != rev {
		t.Fatalf("restored revision %d, want %d", gotRev, rev)
	}
	testutil.SameState(t, "restore after the recapture", got, want)
}

// TestDamagedDeltaCompactedAwayTakesAFullSnapshot: a damaged delta whose revisions the member
// compacted away cannot be captured again: the gap is reported and a full snapshot restarts
// the chain.
func TestDamagedDeltaCompactedAwayTakesAFullSnapshot(t *testing.T) {
	s := openTestStore(t)
	_, cli, ep := testutil.EmbeddedEtcd(t)
	mid := chainWithMiddleDelta(t, s, cli, ep)
	damage(t, s, mid.Key)
	_, rev := testutil.State(t, cli)
	if _, err := cli.Compact(context.Background(), rev); err != nil {
		t.Fatal(err)
	}

	a, _ := startBackups(t, s, ep)
	testutil.Eventually(t, 30*time.Second, "the gap reported and a full snapshot at the member's revision", func() error {
		st := a.Status()
		if !strings.Contains(st.LastError, mid.Key) || !strings.Contains(st.LastError, "lost from the backups") {
			return fmt.Errorf("last error %q", st.LastError)
		}
		if st.LatestFullRevision < rev {
			return fmt.Errorf("newest full snapshot at revision %d, want %d or later", st.LatestFullRevision, rev)
		}
		return nil
	})
	waitStored(t, a, cli, ep, 1)
	want, wantRev := testutil.State(t, cli)
	got, gotRev, _ := restored(t, restore.Options{Store: s})
	if gotRev != wantRev {
		t.Fatalf("restored revision %d, want %d", gotRev, wantRev)
	}
	testutil.SameState(t, "restore from the new full snapshot", got, want)
}

// TestDeltaThatDoesNotReadBackIsWrittenAgain: a delta the store damaged on upload is read
// back, found damaged and written again before it counts as stored: the chain verifies.
func TestDeltaThatDoesNotReadBackIsWrittenAgain(t *testing.T) {
	s3 := testutil.FakeS3(t, "backups")
	s, err := store.Open(context.Background(), s3.StoreURL("backups", "p"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	_, cli, ep := testutil.EmbeddedEtcd(t)
	a, stop := startBackups(t, s, ep)
	waitStored(t, a, cli, ep, 1)
	s3.CorruptNextUpload("/delta/")
	testutil.Write(t, cli, "after", 30)
	waitStored(t, a, cli, ep, 1)
	stop()
	if st := a.Status(); st.Failures == 0 || !strings.Contains(st.LastError, "does not read back") {
		t.Fatalf("backup status %+v: want the damaged upload reported", st)
	}
	chain := checkTimelines(t, s, 1)
	for _, o := range chain.Objects() {
		if err := backup.VerifyObject(context.Background(), s, o); err != nil {
			t.Fatalf("%s: %v", o.Key, err)
		}
	}
}

func TestStoredThroughFull(t *testing.T) {
	for _, tc := range []struct {
		name          string
		first         bool
		current, full int64
		want          bool
	}{
		{"the timeline's first object", true, 0, 5000, true},
		{"right after what is stored", false, 51, 52, true},
		{"at what is stored (an idle cluster)", false, 52, 52, true},
		{"past revisions the deltas still hold", false, 1, 52, false},
		{"a new session, nothing known stored yet", false, 0, 52, false},
		{"behind what is stored", false, 60, 52, false},
	} {
		if got := storedThroughFull(tc.first, tc.current, tc.full); got != tc.want {
			t.Errorf("%s: storedThroughFull(%t, %d, %d) = %t, want %t", tc.name, tc.first, tc.current, tc.full, got, tc.want)
		}
	}
}

// TestStoredRevisionWaitsForTheDeltas: a full snapshot taken while the delta capture still
// holds the revisions before it does not make them "stored": the revision the status (and the
// delta-snapshot Lease, which a restore in place waits on) calls stored is always one the
// store can restore to, with every revision below it.
func TestStoredRevisionWaitsForTheDeltas(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	_, cli, ep := testutil.EmbeddedEtcd(t)
	cfg := Config{StoreURL: s.String(), DeltaPeriod: 2 * time.Second, CheckInterval: 100 * time.Millisecond}
	a, err := New(cfg, etcdutil.Dialer{}, ep, s, zap.NewNop(), NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); a.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testutil.Eventually(t, 30*time.Second, "the first full snapshot", func() error {
		if st := a.Status(); st.CurrentRevision == 0 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	for round := range 3 {
		from := testutil.Write(t, cli, fmt.Sprint("round", round), 1)
		testutil.Write(t, cli, fmt.Sprint("round", round), 20)
		res, err := a.RequestFull(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stored := a.Status().CurrentRevision
		ix, err := backup.ReadIndex(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		ti, _ := ix.Timeline(1)
		ok := stored < from // not yet stored: nothing claimed
		for _, r := range ti.Coverage() {
			ok = ok || r.From <= from && stored <= r.To
		}
		if !ok {
			t.Fatalf("round %d: status says revisions up to %d are stored (full snapshot at %d), but the store restores %v: not every revision from %d", round, stored, res.Revision, ti.Coverage(), from)
		}
	}
}

// TestHoleBelowNewestFullIsFilled: the deltas just below the newest full snapshot lost (as when
// the backup leader that stored the full snapshot beside its deltas is lost before it flushed
// them): the next session captures those revisions again from the member, and every revision
// restores.
func TestHoleBelowNewestFullIsFilled(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	_, cli, ep := testutil.EmbeddedEtcd(t)
	a, stop := startBackups(t, s, ep)
	waitStored(t, a, cli, ep, 1)
	holeFrom := testutil.Write(t, cli, "before", 20) + 1
	waitStored(t, a, cli, ep, 1)
	testutil.Write(t, cli, "lost", 20)
	waitStored(t, a, cli, ep, 1)
	full, err := a.RequestFull(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	// Remove every delta holding a revision from holeFrom on, below the full snapshot.
	for _, key := range keysOf(t, s, "v1/timeline/0000000001/delta/") {
		o, err := backup.ParseKey(key)
		if err != nil {
			t.Fatal(err)
		}
		if o.LastRev >= holeFrom && o.FirstRev < full.Revision {
			if err := s.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
	}
	covers := func(rev int64) error {
		ix, err := backup.ReadIndex(ctx, s)
		if err != nil {
			return err
		}
		ti, _ := ix.Timeline(1)
		for _, r := range ti.Coverage() {
			if r.From <= rev && rev <= r.To {
				return nil
			}
		}
		return fmt.Errorf("revision %d is in no backup: coverage %v", rev, ti.Coverage())
	}
	if covers(holeFrom) == nil {
		t.Fatalf("revision %d still covered after its delta was removed: nothing to test", holeFrom)
	}

	a, _ = startBackups(t, s, ep)
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("revisions %d-%d captured again", holeFrom, full.Revision-1), func() error {
		if err := covers(holeFrom); err != nil {
			return err
		}
		return covers(full.Revision - 1)
	})
	waitStored(t, a, cli, ep, 1)
	at := holeFrom + 5
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(at))
	if err != nil {
		t.Fatal(err)
	}
	got, gotRev, _ := restored(t, restore.Options{Store: s, ToRevision: at})
	if gotRev != at || len(got) != len(resp.Kvs) {
		t.Fatalf("restored revision %d with %d keys, want %d with %d", gotRev, len(got), at, len(resp.Kvs))
	}
	for _, kv := range resp.Kvs {
		if k := got[string(kv.Key)]; k.Value != string(kv.Value) || k.Mod != kv.ModRevision {
			t.Errorf("restored at revision %d: %s = %+v, want %q (mod %d)", at, kv.Key, k, kv.Value, kv.ModRevision)
		}
	}
}
