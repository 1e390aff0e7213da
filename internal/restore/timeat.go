package restore

import (
	"context"
	"fmt"
	"sort"
	"time"

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
func TimelineAt(c backup.Chain, t time.Time) uint32 {
	tls := c.Timelines()
	var began uint32
	for i := len(tls) - 1; i >= 0; i-- {
		tc := c.Timeline(tls[i])
		if len(tc.Fulls) == 0 {
			continue
		}
		start := tc.Fulls[0].Created.Add(time.Second)
		if start.After(t) {
			continue
		}
		end := start
		for _, o := range tc.Objects() {
			if o.Created.After(end) {
				end = o.Created
			}
		}
		if !t.After(end) {
			return tls[i]
		}
		if began == 0 {
			began = tls[i]
		}
	}
	if began != 0 {
		return began
	}
	return c.NewestTimeline()
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
// So RevisionAt returns the last revision of the newest delta created at or before t, or the
// revision of a full snapshot whose second ended at or before t, whichever is newer, and the
// object that proves it. The state at t may include later revisions, up to those of the next
// object (one delta period, 5 s by default); they are not restored because nothing shows they
// were committed by t. Times are the writing member's clock.
//
// Delta headers are read by binary search, in revision order (creation times grow with
// revisions: each object is written after the one before it).
func RevisionAt(ctx context.Context, s *store.Store, c backup.Chain, t time.Time) (int64, backup.Object, error) {
	var best backup.Object
	var rev int64
	for _, f := range c.Fulls {
		if !f.Created.Add(time.Second).After(t) && f.FirstRev > rev {
			rev, best = f.FirstRev, f
		}
	}
	var readErr error
	created := func(i int) time.Time {
		if readErr != nil {
			return time.Time{}
		}
		h, or, err := backup.OpenObject(ctx, s, c.Deltas[i].Key)
		if err != nil {
			readErr = fmt.Errorf("restore to %s: read the creation time of %s: %w", t.Format(time.RFC3339Nano), c.Deltas[i].Key, err)
			return time.Time{}
		}
		or.Close()
		return h.Created
	}
	// The first delta created after t; the ones before it were created at or before t.
	n := sort.Search(len(c.Deltas), func(i int) bool { return created(i).After(t) })
	if readErr != nil {
		return 0, backup.Object{}, readErr
	}
	for _, d := range c.Deltas[:n] {
		if d.LastRev > rev {
			rev, best = d.LastRev, d
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
