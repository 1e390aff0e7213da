// Command heal measures how long a Steward cluster takes to heal itself (issue 5,
// "Benchmarks"): from a fault to healthy voting members again.
//
//	go run ./bench/heal -steward bin/steward -size 100MiB -revisions 100000
//
// It starts a real 3-member local cluster (`steward local up`, backups on into a file:// store,
// a short quorum-loss grace), fills it with real clients to -size of database (fixed value
// size), waits until delta capture has caught up, and then:
//
//  1. One-member wipe, -rounds times: `steward local fault MEMBER wipe` on a follower, then
//     every 100 ms the member list (linearizable) and each member's /readyz, until the member
//     is back as a healthy voting member under a new ID and all three are healthy voters.
//     Reference, in alternating order with it: the same cluster adding a fresh member the way
//     Steward does it, driven directly with no detection or decisions: MemberAddAsLearner, an
//     empty etcd started with initial-cluster-state=existing (in this process), MemberPromote
//     every 100 ms until etcd accepts, then a linearizable read through the new member. The
//     sidecars are paused (SIGSTOP) during the reference, or the leader's sidecar would remove
//     the extra member as superfluous; the fresh member is removed again afterwards.
//  2. Quorum loss with all data gone: a full snapshot through the backup leader's sidecar
//     (POST /v1/snapshots/full), then -revisions small puts, then a wait until the stored
//     deltas reach the cluster's revision; then every member is wiped and the benchmark waits
//     for three healthy voting members. The supervisor waits the configured grace before it
//     recovers; the time is reported with and without it. There is no reference: nothing
//     else recovers a lost quorum from backups by itself.
//
// While each heal is measured, a light background load (-background-rate puts/s) keeps the
// cluster in use, as leases and heartbeats do; with -background-rate 0 the cluster is idle
// (where the reference's fresh member, unlike Steward's, waits for the next write: see
// docs/benchmarks.md, findings). Each fault and each reference
// add starts once the cluster has been healthy for 6 s. The members' logs give each heal's
// phases, read from the "event" field of their lines (timeline.go); a phase expected but never
// seen fails the run. The last line of output is the JSON result (see bench/internal/result).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/bench/internal/load"
	"github.com/etcd-steward/steward/bench/internal/program"
	"github.com/etcd-steward/steward/bench/internal/result"
	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/heal"
	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

type options struct {
	steward        string
	size           int64
	valueSize      int
	workers, conns int
	revisions      int
	revValueSize   int
	revKeys        int
	rounds         int
	grace          time.Duration
	deltaPeriod    time.Duration
	poll           time.Duration
	bgRate         float64
	healTimeout    time.Duration
	basePort       int
	quorum         bool
	keep           bool
}

func main() {
	var o options
	p := program.New("heal bench")
	p.Binary(&o.steward, "steward", "bin/steward", "steward binary")
	p.Size(&o.size, "size", "100MiB", "database size to build before the faults (e.g. 20MiB, 100MiB)")
	flag.IntVar(&o.valueSize, "value-size", 4096, "value bytes of each put while filling (random hex)")
	flag.IntVar(&o.workers, "workers", 16, "concurrent puts while loading")
	flag.IntVar(&o.conns, "conns", 4, "client connections while loading")
	flag.IntVar(&o.revisions, "revisions", 100000, "small puts (revisions) written after the full snapshot, before the quorum loss")
	flag.IntVar(&o.revValueSize, "rev-value-size", 128, "value bytes of those puts")
	flag.IntVar(&o.revKeys, "rev-keys", 10000, "key space of those puts (they overwrite keys in turn)")
	p.Rounds(&o.rounds, "rounds", 3, "one-member wipes measured (each alternating with one reference member add)")
	flag.DurationVar(&o.grace, "grace", 5*time.Second, "the cluster's --quorum-loss-grace")
	flag.DurationVar(&o.deltaPeriod, "delta-period", time.Second, "the sidecars' --delta-period")
	flag.DurationVar(&o.poll, "poll", 100*time.Millisecond, "how often the cluster's state is polled while it heals")
	flag.Float64Var(&o.bgRate, "background-rate", 10, "puts per second kept up while each heal is measured (a cluster in use; 0: idle)")
	flag.DurationVar(&o.healTimeout, "heal-timeout", 5*time.Minute, "give up on a heal after this long")
	flag.IntVar(&o.basePort, "base-port", 24300, "first port to try for the cluster")
	flag.BoolVar(&o.quorum, "quorum-loss", true, "also measure the quorum loss with all data gone")
	p.WorkDir(&o.keep, "keep the cluster and work dir at the end")
	p.Main(func(ctx context.Context, dir string) error { return run(ctx, o, dir) })
}

