// Package restoretest builds backup stores for the tests of the restore paths.
package restoretest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/testutil"
)

// Cluster is what TwoClusters stored of one cluster.
type Cluster struct {
	ID       uint64
	Timeline uint32
	// Revision is a revision of the cluster's history, and Time a time at which it was its
	// newest stored revision: a restore to Time restores Revision.
	Revision int64
	Time     time.Time
	// Newest is the newest revision stored.
	Newest int64
}

// TwoClusters backs two clusters up into one store (the same prefix), as two sidecars
// would: cluster 0 on timeline 1, cluster 1 on timeline 2, each a full snapshot and deltas.
// Their histories overlap in time: cluster 0's Time is inside timeline 2's time range (the
// store's newest), and their revisions differ. It returns the store's URL.
func TwoClusters(t *testing.T) (storeURL string, cs [2]Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	storeURL = "file://" + t.TempDir()
	s, err := store.Open(ctx, storeURL, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	type running struct {
		cli     *clientv3.Client
		current atomic.Int64
		stop    func()
	}
	var rs [2]*running
	for i := range rs {
		_, cli, ep := testutil.EmbeddedEtcd(t)
		r := &running{cli: cli}
		rs[i] = r
		put(t, cli, fmt.Sprintf("c%d", i), 10*(i+1))
		st, err := cli.Status(ctx, ep)
		if err != nil {
			t.Fatal(err)
		}
		cs[i].ID, cs[i].Timeline = st.Header.ClusterId, uint32(i+1)
		m := snapshotter.Member{Client: cli, Endpoint: ep}
		tl := snapshotter.Timeline{ID: cs[i].Timeline, ClusterID: cs[i].ID}
		full, err := snapshotter.Full(ctx, m, s, tl, nil)
		if err != nil {
			t.Fatal(err)
		}
		dctx, dcancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = snapshotter.RunDeltas(dctx, m, s, full.Revision+1, snapshotter.DeltaOptions{Period: 100 * time.Millisecond, Timeline: tl, EtcdVersion: "3.6.0",
				OnCurrent: func(rev int64, _ time.Time) { r.current.Store(rev) }})
		}()
		r.stop = func() { dcancel(); wg.Wait() }
		t.Cleanup(r.stop)
		// Timeline 2 begins a second after timeline 1, to the second of its full snapshot's name.
		time.Sleep(1100 * time.Millisecond)
	}
	stored := func(i int) int64 {
		rev := put(t, rs[i].cli, fmt.Sprintf("c%d", i), 0)
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("cluster %d's deltas at revision %d", i, rev), func() error {
			if got := rs[i].current.Load(); got < rev {
				return fmt.Errorf("stored up to %d", got)
			}
			return nil
		})
		return rev
	}
	for i := range rs {
		put(t, rs[i].cli, fmt.Sprintf("c%d", i), 20*(i+1))
		cs[i].Revision = stored(i)
		time.Sleep(200 * time.Millisecond)
		cs[i].Time = time.Now()
		time.Sleep(200 * time.Millisecond)
	}
	for i := range rs {
		put(t, rs[i].cli, fmt.Sprintf("c%d", i), 30)
	}
	for i := range rs {
		cs[i].Newest = stored(i)
		rs[i].stop()
	}
	return storeURL, cs
}

// put writes n values (n == 0: none) and returns the revision.
func put(t *testing.T, cli *clientv3.Client, tag string, n int) int64 {
	t.Helper()
	for i := range n {
		if _, err := cli.Put(context.Background(), fmt.Sprintf("/k/%d", i%7), fmt.Sprintf("%s-%d", tag, i)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := cli.Get(context.Background(), "/k/0")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}
