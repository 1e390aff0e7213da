package member

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/pki"
	"github.com/etcd-steward/steward/internal/store"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"sigs.k8s.io/yaml"
)

// waitInterval is how often a waiting initialisation observes again when nothing changed.
const waitInterval = time.Second

// Retries of a failed step back off exponentially with jitter between these bounds.
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// backoff is the delay before retry n (1-based): doubling from retryMin up to retryMax, each
// spread by ±25% so that members retrying the same step do not move in lockstep.
func backoff(n int) time.Duration {
	d := min(retryMin<<min(max(n-1, 0), 10), retryMax)
	return time.Duration(float64(d) * (0.75 + rand.Float64()/2))
}

// runInit observes, decides and acts until a plan produces a configuration. Plans that
// wait (no quorum, no directive yet) keep the initialisation running and observe again,
// at once when the directive changes.
func (s *Sidecar) runInit(ctx context.Context) (*Plan, []byte, error) {
	changes, err := s.cfg.View.Watch(ctx)
	if err != nil {
		s.lg.Warn("cannot watch the cluster view; observing every second", zap.Error(err))
	}
	failures := 0
	for {
		if plan, cfg, done, err := s.initAttempt(ctx, changes, &failures); done {
			return plan, cfg, err
		}
	}
}

// initAttempt observes, decides and acts once, then waits before the next attempt. done
// reports that the initialisation ended: with a configuration, an error, or ctx's end.
func (s *Sidecar) initAttempt(ctx context.Context, changes <-chan struct{}, failures *int) (*Plan, []byte, bool, error) {
	// A new directive (or phase) ends the observation and the wait at once: the seed of a
	// quorum-loss recovery acts without waiting out the lost cluster's timeouts. Other
	// changes (reports, every second) do not: they would cut every observation short.
	attemptCtx, endAttempt := context.WithCancel(ctx)
	defer endAttempt()
	changed := s.watchDirective(attemptCtx, changes)
	obsCtx, cancel := context.WithCancel(attemptCtx)
	go func() {
		select {
		case <-changed:
			cancel()
		case <-obsCtx.Done():
		}
	}()
	spec, obs, err := s.observe(obsCtx)
	cancel()
	delay := waitInterval
	var plan Plan
	switch {
	case ctx.Err() != nil:
		return nil, nil, true, ctx.Err()
	case err != nil && isClosed(changed):
		return nil, nil, false, nil // the directive changed while observing: observe again
	case err != nil:
		*failures++
		delay = backoff(*failures)
		plan = Plan{Case: "ObservationFailed", Action: ActionWait, Reason: err.Error()}
		s.lg.Warn("cannot observe; retrying", zap.Error(err), zap.Duration("retryIn", delay))
	default:
		s.recordFence(obs)
		obs.Data.SupersededBy = s.recordSuperseded(obs.Directive, obs.Data)
		plan = Decide(obs)
		s.lg.Info("initialisation decision", zap.String("event", "init-decision"), zap.String("case", plan.Case),
			zap.String("action", string(plan.Action)), zap.String("reason", plan.Reason))
	}
	if plan.Action != ActionWait {
		cfg, err := s.act(ctx, spec, obs, plan)
		if err == nil {
			s.recordStart(cfg)
		}
		if errors.Is(err, errDecideAgain) {
			*failures = 0
			return nil, nil, false, nil
		}
		if err == nil || !errors.Is(err, errTryAgain) {
			return &plan, cfg, true, err
		}
		delay = retryDelay(err, failures)
		log, next := s.lg.Warn, fmt.Sprintf("attempt %d; next in %s", *failures, delay.Round(100*time.Millisecond))
		if errors.Is(err, errTurn) {
			log, next = s.lg.Info, fmt.Sprintf("its turn; next try in %s", delay.Round(100*time.Millisecond))
		}
		log("initialisation step failed; observing again", zap.String("case", plan.Case), zap.Error(err),
			zap.Duration("retryIn", delay))
		plan.Reason = fmt.Sprintf("%v (%s)", err, next)
		changed = nil // a failed step backs off even when the directive changes
	} else if err == nil {
		*failures = 0
	}
	s.setWaiting(plan)
	select {
	case <-ctx.Done():
		return &plan, nil, true, ctx.Err()
	case <-changed:
	case <-time.After(delay):
	}
	return nil, nil, false, nil
}

