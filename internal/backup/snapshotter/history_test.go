package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/testutil"
)

// TestDeltasFromPastTheMemberAreAHistoryRestart: a capture that continues from a revision the
// member does not have (the store holds another history above the member's) ends at once
// with ErrHistoryRestarted and never says the store is current. It used to end each round at
// once and report the store's revision as stored, so BackupReady read true while nothing was
// stored, and deltas resumed, on top of the other history, once the member passed it.
func TestDeltasFromPastTheMemberAreAHistoryRestart(t *testing.T) {
	_, cli, ep := testutil.EmbeddedEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cli.Put(ctx, "/k", "v")
	if err != nil {
		t.Fatal(err)
	}
	s := openStore(t, "mem://"+t.Name())
	var currents atomic.Int64
	err = RunDeltas(ctx, Member{Client: cli, Endpoint: ep}, s, r.Header.Revision+100, DeltaOptions{
		Period: 50 * time.Millisecond, Timeline: timelineOf(t, cli, ep),
		OnCurrent: func(int64, time.Time) { currents.Add(1) },
	})
	if !errors.Is(err, ErrHistoryRestarted) {
		t.Fatalf("RunDeltas from past the member's revision %d: %v", r.Header.Revision, err)
	}
	if currents.Load() != 0 {
		t.Fatalf("OnCurrent was called %d times for revisions the member does not have", currents.Load())
	}
	// From the member's next revision it is no restart.
	err = RunDeltas(ctx, Member{Client: cli, Endpoint: ep}, s, r.Header.Revision+1, DeltaOptions{
		Period: 50 * time.Millisecond, Timeline: timelineOf(t, cli, ep),
		OnCurrent: func(int64, time.Time) { currents.Add(1); cancel() },
	})
	if err != nil || currents.Load() != 1 {
		t.Fatalf("RunDeltas from the member's next revision: %v, %d OnCurrent calls", err, currents.Load())
	}
}

// TestCaptureOfAnotherClusterIsRefused: neither deltas nor full snapshots of a member of
// another cluster go to a timeline: two clusters given one prefix cannot write into each
// other's timelines.
func TestCaptureOfAnotherClusterIsRefused(t *testing.T) {
	_, cli, ep := testutil.EmbeddedEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cli.Put(ctx, "/k", "v")
	if err != nil {
		t.Fatal(err)
	}
	s := openStore(t, "mem://"+t.Name())
	other := timelineOf(t, cli, ep)
	other.ClusterID++
	m := Member{Client: cli, Endpoint: ep}
	if _, err := Full(ctx, m, s, other, nil); !errors.Is(err, ErrHistoryRestarted) {
		t.Fatalf("full snapshot into another cluster's timeline: %v", err)
	}
	if err := RunDeltas(ctx, m, s, r.Header.Revision, DeltaOptions{Period: 50 * time.Millisecond, Timeline: other}); !errors.Is(err, ErrHistoryRestarted) {
		t.Fatalf("deltas into another cluster's timeline: %v", err)
	}
	if objs, err := s.List(ctx, backup.LayoutPrefix); err != nil || len(objs) != 0 {
		t.Fatalf("stored %v (%v), want nothing", objs, err)
	}
}

