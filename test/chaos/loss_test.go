package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// write is one write of the single writer; rev is etcd's revision for it (0: outcome unknown).
type write struct {
	key, value string
	del        bool
	rev        int64
}

// writer is a single client writing one key after another with increasing values, so that
// its history is a sequence and each acknowledged write has its own revision.
type writer struct {
	mu      sync.Mutex
	acked   []write
	unknown []write
	n       atomic.Int64 // acknowledged writes
	stop    context.CancelFunc
	done    chan struct{}
}

// startWriter writes to numKeys keys round robin; with deletes, every fifth write deletes an
// existing key. Its first failed write ends it: every acknowledged write precedes the fault,
// no later write can hide a lost one, and only the last write's outcome is unknown.
func startWriter(cli *clientv3.Client, deletes bool) *writer {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		exists := map[string]bool{}
		for i := 1; ctx.Err() == nil; i++ {
			wr := write{key: fmt.Sprintf("%sk%d", keyPrefix, i%numKeys), value: fmt.Sprintf("%09d", i)}
			wr.del = deletes && i%5 == 0 && exists[wr.key]
			octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
			var err error
			if wr.del {
				var resp *clientv3.DeleteResponse
				if resp, err = cli.Delete(octx, wr.key); err == nil {
					wr.rev = resp.Header.Revision
				}
			} else {
				var resp *clientv3.PutResponse
				if resp, err = cli.Put(octx, wr.key, wr.value); err == nil {
					wr.rev = resp.Header.Revision
				}
			}
			ocancel()
			w.mu.Lock()
			if err != nil {
				w.unknown = append(w.unknown, wr)
			} else {
				w.acked = append(w.acked, wr)
				exists[wr.key] = !wr.del
				w.n.Add(1)
			}
			w.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return w
}

func (w *writer) finish() {
	w.stop()
	<-w.done
}

// wipe wipes the named members one right after the other.
func wipe(t *testing.T, c *localCluster, names []string) {
	t.Helper()
	for _, n := range names {
		if err := local.Fault(local.Dir(c.dir), n, local.FaultWipe, ""); err != nil {
			t.Fatalf("wipe %s: %v", n, err)
		}
	}
}

// TestQuorumLossWithSurvivor wipes a majority of the members while a writer runs: the
// supervisor must recover the quorum from the survivor, and no acknowledged write may be lost.
func TestQuorumLossWithSurvivor(t *testing.T) {
	cfg := chaosConfig(t)
	rng := rand.New(rand.NewSource(cfg.seed))
	c := startCluster(t, cfg, clusterOptions{basePort: 24100, quorumGrace: 5 * time.Second})
	ctx := context.Background()
	cli := c.client()
	w := startWriter(cli, false)
	defer w.finish()
	testutil.Eventually(t, time.Minute, "writes acknowledged", func() error {
		if n := w.n.Load(); n < 300 {
			return fmt.Errorf("%d writes acknowledged", n)
		}
		return nil
	})

	before, err := c.status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ms := before.Members
	perm := rng.Perm(len(ms))
	var victims, survivors, roles []string
	for n, i := range perm {
		if n <= len(ms)/2 {
			victims = append(victims, ms[i].Name)
		} else {
			survivors = append(survivors, ms[i].Name)
		}
		roles = append(roles, ms[i].Name+"="+ms[i].Role)
	}
	c.logf("wiping %v (a majority) while writing; survivors %v; roles %v; %d writes acknowledged so far", victims, survivors, roles, w.n.Load())
	wipe(t, c, victims)
	took, err := c.waitHealthy(ctx, 3*time.Minute, false)
	if err != nil {
		t.Fatalf("quorum not recovered: %v", err)
	}
	c.logf("healthy again %s after the wipe", took.Round(100*time.Millisecond))
	// Invariant 9: the survivor's data seeds the new cluster (it keeps the cluster and its own
	// member ID), not the backup (which makes a new cluster).
	after, err := c.status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idBefore := map[string]string{}
	for _, m := range ms {
		idBefore[m.Name] = m.ID
	}
	kept := 0
	for _, m := range after.Members {
		if slices.Contains(survivors, m.Name) && m.ID == idBefore[m.Name] {
			kept++
		}
	}
	if after.Cluster.ClusterID != before.Cluster.ClusterID || kept == 0 {
		t.Errorf("the quorum was not recovered from a survivor's data: cluster ID %s → %s, no survivor of %v kept its member ID",
			before.Cluster.ClusterID, after.Cluster.ClusterID, survivors)
	}
	w.finish()

	// Every key holds its last acknowledged value or a later one.
	last := map[string]int{}
	for _, wr := range w.acked {
		last[wr.key], _ = strconv.Atoi(wr.value)
	}
	resp, err := cli.Get(ctx, keyPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)], _ = strconv.Atoi(string(kv.Value))
	}
	for k, v := range last {
		if got[k] < v {
			t.Errorf("LOST: %s holds %09d, but %09d was acknowledged", k, got[k], v)
		}
	}
	t.Logf("operations: %d writes acknowledged before the loss, %d failed; %d keys checked", len(w.acked), len(w.unknown), len(last))
	if _, err := cli.Put(ctx, keyPrefix+"after", "recovered"); err != nil {
		t.Errorf("a write after the recovery failed: %v", err)
	}
	if _, err := c.converged(ctx); err != nil {
		t.Error(err)
	}
	if !t.Failed() {
		t.Logf("verdict: no acknowledged write lost across the loss of %v; recovered from the survivor's data", victims)
	} else {
		t.Logf("verdict: FAIL (see above)")
	}
}

