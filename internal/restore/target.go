package restore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/store"
)

// ResolveTarget resolves a restore target against the store s, as a dry run of the restore
// that will read it: the timeline, the revision (for a time, the one RevisionAt finds) and
// the objects the restore reads. It is the one place a target is resolved: `steward local
// restore`, the operator's check of an EtcdRestore, the restoring member (through
// Options.ClusterIDs) and `steward restore` all come here.
//
// own are the etcd cluster IDs of the cluster restored (cluster.IDs): the timeline is chosen
// among that cluster's own timelines only, never another cluster's sharing the prefix, unless
// t names one (a named timeline is read whoever's it is). own == nil means there is no cluster
// of one's own (a data dir restored offline, a new cluster bootstrapped from another's
// store): every timeline of the store counts. t.Store is not read: s is the store.
func ResolveTarget(ctx context.Context, s *store.Store, own []uint64, t cluster.RestoreTarget) (Result, error) {
	return Restore(ctx, Options{Store: s, DryRun: true, ClusterIDs: own, Timeline: t.Timeline, ToRevision: t.Revision, ToTime: t.Time})
}

// chooseTimeline is pickTimeline, after reading from the store whether each timeline's newest
// full snapshot vouches for itself and of which cluster it is (backup.VouchTimelines): a
// restore never chooses a timeline whose newest full snapshot a holder of the keys did not
// write (with encryption), nor one that is not whole, and knows a timeline's cluster from that
// snapshot's header only. A named timeline is read only if its newest full snapshot vouches for
// itself. notes says why each timeline passed over was.
func chooseTimeline(ctx context.Context, s *store.Store, ix backup.Index, own []uint64, want uint32, rev int64, t time.Time) (tl uint32, notes []string, err error) {
	if want != 0 {
		return want, nil, vouchNamed(ctx, s, ix, want)
	}
	tls, err := backup.VouchTimelines(ctx, s, ix)
	if err != nil {
		return 0, nil, fmt.Errorf("restore: %s: %w", s, err)
	}
	return pickTimeline(ix, tls, own, rev, t, s.String())
}

// vouchNamed checks that the timeline named, whoever's it is, is in the store and that its
// newest full snapshot vouches for itself.
func vouchNamed(ctx context.Context, s *store.Store, ix backup.Index, want uint32) error {
	ti, ok := ix.Timeline(want)
	if !ok {
		return fmt.Errorf("restore: %w: %s holds no timeline %d; its timelines: %v (see `steward backup list --store %s`)", ErrOutOfRange, s, want, ix.TimelineIDs(), s)
	}
	full, ok := ti.NewestFull()
	if !ok {
		return nil // the plan says there is nothing to restore
	}
	if _, err := backup.VouchFull(ctx, s, full); err != nil {
		return fmt.Errorf("restore: timeline %d of %s cannot be restored: %w", want, s, err)
	}
	return nil
}

