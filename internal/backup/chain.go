package backup

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/etcd-steward/steward/internal/store"
)

// Chain is every backup object in a store, by timeline, then in revision order.
//
// A timeline is one unbroken history of one etcd cluster (the cluster ID in its objects'
// headers): every restart of history (a restore, a forced new cluster, a member that is
// behind the store, another cluster writing to the prefix) starts a new timeline with a full
// snapshot, and the old one is never appended to again. Revisions of different timelines
// have nothing to do with each other: a restore reads one timeline only.
//
// Check and Objects cover every timeline; Coverage, Plan, Newest and NewestRevision the
// newest (highest) timeline: use Timeline for another.
type Chain struct {
	Fulls   []Object // by timeline, revision, then creation time
	Deltas  []Object // by timeline, first revision, then last revision
	Foreign []string // keys under v1/ that are not backup objects (left alone)
}

// NewChain sorts objects into a chain. Objects of unknown kind are ignored.
func NewChain(objs []Object) Chain {
	var c Chain
	for _, o := range objs {
		switch o.Kind {
		case KindFull:
			c.Fulls = append(c.Fulls, o)
		case KindDelta:
			c.Deltas = append(c.Deltas, o)
		}
	}
	sort.SliceStable(c.Fulls, func(i, j int) bool {
		a, b := c.Fulls[i], c.Fulls[j]
		if a.Timeline != b.Timeline {
			return a.Timeline < b.Timeline
		}
		if a.FirstRev != b.FirstRev {
			return a.FirstRev < b.FirstRev
		}
		if !a.Created.Equal(b.Created) {
			return a.Created.Before(b.Created)
		}
		return a.Key < b.Key
	})
	sort.SliceStable(c.Deltas, func(i, j int) bool {
		a, b := c.Deltas[i], c.Deltas[j]
		if a.Timeline != b.Timeline {
			return a.Timeline < b.Timeline
		}
		if a.FirstRev != b.FirstRev {
			return a.FirstRev < b.FirstRev
		}
		if a.LastRev != b.LastRev {
			return a.LastRev < b.LastRev
		}
		return a.Key < b.Key
	})
	return c
}

// ListChain lists the backup objects in s. It reads names only; Verify
// reads the bytes.
func ListChain(ctx context.Context, s *store.Store) (Chain, error) {
	infos, err := s.List(ctx, LayoutPrefix)
	if err != nil {
		return Chain{}, fmt.Errorf("list backups: %w", err)
	}
	var objs []Object
	var foreign []string
	for _, info := range infos {
		o, err := ParseKey(info.Key)
		if err != nil {
			foreign = append(foreign, info.Key)
			continue
		}
		o.Size, o.ModTime = info.Size, info.ModTime
		if o.Kind == KindDelta {
			o.Created = info.ModTime
		}
		objs = append(objs, o)
	}
	c := NewChain(objs)
	c.Foreign = foreign
	return c, nil
}

// Objects returns every object, fulls then deltas.
func (c Chain) Objects() []Object {
	out := make([]Object, 0, len(c.Fulls)+len(c.Deltas))
	out = append(out, c.Fulls...)
	return append(out, c.Deltas...)
}

// Timelines returns the chain's timelines, lowest first.
func (c Chain) Timelines() []uint32 {
	var out []uint32
	for _, o := range c.Objects() {
		if i, found := slices.BinarySearch(out, o.Timeline); !found {
			out = slices.Insert(out, i, o.Timeline)
		}
	}
	return out
}

// NewestTimeline is the highest timeline in the chain (0 when it is empty).
func (c Chain) NewestTimeline() uint32 {
	var tl uint32
	if n := len(c.Fulls); n > 0 {
		tl = c.Fulls[n-1].Timeline
	}
	if n := len(c.Deltas); n > 0 {
		tl = max(tl, c.Deltas[n-1].Timeline)
	}
	return tl
}

// Timeline returns the objects of timeline tl (without the foreign keys).
func (c Chain) Timeline(tl uint32) Chain {
	of := func(objs []Object) []Object {
		i := sort.Search(len(objs), func(i int) bool { return objs[i].Timeline >= tl })
		j := sort.Search(len(objs), func(i int) bool { return objs[i].Timeline > tl })
		return objs[i:j:j]
	}
	return Chain{Fulls: of(c.Fulls), Deltas: of(c.Deltas)}
}

// newest is the newest timeline's chain.
func (c Chain) newest() Chain {
	tl := c.NewestTimeline()
	if (len(c.Fulls) == 0 || c.Fulls[0].Timeline == tl) && (len(c.Deltas) == 0 || c.Deltas[0].Timeline == tl) {
		return c
	}
	return c.Timeline(tl)
}

// Newest returns the newest full snapshot of the newest timeline.
func (c Chain) Newest() (Object, bool) {
	c = c.newest()
	if len(c.Fulls) == 0 {
		return Object{}, false
	}
	return c.Fulls[len(c.Fulls)-1], true
}

