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
	"regexp"
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
	// Age keeps every full snapshot made within the age, and the newest one made before it,
	// from which a restore to the oldest point within the age starts: every point in time
	// within the age stays restorable.
	Age = "age"
	// Keep deletes nothing.
	Keep = "keep"
)

// PolicyPattern is every policy ParsePolicy accepts, and nothing else: the EtcdCluster's
// spec.backup.retention is checked against it by the API server (its CEL rule).
const PolicyPattern = `^(exponential|keep|limit:[1-9][0-9]{0,5}|age:[1-9][0-9]{0,3}[hdw])$`

var policyPattern = regexp.MustCompile(PolicyPattern)

// ageUnits are the units of an age: hours, days, weeks.
var ageUnits = []struct {
	suffix string
	d      time.Duration
}{{"w", 7 * 24 * time.Hour}, {"d", 24 * time.Hour}, {"h", time.Hour}}

// Policy is a retention policy.
type Policy struct {
	Name  string        // Exponential, Limit, Age or Keep
	Limit int           // for Limit: full snapshots to keep, at least 1
	Age   time.Duration // for Age: how far back every point in time stays restorable
}

func (p Policy) String() string {
	switch p.Name {
	case Limit:
		return fmt.Sprintf("%s:%d", Limit, p.Limit)
	case Age:
		for _, u := range ageUnits {
			if p.Age%u.d == 0 {
				return fmt.Sprintf("%s:%d%s", Age, p.Age/u.d, u.suffix)
			}
		}
		return fmt.Sprintf("%s:%s", Age, p.Age)
	}
	return p.Name
}

// ParsePolicy parses a retention policy: "exponential", "keep", "limit:N" (N full snapshots,
// 1 to 999999) or "age:N" followed by h, d or w (hours, days, weeks; N from 1 to 9999), e.g.
// "age:30d". It accepts exactly what PolicyPattern matches.
func ParsePolicy(s string) (Policy, error) {
	name, arg, hasArg := strings.Cut(s, ":")
	switch name {
	case Exponential, Keep:
		if hasArg {
			return Policy{}, fmt.Errorf("retention policy %q: %s takes no argument", s, name)
		}
	case Limit:
		if !policyPattern.MatchString(s) {
			return Policy{}, fmt.Errorf("retention policy %q: write %s:N with N from 1 to 999999 full snapshots to keep (no sign or leading zero)", s, Limit)
		}
		n, _ := strconv.Atoi(arg)
		return Policy{Name: Limit, Limit: n}, nil
	case Age:
		if !policyPattern.MatchString(s) {
			return Policy{}, fmt.Errorf("retention policy %q: write %s:N followed by h, d or w (hours, days, weeks), N from 1 to 9999, e.g. %s:30d", s, Age, Age)
		}
		n, _ := strconv.Atoi(arg[:len(arg)-1])
		for _, u := range ageUnits {
			if strings.HasSuffix(arg, u.suffix) {
				return Policy{Name: Age, Age: time.Duration(n) * u.d}, nil
			}
		}
	default:
		return Policy{}, fmt.Errorf("unknown retention policy %q: use %s, %s:N, %s:N[h|d|w] (e.g. %s:30d) or %s", s, Exponential, Limit, Age, Age, Keep)
	}
	return Policy{Name: name}, nil
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
	del, oldestKept, err := planFulls(chain.Fulls, p, now)
	if err != nil {
		return nil, err
	}
	for _, d := range chain.Deltas {
		if d.LastRev <= oldestKept {
			del = append(del, d)
		}
	}
	sortOldestFirst(del)
	return del, nil
}

// planFulls decides which of the full snapshots of one timeline (sorted by revision) policy p
// deletes, and the revision of the oldest it keeps: deltas that end at or below it go too
// (oldestKept is 0, nothing to delete, when there are no full snapshots).
func planFulls(fulls []backup.Object, p Policy, now time.Time) (del []backup.Object, oldestKept int64, err error) {
	if len(fulls) == 0 {
		return nil, 0, nil // nothing to anchor a decision on: delete nothing
	}
	var keep map[string]bool
	switch p.Name {
	case Keep:
		return nil, 0, nil
	case Exponential:
		keep = keepExponential(fulls, now)
	case Age:
		if p.Age <= 0 {
			return nil, 0, fmt.Errorf("retention policy %s: the age must be positive", p)
		}
		keep = keepWithin(fulls, now.Add(-p.Age))
	case Limit:
		if p.Limit < 1 {
			return nil, 0, fmt.Errorf("retention policy %s: keep at least 1 full snapshot", p)
		}
		keep = map[string]bool{}
		for i := max(0, len(fulls)-p.Limit); i < len(fulls); i++ {
			keep[fulls[i].Key] = true
		}
	default:
		return nil, 0, fmt.Errorf("unknown retention policy %q: use %s, %s:N, %s:N[h|d|w] or %s", p.Name, Exponential, Limit, Age, Keep)
	}
	keep[fulls[len(fulls)-1].Key] = true

	// Fulls are sorted by revision, so the first kept one is the oldest.
	for _, f := range fulls {
		if keep[f.Key] {
			oldestKept = f.FirstRev
			break
		}
	}
	for _, f := range fulls {
		if !keep[f.Key] {
			del = append(del, f)
		}
	}
	return del, oldestKept, nil
}

