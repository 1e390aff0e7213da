package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/backup/retention"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/testutil"
)

func TestBackupReady(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	const period = 5 * time.Second
	current := func(ago time.Duration, wasReady bool) cluster.BackupStatus {
		return cluster.BackupStatus{Leader: true, Ready: wasReady, Timeline: 2, CurrentRevision: 42, CurrentAt: now.Add(-ago)}
	}
	tests := []struct {
		name   string
		s      cluster.BackupStatus
		ready  bool
		reason string // a substring of the reason when not ready
	}{
		{"not the leader", cluster.BackupStatus{CurrentAt: now}, false, "does not lead"},
		{"no timeline chosen yet", cluster.BackupStatus{Leader: true}, false, "own timeline in the store is not known yet"},
		{"the member's history restarted: ready at once false, whatever was stored before",
			cluster.BackupStatus{Leader: true, Ready: true, TimelineReason: "delta capture: the member's history restarted: the member's revision 90 is below revision 100"},
			false, "not known yet: delta capture: the member's history restarted: the member's revision 90 is below revision 100"},
		{"nothing stored on the member's timeline", cluster.BackupStatus{Leader: true, Timeline: 3, TimelineReason: "timeline 3 starts: the store holds no timeline of cluster a"},
			false, "nothing of the member's history is stored on timeline 3 yet (timeline 3 starts: the store holds no timeline of cluster a)"},
		{"current", current(time.Second, false), true, ""},
		{"between 2 and 3 periods, was ready: stays ready", current(12*time.Second, true), true, ""},
		{"between 2 and 3 periods, was not ready: stays not ready", current(12*time.Second, false), false, "not yet back within 10s"},
		{"older than 3 periods", current(20*time.Second, true), false, "revision 42 on timeline 2 was the member's revision 20s ago, more than 15s"},
		{"older than 3 periods, with the last error", func() cluster.BackupStatus { s := current(time.Minute, true); s.LastError = "store down"; return s }(), false, "last error: store down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready, reason := backupReady(tt.s, now, period)
			if ready != tt.ready || (ready && reason != "") || (!ready && !strings.Contains(reason, tt.reason)) {
				t.Fatalf("backupReady = %t %q; want %t and a reason with %q", ready, reason, tt.ready, tt.reason)
			}
		})
	}
}

func TestFullFirst(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 30, 0, 0, time.UTC)
	chain := func(keys ...string) backup.Chain {
		var objs []backup.Object
		for _, k := range keys {
			o, err := backup.ParseKey(k)
			if err != nil {
				t.Fatal(err)
			}
			objs = append(objs, o)
		}
		return backup.NewChain(objs)
	}
	recent, old := now.Add(-10*time.Minute), now.Add(-2*time.Hour)
	for _, tc := range []struct {
		name   string
		p      snapshotter.Placed
		reason string // "" when no full snapshot is needed
	}{
		{"a new timeline starts with one",
			snapshotter.Placed{Placement: backup.Placement{Timeline: 2, New: true, Reason: "timeline 2 starts: revision below"}, Chain: chain(backup.FullKey(1, 100, recent))},
			"timeline 2 starts: revision below"},
		{"a continued timeline with a recent full snapshot and no hole",
			snapshotter.Placed{Placement: backup.Placement{Timeline: 2, Resume: 300}, Chain: chain(backup.FullKey(1, 500, recent), backup.FullKey(2, 200, recent), backup.DeltaKey(2, 201, 300))},
			""},
		{"a continued timeline without a full snapshot (another timeline's does not count)",
			snapshotter.Placed{Placement: backup.Placement{Timeline: 2, Resume: 300}, Chain: chain(backup.FullKey(1, 100, recent), backup.DeltaKey(2, 201, 300))},
			"timeline 2 holds no full snapshot"},
		{"the newest full snapshot is older than the schedule: taken beside the deltas, not first",
			snapshotter.Placed{Placement: backup.Placement{Timeline: 1, Resume: 300}, Chain: chain(backup.FullKey(1, 200, old), backup.DeltaKey(1, 201, 300))},
			""},
		{"a hole after the newest full snapshot",
			snapshotter.Placed{Placement: backup.Placement{Timeline: 1, Resume: 300}, Chain: chain(backup.FullKey(1, 200, recent), backup.DeltaKey(1, 251, 300))},
			"the chain has a hole"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, reason := fullFirst(tc.p)
			if (reason == "") != (tc.reason == "") || !strings.Contains(reason, tc.reason) {
				t.Fatalf("fullFirst = %q, want %q", reason, tc.reason)
			}
		})
	}
}

func TestAuthFullReason(t *testing.T) {
	for _, tc := range []struct {
		name       string
		atFull     uint64
		known      bool
		now        uint64
		wantReason string // "" when no full snapshot is needed
	}{
		{"auth never changed, newest full snapshot not ours", 0, false, 1, ""},
		{"auth unchanged since our full snapshot", 4, true, 4, ""},
		{"a user, role or password changed since our full snapshot", 4, true, 5, "auth state changed (auth revision 5; 4 when"},
		{"auth changed at some point, and the newest full snapshot is not ours", 0, false, 7, "did not take the newest full snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := authFullReason(tc.atFull, tc.known, tc.now)
			if (got == "") != (tc.wantReason == "") || !strings.Contains(got, tc.wantReason) {
				t.Fatalf("authFullReason = %q, want %q", got, tc.wantReason)
			}
		})
	}
}