func run(ctx context.Context, o options, dir string) (err error) {
	clusterDir := filepath.Join(dir, "cluster")
	storeURL := "file://" + filepath.Join(dir, "backups")
	fmt.Printf("heal bench: 3-member cluster in %s, database %s, %d-byte values; quorum-loss grace %v, delta period %v\n",
		clusterDir, result.Human(o.size), o.valueSize, o.grace, o.deltaPeriod)
	c, err := localcluster.Up(ctx, o.steward, clusterDir, localcluster.Options{Members: 3, BasePort: o.basePort, Backup: storeURL,
		Flags: []string{"--quorum-loss-grace", o.grace.String()}, Timeout: 3 * time.Minute,
		SidecarArgs: []string{"--delta-period=" + o.deltaPeriod.String(),
			// Each quorum-loss round asks for a full snapshot, sooner than the default spacing.
			"--full-snapshot-min-interval=1ms"}})
	if err != nil {
		return err
	}
	defer c.PurgeOnReturn(o.keep, &err)
	spec, _, err := local.ReadSpec(local.Dir(clusterDir))
	if err != nil {
		return err
	}
	w, err := newWatcher(spec)
	if err != nil {
		return err
	}
	defer w.close()

	fill, err := load.Fill(ctx, load.Config{Endpoints: spec.ClientURLs(), Conns: o.conns, Workers: o.workers, Prefix: "/bench/heal/fill/",
		ValueSize: o.valueSize, Seed: 1}, spec.ClientURLs()[0], o.size, time.Hour)
	if err != nil {
		return err
	}
	fmt.Printf("filled: %s\n", fill)
	caughtUp, err := c.WaitBackupCurrent(ctx, 10*time.Minute)
	if err != nil {
		return err
	}
	fmt.Printf("delta capture caught up %v after the fill\n", caughtUp.Round(time.Second))
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	var dbSize int64
	for _, m := range st.Members {
		dbSize = max(dbSize, m.DBSize)
	}
	fmt.Printf("database: %s at revision %d\n", result.Human(dbSize), st.Members[0].Revision)

	// 1. One-member wipe, alternating with the reference.
	var wipes []wipeRound
	var refs []refRound
	for i := 0; i < o.rounds; i++ {
		steps := []func() error{
			func() error {
				r, err := wipeOne(ctx, o, c, w, i)
				if err != nil {
					return err
				}
				wipes = append(wipes, r)
				fmt.Printf("round %d: wipe of %s healed in %v (%s)\n", i+1, r.member, r.took.Round(time.Millisecond), r.phases)
				return nil
			},
			func() error {
				r, err := addFresh(ctx, o, dir, c, w)
				if err != nil {
					return err
				}
				refs = append(refs, r)
				fmt.Printf("round %d: reference: fresh member added and promoted in %v (learner serving after %v, promoted after %v)\n",
					i+1, r.took.Round(time.Millisecond), r.serving.Round(time.Millisecond), r.promoted.Round(time.Millisecond))
				return nil
			},
		}
		if i%2 == 1 {
			steps[0], steps[1] = steps[1], steps[0]
		}
		for _, s := range steps {
			if err := s(); err != nil {
				return err
			}
		}
	}

	// 2. Quorum loss with all data gone.
	var ql *quorumRound
	if o.quorum {
		r, err := quorumLoss(ctx, o, c, w, storeURL)
		if err != nil {
			return err
		}
		ql = &r
		fmt.Printf("quorum loss healed in %v (grace %v): directive +%.2fs, %s\n", r.took.Round(time.Millisecond), o.grace, r.directive.Seconds(), r.phases)
	}
	// The CLI agrees that the cluster is healthy.
	if err := cliHealthy(ctx, c); err != nil {
		return err
	}
	res := report(o, fill, dbSize, caughtUp, wipes, refs, ql)
	return res.Print(os.Stdout)
}

// ---- observing the cluster ----

// watcher observes the cluster cheaply enough to poll every 100 ms: one linearizable member
// list through a long-lived client, and every member's /readyz (what `steward local status`
// reports as healthy: a linearizable read through that member succeeds).
type watcher struct {
	spec local.Spec
	cli  *clientv3.Client
	hc   *http.Client
}