// watchDirective returns a channel closed once the directive in force differs from the one in
// force now (another epoch, phase, seed or acknowledgement), as told by changes. It stops
// when ctx ends.
func (s *Sidecar) watchDirective(ctx context.Context, changes <-chan struct{}) chan struct{} {
	changed := make(chan struct{})
	key := func() string {
		snap, err := s.cfg.View.Snapshot(ctx)
		if err != nil || snap.Directive == nil {
			return ""
		}
		d := snap.Directive
		// A founder waits for the point to restore, then for its own restore to be recorded.
		restored := restoredPoint(snap.Status, *d, s.cfg.Name) != nil
		return fmt.Sprintf("%d/%s/%s/%t/%t/%v", d.Epoch, d.Phase, d.Seed, d.Ack != nil, restored, d.Restored)
	}
	start := key()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-changes:
				if !ok {
					return
				}
				if key() != start {
					close(changed)
					return
				}
			}
		}
	}()
	return changed
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// setWaiting records the decision the initialisation waits on, for the init API and the report.
func (s *Sidecar) setWaiting(plan Plan) {
	s.mu.Lock()
	s.status.Message, s.status.Case, s.plan = plan.Reason, plan.Case, &plan
	s.mu.Unlock()
	s.kickReport()
}

// errTryAgain marks a transient obstacle (another learner is joining, leadership moving):
// the initialisation observes again instead of failing.
var errTryAgain = errors.New("try again")

// errTurn is a step that waits its turn (see addRefused): what it waits for passes within
// seconds by itself. It is no failure: the step is tried again after turnInterval, not after a
// growing backoff.
var errTurn = fmt.Errorf("%w: another member's turn first", errTryAgain)

const turnInterval = 500 * time.Millisecond

// errDecideAgain is a step that completed and leaves the next one to a new decision, at once:
// a founder's restore, whose etcd starts only once the recovery records it.
var errDecideAgain = errors.New("done; deciding again")

// addTimeout bounds one learner add: a commit takes milliseconds, a dropped one the timeout.
// Members recovering around one seed propose their adds at the same moment, and raft drops
// all but one: the others learn it within a second and wait their turn. An add that commits
// after the timeout is found by its peer URL at the next try.
const addTimeout = 500 * time.Millisecond

// addRefused is the step's error for etcd's answer err to adding this member as a learner.
// The waits etcd makes a joining member take are turns, not failures: one learner at a time;
// a new member only once the leader has been connected to every voter for 5 s (a voter that
// has just joined or restarted makes the next join wait); a change proposed while another is
// pending is dropped, and the caller's deadline passes.
func addRefused(err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrTooManyLearners):
		return fmt.Errorf("%w: another learner is joining; this member waits its turn", errTurn)
	case errors.Is(err, rpctypes.ErrUnhealthy):
		return fmt.Errorf("%w: etcd adds a member once its leader has been connected to every voter for 5 s", errTurn)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: add as learner: %v (dropped while another membership change was pending, or the cluster is slow)", errTurn, err)
	}
	return fmt.Errorf("%w: add as learner: %v", errTryAgain, err)
}

// retryDelay is how long to wait before trying a step that failed with err again, counting
// the failures in a row that make the backoff grow.
func retryDelay(err error, failures *int) time.Duration {
	if errors.Is(err, errTurn) {
		return turnInterval
	}
	*failures++
	return backoff(*failures)
}