// NewestRevision is the newest revision the names of the newest timeline's objects promise
// (0 when the chain is empty).
func (c Chain) NewestRevision() int64 {
	var rev int64
	for _, o := range c.newest().Objects() {
		rev = max(rev, o.LastRev)
	}
	return rev
}

// Without returns the chain minus the objects with the given keys.
func (c Chain) Without(keys map[string]bool) Chain {
	var objs []Object
	for _, o := range c.Objects() {
		if !keys[o.Key] {
			objs = append(objs, o)
		}
	}
	out := NewChain(objs)
	out.Foreign = c.Foreign
	return out
}

// Severity ranks chain issues.
type Severity int

const (
	// Info needs no action (overlaps are trimmed on read, unused deltas are
	// collected by retention).
	Info Severity = iota
	// Warning: some revisions cannot be restored to, later ones can.
	Warning
	// Error: revisions after the hole cannot be restored to from the
	// full snapshot before it.
	Error
)

func (s Severity) String() string {
	switch s {
	case Info:
		return "info"
	case Warning:
		return "warning"
	}
	return "error"
}

// Issue kinds reported by Check.
const (
	IssueHole    = "hole"    // a delta starts after a revision nothing covers
	IssueGap     = "gap"     // revisions nothing covers, before a full snapshot that restarts the chain
	IssueOverlap = "overlap" // two deltas hold the same revisions (trimmed on read)
	IssueUnused  = "unused"  // a delta entirely before the oldest full snapshot
	IssueNoFull  = "no-full" // deltas but no full snapshot to apply them to
	// IssueClusters: a timeline holds objects of more than one cluster (Verify reads the headers).
	IssueClusters = "clusters"
)

// Issue is one finding of Check.
type Issue struct {
	Severity Severity
	Kind     string
	Timeline uint32
	From, To int64    // the revisions concerned
	Keys     []string // the objects around or in the issue
	Message  string
}

func (i Issue) String() string {
	return fmt.Sprintf("%s: timeline %d: %s", i.Severity, i.Timeline, i.Message)
}

// Check reports, timeline by timeline, the chain's holes (a delta that does not start right
// after what precedes it: the previous delta's last revision or the full snapshot it
// follows), gaps before a full snapshot, overlaps between deltas, deltas before the oldest
// full snapshot, and deltas without any full snapshot.
func (c Chain) Check() []Issue {
	var issues []Issue
	for _, tl := range c.Timelines() {
		for _, is := range c.Timeline(tl).checkTimeline() {
			is.Timeline = tl
			issues = append(issues, is)
		}
	}
	return issues
}

// checkTimeline is Check of a chain of one timeline.
func (c Chain) checkTimeline() []Issue {
	var issues []Issue
	if len(c.Fulls) == 0 {
		if len(c.Deltas) > 0 {
			first, last := c.Deltas[0], c.Deltas[len(c.Deltas)-1]
			issues = append(issues, Issue{Severity: Error, Kind: IssueNoFull,
				From: first.FirstRev, To: last.LastRev, Keys: []string{first.Key, last.Key},
				Message: fmt.Sprintf("%d deltas (revisions %d-%d) but no full snapshot to apply them to: take a full snapshot", len(c.Deltas), first.FirstRev, last.LastRev)})
		}
		return issues
	}
	oldest := c.Fulls[0]
	cov, covKey := oldest.FirstRev, oldest.Key // revisions up to cov are restorable
	var lastDelta *Object
	fi, di := 1, 0
	for fi < len(c.Fulls) || di < len(c.Deltas) {
		// A full snapshot goes before a delta that starts at the same revision.
		if fi < len(c.Fulls) && (di == len(c.Deltas) || c.Fulls[fi].FirstRev <= c.Deltas[di].FirstRev) {
			f := c.Fulls[fi]
			fi++
			if f.FirstRev > cov+1 {
				issues = append(issues, Issue{Severity: Warning, Kind: IssueGap,
					From: cov + 1, To: f.FirstRev - 1, Keys: []string{covKey, f.Key},
					Message: fmt.Sprintf("revisions %d-%d are in no backup (between %s and %s): they cannot be restored to; revision %d and later can", cov+1, f.FirstRev-1, covKey, f.Key, f.FirstRev)})
			}
			if f.FirstRev >= cov {
				cov, covKey = f.FirstRev, f.Key
			}
			continue
		}
		d := c.Deltas[di]
		di++
		if d.LastRev <= oldest.FirstRev {
			issues = append(issues, Issue{Severity: Info, Kind: IssueUnused,
				From: d.FirstRev, To: d.LastRev, Keys: []string{d.Key},
				Message: fmt.Sprintf("delta %s (revisions %d-%d) is older than the oldest full snapshot %s and is never used", d.Key, d.FirstRev, d.LastRev, oldest.Key)})
			continue
		}
		if lastDelta != nil && d.FirstRev <= lastDelta.LastRev {
			issues = append(issues, Issue{Severity: Info, Kind: IssueOverlap,
				From: d.FirstRev, To: min(d.LastRev, lastDelta.LastRev), Keys: []string{lastDelta.Key, d.Key},
				Message: fmt.Sprintf("deltas %s and %s both hold revisions %d-%d; the repeat is skipped on restore", lastDelta.Key, d.Key, d.FirstRev, min(d.LastRev, lastDelta.LastRev))})
		}
		if d.FirstRev > cov+1 {
			issues = append(issues, Issue{Severity: Error, Kind: IssueHole,
				From: cov + 1, To: d.FirstRev - 1, Keys: []string{covKey, d.Key},
				Message: fmt.Sprintf("hole: revisions %d-%d are missing between %s and %s: nothing after revision %d can be restored from full snapshots before it; take a full snapshot", cov+1, d.FirstRev-1, covKey, d.Key, cov)})
		}
		if d.LastRev > cov {
			cov, covKey = d.LastRev, d.Key
		}
		if lastDelta == nil || d.LastRev > lastDelta.LastRev {
			dd := d
			lastDelta = &dd
		}
	}
	return issues
}

