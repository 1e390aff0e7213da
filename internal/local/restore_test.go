package local

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// kv is what a restore must keep of a key, exactly.
type kv struct {
	Value                       string
	Create, Mod, Version, Lease int64
}

// keysAt reads every key (at revision rev, 0: now) through cli: the keys and the revision read.
func keysAt(t *testing.T, ctx context.Context, cli *clientv3.Client, rev int64, opts ...clientv3.OpOption) (map[string]kv, int64) {
	t.Helper()
	opts = append(opts, clientv3.WithPrefix(), clientv3.WithRev(rev))
	resp, err := cli.Get(ctx, "", opts...)
	if err != nil {
		t.Fatalf("get every key at revision %d: %v", rev, err)
	}
	out := map[string]kv{}
	for _, k := range resp.Kvs {
		out[string(k.Key)] = kv{Value: string(k.Value), Create: k.CreateRevision, Mod: k.ModRevision, Version: k.Version, Lease: k.Lease}
	}
	if rev == 0 {
		rev = resp.Header.Revision
	}
	return out, rev
}

// sameKeys fails unless got equals want, naming the first difference.
func sameKeys(t *testing.T, what string, got, want map[string]kv) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Fatalf("%s: key %s is %+v (present %t), want %+v (%d keys, want %d)", what, k, g, ok, w, len(got), len(want))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Fatalf("%s: key %s = %+v should not exist (%d keys, want %d)", what, k, g, len(got), len(want))
		}
	}
}