func (s *Sidecar) observe(ctx context.Context) (cluster.Spec, Observation, error) {
	snap, err := s.cfg.View.Snapshot(ctx)
	if errors.Is(err, cluster.ErrViewNotReady) {
		return s.observeWithoutView(err)
	}
	if err != nil {
		return cluster.Spec{}, Observation{}, fmt.Errorf("read the cluster view: %w", err)
	}
	spec := snap.Spec
	self, ok := spec.Member(s.cfg.Name)
	if !ok {
		return spec, Observation{}, fmt.Errorf("member %q is not in the desired cluster %q (members: %s)", s.cfg.Name, spec.Name, memberNames(spec))
	}
	data, err := s.inspect()
	if err != nil {
		return spec, Observation{}, err
	}
	if data.Valid() {
		s.metrics.dataValid.Set(1)
	} else {
		s.metrics.dataValid.Set(0)
	}
	s.lastData.Store(&data)
	obs := Observation{Self: s.cfg.Name, SelfPeerURL: self.PeerURL, ClusterSize: len(spec.Members), ClusterToken: spec.Token,
		RelocatesData: spec.RelocatesData, Status: snap.Status, Data: data, Directive: snap.Directive}
	if data.Identity != nil {
		obs.AppliedEpoch = data.Identity.RecoveryEpoch
	}
	obs.Fenced = slices.Contains(spec.Fenced, s.cfg.Name)
	if obs.FencedOnDisk, err = datadir.Fenced(s.cfg.DataDir); err != nil {
		return spec, Observation{}, fmt.Errorf("the fence record in data dir %s: %w", s.cfg.DataDir, err)
	}
	// The seed of a recovery and its founders do not need the (lost) cluster's view, whose
	// member-list timeouts would only delay them; everyone else does.
	if d := snap.Directive; !(d != nil && d.Phase == cluster.PhaseSeeding && ((d.Seed == s.cfg.Name && d.Epoch > obs.AppliedEpoch) || (d.Founder(s.cfg.Name) && d.Epoch >= obs.AppliedEpoch))) {
		obs.Live = observeLive(ctx, s.etcd, others(spec, s.cfg.Name))
	}
	// What the store holds of this cluster matters only to a member that might bootstrap a
	// new cluster, and to the seed that restores this cluster from its own backup store.
	mightBootstrap := !obs.Live.Quorate && snap.Status.ClusterID == "" && len(snap.Status.Voters) == 0
	d := snap.Directive
	restores := d != nil && d.Epoch > obs.AppliedEpoch && d.Phase == cluster.PhaseSeeding && d.Seed == s.cfg.Name && d.Mode == cluster.RecoverFromBackup && d.Restore == nil
	if (mightBootstrap || restores) && s.cfg.Backup.StoreURL != "" {
		ids := cluster.IDs(spec, snap.Status.ClusterID)
		obs.BackupTimeline, obs.ForeignTimelines, err = s.ownBackup(ctx, ids)
		if err != nil {
			return spec, Observation{}, fmt.Errorf("the backup store %s cannot say which of its timelines are of this cluster (a new cluster is bootstrapped only when it holds none, a recovery restores the newest): %w", store.Redact(s.cfg.Backup.StoreURL), err)
		}
	}
	return spec, obs, nil
}

// observeWithoutView observes while the cluster view cannot be read (why): only the data dir.
func (s *Sidecar) observeWithoutView(why error) (cluster.Spec, Observation, error) {
	data, err := s.inspect()
	if err != nil {
		return cluster.Spec{}, Observation{}, err
	}
	s.lastData.Store(&data)
	_, lastStart, err := datadir.ReadLastStart(s.cfg.DataDir)
	if err != nil {
		return cluster.Spec{}, Observation{}, fmt.Errorf("the configuration of this member's last start: %w", err)
	}
	fenced, err := datadir.Fenced(s.cfg.DataDir)
	if err != nil {
		return cluster.Spec{}, Observation{}, fmt.Errorf("the fence record in data dir %s: %w", s.cfg.DataDir, err)
	}
	return cluster.Spec{}, Observation{Self: s.cfg.Name, Data: data, ViewUnavailable: why.Error(), LastStart: lastStart, FencedOnDisk: fenced}, nil
}

// recordFence keeps the data dir's record of the fence in step with the cluster view: written
// while the view fences this member, removed once it does not. Without the view it stays as
// it is, and holds etcd (Decide).
func (s *Sidecar) recordFence(obs Observation) {
	var err error
	switch {
	case obs.ViewUnavailable != "":
		return
	case obs.Fenced && !obs.FencedOnDisk:
		err = datadir.WriteFence(s.cfg.DataDir)
	case !obs.Fenced && obs.FencedOnDisk:
		err = datadir.ClearFence(s.cfg.DataDir)
	}
	if err != nil {
		s.lg.Warn("cannot record the fence in the data dir: a restart without the cluster view would not keep it", zap.Bool("fenced", obs.Fenced), zap.Error(err))
	}
}

