package local

import (
	"context"
	"testing"

	"github.com/etcd-steward/steward/internal/restore/restoretest"
	"github.com/etcd-steward/steward/internal/store"
)

// TestRestoreTargetOfTwoClustersSharingAStore: two clusters back up into one store prefix; a
// time-based and a revision-based restore of each resolve to its own timeline and revision,
// though the other cluster's timeline is the store's newest and holds the time.
func TestRestoreTargetOfTwoClustersSharingAStore(t *testing.T) {
	url, cs := restoretest.TwoClusters(t)
	ctx := context.Background()
	s, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, c := range cs {
		for _, opts := range []RestoreOptions{{ToTime: c.Time}, {ToRevision: c.Revision}} {
			r, err := resolveTarget(ctx, s, []uint64{c.ID}, opts)
			if err != nil {
				t.Fatalf("cluster %d, target %+v: %v", i, opts, err)
			}
			if r.Timeline != c.Timeline || r.Target != c.Revision {
				t.Fatalf("cluster %d (timeline %d), target %+v: resolved to revision %d of timeline %d, want revision %d of timeline %d",
					i, c.Timeline, opts, r.Target, r.Timeline, c.Revision, c.Timeline)
			}
		}
	}
}
