package agent

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
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

// These tests run the sidecar's backup loop against real etcd members whose history restarts
// below what the store holds, or that share a store with another cluster. Before timelines,
// each of them left one chain holding two histories.

const testDeltaPeriod = 300 * time.Millisecond

func openTestStore(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), "file://"+t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startBackups runs the backup loop of the sidecar of the member at ep until stop is called
// (or the test ends).
func startBackups(t *testing.T, s *store.Store, ep string) (a *Agent, stop func()) {
	t.Helper()
	return startBackupsWith(t, Config{}, s, ep)
}

// startBackupsWith is startBackups with cfg, whose store, delta period and check interval it
// sets.
func startBackupsWith(t *testing.T, cfg Config, s *store.Store, ep string) (a *Agent, stop func()) {
	t.Helper()
	return startBackupsDialing(t, cfg, etcdutil.Dialer{}, s, ep)
}

// startBackupsDialing is startBackupsWith whose clients d makes.
func startBackupsDialing(t *testing.T, cfg Config, d etcdutil.Dialer, s *store.Store, ep string) (a *Agent, stop func()) {
	t.Helper()
	return startBackupsOf(t, cfg, d, s, ep, NewMetrics(prometheus.NewRegistry()))
}

// startBackupsMetrics is startBackupsWith publishing in m.
func startBackupsMetrics(t *testing.T, cfg Config, s *store.Store, ep string, m *Metrics) (a *Agent, stop func()) {
	t.Helper()
	return startBackupsOf(t, cfg, etcdutil.Dialer{}, s, ep, m)
}

func startBackupsOf(t *testing.T, cfg Config, d etcdutil.Dialer, s *store.Store, ep string, m *Metrics) (a *Agent, stop func()) {
	t.Helper()
	cfg.StoreURL, cfg.CheckInterval = s.String(), 100*time.Millisecond
	if cfg.DeltaPeriod == 0 {
		cfg.DeltaPeriod = testDeltaPeriod
	}
	a, err := New(cfg, d, ep, s, zap.NewNop(), m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return a, stop
}

// waitStored waits until the loop reports BackupReady on timeline tl with everything the
// member at ep has stored.
func waitStored(t *testing.T, a *Agent, cli *clientv3.Client, ep string, tl uint32) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("the member's history stored on timeline %d", tl), func() error {
		st, err := cli.Status(context.Background(), ep)
		if err != nil {
			return err
		}
		b := a.Status()
		if !b.Ready || b.Timeline != tl || b.CurrentRevision < st.Header.Revision {
			return fmt.Errorf("member at revision %d; backups: ready %t (%s), timeline %d, stored up to %d", st.Header.Revision, b.Ready, b.ReadyReason, b.Timeline, b.CurrentRevision)
		}
		return nil
	})
}

// restored restores o (Store, Timeline, target) into a new data dir and returns what a member
// started on it holds, and the restore's result.
func restored(t *testing.T, o restore.Options) (map[string]testutil.KeyState, int64, restore.Result) {
	t.Helper()
	peer := fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t))
	o.DataDir = filepath.Join(t.TempDir(), "restored")
	o.Name, o.InitialCluster, o.PeerURLs = "test", "test="+peer, []string{peer}
	res, err := restore.Restore(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	_, cli, _, stop := testutil.EtcdOn(t, o.DataDir)
	defer stop()
	kvs, rev := testutil.State(t, cli)
	return kvs, rev, res
}

func keysOf(t *testing.T, s *store.Store, prefix string) []string {
	t.Helper()
	infos, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, i := range infos {
		keys = append(keys, i.Key)
	}
	return keys
}