func TestCompactionReason(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		revs, bytes, maxRevs, maxBy int64
		want                        string
	}{
		{name: "below both limits", revs: 99, bytes: 99, maxRevs: 100, maxBy: 100},
		{name: "revisions reach the limit", revs: 100, bytes: 1, maxRevs: 100, maxBy: 100, want: "span 100 revisions (limit 100)"},
		{name: "bytes reach the limit", revs: 1, bytes: 2 << 20, maxRevs: 100, maxBy: 1 << 20, want: "hold 2.0 MiB (limit 1.0 MiB)"},
		{name: "no limits", revs: 1 << 40, bytes: 1 << 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := compactionReason(tc.revs, tc.bytes, tc.maxRevs, tc.maxBy)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("compactionReason = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestFullSnapshotCompactsTheChain: with a limit on the revisions the deltas may span, full
// snapshots follow the writes, and a restore never replays more than the limit and a delta.
func TestFullSnapshotCompactsTheChain(t *testing.T) {
	const limit, bursts = 40, 5
	s := openTestStore(t)
	_, cli, ep := testutil.EmbeddedEtcd(t)
	a, _ := startBackupsWith(t, Config{FullAfterRevisions: limit}, s, ep)
	waitStored(t, a, cli, ep, 1)
	for b := range bursts { // each burst alone reaches the limit
		for i := range limit {
			if _, err := cli.Put(context.Background(), fmt.Sprintf("k%d-%03d", b, i), "v"); err != nil {
				t.Fatal(err)
			}
		}
		waitStored(t, a, cli, ep, 1)
	}
	testutil.Eventually(t, time.Minute, "full snapshots taken as the deltas reached the limit", func() error {
		c, err := backup.ListChain(context.Background(), s)
		if err != nil {
			return err
		}
		// The first, and at least every other burst's: a full snapshot taken during a burst
		// counts the rest of that burst towards the next.
		if len(c.Fulls) < 1+bursts/2 {
			return fmt.Errorf("%d full snapshots after %d bursts of %d revisions with a limit of %d", len(c.Fulls), bursts, limit, limit)
		}
		newest := c.Fulls[len(c.Fulls)-1]
		var widest int64
		for _, d := range c.Deltas {
			widest = max(widest, d.LastRev-d.FirstRev+1)
		}
		if left := c.NewestRevision() - newest.FirstRev; left > limit+widest {
			return fmt.Errorf("a restore of the newest revision replays %d revisions after %s, more than the limit %d and a delta (%d)", left, newest.Key, limit, widest)
		}
		return nil
	})
}

// TestRecoverableWindow: the backup leader reports the window of its cluster's own timeline as
// the store's index gives it: from the oldest full snapshot to the newest stored revision,
// growing with each delta, starting later once retention deleted the older full snapshot,
// dropped when the session ends, and the same when a new session reads it from the store alone.
func TestRecoverableWindow(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	_, cli, ep := testutil.EmbeddedEtcd(t)
	st, err := cli.Status(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	clusterID := fmt.Sprintf("%x", st.Header.ClusterId)
	put := func(n int) {
		for i := range n {
			if _, err := cli.Put(ctx, fmt.Sprintf("k%d", i), "v"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// matches checks the reported window against the store's index and the member's revision.
	matches := func(a *Agent) error {
		w := a.Status().Recoverable
		ix, err := backup.ReadIndex(ctx, s)
		if err != nil {
			return err
		}
		ti, _ := ix.Timeline(1)
		want, ok := ti.Window()
		st, err := cli.Status(ctx, ep)
		switch {
		case err != nil:
			return err
		case !ok || w == nil:
			return fmt.Errorf("window %+v; the index's %+v (%t)", w, want, ok)
		case w.Timeline != 1 || w.ClusterID != clusterID || w.FirstRevision != want.FirstRevision || !w.FirstTime.Equal(want.FirstTime) ||
			w.LastRevision != want.LastRevision || w.LastRevision != st.Header.Revision:
			return fmt.Errorf("window %+v; want timeline 1 of cluster %s, as the index says (%+v), up to the member's revision %d", w, clusterID, want, st.Header.Revision)
		}
		return nil
	}
	a, stop := startBackupsWith(t, Config{Retention: retention.Policy{Name: retention.Limit, Limit: 1}}, s, ep)
	waitStored(t, a, cli, ep, 1)
	first := a.Status().Recoverable
	if first == nil || first.FirstRevision != a.Status().LatestFullRevision {
		t.Fatalf("window %+v; want it to start at the first full snapshot, revision %d", first, a.Status().LatestFullRevision)
	}
	put(10)
	waitStored(t, a, cli, ep, 1)
	testutil.Eventually(t, 10*time.Second, "the window reaches the newest delta", func() error { return matches(a) })

	full, err := a.RequestFull(ctx)
	if err != nil {
		t.Fatal(err)
	}
	put(10)
	waitStored(t, a, cli, ep, 1)
	testutil.Eventually(t, 10*time.Second, "the window starts at the full snapshot retention kept", func() error {
		if w := a.Status().Recoverable; w == nil || w.FirstRevision != full.Revision {
			return fmt.Errorf("window %+v; want it to start at revision %d", w, full.Revision)
		}
		return matches(a)
	})

	stop()
	if w := a.Status().Recoverable; w != nil {
		t.Fatalf("window %+v after the session ended: another leader may have written since", w)
	}
	b, _ := startBackupsWith(t, Config{}, s, ep)
	waitStored(t, b, cli, ep, 1)
	testutil.Eventually(t, 10*time.Second, "a new session reads the same window from the store", func() error { return matches(b) })
}
