package restore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
)

// TimelineAt is the timeline a restore to time t reads: the newest timeline whose time range
// holds t, else the newest that began before t (t is after its end), else the newest. A
// timeline begins when its oldest full snapshot's second ended (see RevisionAt) and ends with
// its newest object (a delta's store time: about when it was written).
//
// A timeline that starts while an older one still runs (a restore, a recovery) holds the
// history from then on, so the newest one that holds t wins; where two clusters share a
// prefix, name the timeline instead.
func TimelineAt(ix backup.Index, t time.Time) uint32 {
	var began uint32
	for i := len(ix.Timelines) - 1; i >= 0; i-- {
		tc := ix.Timelines[i]
		if len(tc.Fulls) == 0 {
			continue
		}
		start := tc.Fulls[0].ProvenAt()
		if start.After(t) {
			continue
		}
		end := start
		if tc.To.After(end) {
			end = tc.To
		}
		if !t.After(end) {
			return tc.Timeline
		}
		if began == 0 {
			began = tc.Timeline
		}
	}
	if began != 0 {
		return began
	}
	return ix.NewestTimeline()
}

// deltasAround keeps the deltas of timeline ti that RevisionAt may pick for time t: those
// reaching past the newest full snapshot made by t, and starting before the second full
// snapshot begun after t (a delta made by t was written before a snapshot begun after it; one
// snapshot more allows for the clocks of two leaders). A month of deltas is not read for
// one period's worth.
func deltasAround(ti backup.TimelineIndex, t time.Time) func(backup.Object) bool {
	var lo int64
	hi := int64(1<<63 - 2)
	after := 0
	for _, f := range ti.Fulls {
		if !f.ProvenAt().After(t) {
			lo = max(lo, f.FirstRev)
		} else if f.Created.After(t) {
			if after++; after == 2 {
				hi = f.FirstRev
				break
			}
		}
	}
	return backup.DeltasBetween(lo, hi)
}

// RevisionAt finds the revision to restore for a point in time t: the newest revision that the
// backups of chain c, of one timeline, prove existed at t. Events carry no time; what is known
// is when objects were made:
//
//   - a delta's header records when it was written (flushed), after all of its events had been
//     committed, so its last revision existed at that time;
//   - a full snapshot's name records, to the second, when it began; the revision in its name
//     was read from the member right then, so it counts from the end of that second.
//
// So RevisionAt returns the newest revision among the deltas created at or before t and the
// full snapshots whose second ended at or before t, and the object that proves it. The state
// at t may include later revisions, up to those of the next object (one delta period, 5 s by
// default); they are not restored because nothing shows they were committed by t. Times are
// the writing member's clock.
//
// Creation times do not grow with revisions: at a handover the new backup leader starts from
// what the store holds while the old one still captures, and the old one's last delta may be
// stored after the new one's first. So delta headers are read newest revisions first, a batch
// at a time, until a delta made by t is found or no delta left could beat the answer: a restore
// to a recent time reads a few headers, one to an old time reads at most the deltas it would
// replay anyway.
func RevisionAt(ctx context.Context, s *store.Store, c backup.Chain, t time.Time) (int64, backup.Object, error) {
	var best backup.Object
	var rev int64
	for _, f := range c.Fulls {
		if !f.ProvenAt().After(t) && f.FirstRev > rev {
			rev, best = f.FirstRev, f
		}
	}
	ds := slices.Clone(c.Deltas)
	slices.SortFunc(ds, func(a, b backup.Object) int { return cmp.Compare(b.LastRev, a.LastRev) })
	for len(ds) > 0 && ds[0].LastRev > rev {
		batch := ds[:min(len(ds), headerBatch)]
		ds = ds[len(batch):]
		created, err := createdTimes(ctx, s, batch)
		if err != nil {
			return 0, backup.Object{}, fmt.Errorf("restore to %s: %w", t.Format(time.RFC3339Nano), err)
		}
		found := false
		for i, d := range batch { // newest revision first: the first made by t is the answer
			if !created[i].After(t) && d.LastRev > rev {
				rev, best, found = d.LastRev, d, true
				break
			}
		}
		if found {
			break
		}
	}
	if rev == 0 {
		msg := "the store holds no backups"
		if len(c.Fulls) > 0 {
			f := c.Fulls[0]
			msg = fmt.Sprintf("the oldest full snapshot %s was taken at %s", f.Key, f.Created.Format(time.RFC3339))
		}
		return 0, backup.Object{}, fmt.Errorf("restore to %s: %w: no backup was made by then; %s", t.Format(time.RFC3339Nano), ErrOutOfRange, msg)
	}
	return rev, best, nil
}

// headerBatch is how many delta headers RevisionAt reads at once.
const headerBatch = 16

// createdTimes reads the creation times in the headers of objects, in parallel.
func createdTimes(ctx context.Context, s *store.Store, objs []backup.Object) ([]time.Time, error) {
	created := make([]time.Time, len(objs))
	g, ctx := errgroup.WithContext(ctx)
	for i, o := range objs {
		g.Go(func() error {
			h, err := backup.ReadHeader(ctx, s, o.Key)
			if err != nil {
				return fmt.Errorf("read the creation time of %s: %w", o.Key, err)
			}
			created[i] = h.Created
			return nil
		})
	}
	return created, g.Wait()
}