// keepWithin marks every snapshot that a restore to a point in time after since may start
// from, and the newest one a restore to since starts from (backup.Object.ProvenAt).
func keepWithin(fulls []backup.Object, since time.Time) map[string]bool {
	keep := map[string]bool{}
	var base *backup.Object
	for i, f := range fulls {
		switch at := f.ProvenAt(); {
		case at.After(since):
			keep[f.Key] = true
		case base == nil || at.After(base.ProvenAt()) || at.Equal(base.ProvenAt()) && f.FirstRev > base.FirstRev:
			base = &fulls[i]
		}
	}
	if base != nil {
		keep[base.Key] = true
	}
	return keep
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

// Collect deletes what Walk names, as it names it (oldest first), tells deleted (if not nil)
// of each object deleted, and returns how many it deleted. It stops at the first failure;
// running it again is safe.
func Collect(ctx context.Context, s *store.Store, p Policy, now time.Time, clusterID uint64, deleted func(backup.Object)) (int, error) {
	n := 0
	err := Walk(ctx, s, p, now, clusterID, func(o backup.Object) error {
		if err := s.Delete(ctx, o.Key); err != nil {
			return fmt.Errorf("retention: deleted %d objects, then: %w", n, err)
		}
		if deleted != nil {
			deleted(o)
		}
		n++
		return nil
	})
	return n, err
}

// Doomed is Walk's objects as a slice (for a dry run of a small store, and tests).
func Doomed(ctx context.Context, s *store.Store, p Policy, now time.Time, clusterID uint64) ([]backup.Object, error) {
	var out []backup.Object
	err := Walk(ctx, s, p, now, clusterID, func(o backup.Object) error {
		out = append(out, o)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Walk calls fn for each object policy p deletes from the timelines in s of cluster clusterID
// (0: from every timeline), timeline by timeline, oldest first, after reading back to its end
// (backup.VerifyObject) the newest full snapshot of the timeline: nothing is to be deleted
// unless the snapshot that everything kept hangs on is sound. A sidecar passes its cluster's
// ID: the timelines of another cluster sharing the prefix follow that cluster's policy, not
// this one's. It deletes nothing itself, and it streams: the full snapshots are held (they
// are few), the deltas are read page by page and passed on, however many the store holds.
// fn may delete what it is given. fn's error stops the walk and is returned.
func Walk(ctx context.Context, s *store.Store, p Policy, now time.Time, clusterID uint64, fn func(backup.Object) error) error {
	ix, err := backup.ReadIndex(ctx, s)
	if err != nil {
		return err
	}
	own := map[uint32]bool{}
	if clusterID != 0 {
		tls, err := backup.ObserveIndex(ctx, s, ix)
		if err != nil {
			return err
		}
		for _, tl := range tls {
			own[tl.Timeline] = tl.ClusterID == clusterID
		}
	}
	for _, t := range ix.Timelines {
		if clusterID != 0 && !own[t.Timeline] {
			continue
		}
		fullsDel, oldestKept, err := planFulls(t.Fulls, p, now)
		if err != nil {
			return err
		}
		if len(fullsDel) == 0 && (t.Deltas == 0 || t.FirstDelta.LastRev > oldestKept) {
			continue
		}
		newest, _ := t.NewestFull()
		if err := backup.VerifyObject(ctx, s, newest); err != nil {
			return fmt.Errorf("retention: nothing deleted from timeline %d: its newest full snapshot %s does not read back (take a new one: steward backup save; steward backup verify lists the damage): %w", t.Timeline, newest.Key, err)
		}
		// Deltas in revision order, each after the doomed full snapshots at or below its
		// first revision: an interrupted walk leaves the newest objects standing.
		fi := 0
		emitFulls := func(upTo int64) error {
			for ; fi < len(fullsDel) && fullsDel[fi].FirstRev <= upTo; fi++ {
				if err := fn(fullsDel[fi]); err != nil {
					return err
				}
			}
			return nil
		}
		if t.Deltas > 0 && t.FirstDelta.LastRev <= oldestKept {
			for d, err := range backup.Deltas(ctx, s, t.Timeline) {
				if err != nil {
					return err
				}
				if d.FirstRev > oldestKept {
					break // the deltas come by first revision: none further ends at or below it
				}
				if err := emitFulls(d.FirstRev); err != nil {
					return err
				}
				if d.LastRev <= oldestKept {
					if err := fn(d); err != nil {
						return err
					}
				}
			}
		}
		if err := emitFulls(1<<63 - 1); err != nil {
			return err
		}
	}
	return nil
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
