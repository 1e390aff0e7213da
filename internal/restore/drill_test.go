package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/testutil"
)

// drillCluster is a real 3-member cluster backed up into a mem:// store: writes and a
// compaction before a full snapshot of the leader, deltas after it, and a compaction of the
// live cluster past that snapshot once the deltas hold everything.
type drillCluster struct {
	store      *store.Store
	cli        *clientv3.Client
	leader     string
	last       int64
	compactRev int64
}

func backedUpCluster(t *testing.T) drillCluster {
	t.Helper()
	ctx := testCtx(t)
	ms := testutil.Cluster(t, 3)
	var leader testutil.ClusterMember
	for _, m := range ms {
		st, err := m.Client.Status(ctx, m.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		if st.Leader == st.Header.MemberId {
			leader = m
		}
	}
	if leader.Client == nil {
		t.Fatal("no member leads")
	}
	cli := ms[0].Client // writes go through a follower, as any client's might
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	put := func(n int) int64 {
		var rev int64
		for i := range n {
			k := fmt.Sprintf("/k/%d", i%7)
			var opts []clientv3.OpOption
			if i%5 == 0 {
				opts = append(opts, clientv3.WithLease(lease.ID))
			}
			resp, err := cli.Put(ctx, k, strings.Repeat("v", i%13), opts...)
			if err != nil {
				t.Fatal(err)
			}
			rev = resp.Header.Revision
			if i%9 == 0 {
				d, err := cli.Delete(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				rev = d.Header.Revision
			}
		}
		return rev
	}
	rev := put(40)
	if _, err := cli.Compact(ctx, rev-10, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, fmt.Sprintf("mem://drill-%d", storeCopies.Add(1)))
	st, err := leader.Client.Status(ctx, leader.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	m := snapshotter.Member{Client: leader.Client, Endpoint: leader.Endpoint}
	tl := snapshotter.Timeline{ID: 1, ClusterID: st.Header.ClusterId}
	full, err := snapshotter.Full(ctx, m, s, tl, nil)
	if err != nil {
		t.Fatal(err)
	}
	current := make(chan int64, 100)
	dctx, dcancel := context.WithCancel(ctx)
	deltaErr := make(chan error, 1)
	go func() {
		deltaErr <- snapshotter.RunDeltas(dctx, m, s, full.Revision+1, snapshotter.DeltaOptions{
			Period: 100 * time.Millisecond, Timeline: tl, EtcdVersion: "3.6.16",
			OnCurrent: func(rev int64, _ time.Time) {
				select {
				case current <- rev:
				default:
				}
			},
		})
	}()
	last := put(60)
	deadline := time.After(30 * time.Second)
	for stored := int64(0); stored < last; {
		select {
		case stored = <-current:
		case err := <-deltaErr:
			t.Fatalf("delta capture stopped: %v", err)
		case <-deadline:
			t.Fatalf("deltas did not reach revision %d within 30s", last)
		}
	}
	dcancel()
	if err := <-deltaErr; err != nil {
		t.Fatalf("delta capture: %v", err)
	}
	compactRev := full.Revision + 20
	if _, err := cli.Compact(ctx, compactRev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	return drillCluster{store: s, cli: leader.Client, leader: leader.Endpoint, last: last, compactRev: compactRev}
}

func checkEmpty(t *testing.T, dir string) {
	t.Helper()
	if left, _ := os.ReadDir(dir); len(left) > 0 {
		t.Errorf("the drill left %d entries in its scratch dir %s (%s…)", len(left), dir, left[0].Name())
	}
}

func TestDrill(t *testing.T) {
	c := backedUpCluster(t)
	ctx := testCtx(t)

	scratch := t.TempDir()
	res, err := Drill(ctx, DrillOptions{Store: c.store, Live: c.cli, LiveEndpoint: c.leader, ScratchDir: scratch})
	if err != nil {
		t.Fatalf("drill: %v", err)
	}
	if res.Timeline != 1 || res.Revision != c.last || res.CompactRevision != c.compactRev || res.Hash != res.LiveHash || res.LiveEndpoint != c.leader {
		t.Errorf("drill = timeline %d, revision %d, compact revision %d, hash %d, live hash %d from %s; want timeline 1, revision %d, compact revision %d, equal hashes from %s",
			res.Timeline, res.Revision, res.CompactRevision, res.Hash, res.LiveHash, res.LiveEndpoint, c.last, c.compactRev, c.leader)
	}
	checkEmpty(t, scratch)

	// Another cluster's member: its revisions are unrelated to the timeline's.
	_, other, otherEP := testutil.EmbeddedEtcd(t)
	if res, err := Drill(ctx, DrillOptions{Store: c.store, Live: other, LiveEndpoint: otherEP, ScratchDir: scratch}); err == nil ||
		errors.Is(err, ErrDrillMismatch) || !strings.Contains(err.Error(), otherEP) || !strings.Contains(err.Error(), "of cluster") || res.Restore != nil {
		t.Errorf("drill against another cluster's member: err = %v, restore %+v; want one naming the member and both clusters, before restoring anything", err, res.Restore)
	}
	checkEmpty(t, scratch)

	// Without the live cluster: the restored revision and the data's own hash.
	alone, err := Drill(ctx, DrillOptions{Store: c.store, ScratchDir: scratch})
	if err != nil {
		t.Fatalf("drill without a live cluster: %v", err)
	}
	if alone.Revision != c.last || alone.LiveEndpoint != "" || alone.CompactRevision >= c.compactRev {
		t.Errorf("drill without a live cluster = revision %d, compact revision %d, live %q; want revision %d, the full snapshot's compact revision (below %d), no live member",
			alone.Revision, alone.CompactRevision, alone.LiveEndpoint, c.last, c.compactRev)
	}
	checkEmpty(t, scratch)
}

func TestDrillDetectsAlteredDelta(t *testing.T) {
	c := backedUpCluster(t)
	ctx := testCtx(t)
	chain := listChain(t, c.store)
	// The newest delta's last put gets another value: the object still decodes and replays.
	bad := chain.Deltas[len(chain.Deltas)-1]
	hdr, evs := readEvents(t, c.store, bad.Key)
	altered := int64(0)
	for i := len(evs) - 1; i >= 0 && altered == 0; i-- {
		if evs[i].Kv.ModRevision > c.compactRev && len(evs[i].Kv.Value) > 0 {
			evs[i].Kv.Value = append(evs[i].Kv.Value, '!')
			altered = evs[i].Kv.ModRevision
		}
	}
	if altered == 0 {
		t.Fatalf("%s holds no put above the compact revision %d to alter", bad.Key, c.compactRev)
	}
	if _, err := backup.WriteObject(ctx, c.store, bad.Key, hdr, func(w *backup.ObjectWriter) error {
		ew := backup.NewEventWriter(w)
		for _, ev := range evs {
			if err := ew.WriteEvent(ev); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	scratch := t.TempDir()
	res, err := Drill(ctx, DrillOptions{Store: c.store, Live: c.cli, LiveEndpoint: c.leader, ScratchDir: scratch})
	if !errors.Is(err, ErrDrillMismatch) {
		t.Fatalf("drill of a chain with revision %d altered in %s: err = %v, want ErrDrillMismatch", altered, bad.Key, err)
	}
	for _, want := range []string{"timeline 1", fmt.Sprintf("revision %d", c.last), fmt.Sprint(res.Hash), fmt.Sprint(res.LiveHash), c.leader} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("mismatch error %q does not name %q", err, want)
		}
	}
	if res.Hash == res.LiveHash {
		t.Errorf("hashes %d equal in a mismatch", res.Hash)
	}
	checkEmpty(t, scratch)
}

// TestStaleScratchRemoved: a drill removes the scratch dirs that a killed drill left behind
// (no one holds their lock), and leaves one in use by another drill alone.
func TestStaleScratchRemoved(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "steward-drill-killed")
	if err := os.MkdirAll(filepath.Join(stale, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, scratchLock), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	inUse, err := os.MkdirTemp(dir, "steward-drill-")
	if err != nil {
		t.Fatal(err)
	}
	lock, err := lockScratch(inUse)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	unlockedYoung := filepath.Join(dir, "steward-drill-starting") // no lock file yet, just made
	if err := os.Mkdir(unlockedYoung, 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "steward-compact-killed") // another kind: its own sweep
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}

	removeStaleScratch(dir, "drill")
	for path, want := range map[string]bool{stale: false, inUse: true, unlockedYoung: true, other: true} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("%s: exists %t, want %t", filepath.Base(path), err == nil, want)
		}
	}
}
