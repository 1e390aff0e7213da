package backup

import (
	"testing"
	"time"
)

// TestWindow: a timeline's window is the revisions and times a restore reaches without a
// break up to its newest revision: it starts at the oldest full snapshot from which the
// deltas continue without a hole to the newest revision, a full snapshot counting from the
// end of the second its name records; a hole that cuts the newest deltas off leaves none.
// Objects stored later extend it, and retention's deletions move its start.
func TestWindow(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	full := func(tl uint32, rev int64, at time.Time) Object {
		o, err := ParseKey(FullKey(tl, rev, at))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	delta := func(tl uint32, from, to int64, at time.Time) Object {
		o, err := ParseKey(DeltaKey(tl, from, to))
		if err != nil {
			t.Fatal(err)
		}
		o.Created = at
		return o
	}
	index := func(objs ...Object) TimelineIndex {
		ix := IndexOf(NewChain(objs))
		if len(ix.Timelines) != 1 {
			t.Fatalf("%d timelines", len(ix.Timelines))
		}
		return ix.Timelines[0]
	}
	// Two full snapshots cut apart by a hole; a third after the second; deltas to 250.
	gapped := []Object{
		full(1, 100, t0), delta(1, 101, 150, t0.Add(10*time.Minute)),
		delta(1, 161, 200, t0.Add(70*time.Minute)), full(1, 180, t0.Add(time.Hour)),
		full(1, 210, t0.Add(90*time.Minute)), delta(1, 201, 250, t0.Add(2*time.Hour)),
	}
	for _, tc := range []struct {
		name string
		ti   TimelineIndex
		want Window // zero: none
	}{
		{"the oldest full snapshot the chain to the newest revision continues, not one before a hole", index(gapped...),
			Window{Timeline: 1, FirstRevision: 180, FirstTime: t0.Add(time.Hour + time.Second), LastRevision: 250, LastTime: t0.Add(2 * time.Hour)}},
		{"a full snapshot alone, from the end of its second", index(full(1, 100, t0)),
			Window{Timeline: 1, FirstRevision: 100, FirstTime: t0.Add(time.Second), LastRevision: 100, LastTime: t0.Add(time.Second)}},
		{"deltas without a full snapshot: none", index(delta(1, 1, 50, t0)), Window{}},
		{"a hole cuts the newest deltas off: none", index(full(1, 100, t0), delta(1, 101, 150, t0), delta(1, 160, 200, t0)), Window{}},
		{"retention deleted the oldest full snapshot of the window: the next one starts it",
			index(gapped...).WithoutFulls(map[string]bool{gapped[0].Key: true, gapped[3].Key: true}),
			Window{Timeline: 1, FirstRevision: 210, FirstTime: t0.Add(90*time.Minute + time.Second), LastRevision: 250, LastTime: t0.Add(2 * time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.ti.Window()
			if ok != (tc.want != Window{}) || got != tc.want {
				t.Fatalf("Window() = %+v, %t; want %+v", got, ok, tc.want)
			}
		})
	}

	t.Run("objects stored later", func(t *testing.T) {
		ti := index(gapped...)
		ti.Add(delta(1, 251, 260, t0.Add(3*time.Hour)))
		if w, ok := ti.Window(); !ok || w.FirstRevision != 180 || w.LastRevision != 260 || !w.LastTime.Equal(t0.Add(3*time.Hour)) {
			t.Fatalf("after a delta that continues the chain: %+v, %t", w, ok)
		}
		ti.Add(delta(1, 270, 280, t0.Add(4*time.Hour)))
		if w, ok := ti.Window(); ok {
			t.Fatalf("after a hole: %+v; want none", w)
		}
		ti.Add(full(1, 285, t0.Add(5*time.Hour)))
		if w, ok := ti.Window(); !ok || w.FirstRevision != 285 || w.LastRevision != 285 {
			t.Fatalf("after a full snapshot above the hole: %+v, %t; want it alone", w, ok)
		}
	})

	t.Run("only the timeline's own objects count", func(t *testing.T) {
		// Timeline 2 (another cluster's, or this one's before a restore) holds a full
		// snapshot inside timeline 1's hole, and newer revisions: neither counts for timeline 1.
		ix := IndexOf(NewChain([]Object{
			full(1, 100, t0), delta(1, 101, 150, t0.Add(time.Hour)), delta(1, 161, 200, t0.Add(2*time.Hour)),
			full(2, 155, t0.Add(30*time.Minute)), delta(2, 156, 900, t0.Add(3*time.Hour)),
		}))
		one, _ := ix.Timeline(1)
		if w, ok := one.Window(); ok {
			t.Fatalf("timeline 1: %+v; want none (its hole is not bridged by timeline 2)", w)
		}
		two, _ := ix.Timeline(2)
		if w, ok := two.Window(); !ok || w.Timeline != 2 || w.FirstRevision != 155 || w.LastRevision != 900 {
			t.Fatalf("timeline 2: %+v, %t; want 155-900", w, ok)
		}
	})
}
