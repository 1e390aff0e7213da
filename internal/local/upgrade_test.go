package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/maintenance"
	"github.com/etcd-steward/steward/internal/testutil"
)

func TestCheckEtcdUpgrade(t *testing.T) {
	for _, tc := range []struct {
		from, to, err string
	}{
		{from: "3.6.16", to: "3.6.16"},
		{from: "3.6.16", to: "3.6.20"},
		{from: "3.6.16", to: "3.6.2"},
		{from: "3.6.16", to: "3.7.0"},
		{from: "3.6.16", to: "v3.7.1"},
		{from: "3.6.16", to: "3.8.0", err: "one minor version at a time, so upgrade to a steward binary with etcd 3.7 first"},
		{from: "3.6.16", to: "3.5.21", err: "downgrade procedure"},
		{from: "3.6.16", to: "4.0.0", err: "major"},
		{from: "3.6.16", to: "dev", err: `"dev" is not MAJOR.MINOR.PATCH`},
	} {
		err := checkEtcdUpgrade(tc.from, tc.to)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("checkEtcdUpgrade(%s, %s) = %v; want an error with %q", tc.from, tc.to, err, tc.err)
		}
	}
}

func TestAnswerRestartRequest(t *testing.T) {
	now := time.Now()
	req := RestartRequest{requestHeader: requestHeader{ID: "r", RequestedAt: now, Expires: now.Add(time.Minute)}, Member: "m1", Generation: 2}
	old, current := &MemberState{Name: "m1", Generation: 1}, &MemberState{Name: "m1", Generation: 2}
	for _, tc := range []struct {
		name    string
		req     RestartRequest
		gen     int64
		d       *cluster.Directive
		ms      *MemberState
		restart bool
		err     string
	}{
		{name: "an outdated member restarts", req: req, gen: 2, ms: old, restart: true},
		{name: "a member on the generation already: done", req: req, gen: 2, ms: current},
		{name: "the spec changed since", req: req, gen: 3, ms: old, err: "generation 3 now"},
		{name: "a directive in force", req: req, gen: 2, ms: old, d: &cluster.Directive{Epoch: 4, Phase: cluster.PhaseSeeding}, err: "is in force"},
		{name: "no such member", req: req, gen: 2, err: "no member m1"},
		{name: "expired", req: RestartRequest{requestHeader: requestHeader{ID: "r", Expires: now.Add(-time.Second)}, Member: "m1", Generation: 2}, gen: 2, ms: old, err: "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restart, ans := answerRestartRequest(now, tc.req, tc.gen, tc.d, tc.ms)
			if restart != tc.restart || ans.Accepted != (tc.err == "") || !strings.Contains(ans.Error, tc.err) || ans.ID != "r" {
				t.Fatalf("restart %t, answer %+v; want restart %t, error with %q", restart, ans, tc.restart, tc.err)
			}
		})
	}
}

func TestUpgradeCanStart(t *testing.T) {
	healthy := func(names ...string) Report {
		var rep Report
		for _, n := range names {
			rep.Members = append(rep.Members, MemberReport{Name: n, Role: "follower", Healthy: true})
		}
		return rep
	}
	down := func(rep Report, name string) Report {
		for i := range rep.Members {
			if rep.Members[i].Name == name {
				rep.Members[i].Healthy = false
			}
		}
		return rep
	}
	gens := func(g ...int64) State {
		var st State
		for i, x := range g {
			st.Members = append(st.Members, MemberState{Name: fmt.Sprintf("m%d", i), Generation: x})
		}
		return st
	}
	withDirective := gens(1, 1, 1)
	withDirective.Directive = &cluster.Directive{Epoch: 3, Phase: cluster.PhaseSeeding}
	for _, tc := range []struct {
		name string
		rep  Report
		st   State
		gen  int64
		err  string
	}{
		{name: "every member healthy", rep: healthy("m0", "m1", "m2"), st: gens(1, 1, 1), gen: 1},
		{name: "a member down", rep: down(healthy("m0", "m1", "m2"), "m1"), st: gens(1, 1, 1), gen: 1, err: "not: m1"},
		{name: "a member an unfinished upgrade took down", rep: down(healthy("m0", "m1", "m2"), "m1"), st: gens(1, 2, 1), gen: 2},
		{name: "an outdated member down in an unfinished upgrade", rep: down(healthy("m0", "m1", "m2"), "m2"), st: gens(1, 2, 1), gen: 2, err: "not: m2"},
		{name: "a directive in force", rep: healthy("m0", "m1", "m2"), st: withDirective, gen: 1, err: "directive 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := upgradeCanStart(tc.rep, tc.st, tc.gen)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("upgradeCanStart = %v; want an error with %q", err, tc.err)
			}
		})
	}
}

