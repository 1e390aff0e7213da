package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/heal"
	"github.com/etcd-steward/steward/internal/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// healthyVoters waits until every desired member is a healthy voting member and returns the
// member IDs by name.
func healthyVoters(t *testing.T, ctx context.Context, dir string, timeout time.Duration) map[string]string {
	t.Helper()
	var ids map[string]string
	testutil.Eventually(t, timeout, "every member healthy and voting", func() error {
		rep, err := Status(ctx, Dir(dir))
		if err != nil {
			return err
		}
		spec, _, _ := ReadSpec(Dir(dir))
		if len(rep.Members) != len(spec.Members) || rep.Cluster.Size != len(spec.Members) {
			return fmt.Errorf("%d members reported, %d in etcd, want %d: %+v", len(rep.Members), rep.Cluster.Size, len(spec.Members), rep.Members)
		}
		ids = map[string]string{}
		for _, m := range rep.Members {
			if !m.Healthy || (m.Role != "leader" && m.Role != "follower") {
				return fmt.Errorf("member %s: healthy %t role %s", m.Name, m.Healthy, m.Role)
			}
			ids[m.Name] = m.ID
		}
		return nil
	})
	return ids
}

// writeKeys puts n keys through the cluster and returns them with their values.
func writeKeys(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string, n int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := 0; i < n; i++ {
		k, v := fmt.Sprintf("%s/%03d", prefix, i), fmt.Sprintf("value-%d-%d", i, time.Now().UnixNano())
		// A member may be down: retry the same put (idempotent) until it is acknowledged.
		testutil.Eventually(t, 30*time.Second, "put "+k, func() error {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := cli.Put(pctx, k, v)
			return err
		})
		out[k] = v
	}
	return out
}

// everyMemberHas checks each member's own copy (serializable reads) holds the keys.
func everyMemberHas(t *testing.T, ctx context.Context, spec Spec, want map[string]string) {
	t.Helper()
	for _, m := range spec.Members {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{spec.ClientURL(m)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "member "+m.Name+" has every acknowledged write", func() error {
			for k, v := range want {
				resp, err := c.Get(ctx, k, clientv3.WithSerializable())
				if err != nil {
					return err
				}
				if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != v {
					return fmt.Errorf("%s: got %v, want %q", k, resp.Kvs, v)
				}
			}
			return nil
		})
		c.Close()
	}
}

