package backup

import (
	"slices"
	"time"
)

// Window is what one timeline can restore to without a break: every revision from
// FirstRevision to LastRevision, and every point in time from FirstTime on (a restore to a
// later time than LastTime restores LastRevision).
type Window struct {
	Timeline      uint32
	FirstRevision int64
	FirstTime     time.Time
	LastRevision  int64
	LastTime      time.Time
}

// Window is what the timeline can restore up to its newest revision: the restorable range
// (Coverage) that reaches it, which starts at the oldest full snapshot from which the deltas
// continue without a hole to the newest revision. ok=false: nothing of the timeline can be
// restored up to its newest revision (no full snapshot, or a hole cuts the newest deltas off
// from every full snapshot).
func (t TimelineIndex) Window() (w Window, ok bool) {
	cov := t.Coverage()
	if len(cov) == 0 || cov[len(cov)-1].To != t.NewestRevision() {
		return Window{}, false
	}
	r := cov[len(cov)-1]
	i := slices.IndexFunc(t.Fulls, func(f Object) bool { return f.FirstRev == r.From })
	return Window{Timeline: t.Timeline, FirstRevision: r.From, FirstTime: t.Fulls[i].ProvenAt(), LastRevision: r.To, LastTime: t.Newest.ProvenAt()}, true
}

// WithoutFulls is t after retention deleted the full snapshots gone names: what it can
// restore then. The summary of the deltas stays as it is: retention deletes only the deltas
// that end at or below the oldest full snapshot it keeps, which nothing restorable reaches.
func (t TimelineIndex) WithoutFulls(gone map[string]bool) TimelineIndex {
	t.Fulls = slices.DeleteFunc(slices.Clone(t.Fulls), func(f Object) bool { return gone[f.Key] })
	return t
}

// Add counts o, an object just stored on the timeline, into the summary.
func (t *TimelineIndex) Add(o Object) {
	t.add(o)
	sortFulls(t.Fulls)
}

// ProvenAt is when o's newest revision is known to have existed: a delta is made after all
// of its events were committed, so at its creation; a full snapshot's name records, to the
// second, when it began, and the revision in its name was read right then, so it counts from
// the end of that second. A restore to a point in time restores what the objects made by
// then prove.
func (o Object) ProvenAt() time.Time {
	if o.Kind == KindFull {
		return o.Created.Add(time.Second)
	}
	if o.Created.IsZero() {
		return o.ModTime
	}
	return o.Created
}