// kvState is a key as etcd reports it.
type kvState struct {
	value                string
	create, mod, version int64
}

// TestTotalLossRestoreFromBackup wipes every member while a writer runs: the cluster must come
// back from the backup, and its state must equal the history at one revision R, at least the
// newest revision the backups reported before the wipe.
func TestTotalLossRestoreFromBackup(t *testing.T) {
	cfg := chaosConfig(t)
	c := startCluster(t, cfg, clusterOptions{basePort: 24200, quorumGrace: 5 * time.Second,
		sidecarArgs: []string{"--delta-period=1s"}})
	ctx := context.Background()
	cli := c.client()
	w := startWriter(cli, true)
	defer w.finish()
	var backedUp int64
	testutil.Eventually(t, 2*time.Minute, "writes acknowledged and backed up", func() error {
		rep, err := c.status(ctx)
		if err != nil {
			return err
		}
		if rep.Backup == nil || rep.Backup.LatestDeltaRevision < 200 || w.n.Load() < 300 {
			return fmt.Errorf("%d writes acknowledged, backup %+v", w.n.Load(), rep.Backup)
		}
		backedUp = max(rep.Backup.LatestDeltaRevision, rep.Backup.LatestFullRevision)
		return nil
	})
	var names []string
	for _, m := range c.spec.Members {
		names = append(names, m.Name)
	}
	c.logf("wiping all members %v while writing; backups reported revision %d", names, backedUp)
	wipe(t, c, names)
	took, err := c.waitHealthy(ctx, 3*time.Minute, false)
	if err != nil {
		t.Fatalf("cluster not restored: %v", err)
	}
	c.logf("healthy again %s after the wipe", took.Round(100*time.Millisecond))
	w.finish()

	resp, err := cli.Get(ctx, keyPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Header.Revision
	got := map[string]kvState{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = kvState{string(kv.Value), kv.CreateRevision, kv.ModRevision, kv.Version}
	}

	// The history at r: the acknowledged writes up to r, and the one write whose outcome is
	// unknown if r is the revision right after the last acknowledged one.
	hist := append([]write(nil), w.acked...)
	lastAcked := hist[len(hist)-1].rev
	if len(w.unknown) > 0 {
		u := w.unknown[0]
		u.rev = lastAcked + 1
		hist = append(hist, u)
	}
	if newest := hist[len(hist)-1].rev; r > newest {
		t.Fatalf("restored revision %d is beyond any write (last acknowledged %d)", r, lastAcked)
	}
	if r < backedUp {
		t.Errorf("restored revision %d is below %d, which the backups reported before the wipe", r, backedUp)
	}
	want := map[string]kvState{}
	for _, wr := range hist {
		if wr.rev > r {
			break
		}
		if wr.del {
			delete(want, wr.key)
			continue
		}
		s, ok := want[wr.key]
		if !ok {
			s = kvState{create: wr.rev}
		}
		s.value, s.mod, s.version = wr.value, wr.rev, s.version+1
		want[wr.key] = s
	}
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		if got[k] != want[k] {
			t.Errorf("at revision %d %s is %+v, the history says %+v", r, k, got[k], want[k])
		}
	}
	t.Logf("operations: %d writes acknowledged (last at revision %d), %d unknown", len(w.acked), lastAcked, len(w.unknown))
	if _, err := c.converged(ctx); err != nil {
		t.Error(err)
	}
	if !t.Failed() {
		t.Logf("verdict: restored state equals the history at revision %d (backups reported %d before the wipe; %d acknowledged revisions lost, bounded by the delta period)",
			r, backedUp, max(lastAcked-r, 0))
	} else {
		t.Logf("verdict: FAIL (see above)")
	}
}
