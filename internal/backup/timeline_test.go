package backup

import (
	"context"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/store"
)

func TestPlace(t *testing.T) {
	const a, b = 0xa, 0xb
	tl := func(n uint32, cluster uint64, newest int64) TimelineInfo {
		return TimelineInfo{Timeline: n, ClusterID: cluster, Newest: Object{Kind: KindDelta, LastRev: newest}}
	}
	for _, tc := range []struct {
		name    string
		tls     []TimelineInfo
		cluster uint64
		rev     int64
		want    Placement // Reason: a substring
	}{
		{"empty store: timeline 1 starts", nil, a, 5,
			Placement{Timeline: 1, New: true, Reason: "the store holds no backups"}},
		{"the member is at the timeline's newest revision: continue", []TimelineInfo{tl(1, a, 100)}, a, 100,
			Placement{Timeline: 1, Resume: 100, Reason: "continues after revision 100"}},
		{"the member is past it: continue", []TimelineInfo{tl(1, a, 100)}, a, 150,
			Placement{Timeline: 1, Resume: 100, Reason: "timeline 1 of cluster a"}},
		{"recovery from a survivor behind the store: new timeline", []TimelineInfo{tl(1, a, 100)}, a, 90,
			Placement{Timeline: 2, New: true, Reason: "revision 90 is below revision 100, the newest of timeline 1"}},
		{"a new cluster ID (restore, forced new cluster): new timeline", []TimelineInfo{tl(1, a, 100)}, b, 150,
			Placement{Timeline: 2, New: true, Reason: "no timeline of cluster b"}},
		{"the cluster's newest timeline continues, not an older one", []TimelineInfo{tl(1, a, 500), tl(2, a, 100)}, a, 120,
			Placement{Timeline: 2, Resume: 100}},
		{"another cluster's newer timeline is never written to", []TimelineInfo{tl(1, a, 100), tl(2, b, 900)}, a, 120,
			Placement{Timeline: 1, Resume: 100}},
		{"a second cluster on the prefix continues its own timeline", []TimelineInfo{tl(1, a, 100), tl(2, b, 900)}, b, 950,
			Placement{Timeline: 2, Resume: 900}},
		{"a restart below its own timeline numbers above every timeline", []TimelineInfo{tl(1, a, 100), tl(2, b, 900), tl(3, a, 50)}, b, 10,
			Placement{Timeline: 4, New: true, Reason: "below revision 900, the newest of timeline 2"}},
		{"headers that disagree with the chain: new timeline", []TimelineInfo{{Timeline: 1, ClusterID: a, Newest: Object{LastRev: 100}, Disagrees: "bad header"}}, a, 150,
			Placement{Timeline: 2, New: true, Reason: "timeline 1 cannot be continued: bad header"}},
		{"a damaged header (no cluster ID known) is no timeline of this cluster", []TimelineInfo{{Timeline: 1, Newest: Object{LastRev: 100}, Disagrees: "damaged"}}, a, 150,
			Placement{Timeline: 2, New: true, Reason: "no timeline of cluster a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Place(tc.tls, tc.cluster, tc.rev)
			if got.Timeline != tc.want.Timeline || got.New != tc.want.New || got.Resume != tc.want.Resume || !strings.Contains(got.Reason, tc.want.Reason) {
				t.Fatalf("Place = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestOwnTimeline(t *testing.T) {
	const a, a2, b = 0xa, 0xa2, 0xb
	tl := func(n uint32, cluster uint64) TimelineInfo { return TimelineInfo{Timeline: n, ClusterID: cluster} }
	for _, tc := range []struct {
		name string
		tls  []TimelineInfo
		ids  []uint64
		want uint32 // 0: none
	}{
		{"empty store", nil, []uint64{a}, 0},
		{"no cluster ID known", []TimelineInfo{tl(1, a)}, nil, 0},
		{"the cluster's only timeline", []TimelineInfo{tl(1, a)}, []uint64{a}, 1},
		{"another cluster's newer timeline is not the cluster's", []TimelineInfo{tl(1, a), tl(2, b)}, []uint64{a}, 1},
		{"the newest of the cluster's timelines (a history restarted below the store)", []TimelineInfo{tl(1, a), tl(2, b), tl(3, a)}, []uint64{a}, 3},
		{"a timeline written under the cluster's earlier ID (before a restore)", []TimelineInfo{tl(1, a), tl(2, b)}, []uint64{a2, a}, 1},
		{"the newest timeline of any of the cluster's IDs", []TimelineInfo{tl(1, a), tl(2, a2), tl(3, b)}, []uint64{a, a2}, 2},
		{"only other clusters' timelines", []TimelineInfo{tl(1, b), tl(2, b)}, []uint64{a, a2}, 0},
		{"a timeline whose headers disagree is no one's", []TimelineInfo{tl(1, a), {Timeline: 2, ClusterID: a, Disagrees: "two clusters"}}, []uint64{a}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := OwnTimeline(tc.tls, tc.ids)
			if ok != (tc.want != 0) || got.Timeline != tc.want {
				t.Fatalf("OwnTimeline = timeline %d, %t; want %d", got.Timeline, ok, tc.want)
			}
		})
	}
}

// putObject writes an object named o, with a header of cluster and an empty payload.
func putObject(t *testing.T, s *store.Store, o Object, cluster uint64) {
	t.Helper()
	hdr := Header{Kind: o.Kind, Timeline: o.Timeline, Compression: CompressionNone, ClusterID: cluster, FirstRev: o.FirstRev, LastRev: o.LastRev, Created: t0}
	if _, err := WriteObject(context.Background(), s, o.Key, hdr, func(w *ObjectWriter) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestObserveTimelines(t *testing.T) {
	s := openStore(t, "mem://"+t.Name())
	putObject(t, s, fullOn(1, 100), 0xa)
	putObject(t, s, deltaOn(1, 101, 200), 0xa)
	putObject(t, s, fullOn(2, 50), 0xb)
	putObject(t, s, fullOn(3, 10), 0xa)
	putObject(t, s, deltaOn(3, 11, 20), 0xc) // another cluster wrote into timeline 3
	mislabelled := fullOn(4, 10)
	putObject(t, s, mislabelled, 0xa)
	// A delta whose header says other revisions than its name.
	putObject(t, s, Object{Key: DeltaKey(4, 11, 30), Kind: KindDelta, Timeline: 4, FirstRev: 11, LastRev: 25}, 0xa)
	c, err := ListChain(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	tls, err := ObserveTimelines(context.Background(), s, c)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		TimelineInfo
		newest string
	}{
		{TimelineInfo{Timeline: 1, ClusterID: 0xa}, DeltaKey(1, 101, 200)},
		{TimelineInfo{Timeline: 2, ClusterID: 0xb}, fullOn(2, 50).Key},
		{TimelineInfo{Timeline: 3, ClusterID: 0xc, Disagrees: "is of cluster a, its newest object"}, DeltaKey(3, 11, 20)},
		{TimelineInfo{Timeline: 4, Disagrees: "the header says revisions 11-25, the name says 11-30"}, DeltaKey(4, 11, 30)},
	}
	if len(tls) != len(want) {
		t.Fatalf("ObserveTimelines = %+v", tls)
	}
	for i, w := range want {
		g := tls[i]
		if g.Timeline != w.Timeline || g.ClusterID != w.ClusterID || g.Newest.Key != w.newest || (g.Disagrees == "") != (w.Disagrees == "") || !strings.Contains(g.Disagrees, w.Disagrees) {
			t.Errorf("timeline %d: %+v\nwant %+v", w.Timeline, g, w)
		}
	}
}