// everyMemberServes checks each member's own copy (serializable reads) equals want.
func everyMemberServes(t *testing.T, ctx context.Context, spec Spec, want map[string]kv) {
	t.Helper()
	for _, m := range spec.Members {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{spec.ClientURL(m)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := keysAt(t, ctx, c, 0, clientv3.WithSerializable())
		c.Close()
		sameKeys(t, "member "+m.Name, got, want)
	}
}

// backedUp waits until the backups hold revision rev and returns the backup leader's timeline.
func backedUp(t *testing.T, ctx context.Context, dir string, rev int64) uint32 {
	t.Helper()
	var tl uint32
	testutil.Eventually(t, time.Minute, fmt.Sprintf("revision %d backed up", rev), func() error {
		rep, err := Status(ctx, Dir(dir))
		if err != nil {
			return err
		}
		if b := rep.Backup; b == nil || !b.Ready || max(b.LatestDeltaRevision, b.LatestFullRevision) < rev {
			return fmt.Errorf("backup %+v", rep.Backup)
		}
		tl = rep.Backup.Timeline
		return nil
	})
	return tl
}

// overwritten is a history to restore: keys written and read at revision R, then
// overwritten, the backups holding the present revision P on timeline.
type overwritten struct {
	atR, present map[string]kv
	R, P         int64
	timeline     uint32
}

// writeOverwritten waits for the first full snapshot (revisions from there on are
// restorable), writes 20 keys under /a, reads them at R, overwrites them all and waits until
// the backups hold the present revision P.
func writeOverwritten(t *testing.T, ctx context.Context, dir string, cli *clientv3.Client) overwritten {
	t.Helper()
	var h overwritten
	backedUp(t, ctx, dir, 1)
	writeKeys(t, ctx, cli, "/a", 20)
	h.atR, h.R = keysAt(t, ctx, cli, 0)
	writeKeys(t, ctx, cli, "/a", 20)
	h.present, h.P = keysAt(t, ctx, cli, 0)
	h.timeline = backedUp(t, ctx, dir, h.P)
	return h
}

func fullSnapshots(t *testing.T, ctx context.Context, s *store.Store) int {
	t.Helper()
	c, err := backup.ListChain(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	return len(c.Fulls)
}

// TestRestoreRunningCluster restores a running 3-member cluster back to revision R: it then
// serves exactly the keys a Get at R returned before; the full snapshot taken first keeps
// the pre-restore revision restorable from the old timeline; later writes go to a new
// timeline; --to-time resolves to the newest revision stored by then; and a restore to the
// newest revision equals the live cluster exactly. Bad targets change nothing.
func TestRestoreRunningCluster(t *testing.T) {
	t.Parallel() // its own directory and ports
	dir := t.TempDir()
	r := startClusterWith(t, UpOptions{Dir: dir, Members: 3, BasePort: 22600, QuorumLossGrace: 15 * time.Second,
		SidecarArgs: []string{"--delta-period=500ms"}})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cli := clusterClient(t, r.spec)
	s, err := store.Open(ctx, r.spec.Backup, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	backedUp(t, ctx, dir, 1) // the first full snapshot: revisions from here on are restorable
	writeKeys(t, ctx, cli, "/a", 30)
	resp, err := cli.Get(ctx, "/a/000")
	if err != nil {
		t.Fatal(err)
	}
	atR, R := keysAt(t, ctx, cli, resp.Header.Revision)
	writeKeys(t, ctx, cli, "/a", 10) // overwrites /a/000-009
	for i := 10; i < 15; i++ {
		if _, err := cli.Delete(ctx, fmt.Sprintf("/a/%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	writeKeys(t, ctx, cli, "/b", 10)
	before, P := keysAt(t, ctx, cli, 0)
	oldTimeline := backedUp(t, ctx, dir, P)
	st0, _ := ReadState(Dir(dir))

	t.Run("bad targets change nothing", func(t *testing.T) {
		fulls := fullSnapshots(t, ctx, s)
		for _, c := range []struct {
			opts RestoreOptions
			want string
		}{
			{RestoreOptions{ToRevision: P + 1000}, fmt.Sprintf("restore to revision %d", P+1000)},
			{RestoreOptions{Timeline: 7, ToRevision: R}, "holds no timeline 7"},
			{RestoreOptions{ToTime: time.Now().Add(-time.Hour)}, "no backup was made by then"},
		} {
			c.opts.Dir = dir
			_, err := Restore(ctx, c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "nothing was changed") {
				t.Fatalf("restore %+v: %v; want an error saying %q and that nothing was changed", c.opts, err, c.want)
			}
		}
		st, _ := ReadState(Dir(dir))
		if st.Directive != nil || st.LastEpoch != st0.LastEpoch || st.ClusterID != st0.ClusterID || fullSnapshots(t, ctx, s) != fulls {
			t.Fatalf("a refused restore changed something: directive %+v, epoch %d (was %d), cluster %s (was %s), full snapshots %d (was %d)",
				st.Directive, st.LastEpoch, st0.LastEpoch, st.ClusterID, st0.ClusterID, fullSnapshots(t, ctx, s), fulls)
		}
	})

	first, err := Restore(ctx, RestoreOptions{Dir: dir, ToRevision: R, Progress: func(l string) { t.Log(l) }})
	if err != nil {
		t.Fatal(err)
	}
	res := first
	t.Logf("restored: %+v", res)
	if res.Revision != R || res.Target.Revision != R || res.Target.Timeline != oldTimeline {
		t.Fatalf("restored revision %d (target %+v), want %d of timeline %d", res.Revision, res.Target, R, oldTimeline)
	}
	if res.ClusterID == "" || res.ClusterID == st0.ClusterID || res.PreviousClusterID != st0.ClusterID {
		t.Fatalf("cluster %s (previous %s), was %s: a restored cluster is a new one", res.ClusterID, res.PreviousClusterID, st0.ClusterID)
	}
	if res.Timeline == 0 || res.Timeline == oldTimeline {
		t.Fatalf("backups continue on timeline %d; want a new one after %d", res.Timeline, oldTimeline)
	}
	if res.Snapshot.Timeline != oldTimeline || res.Snapshot.Revision < P {
		t.Fatalf("the full snapshot taken first: %+v; want timeline %d at revision %d or later", res.Snapshot, oldTimeline, P)
	}
	everyMemberServes(t, ctx, r.spec, atR)
	if st, _ := ReadState(Dir(dir)); st.ClusterID != res.ClusterID || len(st.Voters) != 3 {
		t.Fatalf("status: cluster %s, voters %v; want cluster %s with 3 voters", st.ClusterID, st.Voters, res.ClusterID)
	}

	t.Run("the present before the restore stays restorable from the old timeline", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		if _, err := restore.Restore(ctx, restore.Options{Store: s, DataDir: data, Timeline: oldTimeline, ToRevision: P,
			Name: "test", InitialCluster: "test=http://127.0.0.1:2380", PeerURLs: []string{"http://127.0.0.1:2380"}}); err != nil {
			t.Fatal(err)
		}
		_, c, _, stop := testutil.EtcdOn(t, data)
		defer stop()
		got, rev := keysAt(t, ctx, c, 0)
		if rev != P {
			t.Fatalf("restored revision %d, want %d", rev, P)
		}
		sameKeys(t, "timeline "+fmt.Sprint(oldTimeline)+" at the pre-restore revision", got, before)
	})

	writeKeys(t, ctx, cli, "/c", 10)
	atQ, Q := keysAt(t, ctx, cli, 0)
	if tl := backedUp(t, ctx, dir, Q); tl != res.Timeline {
		t.Fatalf("writes after the restore backed up on timeline %d, want %d", tl, res.Timeline)
	}
	vr, err := backup.Verify(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !vr.OK() || len(vr.Timelines) != 2 {
		t.Fatalf("verify: ok %t, timelines %+v; want the old and the new timeline", vr.OK(), vr.Timelines)
	}

	t.Run("--to-time resolves to the newest revision stored by then", func(t *testing.T) {
		// A full snapshot proves its revision from the end of the second in its name.
		testutil.Eventually(t, time.Minute, fmt.Sprintf("revision %d proven stored", Q), func() error {
			rep, err := Status(ctx, Dir(dir))
			if err != nil {
				return err
			}
			if b := rep.Backup; b == nil || b.LatestDeltaRevision < Q && (b.LatestFullRevision < Q || time.Since(b.LatestFullTime.Truncate(time.Second)) < time.Second) {
				return fmt.Errorf("backup %+v", rep.Backup)
			}
			return nil
		})
		T := time.Now()
		writeKeys(t, ctx, cli, "/d", 10)
		_, after := keysAt(t, ctx, cli, 0)
		backedUp(t, ctx, dir, after)
		res, err := Restore(ctx, RestoreOptions{Dir: dir, ToTime: T, Progress: func(l string) { t.Log(l) }})
		if err != nil {
			t.Fatal(err)
		}
		if res.Revision != Q || res.Target.Timeline != first.Timeline {
			t.Fatalf("restore to %s gave revision %d (target %+v), want %d", T.Format(time.RFC3339Nano), res.Revision, res.Target, Q)
		}
		everyMemberServes(t, ctx, r.spec, atQ)
	})

	t.Run("a restore to the newest revision equals the live cluster", func(t *testing.T) {
		writeKeys(t, ctx, cli, "/e", 10)
		live, rev := keysAt(t, ctx, cli, 0)
		backedUp(t, ctx, dir, rev)
		res, err := Restore(ctx, RestoreOptions{Dir: dir, Progress: func(l string) { t.Log(l) }})
		if err != nil {
			t.Fatal(err)
		}
		if res.Revision != rev {
			t.Fatalf("restored revision %d, want the live cluster's %d", res.Revision, rev)
		}
		everyMemberServes(t, ctx, r.spec, live)
	})
}

// TestRestoreRefusedWithoutBackupsOrSupervisor: no backup store, or no running cluster: a
// clear error, and nothing changes.
func TestRestoreRefusedWithoutBackupsOrSupervisor(t *testing.T) {
	dir := t.TempDir()
	r := startCluster(t, dir, 1, 22800)
	ctx := ctxT(t)
	if _, err := Restore(ctx, RestoreOptions{Dir: dir, ToRevision: 1}); err == nil || !strings.Contains(err.Error(), "has no backup store") {
		t.Fatalf("restore without backups: %v", err)
	}
	r.stop()
	if _, err := Restore(ctx, RestoreOptions{Dir: dir, ToRevision: 1}); err == nil || !strings.Contains(err.Error(), "is not running") {
		t.Fatalf("restore of a stopped cluster: %v", err)
	}
	if st, _ := ReadState(Dir(dir)); st.Directive != nil || st.LastEpoch != 0 {
		t.Fatalf("a refused restore issued directive %+v (last epoch %d)", st.Directive, st.LastEpoch)
	}
}

// TestRestoreCompletesThroughFaults: while a restore runs, a second one is refused; the seed's
// etcd is killed while it seeds, and the supervisor is stopped and started again. The restore
// completes at the same target, and the command that asked for it sees it through.
func TestRestoreCompletesThroughFaults(t *testing.T) {
	t.Parallel() // its own directory and ports
	dir := t.TempDir()
	opts := UpOptions{Dir: dir, Members: 3, BasePort: 22700, QuorumLossGrace: 15 * time.Second, SidecarArgs: []string{"--delta-period=500ms"}}
	r := startClusterWith(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cli := clusterClient(t, r.spec)
	h := writeOverwritten(t, ctx, dir, cli)
	atR, R, P := h.atR, h.R, h.P

	type outcome struct {
		res RestoreResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := Restore(ctx, RestoreOptions{Dir: dir, ToRevision: R, Progress: func(l string) { t.Log(l) }})
		done <- outcome{res, err}
	}()
	var first int64
	testutil.Eventually(t, time.Minute, "the restore directive issued", func() error {
		st, err := ReadState(Dir(dir))
		if err != nil || st.Directive == nil || st.Directive.Restore == nil {
			return fmt.Errorf("directive %+v (%v)", st.Directive, err)
		}
		first = st.Directive.Epoch
		return nil
	})
	if _, err := Restore(ctx, RestoreOptions{Dir: dir, ToRevision: P}); err == nil || !strings.Contains(err.Error(), "a second restore cannot start") {
		t.Fatalf("a second restore while one runs: %v", err)
	}

	var seed string
	testutil.Eventually(t, time.Minute, "the seed restoring", func() error {
		st, _ := ReadState(Dir(dir))
		if d := st.Directive; d == nil || d.Phase != cluster.PhaseSeeding {
			return fmt.Errorf("directive %+v", d)
		}
		seed = st.Directive.Seed
		return nil
	})
	// Its etcd starts once the fence lifts, on the config the restore generates (or waiting for it).
	testutil.Eventually(t, 30*time.Second, "the seed's etcd killed while it seeds", func() error {
		return Fault(Dir(dir), seed, FaultKill, "")
	})
	r.stop()
	t.Log("supervisor stopped; starting it again")
	startClusterWith(t, UpOptions{Dir: dir, QuorumLossGrace: opts.QuorumLossGrace, SidecarArgs: opts.SidecarArgs})

	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		t.Fatal("the restore did not complete")
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.res.Revision != R || o.res.Epoch < first {
		t.Fatalf("restored revision %d by directive %d; want %d by directive %d or a later one", o.res.Revision, o.res.Epoch, R, first)
	}
	everyMemberServes(t, ctx, r.spec, atR)
	// Every member's old data recorded, before the seed restored, that the restore supersedes
	// it, and the record went aside with it: the data each member serves now carries none.
	for _, m := range r.spec.Members {
		data := Dir(dir).MemberData(m.Name)
		if epoch, err := datadir.ReadSuperseded(data); err != nil || epoch != 0 {
			t.Errorf("%s: the data it serves records that restore %d supersedes it (%v)", m.Name, epoch, err)
		}
		aside, _ := filepath.Glob(data + ".foreign-*")
		var marked []int64
		for _, a := range aside {
			if epoch, err := datadir.ReadSuperseded(a); err == nil && epoch >= first {
				marked = append(marked, epoch)
			}
		}
		if len(marked) == 0 {
			t.Errorf("%s: no data moved aside records that the restore superseded it (moved aside: %v)", m.Name, aside)
		}
	}
}

// TestRestoreKeptWhenTheStateAndTheSeedAreLost: a restore in place whose seed serves the
// restored cluster, and acknowledges writes that are backed up on the restore's new timeline,
// while the others still hold their old data (their sidecars are frozen, so they cannot
// rejoin yet); then both the supervisor's state and the seed's data dir are lost. The others'
// dirs record that the restore superseded their data: the status rebuilt from the dirs never
// adopts it, and the cluster comes back from the backup's newest timeline, the restore's, with
// every write the restored cluster acknowledged, never on the old history it replaced.
func TestRestoreKeptWhenTheStateAndTheSeedAreLost(t *testing.T) {
	t.Parallel() // its own directory and ports
	dir := t.TempDir()
	opts := UpOptions{Dir: dir, Members: 3, BasePort: 23500, QuorumLossGrace: 5 * time.Second, SidecarArgs: []string{"--delta-period=500ms"}}
	r := startClusterWith(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cli := clusterClient(t, r.spec)
	h := writeOverwritten(t, ctx, dir, cli) // the restore to R drops the overwrites
	R, oldTimeline := h.R, h.timeline
	st0, _ := ReadState(Dir(dir))

	rctx, stopRestore := context.WithCancel(ctx)
	defer stopRestore()
	go func() { _, _ = Restore(rctx, RestoreOptions{Dir: dir, ToRevision: R}) }()
	var st State
	testutil.Eventually(t, 2*time.Minute, "the restore's seed chosen", func() error {
		var err error
		if st, err = ReadState(Dir(dir)); err != nil || st.Directive == nil || st.Directive.Restore == nil || st.Directive.Phase != cluster.PhaseSeeding {
			return fmt.Errorf("directive %+v (%v)", st.Directive, err)
		}
		return nil
	})
	seed, epoch := st.Directive.Seed, st.Directive.Epoch
	for _, m := range st.Members {
		if m.Name == seed {
			continue
		}
		// Frozen, the sidecar neither reports nor initialises: its member keeps its old data.
		if err := syscall.Kill(m.SidecarPID, syscall.SIGSTOP); err != nil {
			t.Fatalf("freeze the sidecar of %s (pid %d): %v", m.Name, m.SidecarPID, err)
		}
		defer syscall.Kill(m.SidecarPID, syscall.SIGCONT)
		if got, err := datadir.ReadSuperseded(Dir(dir).MemberData(m.Name)); err != nil || got != epoch {
			t.Fatalf("%s's data dir records %d (%v) once the seed is chosen; want the restore's epoch %d", m.Name, got, err, epoch)
		}
	}
	seedCli := r.client(slices.IndexFunc(r.spec.Members, func(m MemberSpec) bool { return m.Name == seed }))
	defer seedCli.Close()
	testutil.Eventually(t, 2*time.Minute, "the seed serving the restore, backed up on a new timeline", func() error {
		if st, err := ReadState(Dir(dir)); err != nil || st.Directive == nil || st.Directive.Phase != cluster.PhaseRejoining {
			return fmt.Errorf("directive %+v (%v)", st.Directive, err)
		}
		rep, err := Status(ctx, Dir(dir))
		if err != nil {
			return err
		}
		if b := rep.Backup; b == nil || b.Timeline == oldTimeline || b.LatestFullRevision < R {
			return fmt.Errorf("backup %+v", rep.Backup)
		}
		return nil
	})
	writeKeys(t, ctx, seedCli, "/c", 10) // acknowledged by the restored cluster alone
	atQ, Q := keysAt(t, ctx, seedCli, 0)
	if tl := backedUp(t, ctx, dir, Q); tl == oldTimeline {
		t.Fatalf("the restored cluster's writes backed up on the old timeline %d", tl)
	}
	r.stop()
	stopRestore()
	if err := os.RemoveAll(Dir(dir).MemberData(seed)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(Dir(dir).State()); err != nil {
		t.Fatal(err)
	}
	t.Logf("supervisor stopped, its state and the seed %s's data dir removed; starting it again", seed)
	startClusterWith(t, UpOptions{Dir: dir, QuorumLossGrace: opts.QuorumLossGrace, SidecarArgs: opts.SidecarArgs})
	healthyVoters(t, ctx, dir, 3*time.Minute)
	everyMemberServes(t, ctx, r.spec, atQ)
	if st, _ := ReadState(Dir(dir)); st.ClusterID == st0.ClusterID || st.LastEpoch <= epoch {
		t.Fatalf("the cluster serves as %s (epoch %d): the cluster the restore replaced is %s, the restore's epoch %d", st.ClusterID, st.LastEpoch, st0.ClusterID, epoch)
	}
}

// TestRestoreCancelledWhileTheStoreIsDown: the backup store goes down once the restore
// started, so the seed cannot restore; --cancel gets the cluster back on its own data, with
// every acknowledged write and its cluster ID, and the restore command reports it withdrawn.
func TestRestoreCancelledWhileTheStoreIsDown(t *testing.T) {
	s3 := testutil.FakeS3(t, "backups")
	dir := t.TempDir()
	r := startClusterWith(t, UpOptions{Dir: dir, Members: 3, BasePort: 22900, QuorumLossGrace: 15 * time.Second,
		Backup: s3.StoreURL("backups", "cancel"), SidecarArgs: []string{"--delta-period=500ms"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli := clusterClient(t, r.spec)
	h := writeOverwritten(t, ctx, dir, cli)
	R, present := h.R, h.present
	st0, _ := ReadState(Dir(dir))

	done := make(chan error, 1)
	go func() {
		_, err := Restore(ctx, RestoreOptions{Dir: dir, ToRevision: R, Progress: func(l string) { t.Log(l) }})
		done <- err
	}()
	testutil.Eventually(t, time.Minute, "the restore directive issued", func() error {
		if st, err := ReadState(Dir(dir)); err != nil || st.Directive == nil || st.Directive.Restore == nil {
			return fmt.Errorf("directive %+v (%v)", st.Directive, err)
		}
		return nil
	})
	s3.SetDown(true)
	defer s3.SetDown(false)
	testutil.Eventually(t, time.Minute, "the seed retrying its restore", func() error {
		st, _ := ReadState(Dir(dir))
		d := st.Directive
		if d == nil || d.Phase != cluster.PhaseSeeding {
			return fmt.Errorf("directive %+v", d)
		}
		rep, ok := readMemberFile[cluster.Report](Dir(dir).Report(d.Seed))
		if !ok || rep.Case != "RestoreInPlace" || !strings.Contains(rep.Reason, "attempt") {
			return fmt.Errorf("seed %s reports %q: %s", d.Seed, rep.Case, rep.Reason)
		}
		return nil
	})
	// Refused for a few seconds at most, while a stopped member has not reported from disk.
	var epoch int64
	testutil.Eventually(t, 30*time.Second, "the cancel accepted", func() error {
		var err error
		epoch, err = CancelRestore(ctx, Dir(dir), 3*time.Minute, func(l string) { t.Log(l) })
		return err
	})
	if err := <-done; err == nil || !strings.Contains(err.Error(), "withdrawn") {
		t.Fatalf("the restore command after the cancel: %v; want it to say the restore was withdrawn", err)
	}
	st, _ := ReadState(Dir(dir))
	if st.ClusterID != st0.ClusterID || st.Directive != nil || st.LastEpoch < epoch {
		t.Fatalf("after the cancel: cluster %s (was %s), directive %+v, last epoch %d (cancel %d)", st.ClusterID, st0.ClusterID, st.Directive, st.LastEpoch, epoch)
	}
	everyMemberServes(t, ctx, r.spec, present)
}
