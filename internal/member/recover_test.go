package member

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/backup/agent"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/testutil"
)

// staticView is a cluster view that never changes.
type staticView struct{ snap cluster.Snapshot }

func (v staticView) Snapshot(context.Context) (cluster.Snapshot, error) { return v.snap, nil }
func (v staticView) Watch(ctx context.Context) (<-chan struct{}, error) {
	return make(chan struct{}), nil
}
func (v staticView) Report(context.Context, cluster.Report) error { return nil }
func (v staticView) AckDirective(context.Context, int64, cluster.DirectiveResult) error {
	return nil
}

// oneMember is the spec of a one-member cluster whose member "test" has fresh addresses.
func oneMember(t *testing.T, token string) cluster.Spec {
	url := func() string { return fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)) }
	return cluster.Spec{Name: "c", Token: token, Members: []cluster.MemberSpec{{Name: "test", ClientURL: url(), PeerURL: url()}}}
}

// testSidecar is the sidecar of member "test" on a new data dir, backing up to s.
func testSidecar(t *testing.T, s *store.Store, snap cluster.Snapshot) *Sidecar {
	t.Helper()
	sc, err := New(Config{Name: "test", DataDir: filepath.Join(t.TempDir(), "data"), View: staticView{snap},
		Backup: agent.Config{StoreURL: s.String()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// decideOnce observes (the data dir, the cluster, the backup store) and decides, as one
// initialisation attempt does.
func decideOnce(t *testing.T, sc *Sidecar) (cluster.Spec, Observation, Plan) {
	t.Helper()
	spec, obs, err := sc.observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return spec, obs, Decide(obs)
}

// startFromConfig starts etcd on a configuration the sidecar generated.
func startFromConfig(t *testing.T, cfg []byte) (*clientv3.Client, string) {
	t.Helper()
	ec, err := etcdproc.LoadConfigBytes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(ec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		t.Fatal("etcd did not start on the generated configuration")
	}
	ep := ec.AdvertiseClientUrls[0].String()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, ep
}

// twoClusters backs up clusters A (timeline 1) and B (timeline 2, the store's newest) to s,
// and returns each one's cluster ID, keys and revision.
func twoClusters(t *testing.T, s *store.Store) (ids [2]uint64, want [2]map[string]testutil.KeyState, revs [2]int64, peerA string) {
	t.Helper()
	eA, cliA, epA := testutil.EmbeddedEtcd(t)
	_, cliB, epB := testutil.EmbeddedEtcd(t)
	a, stopA := startBackups(t, s, epA)
	waitStored(t, a, cliA, epA, 1)
	b, stopB := startBackups(t, s, epB)
	waitStored(t, b, cliB, epB, 2)
	testutil.Write(t, cliA, "a", 60)
	testutil.Write(t, cliB, "b", 20)
	waitStored(t, a, cliA, epA, 1)
	waitStored(t, b, cliB, epB, 2)
	stopA()
	stopB()
	for i, c := range []struct {
		cli *clientv3.Client
		ep  string
	}{{cliA, epA}, {cliB, epB}} {
		ids[i] = testutil.ClusterIDOf(t, c.cli, c.ep)
		want[i], revs[i] = testutil.State(t, c.cli)
	}
	return ids, want, revs, eA.Config().AdvertisePeerUrls[0].String()
}

// TestRecoveryFromBackupRestoresTheClustersOwnTimeline: two clusters share a store; a quorum
// loss of either one restores that cluster's newest timeline, never the other cluster's
// (timeline 2, B's, is the store's newest).
func TestRecoveryFromBackupRestoresTheClustersOwnTimeline(t *testing.T) {
	s := openTestStore(t)
	ids, want, revs, _ := twoClusters(t, s)
	for i, name := range []string{"A", "B"} {
		t.Run(name, func(t *testing.T) {
			spec := oneMember(t, "tok-"+name)
			sc := testSidecar(t, s, cluster.Snapshot{Spec: spec,
				Status:    cluster.Status{ClusterID: strconv.FormatUint(ids[i], 16), Voters: []cluster.Voter{{ID: "1", Name: "test"}}},
				Directive: &cluster.Directive{Epoch: 1, Phase: cluster.PhaseSeeding, Mode: cluster.RecoverFromBackup, Seed: "test"}})
			spec, obs, plan := decideOnce(t, sc)
			tl := uint32(i + 1)
			if plan.Case != "QuorumLossRestoreFromBackup" || plan.Restore == nil || plan.Restore.Timeline != tl {
				t.Fatalf("plan %+v (restore %+v); want QuorumLossRestoreFromBackup of timeline %d", plan, plan.Restore, tl)
			}
			cfg, err := sc.act(context.Background(), spec, obs, plan)
			if err != nil {
				t.Fatal(err)
			}
			cli, _ := startFromConfig(t, cfg)
			got, rev := testutil.State(t, cli)
			if rev != revs[i] {
				t.Fatalf("restored revision %d, want %d (cluster %s's newest)", rev, revs[i], name)
			}
			testutil.SameState(t, "cluster "+name+" restored", got, want[i])
		})
	}
}

// TestNewClusterBootstrapsBesideAnotherClustersBackups: a cluster that never formed, given a
// store that holds only other clusters' backups, bootstraps (it would otherwise wait forever
// for a restore directive); one that finds backups of its own waits for the restore.
func TestNewClusterBootstrapsBesideAnotherClustersBackups(t *testing.T) {
	s := openTestStore(t)
	ids, _, _, peerA := twoClusters(t, s)

	spec := oneMember(t, "new-cluster")
	sc := testSidecar(t, s, cluster.Snapshot{Spec: spec, Status: cluster.Status{Members: []cluster.StatusMember{{Name: "test"}}}})
	spec, obs, plan := decideOnce(t, sc)
	if plan.Case != "Bootstrap" || obs.BackupTimeline != 0 || obs.ForeignTimelines != 2 {
		t.Fatalf("plan %+v with backup timeline %d and %d foreign; want Bootstrap beside 2 foreign timelines", plan, obs.BackupTimeline, obs.ForeignTimelines)
	}
	cfg, err := sc.act(context.Background(), spec, obs, plan)
	if err != nil {
		t.Fatal(err)
	}
	cli, ep := startFromConfig(t, cfg)
	id := testutil.ClusterIDOf(t, cli, ep)
	if !slices.Contains(cluster.IDs(spec, ""), id) || slices.Contains(ids[:], id) {
		t.Fatalf("bootstrapped cluster %x: ClusterIDs(spec) = %x, the store's clusters %x", id, cluster.IDs(spec, ""), ids)
	}

	// Cluster A again, its status lost (no cluster ID): its spec gives A's ID, so the
	// backups are its own, and it waits for the restore rather than hide them.
	lost := cluster.Spec{Name: "a", Token: "etcd-cluster", Members: []cluster.MemberSpec{{Name: "test", ClientURL: "http://127.0.0.1:1", PeerURL: peerA}}}
	sc = testSidecar(t, s, cluster.Snapshot{Spec: lost, Status: cluster.Status{Members: []cluster.StatusMember{{Name: "test"}}}})
	if _, obs, plan := decideOnce(t, sc); plan.Case != "NoStatusBackupExistsWait" || obs.BackupTimeline != 1 {
		t.Fatalf("plan %+v with backup timeline %d; want NoStatusBackupExistsWait on timeline 1", plan, obs.BackupTimeline)
	}
}

// changingView is a cluster view whose snapshot a test replaces.
type changingView struct {
	staticView
	snap *atomic.Pointer[cluster.Snapshot]
}

func (v changingView) Snapshot(context.Context) (cluster.Snapshot, error) { return *v.snap.Load(), nil }

// TestRestoreInPlaceWithdrawnWhileRestoringDoesNotStart: the seed of a restore in place
// restores the target; the directive was withdrawn meanwhile (a cancelled restore). The
// sidecar must not start a one-member cluster on the restored data beside the members that
// restart on theirs: the restored data is moved aside (kept), and it observes again.
func TestRestoreInPlaceWithdrawnWhileRestoringDoesNotStart(t *testing.T) {
	s := openTestStore(t)
	_, cli, ep := testutil.EmbeddedEtcd(t)
	a, stop := startBackups(t, s, ep)
	waitStored(t, a, cli, ep, 1) // the first full snapshot, before the writes: they are restorable
	rev := testutil.Write(t, cli, "k", 10)
	waitStored(t, a, cli, ep, 1)
	stop()
	spec := oneMember(t, "tok")
	status := cluster.Status{ClusterID: strconv.FormatUint(testutil.ClusterIDOf(t, cli, ep), 16), Voters: []cluster.Voter{{ID: "1", Name: "test"}}}
	seeding := cluster.Snapshot{Spec: spec, Status: status, Directive: &cluster.Directive{Epoch: 3, Phase: cluster.PhaseSeeding, Mode: cluster.RecoverFromBackup, Seed: "test",
		Restore: &cluster.RestoreTarget{Timeline: 1, Revision: rev - 3}}}
	var snap atomic.Pointer[cluster.Snapshot]
	snap.Store(&seeding)
	sc, err := New(Config{Name: "test", DataDir: filepath.Join(t.TempDir(), "data"), View: changingView{snap: &snap},
		Backup: agent.Config{StoreURL: s.String()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	spec, obs, plan := decideOnce(t, sc)
	if plan.Case != "RestoreInPlace" || plan.RecoveryEpoch != 3 {
		t.Fatalf("plan %+v; want RestoreInPlace for directive 3", plan)
	}
	withdrawn := cluster.Snapshot{Spec: spec, Status: status}
	snap.Store(&withdrawn)
	cfg, err := sc.act(context.Background(), spec, obs, plan)
	if !errors.Is(err, errTryAgain) || !strings.Contains(err.Error(), "no longer in force") || cfg != nil {
		t.Fatalf("act after the directive was withdrawn: config %t, err %v; want no configuration and an error saying why", cfg != nil, err)
	}
	_, obs, plan = decideOnce(t, sc)
	if !obs.Data.Empty() || plan.Case != "LostDataWaitForQuorum" {
		t.Fatalf("after: data %+v, plan %+v; want the restored data out of the data dir and the member waiting for the cluster to rejoin", obs.Data, plan)
	}
	aside, _ := filepath.Glob(sc.cfg.DataDir + ".restored-*")
	if len(aside) != 1 {
		t.Fatalf("restored data kept beside the data dir: %v; want one data.restored-<time>", aside)
	}
}