// pickTimeline picks the timeline a restore reads from the store's index ix, among the
// candidates (backup.Restorable: the timelines of tls that vouch for themselves, of the
// cluster known by the IDs own, or of the one cluster the store holds when own is nil): the one
// that holds the history at time t, else (for a cluster's own) the newest that holds revision
// rev, else the newest. Errors name the store, the target and what to do; notes say which
// timelines were passed over as not vouching for themselves, and why.
func pickTimeline(ix backup.Index, tls []backup.TimelineInfo, own []uint64, rev int64, t time.Time, storeName string) (uint32, []string, error) {
	restorable, notes, err := backup.Restorable(tls, own)
	if err != nil {
		return 0, notes, fmt.Errorf("restore: %s: %w; name the cluster to restore (steward restore --cluster-id) or the timeline", storeName, err)
	}
	var cand backup.Index
	for _, tl := range restorable {
		if ti, ok := ix.Timeline(tl.Timeline); ok {
			cand.Timelines = append(cand.Timelines, ti)
		}
	}
	if len(cand.Timelines) == 0 {
		switch {
		case len(tls) == 0:
			return 0, notes, fmt.Errorf("restore: %w: %s holds no backups (check the store URL and its prefix)", ErrOutOfRange, storeName)
		case len(notes) > 0:
			// Each object's own error is kept: the user may lack the keys (backup.ErrNoKey).
			var errs []error
			for _, tl := range tls {
				if tl.Unvouched != nil {
					errs = append(errs, fmt.Errorf("timeline %d: %w", tl.Timeline, tl.Unvouched))
				}
			}
			return 0, notes, fmt.Errorf("restore: %w: no timeline of %s can be restored: %w", ErrOutOfRange, storeName, unvouched(errs))
		case own != nil:
			return 0, notes, fmt.Errorf("restore: %w: %s holds no backups of this cluster (cluster IDs %s); timelines of other clusters in this store: %s; name one with --timeline to restore it",
				ErrOutOfRange, storeName, hexIDs(own), describeTimelines(ix, tls, func(backup.TimelineInfo) bool { return true }))
		}
		return 0, notes, fmt.Errorf("restore: %w: no timeline of %s can be restored: %s", ErrOutOfRange, storeName, describeTimelines(ix, tls, func(backup.TimelineInfo) bool { return true }))
	}
	switch {
	case !t.IsZero():
		return TimelineAt(cand, t), notes, nil
	case rev > 0 && own != nil:
		for i := len(cand.Timelines) - 1; i >= 0; i-- {
			if ti := cand.Timelines[i]; holdsRevision(ti, rev) {
				return ti.Timeline, notes, nil
			}
		}
		others := func(tl backup.TimelineInfo) bool {
			ti, ok := ix.Timeline(tl.Timeline)
			return !tl.Of(own) && ok && holdsRevision(ti, rev)
		}
		return 0, notes, fmt.Errorf("restore to revision %d: %w: no timeline of this cluster (cluster IDs %s) in %s holds revision %d; this cluster's timelines: %s; timelines of other clusters in this store that hold it: %s; name one with --timeline to restore it",
			rev, ErrOutOfRange, hexIDs(own), storeName, rev, describeTimelines(ix, tls, func(tl backup.TimelineInfo) bool { return tl.Of(own) }), describeTimelines(ix, tls, others))
	}
	return cand.NewestTimeline(), notes, nil
}

// unvouched is the timelines' reasons for not vouching for themselves, on one line.
type unvouched []error

func (u unvouched) Error() string {
	s := make([]string, len(u))
	for i, err := range u {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

func (u unvouched) Unwrap() []error { return u }

// holdsRevision: rev is between ti's oldest full snapshot and its newest revision (a hole
// in between is for the plan to report).
func holdsRevision(ti backup.TimelineIndex, rev int64) bool {
	return len(ti.Fulls) > 0 && ti.Fulls[0].FirstRev <= rev && rev <= ti.NewestRevision()
}

// describeTimelines lists the timelines of tls that keep keeps, with their cluster and
// restorable revisions ("none" when none is).
func describeTimelines(ix backup.Index, tls []backup.TimelineInfo, keep func(backup.TimelineInfo) bool) string {
	var parts []string
	for _, tl := range tls {
		if !keep(tl) {
			continue
		}
		whose := fmt.Sprintf("cluster %x", tl.ClusterID)
		if !tl.Vouched {
			whose = fmt.Sprintf("of an unknown cluster: %v", tl.Unvouched)
		}
		cov := "none"
		if ti, ok := ix.Timeline(tl.Timeline); ok {
			cov = backup.DescribeRanges(ti.Coverage())
		}
		parts = append(parts, fmt.Sprintf("%d (%s, revisions %s)", tl.Timeline, whose, cov))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func hexIDs(ids []uint64) string {
	s := make([]string, len(ids))
	for i, id := range slices.Sorted(slices.Values(ids)) {
		s[i] = fmt.Sprintf("%x", id)
	}
	return strings.Join(s, ", ")
}
