package backup

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"sort"
	"time"

	"github.com/etcd-steward/steward/internal/store"
)

// A store holds one delta every few seconds: kept for four weeks, about 480k objects. Nothing
// here holds them all. Scan streams the listing page by page; ReadIndex keeps a bounded summary
// of it (every full snapshot, which retention keeps to tens, and per timeline the counts, ends
// and revision runs of the deltas); LoadTimeline keeps the deltas a caller asks for (those of
// one restore, one retention pass, one full snapshot's period) and no others.

// MaxForeignKeys is how many foreign keys (under v1/ but not backup objects) an Index names;
// it counts all of them.
const MaxForeignKeys = 100

// Scan calls fn for every backup object in s, in listing order (by timeline, then full
// snapshots before deltas, each by revision; the names from before timelines first), and
// foreign, if not nil, for every other key under v1/. It streams: memory holds one page of
// the listing. fn's error stops it and is returned.
func Scan(ctx context.Context, s *store.Store, fn func(Object) error, foreign func(key string)) error {
	return scanPrefix(ctx, s, LayoutPrefix, fn, foreign)
}

func scanPrefix(ctx context.Context, s *store.Store, prefix string, fn func(Object) error, foreign func(key string)) error {
	err := s.Walk(ctx, prefix, func(info store.ObjectInfo) error {
		o, err := ParseKey(info.Key)
		if err != nil {
			if foreign != nil {
				foreign(info.Key)
			}
			return nil
		}
		o.Size, o.ModTime = info.Size, info.ModTime
		if o.Kind == KindDelta {
			o.Created = info.ModTime
		}
		return fn(o)
	})
	if err != nil {
		return fmt.Errorf("list backups: %w", err)
	}
	return nil
}

// Index is a bounded summary of the backup objects in a store: what placing a writer, listing
// timelines, choosing a timeline for a restore and planning retention need, without the names
// of every delta.
type Index struct {
	Timelines   []TimelineIndex // lowest first
	Foreign     int             // keys under v1/ that are not backup objects
	ForeignKeys []string        // the first MaxForeignKeys of them
}

// TimelineIndex summarises one timeline.
type TimelineIndex struct {
	Timeline uint32
	Fulls    []Object // every full snapshot, by revision, then creation time
	Deltas   int      // how many deltas
	Bytes    int64    // bytes of all objects, fulls and deltas
	// FirstDelta starts lowest; FurthestDelta reaches the highest revision (the first such in
	// listing order); Newest holds the timeline's newest revision, the delta if a delta and a
	// full snapshot end there.
	FirstDelta, FurthestDelta, Newest Object
	// Runs are the revisions the deltas hold, as maximal runs without a hole (a delta
	// continues a run when it starts at most one revision after its end). Their number grows
	// with the holes, not with the deltas.
	Runs []Range
	// From and To are the creation times of the oldest and newest objects (a full snapshot's
	// name time, a delta's store time).
	From, To time.Time
}

// Objects is how many objects the timeline holds.
func (t TimelineIndex) Objects() int { return len(t.Fulls) + t.Deltas }

// FirstRev is the lowest revision any object of the timeline names.
func (t TimelineIndex) FirstRev() int64 {
	var r int64
	if len(t.Fulls) > 0 {
		r = t.Fulls[0].FirstRev
	}
	if t.Deltas > 0 && (r == 0 || t.FirstDelta.FirstRev < r) {
		r = t.FirstDelta.FirstRev
	}
	return r
}

// NewestRevision is the newest revision the names of the timeline's objects promise.
func (t TimelineIndex) NewestRevision() int64 { return t.Newest.LastRev }

// NewestFull is the timeline's newest full snapshot.
func (t TimelineIndex) NewestFull() (Object, bool) {
	if len(t.Fulls) == 0 {
		return Object{}, false
	}
	return t.Fulls[len(t.Fulls)-1], true
}

// Coverage is the revision ranges the timeline can restore to (Chain.Coverage).
func (t TimelineIndex) Coverage() []Range { return coverage(t.Fulls, t.Runs) }

// NextAfter is the first revision above rev that any object of the timeline holds (0: none).
func (t TimelineIndex) NextAfter(rev int64) int64 {
	var next int64
	for _, f := range t.Fulls {
		if f.FirstRev > rev {
			next = f.FirstRev
			break
		}
	}
	for _, r := range t.Runs {
		switch {
		case r.To <= rev:
			continue
		case r.From > rev:
			if next == 0 || r.From < next {
				next = r.From
			}
		default:
			if next == 0 || rev+1 < next {
				next = rev + 1
			}
		}
		break
	}
	return next
}

// Timeline returns the summary of timeline tl.
func (ix Index) Timeline(tl uint32) (TimelineIndex, bool) {
	i, ok := slices.BinarySearchFunc(ix.Timelines, tl, func(t TimelineIndex, tl uint32) int { return cmpUint32(t.Timeline, tl) })
	if !ok {
		return TimelineIndex{}, false
	}
	return ix.Timelines[i], true
}