// TestPlaceComparesTheNewestRevisionsEvents: a member past a timeline's newest revision
// continues it only if its events of that revision are the stored ones; a member whose history
// restarted below the timeline and has since passed it starts a new timeline.
func TestPlaceComparesTheNewestRevisionsEvents(t *testing.T) {
	_, cli, ep := testutil.EmbeddedEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := Member{Client: cli, Endpoint: ep}
	s := openStore(t, "file://"+t.TempDir())
	tl := timelineOf(t, cli, ep)
	full, err := Full(ctx, m, s, tl, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cli.Put(ctx, "/k", "real")
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithCancel(ctx)
	if err := RunDeltas(dctx, m, s, full.Revision+1, DeltaOptions{Period: 50 * time.Millisecond, Timeline: tl,
		OnCurrent: func(rev int64, _ time.Time) {
			if rev >= r.Header.Revision {
				dcancel()
			}
		}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/k", "later"); err != nil {
		t.Fatal(err)
	}
	p, err := Place(ctx, m, s)
	if err != nil || p.Placement.New || p.Placement.Timeline != 1 || p.Placement.Resume != r.Header.Revision {
		t.Fatalf("Place on the member's own history: %+v, %v", p.Placement, err)
	}
	// A full snapshot after the deltas: the events of the delta before it agree.
	f2, err := Full(ctx, m, s, tl, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err = Place(ctx, m, s)
	if err != nil || p.Placement.New || p.Placement.Resume != f2.Revision {
		t.Fatalf("Place on the member's own history ending with a full snapshot: %+v, %v", p.Placement, err)
	}

	// The store's next revision holds another history than the member's.
	next := r.Header.Revision + 1
	other := &mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte("/k"), Value: []byte("other"), CreateRevision: r.Header.Revision, ModRevision: next, Version: 2}}
	hdr := backup.Header{Kind: backup.KindDelta, Timeline: 1, Compression: backup.CompressionZstd, ClusterID: tl.ClusterID, FirstRev: next, LastRev: next}
	if _, err := backup.WriteObject(ctx, s, backup.DeltaKey(1, next, next), hdr, func(w *backup.ObjectWriter) error {
		return backup.NewEventWriter(w).WriteEvent(other)
	}); err != nil {
		t.Fatal(err)
	}
	p, err = Place(ctx, m, s)
	if err != nil || !p.Placement.New || p.Placement.Timeline != 2 || !strings.Contains(p.Placement.Reason, fmt.Sprintf("events of revision %d are not those stored", next)) {
		t.Fatalf("Place on a member past another history: %+v, %v", p.Placement, err)
	}
	// Also when a full snapshot follows that delta.
	if _, err := cli.Put(ctx, "/k", "latest"); err != nil {
		t.Fatal(err)
	}
	if _, err := Full(ctx, m, s, tl, nil); err != nil {
		t.Fatal(err)
	}
	p, err = Place(ctx, m, s)
	if err != nil || !p.Placement.New || !strings.Contains(p.Placement.Reason, fmt.Sprintf("events of revision %d are not those stored", next)) {
		t.Fatalf("Place on a member past another history, ending with a full snapshot: %+v, %v", p.Placement, err)
	}
}

// TestPlaceComparesEveryRevisionOfTheNewestDelta: histories that agree at the newest stored
// revision but not before it (the same request landing at the same revision in both, as a
// request retried after a failover may) are told apart: Place compares every revision of the
// newest delta, and starts a new timeline naming the first that differs.
func TestPlaceComparesEveryRevisionOfTheNewestDelta(t *testing.T) {
	_, cli, ep := testutil.EmbeddedEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := Member{Client: cli, Endpoint: ep}
	s := openStore(t, "file://"+t.TempDir())
	tl := timelineOf(t, cli, ep)
	full, err := Full(ctx, m, s, tl, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := cli.Put(ctx, "/a", "real")
	if err != nil {
		t.Fatal(err)
	}
	b, err := cli.Put(ctx, "/b", "same")
	if err != nil {
		t.Fatal(err)
	}
	first, last := a.Header.Revision, b.Header.Revision
	if first != full.Revision+1 || last != first+1 {
		t.Fatalf("revisions %d and %d after the full snapshot at %d", first, last, full.Revision)
	}
	// The store holds another history at first, and the member's own event at last.
	events := []*mvccpb.Event{
		{Kv: &mvccpb.KeyValue{Key: []byte("/a"), Value: []byte("other"), CreateRevision: first, ModRevision: first, Version: 1}},
		{Kv: &mvccpb.KeyValue{Key: []byte("/b"), Value: []byte("same"), CreateRevision: last, ModRevision: last, Version: 1}},
	}
	hdr := backup.Header{Kind: backup.KindDelta, Timeline: 1, Compression: backup.CompressionZstd, ClusterID: tl.ClusterID, FirstRev: first, LastRev: last}
	if _, err := backup.WriteObject(ctx, s, backup.DeltaKey(1, first, last), hdr, func(w *backup.ObjectWriter) error {
		ew := backup.NewEventWriter(w)
		for _, ev := range events {
			if err := ew.WriteEvent(ev); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	p, err := Place(ctx, m, s)
	if err != nil || !p.Placement.New || p.Placement.Timeline != 2 || !strings.Contains(p.Placement.Reason, fmt.Sprintf("events of revision %d are not those stored", first)) {
		t.Fatalf("Place on a member whose history agrees at the newest stored revision only: %+v, %v", p.Placement, err)
	}
	// The member's own delta of the same revisions continues timeline 1.
	events[0].Kv.Value = []byte("real")
	if _, err := backup.WriteObject(ctx, s, backup.DeltaKey(1, first, last), hdr, func(w *backup.ObjectWriter) error {
		ew := backup.NewEventWriter(w)
		for _, ev := range events {
			if err := ew.WriteEvent(ev); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	p, err = Place(ctx, m, s)
	if err != nil || p.Placement.New || p.Placement.Timeline != 1 || p.Placement.Resume != last {
		t.Fatalf("Place on the member's own history: %+v, %v", p.Placement, err)
	}
	// A member that compacted the delta's first revisions away still shows the rest of them.
	if _, err := cli.Compact(ctx, last); err != nil {
		t.Fatal(err)
	}
	p, err = Place(ctx, m, s)
	if err != nil || p.Placement.New || p.Placement.Timeline != 1 || p.Placement.Resume != last {
		t.Fatalf("Place on the member's own history, compacted to the delta's newest revision: %+v, %v", p.Placement, err)
	}
	// One that compacted every revision of it away cannot.
	c, err := cli.Put(ctx, "/c", "later")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, c.Header.Revision); err != nil {
		t.Fatal(err)
	}
	p, err = Place(ctx, m, s)
	if err != nil || !p.Placement.New || p.Placement.Timeline != 2 || !strings.Contains(p.Placement.Reason, "compacted") {
		t.Fatalf("Place on a member that compacted the newest stored delta away: %+v, %v", p.Placement, err)
	}
}