func clusterClient(t *testing.T, spec Spec) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: spec.ClientURLs(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestMembersHealThemselves: wipe one member, corrupt another's database, swap two members'
// data dirs; each time the cluster heals to three healthy voting members holding every
// acknowledged write. Damaged members come back under new IDs; swapped data dirs are moved
// back where they belong, so the swapped members keep their IDs and no quorum-loss recovery
// runs although two of three members held the wrong data.
func TestMembersHealThemselves(t *testing.T) {
	t.Parallel() // its own directory and ports
	dir := t.TempDir()
	// No step here loses the quorum for good: the grace only has to outlast restarts.
	r := startClusterWith(t, UpOptions{Dir: dir, Members: 3, BasePort: 21700, Backup: "none", QuorumLossGrace: 15 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cli := clusterClient(t, r.spec)
	acked := writeKeys(t, ctx, cli, "/before", 50)
	ids := healthyVoters(t, ctx, dir, time.Minute)

	for _, step := range []struct {
		fault, member, other string
		newID, sameID        []string
	}{
		{fault: FaultWipe, member: "m1", newID: []string{"m1"}},
		{fault: FaultCorrupt, member: "m2", newID: []string{"m2"}},
		{fault: FaultSwap, member: "m0", other: "m2", sameID: []string{"m0", "m2"}},
	} {
		t.Run(step.fault+" "+step.member, func(t *testing.T) {
			before, _ := ReadState(Dir(dir))
			if err := Fault(Dir(dir), step.member, step.fault, step.other); err != nil {
				t.Fatal(err)
			}
			for k, v := range writeKeys(t, ctx, cli, "/after-"+step.fault, 20) {
				acked[k] = v
			}
			now := healthyVoters(t, ctx, dir, 2*time.Minute)
			for _, name := range step.newID {
				if now[name] == ids[name] {
					t.Errorf("member %s kept ID %s after %s: it must have been replaced", name, ids[name], step.fault)
				}
			}
			for _, name := range step.sameID {
				if now[name] != ids[name] {
					t.Errorf("member %s changed ID from %s to %s after %s: its data should have been moved back", name, ids[name], now[name], step.fault)
				}
			}
			if after, _ := ReadState(Dir(dir)); after.LastEpoch != before.LastEpoch {
				t.Errorf("a quorum-loss recovery ran (directive %d) although every copy was intact", after.LastEpoch)
			}
			ids = now
			everyMemberHas(t, ctx, r.spec, acked)
		})
	}

	// etcd's hash check marks a member whose data disagrees CORRUPT, and the cluster then
	// refuses every request. The alarm is raised here as the check raises it.
	t.Run("CORRUPT alarm on m1", func(t *testing.T) {
		before, _ := ReadState(Dir(dir))
		id, err := strconv.ParseUint(ids["m1"], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: pb.AlarmType_CORRUPT}); err != nil {
			t.Fatal(err)
		}
		for k, v := range writeKeys(t, ctx, cli, "/after-corrupt-alarm", 10) {
			acked[k] = v
		}
		now := healthyVoters(t, ctx, dir, 2*time.Minute)
		if now["m1"] == ids["m1"] {
			t.Fatalf("m1 kept ID %s: the member marked CORRUPT must have been replaced", ids["m1"])
		}
		if resp, err := cli.AlarmList(ctx); err != nil || len(resp.Alarms) != 0 {
			t.Fatalf("alarms after the replacement: %v %v", resp, err)
		}
		if after, _ := ReadState(Dir(dir)); after.LastEpoch != before.LastEpoch {
			t.Errorf("a quorum-loss recovery ran (directive %d) for one member marked CORRUPT", after.LastEpoch)
		}
		everyMemberHas(t, ctx, r.spec, acked)
	})
}

// TestQuorumLossRecoversFromSurvivor wipes two of three members: the survivor seeds the
// recovered cluster and no acknowledged write is lost.
func TestQuorumLossRecoversFromSurvivor(t *testing.T) {
	t.Parallel() // its own directory and ports
	dir := t.TempDir()
	r := startClusterWith(t, UpOptions{Dir: dir, Members: 3, BasePort: 21800, Backup: "none", QuorumLossGrace: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli := clusterClient(t, r.spec)
	acked := writeKeys(t, ctx, cli, "/k", 100)
	healthyVoters(t, ctx, dir, time.Minute)

	for _, m := range []string{"m1", "m2"} {
		if err := Fault(Dir(dir), m, FaultWipe, ""); err != nil {
			t.Fatal(err)
		}
	}
	healthyVoters(t, ctx, dir, 3*time.Minute)
	everyMemberHas(t, ctx, r.spec, acked)
	st, _ := ReadState(Dir(dir))
	if st.LastEpoch == 0 {
		t.Fatal("healed without a recovery directive: the majority was not lost?")
	}
}

// TestWipedFollowersRecoverWithoutTheGrace wipes both followers of three while the leader
// keeps every write: their sidecars report from disk that their data is gone, no grace can
// bring it back, so the recovery starts at once (the grace here is far longer than the test
// may take) and nothing acknowledged is lost.
func TestWipedFollowersRecoverWithoutTheGrace(t *testing.T) {
	t.Parallel() // its own directory and ports
	dir := t.TempDir()
	r := startClusterWith(t, UpOptions{Dir: dir, Members: 3, BasePort: 22000, Backup: "none", QuorumLossGrace: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli := clusterClient(t, r.spec)
	acked := writeKeys(t, ctx, cli, "/k", 50)
	healthyVoters(t, ctx, dir, time.Minute)
	rep, err := Status(ctx, Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	var followers []string
	for _, m := range rep.Members {
		if m.Role == "follower" {
			followers = append(followers, m.Name)
		}
	}
	if len(followers) != 2 {
		t.Fatalf("followers %v, want two: %+v", followers, rep.Members)
	}
	for _, m := range followers {
		if err := Fault(Dir(dir), m, FaultWipe, ""); err != nil {
			t.Fatal(err)
		}
	}
	healthyVoters(t, ctx, dir, 3*time.Minute)
	everyMemberHas(t, ctx, r.spec, acked)
	testutil.Eventually(t, time.Minute, "the recovery retired", func() error {
		st, err := ReadState(Dir(dir))
		switch {
		case err != nil:
			return err
		case st.Directive != nil:
			return fmt.Errorf("directive %d still in force (%s)", st.Directive.Epoch, st.Directive.Phase)
		case st.LastRecovery == nil:
			return fmt.Errorf("healed without a recovery directive")
		}
		return nil
	})
	st, _ := ReadState(Dir(dir))
	if got := st.LastRecovery.Case; got != string(heal.CaseQuorumLossProven) {
		t.Fatalf("the recovery was started by case %q, want %s (it waited for the grace, or the loss was not proven): %+v", got, heal.CaseQuorumLossProven, st.LastRecovery)
	}
}

// TestTotalLossRestoresFromBackup wipes every member: the cluster comes back from the backup
// chain at a revision at least the newest one backed up before the loss.
func TestTotalLossRestoresFromBackup(t *testing.T) {
	t.Parallel() // its own directory and ports
	dir := t.TempDir()
	r := startClusterWith(t, UpOptions{Dir: dir, Members: 3, BasePort: 21900, QuorumLossGrace: 5 * time.Second,
		SidecarArgs: []string{"--delta-period=500ms"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli := clusterClient(t, r.spec)
	acked := writeKeys(t, ctx, cli, "/k", 100)
	var backedUp int64
	testutil.Eventually(t, time.Minute, "the writes are backed up", func() error {
		rep, err := Status(ctx, Dir(dir))
		if err != nil {
			return err
		}
		// A full snapshot taken after the writes holds them as well as a delta would.
		if rep.Backup == nil || !rep.Backup.Ready || max(rep.Backup.LatestDeltaRevision, rep.Backup.LatestFullRevision) < 101 {
			return fmt.Errorf("backup %+v", rep.Backup)
		}
		backedUp = max(rep.Backup.LatestDeltaRevision, rep.Backup.LatestFullRevision)
		return nil
	})

	for _, m := range []string{"m0", "m1", "m2"} {
		if err := Fault(Dir(dir), m, FaultWipe, ""); err != nil {
			t.Fatal(err)
		}
	}
	healthyVoters(t, ctx, dir, 3*time.Minute)
	everyMemberHas(t, ctx, r.spec, acked)
	resp, err := cli.Get(ctx, "/k/000")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision < backedUp {
		t.Fatalf("restored at revision %d, below the newest backed-up revision %d", resp.Header.Revision, backedUp)
	}
	// Every member reported its data gone: the seed restores the whole cluster, each of the
	// others restores the same point for itself, and none joins as a learner.
	for _, m := range []string{"m0", "m1", "m2"} {
		logs, _ := os.ReadFile(Dir(dir).Log(m, "sidecar"))
		if !strings.Contains(string(logs), `"event":"restored-from-backup"`) {
			t.Errorf("%s did not restore from backup", m)
		}
		if strings.Contains(string(logs), `"event":"added-as-learner"`) {
			t.Errorf("%s joined the restored cluster as a learner: the founders start together", m)
		}
	}
	testutil.Eventually(t, time.Minute, "the recovery retired", func() error {
		rep, err := Status(ctx, Dir(dir))
		if err != nil {
			return err
		}
		if rep.Supervisor.Recovery != nil || rep.Supervisor.LastRecovery == nil {
			return fmt.Errorf("directive in force %+v", rep.Supervisor.Recovery)
		}
		if d := rep.Supervisor.LastRecovery; d.Epoch != 1 || len(d.Founders) != 3 || len(d.Restored) != 2 {
			t.Fatalf("want one recovery, its first epoch done with every member a founder and the two besides the seed recorded as restored; got %+v", d)
		}
		return nil
	})
}

// TestIdleClusterReplacesMember wipes a member of a cluster whose raft index is past 5000
// and that gets no writes while it heals. The replacement joins through a raft snapshot;
// etcd does not count a snapshot as applied, so the new member's own requests (publishing
// itself) are refused as "too many requests" until some entry is applied after it. The
// sidecar must get it there without any client traffic.
func TestIdleClusterReplacesMember(t *testing.T) {
	t.Parallel() // its own directory and ports
	dir := t.TempDir()
	r := startClusterWith(t, UpOptions{Dir: dir, Members: 3, BasePort: 22300, Backup: "none",
		SidecarArgs: []string{"--etcd-snapshot-count=500"}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cli := clusterClient(t, r.spec)
	// Past 5000 raft entries: concurrent puts (each one entry), then nothing more.
	const puts, workers = 5500, 16
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			var err error
			for i := w; i < puts && err == nil; i += workers {
				err = putRetrying(ctx, cli, fmt.Sprintf("/fill/%05d", i), "v")
			}
			errs <- err
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ids := healthyVoters(t, ctx, dir, time.Minute)
	if err := Fault(Dir(dir), "m2", FaultWipe, ""); err != nil {
		t.Fatal(err)
	}
	now := healthyVoters(t, ctx, dir, 2*time.Minute)
	if now["m2"] == ids["m2"] {
		t.Fatalf("m2 kept ID %s after the wipe: it must have been replaced", ids["m2"])
	}
	resp, err := r.client(2).Get(ctx, "/fill/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != puts {
		t.Fatalf("the replaced m2 holds %d of the %d keys", resp.Count, puts)
	}
}

// putRetrying puts until the cluster acknowledges it or ctx ends. A put that timed out
// under load may or may not have been applied; putting the same value again is harmless.
func putRetrying(ctx context.Context, cli *clientv3.Client, key, value string) error {
	for {
		_, err := cli.Put(ctx, key, value)
		if err == nil || ctx.Err() != nil {
			return err
		}
		switch {
		case errors.Is(err, rpctypes.ErrTimeout), errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
			errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost), errors.Is(err, rpctypes.ErrTooManyRequests):
		default:
			return err
		}
	}
}