// TimelineIDs lists the timelines, lowest first.
func (ix Index) TimelineIDs() []uint32 {
	out := make([]uint32, len(ix.Timelines))
	for i, t := range ix.Timelines {
		out[i] = t.Timeline
	}
	return out
}

// NewestTimeline is the highest timeline (0 when the store holds none).
func (ix Index) NewestTimeline() uint32 {
	if n := len(ix.Timelines); n > 0 {
		return ix.Timelines[n-1].Timeline
	}
	return 0
}

func cmpUint32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ReadIndex lists s once, page by page, and summarises it.
func ReadIndex(ctx context.Context, s *store.Store) (Index, error) {
	var ix Index
	by := map[uint32]*TimelineIndex{}
	err := Scan(ctx, s, func(o Object) error {
		t := by[o.Timeline]
		if t == nil {
			t = &TimelineIndex{Timeline: o.Timeline}
			by[o.Timeline] = t
		}
		t.add(o)
		return nil
	}, func(key string) {
		ix.Foreign++
		if len(ix.ForeignKeys) < MaxForeignKeys {
			ix.ForeignKeys = append(ix.ForeignKeys, key)
		}
	})
	if err != nil {
		return Index{}, err
	}
	for _, t := range by {
		sortFulls(t.Fulls)
		ix.Timelines = append(ix.Timelines, *t)
	}
	sort.Slice(ix.Timelines, func(i, j int) bool { return ix.Timelines[i].Timeline < ix.Timelines[j].Timeline })
	return ix, nil
}

// IndexOf summarises a chain held in memory (as ReadIndex does a store).
func IndexOf(c Chain) Index {
	ix := Index{Foreign: len(c.Foreign)}
	ix.ForeignKeys = c.Foreign[:min(len(c.Foreign), MaxForeignKeys)]
	for _, tl := range c.Timelines() {
		t := TimelineIndex{Timeline: tl}
		for _, o := range c.Timeline(tl).Objects() {
			t.add(o)
		}
		sortFulls(t.Fulls)
		ix.Timelines = append(ix.Timelines, t)
	}
	return ix
}

// add counts o into the summary. Deltas may come in any order.
func (t *TimelineIndex) add(o Object) {
	created := o.Created
	if created.IsZero() {
		created = o.ModTime
	}
	if t.Objects() == 0 || created.Before(t.From) {
		t.From = created
	}
	if created.After(t.To) {
		t.To = created
	}
	t.Bytes += o.Size
	if o.LastRev > t.Newest.LastRev || (o.LastRev == t.Newest.LastRev && (t.Newest.Key == "" || o.Kind == KindDelta)) {
		t.Newest = o
	}
	if o.Kind == KindFull {
		t.Fulls = append(t.Fulls, o)
		return
	}
	if t.Deltas == 0 || o.FirstRev < t.FirstDelta.FirstRev || (o.FirstRev == t.FirstDelta.FirstRev && o.LastRev < t.FirstDelta.LastRev) {
		t.FirstDelta = o
	}
	if o.LastRev > t.FurthestDelta.LastRev {
		t.FurthestDelta = o
	}
	t.Deltas++
	t.Runs = addRun(t.Runs, Range{o.FirstRev, o.LastRev})
}

// addRun adds r to runs, sorted and merged: a run continues another that ends at most one
// revision before it starts.
func addRun(runs []Range, r Range) []Range {
	// The first run that does not end before r can join it.
	i := sort.Search(len(runs), func(i int) bool { return runs[i].To+1 >= r.From })
	if i == len(runs) {
		return append(runs, r)
	}
	if runs[i].From > r.To+1 {
		return slices.Insert(runs, i, r)
	}
	runs[i].From, runs[i].To = min(runs[i].From, r.From), max(runs[i].To, r.To)
	j := i + 1
	for j < len(runs) && runs[j].From <= runs[i].To+1 {
		runs[i].To = max(runs[i].To, runs[j].To)
		j++
	}
	return slices.Delete(runs, i+1, j)
}

// coverage is the revision ranges restorable from fulls (sorted by revision) through delta
// runs: from each full snapshot, through the run that continues it.
func coverage(fulls []Object, runs []Range) []Range {
	var out []Range
	for _, f := range fulls {
		if n := len(out); n > 0 && f.FirstRev <= out[n-1].To+1 {
			out[n-1].To = max(out[n-1].To, f.FirstRev)
		} else {
			out = append(out, Range{f.FirstRev, f.FirstRev})
		}
		r := &out[len(out)-1]
		// The run holding revision r.To+1 continues the range.
		i := sort.Search(len(runs), func(i int) bool { return runs[i].To > r.To })
		if i < len(runs) && runs[i].From <= r.To+1 {
			r.To = runs[i].To
		}
	}
	return out
}