// recordSuperseded keeps the data dir's record that a restore supersedes its data in step
// with directive d in force (SupersededRecord), data being what the dir holds, and returns
// the epoch the dir records now. Nothing is written to a dir whose database a running etcd
// holds: a record marks data at rest. A record that cannot be written is retried at the next
// observation; the supervisor or operator waits for it (the member's report shows it).
func (s *Sidecar) recordSuperseded(d *cluster.Directive, data datadir.State) int64 {
	want := SupersededRecord(d, s.cfg.Name, data)
	if want == data.SupersededBy || data.InUse {
		return data.SupersededBy
	}
	var err error
	if want == 0 {
		err = datadir.ClearSuperseded(s.cfg.DataDir)
	} else {
		err = datadir.WriteSuperseded(s.cfg.DataDir, want)
	}
	if err != nil {
		s.lg.Warn("cannot keep the data dir's record that a restore supersedes its data", zap.Int64("epoch", want), zap.Error(err))
		return data.SupersededBy
	}
	if want == 0 {
		s.lg.Info("cleared the data dir's record that a restore supersedes its data", zap.Int64("was", data.SupersededBy))
	} else {
		s.lg.Info("recorded in the data dir that a restore supersedes its data", zap.String("event", "data-superseded"), zap.Int64("epoch", want))
	}
	return want
}

// others lists the client URLs of the desired members other than self.
func others(spec cluster.Spec, self string) []string {
	var out []string
	for _, m := range spec.Members {
		if m.Name != self {
			out = append(out, m.ClientURL)
		}
	}
	return out
}

// observeLive asks the other members for the member list: linearizable first (it succeeds
// only with a quorum), else serializable (what a reachable member believes). With etcd
// authentication, the list needs a login, which is a raft request: members without a quorum
// then count as unreachable.
func observeLive(ctx context.Context, etcd etcdutil.Dialer, endpoints []string) cluster.LiveCluster {
	if len(endpoints) == 0 {
		return cluster.LiveCluster{}
	}
	cli, err := etcd.New(endpoints, 2*time.Second)
	if err != nil {
		return cluster.LiveCluster{}
	}
	defer cli.Close()
	live := cluster.LiveCluster{}
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	resp, err := cli.MemberList(lctx)
	cancel()
	if err == nil {
		live.Reachable, live.Quorate = true, true
	} else {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err = cli.MemberList(lctx, clientv3.WithSerializable())
		cancel()
		if err != nil {
			return live
		}
		live.Reachable = true
	}
	live.ClusterID = fmt.Sprintf("%x", resp.Header.ClusterId)
	for _, m := range resp.Members {
		lm := cluster.LiveMember{ID: fmt.Sprintf("%x", m.ID), Name: m.Name, IsLearner: m.IsLearner}
		if len(m.PeerURLs) > 0 {
			lm.PeerURL = m.PeerURLs[0]
		}
		live.Members = append(live.Members, lm)
	}
	return live
}