// Range is an inclusive range of revisions.
type Range struct{ From, To int64 }

func (r Range) String() string {
	if r.From == r.To {
		return fmt.Sprint(r.From)
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// Coverage returns the revision ranges the newest timeline can restore to: from each full
// snapshot through the deltas that continue it without a hole.
func (c Chain) Coverage() []Range {
	c = c.newest()
	var out []Range
	di := 0
	for _, f := range c.Fulls {
		if n := len(out); n > 0 && f.FirstRev <= out[n-1].To+1 {
			out[n-1].To = max(out[n-1].To, f.FirstRev)
		} else {
			out = append(out, Range{f.FirstRev, f.FirstRev})
		}
		r := &out[len(out)-1]
		// Deltas that start inside a hole are passed over here and picked up
		// (harmlessly) by the next full snapshot's range.
		for ; di < len(c.Deltas) && c.Deltas[di].FirstRev <= r.To+1; di++ {
			r.To = max(r.To, c.Deltas[di].LastRev)
		}
	}
	return out
}

func describeRanges(rs []Range) string {
	if len(rs) == 0 {
		return "none"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ", ")
}

// RestorePlan says what to read to restore to Target.
type RestorePlan struct {
	Full   Object   // the newest full snapshot at or below Target
	Deltas []Object // in order; apply events with revision above the database's own and at most Target
	Target int64
}

// Plan picks, on the newest timeline, the newest full snapshot at or below target and the
// deltas that lead from it to target. target <= 0 means the newest revision the
// newest full snapshot can be brought to. The error names the revisions
// that are missing and what the chain can restore to.
//
// A full snapshot's name carries a lower bound of its revision; the
// restore reads the true one from the database and skips delta events at
// or below it. If the true revision is beyond target, restore with a
// target at or above it or from an older snapshot.
func (c Chain) Plan(target int64) (RestorePlan, error) {
	c = c.newest()
	cov := c.Coverage()
	if len(c.Fulls) == 0 {
		return RestorePlan{}, fmt.Errorf("no full snapshot in the store: nothing to restore from")
	}
	if target <= 0 {
		target = cov[len(cov)-1].To
	}
	bi := sort.Search(len(c.Fulls), func(i int) bool { return c.Fulls[i].FirstRev > target }) - 1
	if bi < 0 {
		return RestorePlan{}, fmt.Errorf("no full snapshot at or below revision %d: the oldest is at revision %d; restorable revisions: %s", target, c.Fulls[0].FirstRev, describeRanges(cov))
	}
	base := c.Fulls[bi]
	plan := RestorePlan{Full: base, Target: target}
	reach := base.FirstRev
	di := 0
	for reach < target {
		// Among deltas that continue from reach, take the one that goes
		// furthest (overlaps are trimmed on read).
		best := -1
		for ; di < len(c.Deltas) && c.Deltas[di].FirstRev <= reach+1; di++ {
			if c.Deltas[di].LastRev > reach && (best < 0 || c.Deltas[di].LastRev > c.Deltas[best].LastRev) {
				best = di
			}
		}
		if best < 0 {
			missingTo := target
			if di < len(c.Deltas) && c.Deltas[di].FirstRev-1 < missingTo {
				missingTo = c.Deltas[di].FirstRev - 1
			}
			if di == len(c.Deltas) {
				return RestorePlan{}, fmt.Errorf("revision %d is beyond the backups: from %s they reach revision %d; restorable revisions: %s", target, base.Key, reach, describeRanges(cov))
			}
			return RestorePlan{}, fmt.Errorf("revisions %d-%d are missing from the backups after %s: cannot reach revision %d; restorable revisions: %s", reach+1, missingTo, base.Key, target, describeRanges(cov))
		}
		plan.Deltas = append(plan.Deltas, c.Deltas[best])
		reach = c.Deltas[best].LastRev
		di = best + 1
	}
	return plan, nil
}