func sortFulls(fulls []Object) {
	sort.SliceStable(fulls, func(i, j int) bool {
		a, b := fulls[i], fulls[j]
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
}

// timelinePrefixes are the key prefixes that hold timeline tl's objects of one kind: its
// directory, and for timeline 1 the names from before timelines.
func timelinePrefixes(tl uint32, kind Kind) []string {
	dir := fullDir
	legacy := legacyFull
	if kind == KindDelta {
		dir, legacy = deltaDir, legacyDelta
	}
	p := []string{TimelineDir(tl) + dir}
	if tl == 1 {
		p = append(p, legacy)
	}
	return p
}

// Deltas streams the deltas of timeline tl in chain order (by first revision, then last
// revision), page by page. The deltas of timeline 1 named before timelines are merged in.
func Deltas(ctx context.Context, s *store.Store, tl uint32) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		prefixes := timelinePrefixes(tl, KindDelta)
		type src struct {
			next func() (store.ObjectInfo, error, bool)
			stop func()
			cur  Object
			ok   bool
		}
		var srcs []*src
		defer func() {
			for _, sr := range srcs {
				sr.stop()
			}
		}()
		advance := func(sr *src) error {
			for {
				info, err, ok := sr.next()
				if !ok {
					sr.ok = false
					return nil
				}
				if err != nil {
					return fmt.Errorf("list the deltas of timeline %d: %w", tl, err)
				}
				o, perr := ParseKey(info.Key)
				if perr != nil || o.Kind != KindDelta || o.Timeline != tl {
					continue // foreign: Scan reports those
				}
				o.Size, o.ModTime, o.Created = info.Size, info.ModTime, info.ModTime
				if sr.ok && deltaLess(o, sr.cur) {
					return fmt.Errorf("list the deltas of timeline %d: the store listed %s after %s: its listing is not in key order", tl, o.Key, sr.cur.Key)
				}
				sr.cur, sr.ok = o, true
				return nil
			}
		}
		for _, p := range prefixes {
			next, stop := iter.Pull2(s.All(ctx, p))
			sr := &src{next: next, stop: stop}
			srcs = append(srcs, sr)
			if err := advance(sr); err != nil {
				yield(Object{}, err)
				return
			}
		}
		for {
			var best *src
			for _, sr := range srcs {
				if sr.ok && (best == nil || deltaLess(sr.cur, best.cur)) {
					best = sr
				}
			}
			if best == nil {
				return
			}
			if !yield(best.cur, nil) {
				return
			}
			if err := advance(best); err != nil {
				yield(Object{}, err)
				return
			}
		}
	}
}

func deltaLess(a, b Object) bool {
	if a.FirstRev != b.FirstRev {
		return a.FirstRev < b.FirstRev
	}
	if a.LastRev != b.LastRev {
		return a.LastRev < b.LastRev
	}
	return a.Key < b.Key
}

// Fulls lists the full snapshots of timeline tl (few: retention keeps tens), by revision.
func Fulls(ctx context.Context, s *store.Store, tl uint32) ([]Object, error) {
	var out []Object
	for _, p := range timelinePrefixes(tl, KindFull) {
		err := scanPrefix(ctx, s, p, func(o Object) error {
			if o.Kind == KindFull && o.Timeline == tl {
				out = append(out, o)
			}
			return nil
		}, nil)
		if err != nil {
			return nil, err
		}
	}
	sortFulls(out)
	return out, nil
}

// LoadTimeline reads timeline tl as a Chain holding every full snapshot and only the deltas
// keep accepts (nil: none), streaming past the others. Callers keep what one plan needs:
// the deltas of one restore, of one full snapshot's period.
func LoadTimeline(ctx context.Context, s *store.Store, tl uint32, keep func(Object) bool) (Chain, error) {
	fulls, err := Fulls(ctx, s, tl)
	if err != nil {
		return Chain{}, err
	}
	c := Chain{Fulls: fulls}
	if keep == nil {
		return c, nil
	}
	for d, err := range Deltas(ctx, s, tl) {
		if err != nil {
			return Chain{}, err
		}
		if keep(d) {
			c.Deltas = append(c.Deltas, d)
		}
	}
	return c, nil
}

// DeltasAfter keeps the deltas that reach past revision rev (for LoadTimeline).
func DeltasAfter(rev int64) func(Object) bool {
	return func(d Object) bool { return d.LastRev > rev }
}

// DeltasBetween keeps the deltas that reach past revision from and start at or before to+1:
// those a restore from a full snapshot at from to revision to can use (for LoadTimeline).
func DeltasBetween(from, to int64) func(Object) bool {
	return func(d Object) bool { return d.LastRev > from && d.FirstRev <= to+1 }
}
