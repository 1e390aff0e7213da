// Package retention decides which backup objects to delete (Plan, a pure
// function) and deletes them (Apply).
//
// Whatever the policy, the newest full snapshot and every delta after it
// are kept, and so is every delta whose revisions reach past the oldest
// kept full snapshot: those are what point-in-time restores from the kept
// snapshots need. Deltas entirely at or below the oldest kept full
// snapshot are deleted with it. Objects that are not backups are never
// touched.
package retention

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
)

// Policy names.
const (
	// Exponential keeps every full snapshot of the last hour, the newest
	// of each hour for the last 24 hours, of each day for the last 7 days
	// and of each ISO week for the last 4 weeks (hours, days and weeks in
	// UTC).
	Exponential = "exponential"
	// Limit keeps the N newest full snapshots.
	Limit = "limit"
)

// Policy is a retention policy.
type Policy struct {
	Name  string // Exponential or Limit
	Limit int    // for Limit: full snapshots to keep, at least 1
}

func (p Policy) String() string {
	if p.Name == Limit {
		return fmt.Sprintf("%s:%d", Limit, p.Limit)
	}
	return p.Name
}

// ParsePolicy parses "exponential" or "limit:N" (also "limit=N").
func ParsePolicy(s string) (Policy, error) {
	name, arg, hasArg := strings.Cut(strings.TrimSpace(s), ":")
	if !hasArg {
		name, arg, hasArg = strings.Cut(name, "=")
	}
	switch name {
	case Exponential:
		if hasArg {
			return Policy{}, fmt.Errorf("retention policy %q: %s takes no argument", s, Exponential)
		}
		return Policy{Name: Exponential}, nil
	case Limit:
		n, err := strconv.Atoi(arg)
		if !hasArg || err != nil || n < 1 {
			return Policy{}, fmt.Errorf("retention policy %q: write %s:N with N >= 1 full snapshots to keep", s, Limit)
		}
		return Policy{Name: Limit, Limit: n}, nil
	}
	return Policy{}, fmt.Errorf("unknown retention policy %q: use %s or %s:N", s, Exponential, Limit)
}

// Plan returns the objects to delete from chain under policy at time now, oldest first. Each
// timeline is a chain of its own: the policy applies to each, and each keeps its newest full
// snapshot and the deltas after it. It is pure: same inputs, same answer.
func Plan(chain backup.Chain, p Policy, now time.Time) ([]backup.Object, error) {
	var del []backup.Object
	for _, tl := range chain.Timelines() {
		d, err := planTimeline(chain.Timeline(tl), p, now)
		if err != nil {
			return nil, err
		}
		del = append(del, d...)
	}
	return del, nil
}

// planTimeline is Plan for the chain of one timeline.
func planTimeline(chain backup.Chain, p Policy, now time.Time) ([]backup.Object, error) {
	if len(chain.Fulls) == 0 {
		return nil, nil // nothing to anchor a decision on: delete nothing
	}
	var keep map[string]bool
	switch p.Name {
	case Exponential:
		keep = keepExponential(chain.Fulls, now)
	case Limit:
		if p.Limit < 1 {
			return nil, fmt.Errorf("retention policy %s: keep at least 1 full snapshot", p)
		}
		keep = map[string]bool{}
		for i := max(0, len(chain.Fulls)-p.Limit); i < len(chain.Fulls); i++ {
			keep[chain.Fulls[i].Key] = true
		}
	default:
		return nil, fmt.Errorf("unknown retention policy %q: use %s or %s:N", p.Name, Exponential, Limit)
	}
	newest := chain.Fulls[len(chain.Fulls)-1]
	keep[newest.Key] = true

	// Fulls are sorted by revision, so the first kept one is the oldest.
	var oldestKept int64
	for _, f := range chain.Fulls {
		if keep[f.Key] {
			oldestKept = f.FirstRev
			break
		}
	}
	var del []backup.Object
	for _, f := range chain.Fulls {
		if !keep[f.Key] {
			del = append(del, f)
		}
	}
	for _, d := range chain.Deltas {
		if d.LastRev <= oldestKept {
			del = append(del, d)
		}
	}
	sortOldestFirst(del)
	return del, nil
}