// checkTimelines checks that the store holds timelines 1..n, each of one cluster from its
// first object to its last, and that every timeline verifies.
func checkTimelines(t *testing.T, s *store.Store, n int) backup.Chain {
	t.Helper()
	ctx := context.Background()
	c, err := backup.ListChain(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Timelines(); len(got) != n {
		t.Fatalf("timelines %v, want 1-%d", got, n)
	}
	for _, tl := range c.Timelines() {
		clusters := map[uint64]bool{}
		for _, o := range c.Timeline(tl).Objects() {
			h, or, err := backup.OpenObject(ctx, s, o.Key)
			if err != nil {
				t.Fatal(err)
			}
			or.Close()
			clusters[h.ClusterID] = true
		}
		if len(clusters) != 1 {
			t.Fatalf("timeline %d holds objects of clusters %v", tl, slices.Collect(maps.Keys(clusters)))
		}
	}
	rep, err := backup.Verify(ctx, s, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %v %+v", err, rep)
	}
	return c
}

// TestBackupsOfASurvivorBehindTheStoreStartANewTimeline: a member recovered from a survivor
// that is behind the store (same cluster ID, lower revision) starts timeline 2 with a full
// snapshot; timeline 1 is not appended to; the newest restore gives the survivor's history,
// written past the old store's newest revision, not a mix of the two. Also when the survivor
// has passed the store's newest revision before its backups start (then the events of that
// revision tell the histories apart).
func TestBackupsOfASurvivorBehindTheStoreStartANewTimeline(t *testing.T) {
	for _, passedFirst := range []bool{false, true} {
		t.Run(map[bool]string{false: "behind", true: "passed the store before backing up"}[passedFirst], func(t *testing.T) {
			testSurvivorBehindTheStore(t, passedFirst)
		})
	}
}

func testSurvivorBehindTheStore(t *testing.T, passedFirst bool) {
	s := openTestStore(t)
	dir, survivorDir := filepath.Join(t.TempDir(), "m"), filepath.Join(t.TempDir(), "survivor")
	_, cli, _, stop := testutil.EtcdOn(t, dir)
	testutil.Write(t, cli, "both", 20)
	stop()
	testutil.CopyDir(t, dir, survivorDir) // the survivor stops here

	_, cli, ep, stop := testutil.EtcdOn(t, dir)
	a, stopBackups := startBackups(t, s, ep)
	old := testutil.Write(t, cli, "lost", 40)
	waitStored(t, a, cli, ep, 1)
	stopBackups()
	stop()
	timeline1 := keysOf(t, s, backup.LayoutPrefix)

	_, cli, ep, _ = testutil.EtcdOn(t, survivorDir)
	if passedFirst {
		if rev := testutil.Write(t, cli, "survivor-first", 60); rev <= old {
			t.Fatalf("the survivor's history (revision %d) did not pass the old one's (%d)", rev, old)
		}
	}
	a, _ = startBackups(t, s, ep)
	waitStored(t, a, cli, ep, 2)
	if st := a.Status(); st.TimelineReason == "" || st.LatestFullKey == "" {
		t.Fatalf("timeline 2 started without a reason or a full snapshot: %+v", st)
	}
	if rev := testutil.Write(t, cli, "survivor", 60); rev <= old {
		t.Fatalf("the survivor's history (revision %d) did not pass the old one's (%d)", rev, old)
	}
	waitStored(t, a, cli, ep, 2)
	want, wantRev := testutil.State(t, cli)

	checkTimelines(t, s, 2)
	if got := keysOf(t, s, backup.TimelineDir(1)); !slices.Equal(got, timeline1) {
		t.Fatalf("timeline 1 changed after timeline 2 started:\n got %v\nwant %v", got, timeline1)
	}
	got, gotRev, res := restored(t, restore.Options{Store: s})
	if res.Timeline != 2 || gotRev != wantRev {
		t.Fatalf("restore of the newest: timeline %d, revision %d; want timeline 2, revision %d", res.Timeline, gotRev, wantRev)
	}
	testutil.SameState(t, "restore of the newest revision", got, want)
}

// TestPointInTimeRestoreThenNewWritesStartATimeline: a cluster restored to an older revision
// (here with the same member, peer URL and token, so even its cluster ID is the old one) and
// backed up into the same store starts timeline 2; the writes after the restore are on it,
// and timeline 1 still restores the history before the restore.
func TestPointInTimeRestoreThenNewWritesStartATimeline(t *testing.T) {
	s := openTestStore(t)
	e, cli, ep, stop := testutil.EtcdOn(t, filepath.Join(t.TempDir(), "m"))
	peer := e.Config().AdvertisePeerUrls[0].String()
	a, stopBackups := startBackups(t, s, ep)
	mid := testutil.Write(t, cli, "before", 30)
	end := testutil.Write(t, cli, "after", 30)
	waitStored(t, a, cli, ep, 1)
	before, _ := testutil.State(t, cli)
	stopBackups()
	stop()

	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := restore.Restore(context.Background(), restore.Options{Store: s, DataDir: dir, ToRevision: mid,
		Name: "test", InitialCluster: "test=" + peer, PeerURLs: []string{peer}, InitialClusterToken: "etcd-cluster"}); err != nil {
		t.Fatal(err)
	}
	_, cli, ep, _ = testutil.EtcdOn(t, dir)
	a, _ = startBackups(t, s, ep)
	waitStored(t, a, cli, ep, 2)
	if rev := testutil.Write(t, cli, "new", 50); rev <= end {
		t.Fatalf("the new writes (to revision %d) did not pass the old history (%d)", rev, end)
	}
	waitStored(t, a, cli, ep, 2)
	want, wantRev := testutil.State(t, cli)

	checkTimelines(t, s, 2)
	got, gotRev, res := restored(t, restore.Options{Store: s})
	if res.Timeline != 2 || gotRev != wantRev {
		t.Fatalf("restore of the newest: timeline %d, revision %d; want timeline 2, revision %d", res.Timeline, gotRev, wantRev)
	}
	testutil.SameState(t, "restore of the newest revision", got, want)
	got, gotRev, res = restored(t, restore.Options{Store: s, Timeline: 1})
	if res.Timeline != 1 || gotRev != end {
		t.Fatalf("restore of timeline 1: timeline %d, revision %d; want timeline 1, revision %d", res.Timeline, gotRev, end)
	}
	testutil.SameState(t, "restore of timeline 1", got, before)
}

// TestTwoClustersOnOnePrefixKeepTheirOwnTimelines: two clusters given the same store each write
// a timeline of their own, and each restores to its own data.
func TestTwoClustersOnOnePrefixKeepTheirOwnTimelines(t *testing.T) {
	s := openTestStore(t)
	_, cliA, epA := testutil.EmbeddedEtcd(t)
	_, cliB, epB := testutil.EmbeddedEtcd(t)
	a, _ := startBackups(t, s, epA)
	waitStored(t, a, cliA, epA, 1)
	b, _ := startBackups(t, s, epB)
	waitStored(t, b, cliB, epB, 2)
	testutil.Write(t, cliA, "a", 80)
	testutil.Write(t, cliB, "b", 30)
	waitStored(t, a, cliA, epA, 1)
	waitStored(t, b, cliB, epB, 2)
	wantA, revA := testutil.State(t, cliA)
	wantB, revB := testutil.State(t, cliB)

	checkTimelines(t, s, 2)
	for _, tc := range []struct {
		tl   uint32
		want map[string]testutil.KeyState
		rev  int64
	}{{1, wantA, revA}, {2, wantB, revB}} {
		got, gotRev, _ := restored(t, restore.Options{Store: s, Timeline: tc.tl})
		if gotRev != tc.rev {
			t.Fatalf("restore of timeline %d: revision %d, want %d", tc.tl, gotRev, tc.rev)
		}
		testutil.SameState(t, fmt.Sprintf("restore of timeline %d", tc.tl), got, tc.want)
	}
}
