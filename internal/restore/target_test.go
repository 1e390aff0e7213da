package restore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
)

// TestPickTimeline: a restore for a cluster reads its own timelines only: the newest of them,
// the one of a time, the newest holding a revision; without a cluster, the timelines of a
// store of one cluster count, and a store of several is refused, naming them; a timeline whose
// newest full snapshot does not vouch for itself is passed over.
func TestPickTimeline(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	full := func(tl uint32, rev int64, at time.Time) backup.Object {
		return backup.Object{Key: backup.FullKey(tl, rev, at), Kind: backup.KindFull, Timeline: tl, FirstRev: rev, LastRev: rev, Created: at}
	}
	delta := func(tl uint32, first, last int64, at time.Time) backup.Object {
		return backup.Object{Key: backup.DeltaKey(tl, first, last), Kind: backup.KindDelta, Timeline: tl, FirstRev: first, LastRev: last, Created: at}
	}
	// Timelines 1 and 2 are this cluster's (IDs 0xa, then 0xc after a restore); 3 is another
	// cluster's on the same prefix, and the newest.
	chain := backup.NewChain([]backup.Object{
		full(1, 10, t0), delta(1, 11, 90, t0.Add(10*time.Minute)),
		full(2, 40, t0.Add(20*time.Minute)), delta(2, 41, 60, t0.Add(30*time.Minute)),
		full(3, 5, t0.Add(40*time.Minute)), delta(3, 6, 500, t0.Add(50*time.Minute)),
	})
	tls := []backup.TimelineInfo{{Timeline: 1, ClusterID: 0xa, Vouched: true}, {Timeline: 2, ClusterID: 0xc, Vouched: true}, {Timeline: 3, ClusterID: 0xb, Vouched: true}}
	// The same store where every timeline is of cluster 0xa, and timeline 3 is planted.
	oneCluster := []backup.TimelineInfo{{Timeline: 1, ClusterID: 0xa, Vouched: true}, {Timeline: 2, ClusterID: 0xa, Vouched: true},
		{Timeline: 3, ClusterID: 0xa, Unvouched: errors.New("it was planted")}}
	own := []uint64{0xa, 0xc}
	tests := []struct {
		name    string
		tls     []backup.TimelineInfo // default: tls
		ids     []uint64
		rev     int64
		at      time.Time
		wantTL  uint32
		wantErr string
	}{
		{name: "the newest of its own, not the store's newest", ids: own, wantTL: 2},
		{name: "no timeline of its own", ids: []uint64{0xd}, wantErr: "file:///s holds no backups of this cluster (cluster IDs d); timelines of other clusters in this store: 1 (cluster a, revisions 10-90), 2 (cluster c, revisions 40-60), 3 (cluster b, revisions 5-500); name one with --timeline"},
		{name: "a time in the old history", ids: own, at: t0.Add(15 * time.Minute), wantTL: 1},
		{name: "a time after the restore", ids: own, at: t0.Add(25 * time.Minute), wantTL: 2},
		{name: "a time only another cluster's timeline holds", ids: own, at: t0.Add(55 * time.Minute), wantTL: 2},
		{name: "a revision of the newest own", ids: own, rev: 50, wantTL: 2},
		{name: "a revision only the older own holds", ids: own, rev: 80, wantTL: 1},
		{name: "a revision only another cluster's holds", ids: own, rev: 300,
			wantErr: "no timeline of this cluster (cluster IDs a, c) in file:///s holds revision 300; this cluster's timelines: 1 (cluster a, revisions 10-90), 2 (cluster c, revisions 40-60); timelines of other clusters in this store that hold it: 3 (cluster b, revisions 5-500); name one with --timeline"},
		{name: "no cluster, several in the store: refused, naming them",
			wantErr: "the backup store holds the timelines of several clusters: cluster a (timelines 1), cluster b (timelines 3), cluster c (timelines 2)"},
		{name: "no cluster, several in the store, for a revision: refused", rev: 50, wantErr: "several clusters"},
		{name: "no cluster, one in the store: its newest that vouches for itself", tls: oneCluster, wantTL: 2},
		{name: "no cluster, one in the store: a time", tls: oneCluster, at: t0.Add(15 * time.Minute), wantTL: 1},
		{name: "its own, newest planted: passed over", tls: oneCluster, ids: own, wantTL: 2},
		{name: "nothing vouches for itself", tls: oneCluster[2:], wantErr: "no timeline of file:///s can be restored: timeline 3: it was planted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			infos := tt.tls
			if infos == nil {
				infos = tls
			}
			tl, _, err := pickTimeline(backup.IndexOf(chain), infos, tt.ids, tt.rev, tt.at, "file:///s")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("timeline %d, err %v; want an error saying %q", tl, err, tt.wantErr)
				}
				return
			}
			if err != nil || tl != tt.wantTL {
				t.Fatalf("timeline %d (%v), want %d", tl, err, tt.wantTL)
			}
		})
	}
}