// writeLoad writes a unique key every 100 ms through every endpoint until stopped, and
// records which writes were acknowledged and when the others failed.
type writeLoad struct {
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	acked  map[string]string
	failed []int // attempt numbers
	at     map[int]time.Time
}

func startWriteLoad(t *testing.T, spec Spec, prefix string) *writeLoad {
	cli := clusterClient(t, spec)
	w := &writeLoad{stop: make(chan struct{}), done: make(chan struct{}), acked: map[string]string{}, at: map[int]time.Time{}}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			k, v := fmt.Sprintf("%s/%05d", prefix, i), fmt.Sprintf("v%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := cli.Put(ctx, k, v)
			cancel()
			w.mu.Lock()
			w.at[i] = time.Now()
			if err == nil {
				w.acked[k] = v
			} else {
				w.failed = append(w.failed, i)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// finish stops the load and checks that failed writes, if any, are consecutive attempts
// within one window shorter than maxWindow (one leader election at most).
func (w *writeLoad) finish(t *testing.T, maxWindow time.Duration) map[string]string {
	t.Helper()
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.acked) < 20 {
		t.Fatalf("only %d writes acknowledged", len(w.acked))
	}
	if n := len(w.failed); n > 0 {
		first, last := w.failed[0], w.failed[n-1]
		if last-first+1 != n {
			t.Fatalf("failed writes %v are not one contiguous window", w.failed)
		}
		if span := w.at[last].Sub(w.at[first]); span > maxWindow {
			t.Fatalf("writes failed for %s (attempts %v); want at most one election (< %s)", span, w.failed, maxWindow)
		}
	}
	t.Logf("%d writes acknowledged, %d failed", len(w.acked), len(w.failed))
	return w.acked
}

func leaderName(t *testing.T, ctx context.Context, dir string) string {
	t.Helper()
	var leader string
	testutil.Eventually(t, 30*time.Second, "a leader", func() error {
		rep, err := Status(ctx, Dir(dir))
		if err != nil {
			return err
		}
		if leader = rep.Cluster.Leader; leader == "" {
			return errors.New("no leader")
		}
		return nil
	})
	return leader
}

// checkRollout checks the order of a rolling update over every member: followers by name,
// one at a time, then the leader after its leadership moved; no recovery ran (the quorum held).
func checkRollout(t *testing.T, res UpgradeResult, spec Spec, leader string, epochBefore int64, st State) {
	t.Helper()
	var followers []string
	for _, m := range spec.Members {
		if m.Name != leader {
			followers = append(followers, m.Name)
		}
	}
	if want := append(followers, leader); !slices.Equal(res.Restarted, want) {
		t.Fatalf("restarted %v; want the followers by name, then the leader: %v", res.Restarted, want)
	}
	if len(res.LeaderMoves) == 0 || res.LeaderMoves[0].From != leader || res.LeaderMoves[0].To == leader {
		t.Fatalf("leadership moves %v; want one from %s first", res.LeaderMoves, leader)
	}
	if st.Directive != nil || st.LastEpoch != epochBefore {
		t.Fatalf("a recovery ran during the rollout (directive %+v, last epoch %d, before %d)", st.Directive, st.LastEpoch, epochBefore)
	}
	for _, m := range st.Members {
		if m.Generation != res.Generation {
			t.Fatalf("member %s runs generation %d after the rollout to %d", m.Name, m.Generation, res.Generation)
		}
	}
}

// etcdStartedWith is an option as the member's etcd reports it in its newest start-up line.
func etcdStartedWith(t *testing.T, dir, name, option string) any {
	t.Helper()
	f, err := os.Open(Dir(dir).Log(name, "etcd"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"starting an etcd server"`) {
			last = nil
			_ = json.Unmarshal(sc.Bytes(), &last)
		}
	}
	if last == nil {
		t.Fatalf("%s's etcd log has no start-up line", name)
	}
	return last[option]
}

func stateNow(t *testing.T, dir string) State {
	t.Helper()
	st, err := ReadState(Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func upgrade(t *testing.T, ctx context.Context, opts UpgradeOptions) (UpgradeResult, error) {
	t.Helper()
	opts.Progress = func(line string) { t.Logf("upgrade: %s", line) }
	start := time.Now()
	res, err := Upgrade(ctx, opts)
	t.Logf("upgrade took %s: %+v, %v", time.Since(start).Round(time.Millisecond), res, err)
	return res, err
}

// TestUpgradeThreeMembers shares one 3-member cluster (with backups) across a rolling update
// under write load, a change from one flag set to another, refused input and a bad flag.
func TestUpgradeThreeMembers(t *testing.T) {
	t.Parallel() // its own directory and ports
	dir := t.TempDir()
	r := startClusterWith(t, UpOptions{Dir: dir, Members: 3, BasePort: 23100, SidecarArgs: []string{"--delta-period=1s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	t.Run("a rolling update under write load: followers one at a time, the leader last after moving leadership", func(t *testing.T) {
		leader, epoch := leaderName(t, ctx, dir), stateNow(t, dir).LastEpoch
		load := startWriteLoad(t, r.spec, "/load3")
		res, err := upgrade(t, ctx, UpgradeOptions{Dir: dir, SetFlags: map[string]string{"snapshot-count": "5000"}})
		if err != nil {
			t.Fatal(err)
		}
		acked := load.finish(t, 5*time.Second)
		if res.Snapshot == nil || res.Snapshot.Key == "" || res.Generation != 1 {
			t.Fatalf("result %+v: want a full snapshot first and generation 1", res)
		}
		checkRollout(t, res, r.spec, leader, epoch, stateNow(t, dir))
		everyMemberHas(t, ctx, r.spec, acked)
		for _, m := range r.spec.Members {
			if got := etcdStartedWith(t, dir, m.Name, "snapshot-count"); got != float64(5000) {
				t.Fatalf("%s's etcd started with snapshot-count %v; want 5000", m.Name, got)
			}
		}
	})

	t.Run("from one flag set to another: every etcd runs with the new flags", func(t *testing.T) {
		const quota = 3 << 30
		pids := etcdPIDs(t, dir)
		res, err := upgrade(t, ctx, UpgradeOptions{Dir: dir, SkipSnapshot: true, UnsetFlags: []string{"snapshot-count"},
			SetFlags: map[string]string{"quota-backend-bytes": fmt.Sprint(quota)}})
		if err != nil {
			t.Fatal(err)
		}
		// Once the rollout returns, the state never shows a process it stopped.
		for _, m := range stateNow(t, dir).Members {
			if m.EtcdPID == pids[m.Name] {
				t.Fatalf("state.json records %s's etcd pid %d, the process the rollout stopped", m.Name, m.EtcdPID)
			}
		}
		if len(res.Restarted) != 3 || res.Generation != 2 {
			t.Fatalf("result %+v: want 3 members restarted onto generation 2", res)
		}
		for _, m := range r.spec.Members {
			c := r.client(slices.Index(r.spec.Members, m))
			st, err := c.Status(ctx, r.spec.ClientURL(m))
			if err != nil {
				t.Fatal(err)
			}
			if st.DbSizeQuota != quota {
				t.Fatalf("%s's etcd reports a backend quota of %d; want %d", m.Name, st.DbSizeQuota, quota)
			}
			if got := etcdStartedWith(t, dir, m.Name, "snapshot-count"); got != float64(10000) {
				t.Fatalf("%s's etcd started with snapshot-count %v; want the sidecar's default 10000 again", m.Name, got)
			}
		}
	})

	t.Run("bad input is refused and changes nothing", func(t *testing.T) {
		specBefore, _ := os.ReadFile(Dir(dir).Spec())
		pids := etcdPIDs(t, dir)
		// A stand-in for a steward binary, for the version check only: it reports etcd 3.8.
		fake := filepath.Join(t.TempDir(), "steward-etcd-3.8")
		if err := os.WriteFile(fake, []byte("#!/bin/sh\necho '{\"steward\":\"fake\",\"etcd\":\"3.8.0\",\"go\":\"go\"}'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			opts UpgradeOptions
			err  string
		}{
			{UpgradeOptions{SetFlags: map[string]string{"snapshot-cout": "1"}}, `"snapshot-cout" is not an etcd configuration option`},
			{UpgradeOptions{SetFlags: map[string]string{"data-dir": "/tmp/x"}}, `"data-dir" is set by Steward`},
			{UpgradeOptions{SetFlags: map[string]string{"snapshot-count": "lots"}}, "snapshot-count=lots"},
			{UpgradeOptions{UnsetFlags: []string{"max-txn-ops"}}, `"max-txn-ops" is not set`},
			{UpgradeOptions{Binary: filepath.Join(dir, "no-such-steward")}, "no such file"},
			{UpgradeOptions{Binary: fake}, "skips a minor version"},
		} {
			tc.opts.Dir = dir
			_, err := upgrade(t, ctx, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "nothing was changed") {
				t.Fatalf("upgrade %+v: %v; want a refusal with %q that says nothing was changed", tc.opts, err, tc.err)
			}
		}
		if after, _ := os.ReadFile(Dir(dir).Spec()); string(after) != string(specBefore) {
			t.Fatalf("cluster.json changed:\n%s\nwas\n%s", after, specBefore)
		}
		if after := etcdPIDs(t, dir); !maps.Equal(after, pids) {
			t.Fatalf("members restarted: etcd pids %v, were %v", after, pids)
		}
	})

	t.Run("a flag etcd fails to start with stops the rollout after one member; upgrading without it brings the member back", func(t *testing.T) {
		leader := leaderName(t, ctx, dir)
		pids := etcdPIDs(t, dir)
		// etcd's own validation accepts it; etcd refuses it only as it starts.
		bad := map[string]string{"auto-compaction-mode": "periodic", "auto-compaction-retention": "bogus"}
		res, err := upgrade(t, ctx, UpgradeOptions{Dir: dir, SkipSnapshot: true, SetFlags: bad, WaitTimeout: 15 * time.Second})
		if !errors.Is(err, maintenance.ErrStalled) {
			t.Fatalf("upgrade with a bad flag: %v; want ErrStalled", err)
		}
		if len(res.Restarted) != 1 || res.Restarted[0] == leader {
			t.Fatalf("restarted %v; want one follower", res.Restarted)
		}
		broken := res.Restarted[0]
		if !strings.Contains(err.Error(), broken+" was restarted") || !strings.Contains(err.Error(), "--unset-flag auto-compaction-mode --unset-flag auto-compaction-retention") {
			t.Fatalf("the error does not name the member and the way back: %v", err)
		}
		st, after := stateNow(t, dir), etcdPIDs(t, dir, broken)
		for _, m := range st.Members {
			if m.Name != broken && (m.Generation != 2 || after[m.Name] != pids[m.Name]) {
				t.Fatalf("member %s was touched: generation %d, etcd pid %d (was %d)", m.Name, m.Generation, after[m.Name], pids[m.Name])
			}
		}
		res, err = upgrade(t, ctx, UpgradeOptions{Dir: dir, SkipSnapshot: true, UnsetFlags: []string{"auto-compaction-mode", "auto-compaction-retention"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Restarted) != 3 || res.Restarted[0] != broken || res.Generation != 4 {
			t.Fatalf("result %+v: want %s restarted first, then the others, onto generation 4", res, broken)
		}
		healthyVoters(t, ctx, dir, 60*time.Second)
	})
}

// etcdPIDs reads every member's etcd pid once the supervisor has recorded all of them but
// those of except (just after a restart it records 0 until the new process runs).
func etcdPIDs(t *testing.T, dir string, except ...string) map[string]int {
	t.Helper()
	out := map[string]int{}
	testutil.Eventually(t, 30*time.Second, "every member's etcd pid recorded", func() error {
		clear(out)
		for _, m := range stateNow(t, dir).Members {
			if m.EtcdPID == 0 && !slices.Contains(except, m.Name) {
				return fmt.Errorf("member %s has no etcd pid yet", m.Name)
			}
			out[m.Name] = m.EtcdPID
		}
		return nil
	})
	return out
}

// TestUpgradeFiveMembersUnderWriteLoad: a rolling restart (an upgrade that changes nothing)
// of a 5-member cluster.
func TestUpgradeFiveMembersUnderWriteLoad(t *testing.T) {
	t.Parallel() // its own directory and ports
	dir := t.TempDir()
	r := startCluster(t, dir, 5, 23300)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	leader, epoch := leaderName(t, ctx, dir), stateNow(t, dir).LastEpoch
	load := startWriteLoad(t, r.spec, "/load5")
	res, err := upgrade(t, ctx, UpgradeOptions{Dir: dir, SkipSnapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	acked := load.finish(t, 5*time.Second)
	if res.Generation != 1 {
		t.Fatalf("a rolling restart made generation %d; want 1", res.Generation)
	}
	checkRollout(t, res, r.spec, leader, epoch, stateNow(t, dir))
	everyMemberHas(t, ctx, r.spec, acked)
}

// TestPruneBinaries: after an upgrade, the member binaries of earlier generations go but the
// one the members run and the one they ran before; the supervisor's own binary stays.
func TestPruneBinaries(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"steward", "steward-g1", "steward-g2", "steward-g3", "steward-g4"} {
		if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "bin", name), nil, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := pruneBinaries(Dir(dir), "bin/steward-g4", "bin/steward-g2"); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"steward", "steward-g2", "steward-g4"}; !slices.Equal(left, want) {
		t.Fatalf("left %v; want %v", left, want)
	}
}
