package backup

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/store"
)

// TestIndexAgreesWithChain: the bounded summary (ReadIndex, streamed) says what the whole
// chain in memory says: per timeline the full snapshots, the counts, the ends and what can be
// restored, over holes, overlaps, deltas before the oldest full and the names from before
// timelines mixed into timeline 1; Deltas streams a timeline's deltas in chain order, the
// two layouts of timeline 1 merged; LoadTimeline keeps only what it is asked for.
func TestIndexAgreesWithChain(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(ctx, "file://"+t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var keys []string
	// Timeline 1: old names, then new ones; a hole at 300-309, an overlap, a delta before the
	// oldest full.
	keys = append(keys, legacyFull+fmt.Sprintf("%020d-%d%s", 100, at.Unix(), fullSuffix))
	keys = append(keys, legacyDelta+fmt.Sprintf("%020d-%020d%s", 50, 60, deltaSuffix))
	for r := int64(101); r < 300; r += 10 {
		keys = append(keys, legacyDelta+fmt.Sprintf("%020d-%020d%s", r, r+9, deltaSuffix))
	}
	keys = append(keys, DeltaKey(1, 295, 299)) // overlap, new layout
	keys = append(keys, FullKey(1, 350, at.Add(time.Hour)))
	for r := int64(310); r < 600; r += 10 {
		keys = append(keys, DeltaKey(1, r, r+9))
	}
	// Timeline 2: deltas only. Timeline 3: a full and its deltas.
	keys = append(keys, DeltaKey(2, 10, 19), DeltaKey(2, 20, 29))
	keys = append(keys, FullKey(3, 1000, at.Add(2*time.Hour)), DeltaKey(3, 1001, 1010))
	keys = append(keys, "v1/README", "v1/timeline/junk")
	for _, k := range keys {
		w, err := s.NewWriter(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("x"))
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}

	c, err := ListChain(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := ReadIndex(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	want := IndexOf(c)
	if ix.Foreign != 2 || want.Foreign != 2 {
		t.Fatalf("foreign keys: index %d, chain %d; want 2", ix.Foreign, want.Foreign)
	}
	if !reflect.DeepEqual(ix.TimelineIDs(), []uint32{1, 2, 3}) {
		t.Fatalf("timelines %v, want 1 2 3", ix.TimelineIDs())
	}
	for i, got := range ix.Timelines {
		w := want.Timelines[i]
		tl := got.Timeline
		if len(got.Fulls) != len(w.Fulls) || got.Deltas != w.Deltas || got.Bytes != w.Bytes || got.Newest.Key != w.Newest.Key ||
			got.FirstDelta.Key != w.FirstDelta.Key || got.FurthestDelta.Key != w.FurthestDelta.Key || !reflect.DeepEqual(got.Runs, w.Runs) {
			t.Fatalf("timeline %d: index %+v\nchain %+v", tl, got, w)
		}
		tc := c.Timeline(tl)
		if cov, wcov := got.Coverage(), tc.Coverage(); !reflect.DeepEqual(cov, wcov) {
			t.Fatalf("timeline %d: index coverage %v, chain coverage %v", tl, cov, wcov)
		}
		var streamed []string
		for d, err := range Deltas(ctx, s, tl) {
			if err != nil {
				t.Fatal(err)
			}
			streamed = append(streamed, d.Key)
		}
		var inChain []string
		for _, d := range tc.Deltas {
			inChain = append(inChain, d.Key)
		}
		if !reflect.DeepEqual(streamed, inChain) {
			t.Fatalf("timeline %d: Deltas streamed %v\nthe chain orders them %v", tl, streamed, inChain)
		}
		// The streaming check finds what Check finds.
		k := newChecker(tc.Fulls)
		for _, d := range tc.Deltas {
			k.delta(d)
		}
		if got, w := fmt.Sprint(k.finish()), fmt.Sprint(tc.checkTimeline()); got != w {
			t.Fatalf("timeline %d: checker %s, Check %s", tl, got, w)
		}
	}
	t1, _ := ix.Timeline(1)
	if cov := t1.Coverage(); fmt.Sprint(cov) != "[100-300 350-599]" {
		t.Fatalf("timeline 1 restores %v, want 100-300 and 350-599", cov)
	}
	part, err := LoadTimeline(ctx, s, 1, DeltasBetween(350, 400))
	if err != nil {
		t.Fatal(err)
	}
	if len(part.Fulls) != 2 || len(part.Deltas) != 6 || part.Deltas[0].FirstRev != 350 || part.Deltas[5].LastRev != 409 {
		t.Fatalf("LoadTimeline(350-400) kept %d fulls, deltas %v; want both fulls and the 6 deltas from 350 to 409", len(part.Fulls), part.Deltas)
	}
	if p, err := part.Plan(400); err != nil || p.Full.FirstRev != 350 || len(p.Deltas) != 6 {
		t.Fatalf("plan to 400 from the loaded part: %+v, %v", p, err)
	}
}
