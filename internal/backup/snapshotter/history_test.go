package snapshotter

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

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