// act carries out a plan and returns the etcd configuration for this start.
func (s *Sidecar) act(ctx context.Context, spec cluster.Spec, obs Observation, plan Plan) ([]byte, error) {
	if plan.CleanPartialRestore {
		if err := os.RemoveAll(datadir.PartDir(s.cfg.DataDir)); err != nil {
			return nil, fmt.Errorf("remove the unfinished restore %s: %w", datadir.PartDir(s.cfg.DataDir), err)
		}
		s.lg.Info("removed an unfinished restore", zap.String("dir", datadir.PartDir(s.cfg.DataDir)))
	}
	identity := datadir.Identity{ClusterName: spec.Name, ClusterToken: spec.Token, MemberName: s.cfg.Name,
		RecoveryEpoch: max(plan.RecoveryEpoch, obs.AppliedEpoch)}
	if obs.Data.Identity != nil {
		identity.ClusterID, identity.MemberID = obs.Data.Identity.ClusterID, obs.Data.Identity.MemberID
	}
	s.pendingEpoch.Store(0)
	if plan.Action == ActionForceNewCluster {
		// The WAL holds the new membership only once etcd has started on it with
		// force-new-cluster: the epoch is recorded once it serves. (A restore writes a
		// complete one-member data dir, and records it at once.)
		identity.RecoveryEpoch = obs.AppliedEpoch
		s.pendingEpoch.Store(plan.RecoveryEpoch)
	}
	switch plan.Action {
	case ActionBootstrap:
		if err := s.dispose(plan.Disposal); err != nil {
			return nil, err
		}
		if err := s.writeIdentity(identity); err != nil {
			return nil, err
		}
		return s.etcdConfig(spec, plan, staticCluster(spec))
	case ActionRestart:
		if obs.ViewUnavailable != "" {
			return s.lastStartConfig()
		}
		return s.etcdConfig(spec, plan, staticCluster(spec))
	case ActionForceNewCluster:
		// force-new-cluster drops the log's entries above the survivor's own commit index. A
		// write the lost majority acknowledged may be among them (the survivor stored it but
		// never heard it committed): every logged entry is treated as committed first.
		before, after, err := datadir.CommitLog(s.cfg.DataDir, s.lg)
		if err != nil {
			return nil, fmt.Errorf("keep the entries logged above the commit index before force-new-cluster: %w", err)
		}
		if after.Commit != before.Commit {
			s.lg.Warn("entries logged above the commit index are kept as committed", zap.Uint64("commit", before.Commit),
				zap.Uint64("lastIndex", after.LastIndex), zap.Uint64("kept", after.Commit-before.Commit))
		}
		if err := s.writeIdentity(identity); err != nil {
			return nil, err
		}
		self, _ := spec.Member(s.cfg.Name)
		return s.etcdConfig(spec, plan, s.cfg.Name+"="+self.PeerURL)
	case ActionJoinAsLearner:
		return s.joinAsLearner(ctx, spec, obs, plan, identity)
	case ActionRestoreFromBackup:
		return s.restoreFromBackup(ctx, spec, obs.Status.ClusterID, plan, identity)
	}
	return nil, fmt.Errorf("no automatic action for case %s: %s", plan.Case, plan.Reason)
}

// lastStartConfig is the configuration of this member's last start, as a restart on the
// data that start left: never a new cluster, never force-new-cluster again.
func (s *Sidecar) lastStartConfig() ([]byte, error) {
	b, _, err := datadir.ReadLastStart(s.cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("the configuration of this member's last start: %w", err)
	}
	m := map[string]any{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("the configuration of this member's last start in %s is damaged: %w", s.cfg.DataDir, err)
	}
	m["initial-cluster-state"] = "existing"
	delete(m, "force-new-cluster")
	return yaml.Marshal(m)
}

// recordStart records the configuration of this start in the data dir, for a restart while
// the cluster view cannot be read.
func (s *Sidecar) recordStart(config []byte) {
	if err := datadir.WriteLastStart(s.cfg.DataDir, config); err != nil {
		s.lg.Warn("cannot record this start's configuration: a restart while the cluster view cannot be read will wait for it", zap.Error(err))
	}
}

// writeIdentity records id in the data dir, for data this member starts on: new data (a
// bootstrap, a join, a restore), or data etcd runs on. A record that a restore supersedes what
// the dir held before goes first: it never marks the data started on.
func (s *Sidecar) writeIdentity(id datadir.Identity) error {
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return err
	}
	if err := datadir.ClearSuperseded(s.cfg.DataDir); err != nil {
		return fmt.Errorf("clear the superseded record of data dir %s: %w", s.cfg.DataDir, err)
	}
	id.WrittenAt = time.Now().UTC()
	if err := datadir.WriteIdentity(s.cfg.DataDir, id); err != nil {
		return fmt.Errorf("record the identity of data dir %s: %w", s.cfg.DataDir, err)
	}
	return nil
}