func newWatcher(spec local.Spec) (*watcher, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: spec.ClientURLs(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return &watcher{spec: spec, cli: cli, hc: &http.Client{Timeout: time.Second}}, nil
}

func (w *watcher) close() { w.cli.Close() }

type memberView struct {
	id      string
	listed  bool
	learner bool
	ready   bool
}

type view struct {
	err     error // the member list failed (no quorum)
	listed  int   // members in etcd's member list
	members map[string]memberView
}

// healthyVoters counts the desired members that are listed as voters and ready.
func (v view) healthyVoters() int {
	n := 0
	for _, m := range v.members {
		if m.listed && !m.learner && m.ready {
			n++
		}
	}
	return n
}

// healed: every desired member is a healthy voter and etcd lists no other member.
func (v view) healed(size int) bool {
	return v.err == nil && v.listed == size && v.healthyVoters() == size
}

func (w *watcher) observe(ctx context.Context) view {
	v := view{members: map[string]memberView{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range w.spec.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := httpOK(ctx, w.hc, w.spec.HealthURL(m)+"/readyz")
			mu.Lock()
			v.members[m.Name] = memberView{ready: ok}
			mu.Unlock()
		}()
	}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	resp, err := w.cli.MemberList(lctx)
	cancel()
	wg.Wait()
	if err != nil {
		// A new client next time: after an outage gRPC's reconnect backoff would otherwise
		// delay seeing the cluster back by seconds.
		if cli, nerr := clientv3.New(clientv3.Config{Endpoints: w.spec.ClientURLs(), DialTimeout: time.Second, Logger: zap.NewNop()}); nerr == nil {
			w.cli.Close()
			w.cli = cli
		}
		v.err = err
		return v
	}
	v.listed = len(resp.Members)
	for _, em := range resp.Members {
		if mv, ok := v.members[em.Name]; ok && em.Name != "" {
			mv.listed, mv.learner, mv.id = true, em.IsLearner, fmt.Sprintf("%x", em.ID)
			v.members[em.Name] = mv
		}
	}
	return v
}

func (w *watcher) leader(ctx context.Context) (string, error) {
	for _, m := range w.spec.Members {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s, err := w.cli.Status(sctx, w.spec.ClientURL(m))
		cancel()
		if err == nil && s.Leader == s.Header.MemberId {
			return m.Name, nil
		}
	}
	return "", errors.New("no member reports itself the leader")
}

// settle is how long the cluster must have been healthy before a fault or a membership change
// is measured: etcd refuses membership changes until the member handling them has been
// connected to its peers for 5 s (etcdserver.HealthInterval, strict reconfiguration check), so
// right after a heal a second change would measure that wait instead of the heal.
const settle = 6 * time.Second

// waitHealed polls until every member is a healthy voter and has stayed so for settle.
func (w *watcher) waitHealed(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var v view
	var since time.Time
	for time.Now().Before(deadline) {
		if v = w.observe(ctx); v.healed(len(w.spec.Members)) {
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) >= settle {
				return nil
			}
		} else {
			since = time.Time{}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the cluster did not stay healthy for %v within %v: %s", settle, timeout, v)
}

func (v view) String() string {
	if v.err != nil {
		return "member list failed: " + v.err.Error()
	}
	names := make([]string, 0, len(v.members))
	for n := range v.members {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		m := v.members[n]
		role := "voter"
		switch {
		case !m.listed:
			role = "not listed"
		case m.learner:
			role = "learner"
		}
		parts = append(parts, fmt.Sprintf("%s %s ready=%t", n, role, m.ready))
	}
	return fmt.Sprintf("%d listed; %s", v.listed, strings.Join(parts, ", "))
}

func cliHealthy(ctx context.Context, c *localcluster.Cluster) error {
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	for _, m := range st.Members {
		if !m.Healthy || (m.Role != "leader" && m.Role != "follower") {
			return fmt.Errorf("`steward local status` disagrees: member %s healthy=%t role=%s", m.Name, m.Healthy, m.Role)
		}
	}
	return nil
}

// ---- background load ----

// background is a light write load kept up while a heal is measured, as a cluster in use
// has (leases, heartbeats): small puts at a fixed rate over a few keys. Puts that fail while
// the cluster is unavailable are retried by the client or counted, never fatal.
type background struct {
	cancel context.CancelFunc
	done   chan load.Result
	once   sync.Once
	res    load.Result
}

func startBackground(ctx context.Context, o options, endpoints []string) (*background, error) {
	if o.bgRate <= 0 {
		return nil, nil
	}
	g, err := load.New(load.Config{Endpoints: endpoints, Conns: 1, Workers: 4, Rate: o.bgRate, Prefix: "/bench/heal/background/",
		Keys: 100, ValueSize: 256, Seed: 3})
	if err != nil {
		return nil, err
	}
	bctx, cancel := context.WithCancel(ctx)
	b := &background{cancel: cancel, done: make(chan load.Result, 1)}
	go func() {
		b.done <- g.Run(bctx, 24*time.Hour, nil)
		g.Close()
	}()
	return b, nil
}

// stop ends the load (once) and returns what it did.
func (b *background) stop() load.Result {
	if b == nil {
		return load.Result{}
	}
	b.once.Do(func() {
		b.cancel()
		b.res = <-b.done
	})
	return b.res
}

// ---- 1. one-member wipe ----

type wipeRound struct {
	background   load.Result
	member, role string
	oldID, newID string
	took         time.Duration // fault → healthy voting member (and all three healthy)
	phases       timeline
}

func wipeOne(ctx context.Context, o options, c *localcluster.Cluster, w *watcher, round int) (wipeRound, error) {
	if err := w.waitHealed(ctx, 2*time.Minute); err != nil {
		return wipeRound{}, err
	}
	leader, err := w.leader(ctx)
	if err != nil {
		return wipeRound{}, err
	}
	var followers []string
	for _, m := range w.spec.Members {
		if m.Name != leader {
			followers = append(followers, m.Name)
		}
	}
	victim := followers[round%len(followers)]
	v := w.observe(ctx)
	r := wipeRound{member: victim, role: "follower", oldID: v.members[victim].id}

	bg, err := startBackground(ctx, o, w.spec.ClientURLs())
	if err != nil {
		return r, err
	}
	defer bg.stop()
	t0 := time.Now()
	if _, err := localcluster.Run(ctx, o.steward, "local", "fault", victim, "wipe", "--dir", c.Dir); err != nil {
		return r, err
	}
	deadline := t0.Add(o.healTimeout)
	for {
		v = w.observe(ctx)
		m := v.members[victim]
		if v.healed(len(w.spec.Members)) && m.id != r.oldID {
			r.took, r.newID = time.Since(t0), m.id
			break
		}
		if time.Now().After(deadline) {
			n, last := publishFailures(readLog(local.Dir(c.Dir).Log(victim, "etcd")), t0)
			return r, fmt.Errorf("wipe of %s: not healed within %v: %s; its etcd logged %d \"failed to publish local member\" lines (last error %s)", victim, o.healTimeout, v, n, last)
		}
		time.Sleep(o.poll)
	}
	r.background = bg.stop()
	if r.phases, err = wipeTimeline(clusterLogs(c.Dir), victim, t0, r.took); err != nil {
		return r, err
	}
	return r, nil
}

// ---- the reference: add a fresh member by hand ----

type refRound struct {
	took     time.Duration // MemberAddAsLearner → promoted and serving linearizable reads
	serving  time.Duration // → the learner's etcd serves (snapshot received and applied)
	promoted time.Duration // → MemberPromote accepted
	// publishStalled: etcd's first attempt to publish the fresh member timed out.
	publishStalled bool
}

func addFresh(ctx context.Context, o options, dir string, c *localcluster.Cluster, w *watcher) (r refRound, err error) {
	if err := w.waitHealed(ctx, 2*time.Minute); err != nil {
		return r, err
	}
	st, err := local.ReadState(local.Dir(c.Dir))
	if err != nil {
		return r, err
	}
	var sidecars []int
	for _, m := range st.Members {
		if m.SidecarPID <= 0 {
			return r, fmt.Errorf("member %s has no sidecar process recorded", m.Name)
		}
		sidecars = append(sidecars, m.SidecarPID)
	}
	// Pause the sidecars: the leader's would remove the fresh member (not in the desired
	// cluster) while it catches up.
	for _, p := range sidecars {
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			return r, fmt.Errorf("pause sidecar %d: %w", p, err)
		}
	}
	defer func() {
		for _, p := range sidecars {
			_ = syscall.Kill(p, syscall.SIGCONT)
		}
	}()
	ports, err := freePorts(2)
	if err != nil {
		return r, err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	dataDir := filepath.Join(dir, "fresh-member")
	os.RemoveAll(dataDir)
	defer os.RemoveAll(dataDir)

	bg, err := startBackground(ctx, o, w.spec.ClientURLs())
	if err != nil {
		return r, err
	}
	defer bg.stop()
	t0 := time.Now()
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := w.cli.MemberAddAsLearner(actx, []string{peerURL})
	cancel()
	if err != nil {
		return r, fmt.Errorf("reference: add a learner: %w", err)
	}
	id := resp.Member.ID
	var removed bool
	defer func() {
		if !removed {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _ = w.cli.MemberRemove(rctx, id)
			cancel()
		}
	}()
	var peers []string
	for _, m := range resp.Members {
		name := m.Name
		if m.ID == id {
			name = "fresh"
		}
		peers = append(peers, name+"="+m.PeerURLs[0])
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "fresh", dataDir
	// etcd's own log of the fresh member, to see whether its publish stalled as the
	// replaced members' sometimes do.
	logPath := filepath.Join(dir, "fresh-member-etcd.log")
	zc := zap.NewProductionConfig()
	zc.Encoding, zc.OutputPaths, zc.ErrorOutputPaths = "json", []string{logPath}, []string{logPath}
	zc.EncoderConfig.TimeKey, zc.EncoderConfig.EncodeTime = "ts", zapcore.RFC3339NanoTimeEncoder
	zc.Sampling = nil
	elg, err := zc.Build()
	if err != nil {
		return r, err
	}
	defer elg.Sync()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(elg)
	cu, _ := url.Parse(clientURL)
	pu, _ := url.Parse(peerURL)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = strings.Join(peers, ",")
	cfg.ClusterState = embed.ClusterStateFlagExisting
	cfg.SnapshotCount = 10000 // steward's setting (--etcd-snapshot-count)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return r, fmt.Errorf("reference: start the fresh member: %w", err)
	}
	defer e.Close()
	fresh, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return r, err
	}
	defer fresh.Close()
	deadline := t0.Add(o.healTimeout)
	ready := e.Server.ReadyNotify()
	for {
		select {
		case <-ready:
			r.serving, ready = time.Since(t0), nil
		default:
		}
		if r.promoted == 0 {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := w.cli.MemberPromote(pctx, id)
			cancel()
			switch {
			case err == nil:
				r.promoted = time.Since(t0)
			case errors.Is(err, rpctypes.ErrMemberLearnerNotReady) || strings.Contains(err.Error(), rpctypes.ErrMemberLearnerNotReady.Error()):
			default:
				return r, fmt.Errorf("reference: promote the fresh member: %w", err)
			}
		}
		if r.promoted > 0 {
			gctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := fresh.Get(gctx, "health") // linearizable, through the fresh member
			cancel()
			if err == nil {
				r.took = time.Since(t0)
				if r.serving == 0 {
					r.serving = r.took
				}
				break
			}
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("reference: the fresh member was not promoted and serving within %v (promoted after %v)", o.healTimeout, r.promoted)
		}
		time.Sleep(o.poll)
	}
	n, _ := publishFailures(readLog(logPath), t0)
	r.publishStalled = n > 0
	// Leave the cluster as it was: remove the fresh member, stop it, resume the sidecars.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = w.cli.MemberRemove(rctx, id)
	cancel()
	if err != nil {
		return r, fmt.Errorf("reference: remove the fresh member: %w", err)
	}
	removed = true
	return r, nil
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ---- 2. quorum loss with all data gone ----

type quorumRound struct {
	background                 load.Result
	full                       snapshotter.FullResult
	revisions                  int64 // written after the full snapshot
	writes                     load.Result
	deltaWait                  time.Duration
	chain                      chainInfo
	backedUp, restoredRev      int64
	took                       time.Duration // wipe → three healthy voting members
	directive, firstUp, twoUp  time.Duration // wipe → directive issued, → one healthy voter, → two
	seed                       string
	directiveCase              string // heal's case that issued the directive
	phases                     timeline
	restoreTook                time.Duration // the seed's "restored from backup" took
	restoreDeltas, restoreRevs int64
}

type chainInfo struct {
	fullKey              string
	fullRev, target      int64
	deltas               int
	deltaBytes, fullSize int64
}

func quorumLoss(ctx context.Context, o options, c *localcluster.Cluster, w *watcher, storeURL string) (r quorumRound, err error) {
	if err := w.waitHealed(ctx, 2*time.Minute); err != nil {
		return r, err
	}
	if _, err := c.WaitBackupCurrent(ctx, 5*time.Minute); err != nil {
		return r, err
	}
	st, err := c.Status(ctx)
	if err != nil {
		return r, err
	}
	if st.Backup == nil || st.Backup.Leader == "" {
		return r, errors.New("no backup leader reported")
	}
	sidecarURL, err := c.SidecarURL(st.Backup.Leader)
	if err != nil {
		return r, err
	}
	if r.full, err = fullSnapshot(ctx, c.Dir, sidecarURL); err != nil {
		return r, err
	}
	fmt.Printf("full snapshot %s at revision %d: %s of database, %s stored, in %v\n", r.full.Key, r.full.Revision, result.Human(r.full.DBSize), result.Human(r.full.Size), r.full.Duration.Round(time.Millisecond))

	g, err := load.New(load.Config{Endpoints: w.spec.ClientURLs(), Conns: o.conns, Workers: o.workers, Prefix: "/bench/heal/rev/",
		Keys: o.revKeys, ValueSize: o.revValueSize, Seed: 2})
	if err != nil {
		return r, err
	}
	var n atomic.Int64
	r.writes = g.Run(ctx, time.Hour, func() bool { return n.Add(1) >= int64(o.revisions) })
	g.Close()
	if r.writes.Errors > 0 {
		return r, fmt.Errorf("writing revisions: %s", r.writes)
	}
	fmt.Printf("wrote %d revisions of %d-byte values over %d keys: %s\n", r.writes.Puts, o.revValueSize, o.revKeys, r.writes)
	if r.deltaWait, err = c.WaitBackupCurrent(ctx, 10*time.Minute); err != nil {
		return r, err
	}
	if st, err = c.Status(ctx); err != nil {
		return r, err
	}
	r.backedUp = st.Backup.LatestDeltaRevision
	if r.chain, err = readChain(ctx, storeURL); err != nil {
		return r, err
	}
	r.revisions = r.chain.target - r.chain.fullRev
	fmt.Printf("backup chain: full snapshot at revision %d (%s stored) + %d deltas (%s) up to revision %d: %d revisions to replay; stored %v after the writes\n",
		r.chain.fullRev, result.Human(r.chain.fullSize), r.chain.deltas, result.Human(r.chain.deltaBytes), r.chain.target, r.revisions, r.deltaWait.Round(time.Second))

	stateBefore, err := local.ReadState(local.Dir(c.Dir))
	if err != nil {
		return r, err
	}
	bg, err := startBackground(ctx, o, w.spec.ClientURLs())
	if err != nil {
		return r, err
	}
	defer bg.stop()
	t0 := time.Now()
	for _, m := range w.spec.Members {
		if _, err := localcluster.Run(ctx, o.steward, "local", "fault", m.Name, "wipe", "--dir", c.Dir); err != nil {
			return r, err
		}
	}
	deadline := t0.Add(2 * o.healTimeout)
	for {
		v := w.observe(ctx)
		now := time.Since(t0)
		if r.directive == 0 {
			if s, err := local.ReadState(local.Dir(c.Dir)); err == nil && s.Directive != nil && s.Directive.Seed != "" && s.LastEpoch > stateBefore.LastEpoch {
				r.directive, r.seed, r.directiveCase = now, s.Directive.Seed, s.Directive.Case
				if !s.Directive.IssuedAt.IsZero() {
					r.directive = s.Directive.IssuedAt.Sub(t0)
				}
			}
		}
		hv := 0
		if v.err == nil {
			hv = v.healthyVoters()
		}
		if hv >= 1 && r.firstUp == 0 {
			r.firstUp = now
		}
		if hv >= 2 && r.twoUp == 0 {
			r.twoUp = now
		}
		if v.healed(len(w.spec.Members)) {
			r.took = now
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("quorum loss: not healed within %v: %s", 2*o.healTimeout, v)
		}
		time.Sleep(o.poll)
	}
	r.background = bg.stop()
	if r.seed == "" {
		if s, err := local.ReadState(local.Dir(c.Dir)); err == nil && s.LastEpoch > stateBefore.LastEpoch {
			r.seed = "?"
		}
		if r.seed == "" {
			return r, errors.New("quorum loss: healed, but the supervisor issued no recovery directive: was the quorum lost?")
		}
	}
	// Nothing backed up is lost: the restored cluster is at least at the newest stored revision.
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := w.cli.Get(gctx, "/bench/heal/rev/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return r, err
	}
	r.restoredRev = resp.Header.Revision
	if r.restoredRev < r.backedUp {
		return r, fmt.Errorf("restored at revision %d, below the newest backed-up revision %d", r.restoredRev, r.backedUp)
	}
	if resp.Count != int64(min(o.revKeys, o.revisions)) {
		return r, fmt.Errorf("restored cluster has %d of the %d keys written after the full snapshot", resp.Count, min(o.revKeys, o.revisions))
	}
	logs := clusterLogs(c.Dir)
	var members []string
	for _, m := range w.spec.Members {
		members = append(members, m.Name)
	}
	if r.phases, err = quorumTimeline(logs, members, r.seed, t0, r.took); err != nil {
		return r, err
	}
	if ev, ok := first(logs(r.seed, "sidecar"), t0, isEvent(evRestored)); ok {
		r.restoreTook = time.Duration(num(ev.fields.Took) * float64(time.Second))
		r.restoreDeltas = int64(num(ev.fields.Deltas))
		r.restoreRevs = int64(num(ev.fields.Revision))
	}
	return r, nil
}

func fullSnapshot(ctx context.Context, dir, sidecarURL string) (snapshotter.FullResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sidecarURL+"/v1/snapshots/full", nil)
	if err != nil {
		return snapshotter.FullResult{}, err
	}
	resp, err := sidecarapi.FileClient(local.Dir(dir).Token(), nil).Do(req)
	if err != nil {
		return snapshotter.FullResult{}, fmt.Errorf("POST %s/v1/snapshots/full: %w", sidecarURL, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return snapshotter.FullResult{}, fmt.Errorf("POST %s/v1/snapshots/full: %s: %s", sidecarURL, resp.Status, strings.TrimSpace(string(body)))
	}
	var fr snapshotter.FullResult
	if err := json.Unmarshal(body, &fr); err != nil {
		return snapshotter.FullResult{}, fmt.Errorf("POST %s/v1/snapshots/full: unexpected answer %q: %w", sidecarURL, body, err)
	}
	return fr, nil
}

// readChain lists the store and returns what a restore to the newest revision reads.
func readChain(ctx context.Context, storeURL string) (chainInfo, error) {
	s, err := store.Open(ctx, storeURL, store.Options{})
	if err != nil {
		return chainInfo{}, err
	}
	defer s.Close()
	ch, err := backup.ListChain(ctx, s)
	if err != nil {
		return chainInfo{}, err
	}
	plan, err := ch.Plan(0)
	if err != nil {
		return chainInfo{}, err
	}
	ci := chainInfo{fullKey: plan.Full.Key, fullRev: plan.Full.Rev(), target: plan.Target, deltas: len(plan.Deltas), fullSize: plan.Full.Size}
	for _, d := range plan.Deltas {
		ci.deltaBytes += d.Size
	}
	return ci, nil
}

// ---- the result ----

func report(o options, fill load.FillResult, dbSize int64, caughtUp time.Duration, wipes []wipeRound, refs []refRound, ql *quorumRound) result.Result {
	res := result.Result{
		Benchmark: "heal",
		Title:     fmt.Sprintf("Time to heal: one-member wipe with a %s database, and quorum loss with all data gone", result.Human(dbSize)),
		Params: map[string]any{
			"members":         3,
			"dbSize":          result.Human(dbSize),
			"valueSize":       o.valueSize,
			"keys":            fill.Puts,
			"rounds":          o.rounds,
			"quorumLossGrace": o.grace.String(),
			"deltaPeriod":     o.deltaPeriod.String(),
			"poll":            o.poll.String(),
			"store":           "file://",
		},
	}
	var took, ratios []float64
	var refTook []float64
	for i := range wipes {
		took = append(took, wipes[i].took.Seconds())
		if i < len(refs) {
			refTook = append(refTook, refs[i].took.Seconds())
			ratios = append(ratios, wipes[i].took.Seconds()/refs[i].took.Seconds())
		}
	}
	ts, rs, rt := result.Summarise(took), result.Summarise(refTook), result.Summarise(ratios)
	row := result.Compare("one-member wipe: fault → healthy voting member", "s", "steward (detect, remove, add learner, catch up, promote)", result.Round3(ts.Median),
		"fresh member added by hand (add learner, start empty, promote asap)", result.Round3(rs.Median))
	row.Ratio = rt.Median
	res.Rows = append(res.Rows, row.WithGoal("≤ 10 s", ts.Median <= 10).
		WithSpread("ratio %.2f–%.2f over %d rounds; steward %.2f–%.2f s, reference %.2f–%.2f s", rt.Min, rt.Max, rt.N, ts.Min, ts.Max, rs.Min, rs.Max))
	// etcd's publish stall (7 s) hits some joins on either side: compare the rounds without it too.
	var cleanOurs, cleanRef []float64
	stalledOurs, stalledRef := 0, 0
	for _, w := range wipes {
		_, timedOut := w.phases.at(pPublishFailed)
		if _, restarted := w.phases.at(pRaceRestart); timedOut || restarted {
			stalledOurs++
		} else {
			cleanOurs = append(cleanOurs, w.took.Seconds())
		}
	}
	for _, r := range refs {
		if r.publishStalled {
			stalledRef++
		} else {
			cleanRef = append(cleanRef, r.took.Seconds())
		}
	}
	if len(cleanOurs) > 0 && len(cleanRef) > 0 {
		co, cr := result.Summarise(cleanOurs), result.Summarise(cleanRef)
		row := result.Compare("one-member wipe, joins without etcd's publish race", "s", "steward", result.Round3(co.Median), "fresh member added by hand", result.Round3(cr.Median))
		res.Rows = append(res.Rows, row.WithSpread("medians of the rounds without the stall: steward %d of %d (%.2f–%.2f s), reference %d of %d (%.2f–%.2f s)",
			co.N, len(wipes), co.Min, co.Max, cr.N, len(refs), cr.Min, cr.Max))
	}
	row = result.Compare("joins that hit etcd's publish race", "%", "steward wipes", math.Round(100*float64(stalledOurs)/float64(len(wipes))), "reference adds", math.Round(100*float64(stalledRef)/float64(max(1, len(refs)))))
	res.Rows = append(res.Rows, row.WithSpread("steward %d of %d wipes (steward etcd restarts the member at once), reference %d of %d adds (etcd logged \"failed to publish local member to cluster through raft\" and served 7 s, its request timeout, later)", stalledOurs, len(wipes), stalledRef, len(refs)))
	// Where Steward's time goes: the medians of each phase.
	phase := func(from, to string) (result.Stats, bool) {
		var xs []float64
		for _, w := range wipes {
			a, ok1 := w.phases.at(from)
			b, ok2 := w.phases.at(to)
			if from == "" {
				a, ok1 = 0, true
			}
			if ok1 && ok2 {
				xs = append(xs, max(0, (b-a).Seconds())) // log lines and polls may tie within milliseconds
			}
		}
		return result.Summarise(xs), len(xs) > 0
	}
	var parts []string
	for _, p := range []struct{ label, from, to string }{
		{"fault → sidecar's decision (kill, restart, init)", "", pDecided},
		{"decision → added as learner (remove old member, add learner)", pDecided, pAdded},
		{"added → learner serving (etcd start, snapshot transfer and apply)", pAdded, pServing},
		{"learner serving → promoted", pServing, pPromoted},
		{"promoted → seen healthy", pPromoted, pHealthy},
	} {
		if s, ok := phase(p.from, p.to); ok {
			parts = append(parts, fmt.Sprintf("%s %.2f s (%.2f–%.2f)", p.label, s.Median, s.Min, s.Max))
		}
	}
	var refServing, refPromoted []float64
	for _, r := range refs {
		refServing = append(refServing, r.serving.Seconds())
		refPromoted = append(refPromoted, r.promoted.Seconds())
	}
	res.Notes = append(res.Notes, "One-member wipe, Steward's phases (medians over the rounds, from the member's sidecar and etcd logs): "+strings.Join(parts, "; ")+".")
	res.Notes = append(res.Notes, fmt.Sprintf("Reference phases (medians): learner serving %.2f s, promotion accepted %.2f s after MemberAddAsLearner.",
		result.Summarise(refServing).Median, result.Summarise(refPromoted).Median))
	for i, w := range wipes {
		res.Notes = append(res.Notes, fmt.Sprintf("Wipe round %d: %s (%s, ID %s → %s) healed in %.2f s: %s.", i+1, w.member, w.role, w.oldID, w.newID, w.took.Seconds(), w.phases))
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("The database was built with real clients: %d puts of %d-byte values (random hex) under new keys into the 3-member cluster, backups on; delta capture caught up %v after the fill. The wiped member is a follower (never the raft or backup leader), a different one each round where possible.", fill.Puts, o.valueSize, caughtUp.Round(time.Second)),
		backgroundNote(o, wipes),
		fmt.Sprintf("Healed means: etcd's member list (linearizable) holds exactly the three members, each a voter, and each member's /readyz answers (a linearizable read through it succeeds), polled every %v; `steward local status` is checked to agree at the end.", o.poll),
		"Each fault and each reference add starts once the cluster has been healthy for 6 s (etcd refuses membership changes until the member handling them has been connected to its peers for 5 s), so every round measures a settled cluster. Reference: the same cluster adds a fresh member the way Steward replaces one, driven directly: MemberAddAsLearner, an empty etcd (embedded in the benchmark process, Steward's snapshot-count) started with initial-cluster-state=existing, MemberPromote every poll until etcd accepts, then a linearizable read through the new member; timed from the add. It has no detection, no removal of an old member and no decisions: it is the floor set by etcd's snapshot transfer and catch-up. The sidecars are paused with SIGSTOP meanwhile (the leader's would remove the extra member as superfluous); the fresh member is removed afterwards. Rounds alternate the order.",
	)
	if ql == nil {
		res.Notes = append(res.Notes, "The quorum loss was not measured (-quorum-loss=false).")
		return res
	}
	q := *ql
	res.Params["revisionsAfterFull"] = q.revisions
	res.Params["revisionValueSize"] = o.revValueSize
	// The grace is waited only when the loss is not proven: with every member reporting its
	// data gone, the directive comes without it, and the whole time counts.
	waited, beyond := o.grace, q.took-o.grace
	why := fmt.Sprintf("%.2f s minus the %v grace waited (directive case %s)", q.took.Seconds(), o.grace, q.directiveCase)
	if q.directiveCase == string(heal.CaseQuorumLossProven) {
		waited, beyond = 0, q.took
		why = fmt.Sprintf("no grace waited: every member reported its data gone (directive case %s, issued %.2f s after the wipes began)", q.directiveCase, q.directive.Seconds())
	}
	res.Rows = append(res.Rows,
		result.Row{Measure: "quorum loss, all data gone: wipe → three healthy voting members", Unit: "s", OursName: "steward (restore full + deltas, rejoin)", Ours: result.Round3(q.took.Seconds())}.
			WithGoal("≤ 30 s", q.took <= 30*time.Second).
			WithSpread("one run; configured quorum-loss grace %v, waited %v; directive issued %.2f s after the wipes began, first healthy voter %.2f s, second %.2f s, third %.2f s", o.grace, waited, q.directive.Seconds(), q.firstUp.Seconds(), q.twoUp.Seconds(), q.took.Seconds()),
		result.Row{Measure: "quorum loss, all data gone: the same beyond the grace waited", Unit: "s", OursName: "steward", Ours: result.Round3(beyond.Seconds())}.
			WithGoal("≤ 10 s", beyond <= 10*time.Second).
			WithSpread("%s", why),
	)
	if q.restoreTook > 0 {
		res.Rows = append(res.Rows, result.Row{Measure: "quorum loss: the seed's restore from the store (full + deltas)", Unit: "s", OursName: "restore.Restore in the sidecar", Ours: result.Round3(q.restoreTook.Seconds())}.
			WithSpread("%d deltas, restored to revision %d", q.restoreDeltas, q.restoreRevs))
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("Quorum loss: a full snapshot through the backup leader's sidecar (%s of database at revision %d, %s stored, %v), then %d puts of %d-byte values over %d keys (%s), stored as deltas %v after the writes; the restore reads the full snapshot at revision %d (%s) and %d deltas (%s) up to revision %d: %d revisions. Then all three members were wiped (`steward local fault M wipe`, one after the other).",
			result.Human(q.full.DBSize), q.full.Revision, result.Human(q.full.Size), q.full.Duration.Round(time.Millisecond), q.writes.Puts, o.revValueSize, o.revKeys, q.writes, q.deltaWait.Round(time.Second),
			q.chain.fullRev, result.Human(q.chain.fullSize), q.chain.deltas, result.Human(q.chain.deltaBytes), q.chain.target, q.revisions),
		fmt.Sprintf("Quorum-loss timeline (seed %s): directive issued +%.2fs (read from the supervisor's state file), %s. The restored cluster is at revision %d, at or above the newest backed-up revision %d, and holds all %d keys written after the full snapshot.",
			q.seed, q.directive.Seconds(), q.phases, q.restoredRev, q.backedUp, min(o.revKeys, o.revisions)),
		"There is no reference for the quorum loss: no other tool recovers a lost quorum from backups by itself.",
		fmt.Sprintf("Background load during the quorum loss: %d puts done, %d failed (the cluster was unavailable).", q.background.Puts, q.background.Errors),
	)
	return res
}

func backgroundNote(o options, wipes []wipeRound) string {
	if o.bgRate <= 0 {
		return "No background load: the cluster was idle while it healed (-background-rate 0)."
	}
	var puts, errs int64
	for _, w := range wipes {
		puts += w.background.Puts
		errs += w.background.Errors
	}
	return fmt.Sprintf("While each heal (and each reference add) was measured, a background load of %.0f puts/s (256-byte values over 100 keys, 4 workers) kept the cluster in use, as leases and heartbeats do: %d puts, %d failed during the wipes. On an idle cluster a member that joins through a snapshot with a raft index above 5000 becomes ready only after the next write; Steward's sidecar makes one (a lease granted and revoked), the reference would wait (see the findings).", o.bgRate, puts, errs)
}

// ---- helpers ----

func httpOK(ctx context.Context, hc *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