// keepExponential marks, newest first, each snapshot that is the newest in
// a time bucket of a tier whose window it is in.
func keepExponential(fulls []backup.Object, now time.Time) map[string]bool {
	type tier struct {
		window time.Duration
		bucket func(time.Time) int64 // nil: keep all in the window
	}
	tiers := []tier{
		{time.Hour, nil},
		{24 * time.Hour, func(t time.Time) int64 { return t.Unix() / 3600 }},
		{7 * 24 * time.Hour, func(t time.Time) int64 {
			y, m, d := t.Date()
			return int64(y)*10000 + int64(m)*100 + int64(d)
		}},
		{28 * 24 * time.Hour, func(t time.Time) int64 {
			y, w := t.ISOWeek()
			return int64(y)*100 + int64(w)
		}},
	}
	byTime := append([]backup.Object(nil), fulls...)
	sort.SliceStable(byTime, func(i, j int) bool {
		a, b := byTime[i], byTime[j]
		if !a.Created.Equal(b.Created) {
			return a.Created.After(b.Created)
		}
		return a.FirstRev > b.FirstRev
	})
	seen := make([]map[int64]bool, len(tiers))
	for i := range seen {
		seen[i] = map[int64]bool{}
	}
	keep := map[string]bool{}
	for _, f := range byTime {
		t := f.Created.UTC()
		age := now.Sub(t)
		if age < 0 {
			keep[f.Key] = true // from the future (clock skew): not ours to judge
			continue
		}
		for i, tr := range tiers {
			if age >= tr.window {
				continue
			}
			if tr.bucket == nil {
				keep[f.Key] = true
				continue
			}
			if b := tr.bucket(t); !seen[i][b] {
				seen[i][b] = true
				keep[f.Key] = true
			}
		}
	}
	return keep
}

// sortOldestFirst orders deletions by revision, a full snapshot before the
// deltas that start with it, so that an interrupted Apply leaves the
// newest objects standing.
func sortOldestFirst(objs []backup.Object) {
	sort.SliceStable(objs, func(i, j int) bool {
		a, b := objs[i], objs[j]
		if a.FirstRev != b.FirstRev {
			return a.FirstRev < b.FirstRev
		}
		if a.Kind != b.Kind {
			return a.Kind == backup.KindFull
		}
		return a.Key < b.Key
	})
}

// Collect deletes what Doomed names and returns it.
func Collect(ctx context.Context, s *store.Store, p Policy, now time.Time, clusterID uint64) ([]backup.Object, error) {
	doomed, err := Doomed(ctx, s, p, now, clusterID)
	if err != nil || len(doomed) == 0 {
		return nil, err
	}
	return doomed, Apply(ctx, s, doomed)
}

// Doomed says what policy p deletes from the timelines in s of cluster clusterID (0: from
// every timeline), oldest first, after reading back to its end (backup.VerifyObject) the
// newest full snapshot of every timeline it would delete from: nothing is to be deleted unless
// the snapshots that everything kept hangs on are sound. A sidecar passes its cluster's ID:
// the timelines of another cluster sharing the prefix follow that cluster's policy, not this
// one's. It deletes nothing.
func Doomed(ctx context.Context, s *store.Store, p Policy, now time.Time, clusterID uint64) ([]backup.Object, error) {
	chain, err := backup.ListChain(ctx, s)
	if err != nil {
		return nil, err
	}
	if clusterID != 0 {
		tls, err := backup.ObserveTimelines(ctx, s, chain)
		if err != nil {
			return nil, err
		}
		var own []backup.Object
		for _, tl := range tls {
			if tl.ClusterID == clusterID {
				own = append(own, chain.Timeline(tl.Timeline).Objects()...)
			}
		}
		chain = backup.NewChain(own)
	}
	doomed, err := Plan(chain, p, now)
	if err != nil || len(doomed) == 0 {
		return nil, err
	}
	checked := map[uint32]bool{}
	for _, o := range doomed {
		if checked[o.Timeline] {
			continue
		}
		checked[o.Timeline] = true
		newest, _ := chain.Timeline(o.Timeline).Newest()
		if err := backup.VerifyObject(ctx, s, newest); err != nil {
			return nil, fmt.Errorf("retention: nothing deleted: the newest full snapshot %s of timeline %d does not read back (take a new one: steward backup save; steward backup verify lists the damage): %w", newest.Key, o.Timeline, err)
		}
	}
	return doomed, nil
}

// Apply deletes objs from s in the given order (Plan's: oldest first). It
// stops at the first failure and says how far it got; running it again
// is safe.
func Apply(ctx context.Context, s *store.Store, objs []backup.Object) error {
	for i, o := range objs {
		if err := s.Delete(ctx, o.Key); err != nil {
			return fmt.Errorf("retention: deleted %d of %d objects, then: %w", i, len(objs), err)
		}
	}
	return nil
}