func staticCluster(spec cluster.Spec) string {
	var peers []string
	for _, m := range spec.Members {
		peers = append(peers, m.Name+"="+m.PeerURL)
	}
	return strings.Join(peers, ",")
}

// dispose empties the data dir as the plan says.
func (s *Sidecar) dispose(d DataDisposal) error {
	switch d {
	case WipeData:
		s.lg.Warn("wiping the data dir", zap.String("dir", s.cfg.DataDir))
		return datadir.Wipe(s.cfg.DataDir)
	case MoveDataAside:
		// Nothing to keep in a data dir that is empty or does not exist (a new member).
		if entries, err := os.ReadDir(s.cfg.DataDir); errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
			return nil
		}
		to, err := datadir.MoveAside(s.cfg.DataDir, "foreign")
		if err == nil {
			s.lg.Warn("moved the data dir aside; it is kept for inspection", zap.String("dir", s.cfg.DataDir), zap.String("to", to))
		}
		return err
	}
	return nil
}

// joinAsLearner replaces this member: remove its old ID, empty the data dir, add it as a
// learner and start it with initial-cluster-state=existing and the cluster's current
// membership. The promotion happens once it has caught up (see maintainMember).
func (s *Sidecar) joinAsLearner(ctx context.Context, spec cluster.Spec, obs Observation, plan Plan, identity datadir.Identity) ([]byte, error) {
	self, _ := spec.Member(s.cfg.Name)
	cli, err := s.etcd.New(others(spec, s.cfg.Name), 3*time.Second)
	if err != nil {
		return nil, err
	}
	defer cli.Close()

	if plan.RemoveMemberID != "" {
		id, err := strconv.ParseUint(plan.RemoveMemberID, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("member ID %q: %w", plan.RemoveMemberID, err)
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = cli.MemberRemove(rctx, id)
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) {
			s.metrics.membership.WithLabelValues("remove", "failed").Inc()
			return nil, fmt.Errorf("%w: remove old member %s: %v", errTryAgain, plan.RemoveMemberID, err)
		}
		s.metrics.membership.WithLabelValues("remove", "ok").Inc()
		s.metrics.membershipSeconds.WithLabelValues("remove").Observe(time.Since(start).Seconds())
		s.lg.Info("removed the old member", zap.String("id", plan.RemoveMemberID), zap.Duration("took", time.Since(start)))
	}
	if err := s.dispose(plan.Disposal); err != nil {
		return nil, err
	}

	start := time.Now()
	// Short: raft drops a membership change proposed while another is pending, and etcd
	// then waits for the caller's deadline. The next attempt follows its turn (addRefused);
	// one that did commit is found by its peer URL then.
	actx, cancel := context.WithTimeout(ctx, addTimeout)
	resp, err := cli.MemberAddAsLearner(actx, []string{self.PeerURL})
	cancel()
	var newID uint64
	var members []cluster.LiveMember
	switch {
	case err == nil:
		newID = resp.Member.ID
		for _, m := range resp.Members {
			lm := cluster.LiveMember{ID: fmt.Sprintf("%x", m.ID), Name: m.Name, IsLearner: m.IsLearner}
			if len(m.PeerURLs) > 0 {
				lm.PeerURL = m.PeerURLs[0]
			}
			members = append(members, lm)
		}
	case errors.Is(err, rpctypes.ErrPeerURLExist):
		// Added by an earlier attempt, or listed at the bootstrap, and never started: take
		// that entry.
		live := observeLive(ctx, s.etcd, others(spec, s.cfg.Name))
		for _, m := range live.Members {
			if m.PeerURL == self.PeerURL && m.Name == "" {
				newID, _ = strconv.ParseUint(m.ID, 16, 64)
			}
		}
		if newID == 0 {
			return nil, fmt.Errorf("%w: peer URL %s is taken by a started member; it is removed at the next attempt", errTryAgain, self.PeerURL)
		}
		members = live.Members
	default:
		err = addRefused(err)
		result := "failed"
		if errors.Is(err, errTurn) {
			result = "waiting"
		}
		s.metrics.membership.WithLabelValues("add_learner", result).Inc()
		return nil, err
	}
	s.metrics.membership.WithLabelValues("add_learner", "ok").Inc()
	s.metrics.membershipSeconds.WithLabelValues("add_learner").Observe(time.Since(start).Seconds())
	s.learnerSince.Store(time.Now().UnixNano())
	idHex := fmt.Sprintf("%x", newID)
	s.lg.Info("added as learner", zap.String("event", "added-as-learner"), zap.String("id", idHex), zap.Duration("took", time.Since(start)))

	// The configuration is generated now from the cluster's current membership, never frozen.
	var peers []string
	for _, m := range members {
		name := m.Name
		if m.ID == idHex {
			name = s.cfg.Name
		} else if name == "" {
			name = nameForPeer(spec, m.PeerURL, m.ID)
		}
		peers = append(peers, name+"="+m.PeerURL)
	}
	identity.MemberID, identity.ClusterID = idHex, obs.Live.ClusterID
	if err := s.writeIdentity(identity); err != nil {
		return nil, err
	}
	return s.etcdConfig(spec, plan, strings.Join(peers, ","))
}

