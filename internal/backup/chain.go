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
	sortFulls(c.Fulls)
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

// ListChain lists every backup object in s into memory. It reads names only; Verify reads the
// bytes. A store holds hundreds of thousands of deltas: code that runs against real stores uses
// ReadIndex, LoadTimeline or Scan, which hold a bounded part of the listing; ListChain is for
// small stores and tests.
func ListChain(ctx context.Context, s *store.Store) (Chain, error) {
	var objs []Object
	var foreign []string
	err := Scan(ctx, s, func(o Object) error {
		objs = append(objs, o)
		return nil
	}, func(key string) { foreign = append(foreign, key) })
	if err != nil {
		return Chain{}, err
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
	// IssueDiverged: overlapping deltas hold different events at one revision (Verify reads
	// them): two histories in one timeline.
	IssueDiverged = "diverged"
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
	k := newChecker(c.Fulls)
	for _, d := range c.Deltas {
		k.delta(d)
	}
	return k.finish()
}

// checker is Check of one timeline, fed its deltas one by one in chain order (by first, then
// last revision): it holds the full snapshots, the issues, and no delta but the last.
type checker struct {
	fulls     []Object
	fi        int
	cov       int64 // revisions up to cov are restorable
	covKey    string
	lastDelta Object
	noFull    int // deltas seen without any full snapshot
	issues    []Issue
}

func newChecker(fulls []Object) *checker {
	k := &checker{fulls: fulls, fi: 1}
	if len(fulls) > 0 {
		k.cov, k.covKey = fulls[0].FirstRev, fulls[0].Key
	}
	return k
}

// full takes the full snapshots that start at or before rev: a full snapshot goes before a
// delta that starts at the same revision.
func (k *checker) full(rev int64) {
	for ; k.fi < len(k.fulls) && k.fulls[k.fi].FirstRev <= rev; k.fi++ {
		f := k.fulls[k.fi]
		if f.FirstRev > k.cov+1 {
			k.issues = append(k.issues, Issue{Severity: Warning, Kind: IssueGap,
				From: k.cov + 1, To: f.FirstRev - 1, Keys: []string{k.covKey, f.Key},
				Message: fmt.Sprintf("revisions %d-%d are in no backup (between %s and %s): they cannot be restored to; revision %d and later can", k.cov+1, f.FirstRev-1, k.covKey, f.Key, f.FirstRev)})
		}
		if f.FirstRev >= k.cov {
			k.cov, k.covKey = f.FirstRev, f.Key
		}
	}
}

func (k *checker) delta(d Object) {
	if len(k.fulls) == 0 {
		if k.lastDelta.Key == "" {
			k.issues = append(k.issues, Issue{Severity: Error, Kind: IssueNoFull, From: d.FirstRev, To: d.LastRev, Keys: []string{d.Key, d.Key}})
		}
		k.noFull++
		is := &k.issues[len(k.issues)-1]
		is.To, is.Keys[1] = max(is.To, d.LastRev), d.Key
		is.Message = fmt.Sprintf("%d deltas (revisions %d-%d) but no full snapshot to apply them to: take a full snapshot", k.noFull, is.From, is.To)
		k.lastDelta = d
		return
	}
	k.full(d.FirstRev)
	oldest := k.fulls[0]
	if d.LastRev <= oldest.FirstRev {
		k.issues = append(k.issues, Issue{Severity: Info, Kind: IssueUnused,
			From: d.FirstRev, To: d.LastRev, Keys: []string{d.Key},
			Message: fmt.Sprintf("delta %s (revisions %d-%d) is older than the oldest full snapshot %s and is never used", d.Key, d.FirstRev, d.LastRev, oldest.Key)})
		return
	}
	last := k.lastDelta
	if last.Key != "" && d.FirstRev <= last.LastRev {
		k.issues = append(k.issues, Issue{Severity: Info, Kind: IssueOverlap,
			From: d.FirstRev, To: min(d.LastRev, last.LastRev), Keys: []string{last.Key, d.Key},
			Message: fmt.Sprintf("deltas %s and %s both hold revisions %d-%d; the repeat is skipped on restore", last.Key, d.Key, d.FirstRev, min(d.LastRev, last.LastRev))})
	}
	if d.FirstRev > k.cov+1 {
		k.issues = append(k.issues, Issue{Severity: Error, Kind: IssueHole,
			From: k.cov + 1, To: d.FirstRev - 1, Keys: []string{k.covKey, d.Key},
			Message: fmt.Sprintf("hole: revisions %d-%d are missing between %s and %s: nothing after revision %d can be restored from full snapshots before it; take a full snapshot", k.cov+1, d.FirstRev-1, k.covKey, d.Key, k.cov)})
	}
	if d.LastRev > k.cov {
		k.cov, k.covKey = d.LastRev, d.Key
	}
	if last.Key == "" || d.LastRev > last.LastRev {
		k.lastDelta = d
	}
}

func (k *checker) finish() []Issue {
	k.full(1<<63 - 1)
	return k.issues
}

// Range is an inclusive range of revisions. In JSON (steward backup list/verify -o json):
// {"from": 100, "to": 200}.
type Range struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

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
	var runs []Range
	for _, d := range c.Deltas {
		runs = addRun(runs, Range{d.FirstRev, d.LastRev})
	}
	return coverage(c.Fulls, runs)
}

// DescribeRanges lists revision ranges for a message, "none" when there are none.
func DescribeRanges(rs []Range) string {
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
		return RestorePlan{}, fmt.Errorf("no full snapshot at or below revision %d: the oldest is at revision %d; restorable revisions: %s", target, c.Fulls[0].FirstRev, DescribeRanges(cov))
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
				return RestorePlan{}, fmt.Errorf("revision %d is beyond the backups: from %s they reach revision %d; restorable revisions: %s", target, base.Key, reach, DescribeRanges(cov))
			}
			return RestorePlan{}, fmt.Errorf("revisions %d-%d are missing from the backups after %s: cannot reach revision %d; restorable revisions: %s", reach+1, missingTo, base.Key, target, DescribeRanges(cov))
		}
		plan.Deltas = append(plan.Deltas, c.Deltas[best])
		reach = c.Deltas[best].LastRev
		di = best + 1
	}
	return plan, nil
}