// listenURL is u with its host replaced by host (u itself when host is empty).
func listenURL(u, host string) string {
	p, err := url.Parse(u)
	if host == "" || err != nil {
		return u
	}
	p.Host = net.JoinHostPort(host, p.Port())
	return p.String()
}

func nameForPeer(spec cluster.Spec, peerURL, id string) string {
	for _, m := range spec.Members {
		if m.PeerURL == peerURL {
			return m.Name
		}
	}
	return "unstarted-" + id
}

// etcdConfig generates the configuration for this start.
func (s *Sidecar) etcdConfig(spec cluster.Spec, plan Plan, initialCluster string) ([]byte, error) {
	self, _ := spec.Member(s.cfg.Name)
	c := s.cfg.Etcd
	c.Name = self.Name
	c.DataDir = s.cfg.DataDir
	c.ListenClientURLs = listenURL(self.ClientURL, s.cfg.ListenHost)
	c.AdvertiseClientURLs = self.ClientURL
	c.ListenPeerURLs = listenURL(self.PeerURL, s.cfg.ListenHost)
	c.InitialAdvertisePeerURLs = self.PeerURL
	c.InitialCluster = initialCluster
	c.InitialClusterState = plan.ClusterState
	c.InitialClusterToken = spec.Token
	c.ForceNewCluster = plan.Action == ActionForceNewCluster
	if dir := s.cfg.TLSDir; dir != "" {
		client, peer, err := transportSecurity(dir)
		if err != nil {
			return nil, err
		}
		c.ClientTransportSecurity, c.PeerTransportSecurity = client, peer
	}
	if dir := s.cfg.TokenKeyDir; dir != "" {
		c.AuthToken = etcdproc.JWTAuthToken(dir)
	}
	return c.MarshalWith(s.cfg.EtcdFlags)
}

// transportSecurity is etcd's TLS for a member whose certificate directory is dir. One
// certificate serves clients and peers: mutual TLS both ways, of the cluster's CA. A peer
// must present this member's own common name, so that a client certificate of the same CA
// cannot pose as a peer. That check stands in for etcd's SAN check of peers, which matches
// the connecting IP against the certificate's names by DNS lookups: in Kubernetes, pod IPs
// change with every pod and a certificate names Services, not IPs.
func transportSecurity(dir string) (client, peer *etcdproc.TransportSecurity, err error) {
	cert := filepath.Join(dir, pki.CertFile)
	cn, err := pki.CommonName(cert)
	if err != nil {
		return nil, nil, fmt.Errorf("this member's certificate: %w", err)
	}
	if cn == "" {
		return nil, nil, fmt.Errorf("this member's certificate %s has no common name: peers are told apart from clients by it; issue it with one (Steward's own are %q)", cert, pki.MemberCN)
	}
	client = &etcdproc.TransportSecurity{CertFile: cert, KeyFile: filepath.Join(dir, pki.KeyFile),
		TrustedCAFile: filepath.Join(dir, pki.CAFile), ClientCertAuth: true}
	p := *client
	p.AllowedCNs, p.SkipClientSANVerify = []string{cn}, true
	return client, &p, nil
}
