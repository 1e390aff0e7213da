package member

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/maintenance"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const (
	// learnerStallTimeout is how long a learner may stay unpromotable before it is reported loudly.
	learnerStallTimeout = 5 * time.Minute
	// learnerServeTimeout is how long a new learner may take to serve before it is reported.
	learnerServeTimeout = time.Minute
	// nudgeAfter is how long a new learner may stay unready before the cluster is nudged.
	nudgeAfter = time.Second
	// maintainInterval is how often the sidecar maintains its member; joiningInterval while a
	// learner of its own is joining (catch-up and promotion are on the path of every heal).
	maintainInterval, joiningInterval = 2 * time.Second, 200 * time.Millisecond
)

// maintainMember runs while the sidecar lives: once etcd serves it records the data dir's
// identity, promotes this member when it is a caught-up learner, and, on the leader, removes
// members that are not in the desired cluster (one at a time).
func (s *Sidecar) maintainMember(ctx context.Context) {
	var conn *etcdutil.Conn
	defer func() {
		if conn != nil {
			conn.Reset()
		}
	}()
	var lastStalledLog, lastNudge, lastAuthLog time.Time
	var lastSelf cluster.MemberSpec
	for {
		interval := maintainInterval
		if s.learnerSince.Load() != 0 {
			interval = joiningInterval
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		snap, err := s.cfg.View.Snapshot(ctx)
		if err != nil {
			continue
		}
		spec := snap.Spec
		self, ok := spec.Member(s.cfg.Name)
		if !ok {
			if s.cfg.RemoveUndesired && conn != nil && snap.Directive == nil && len(spec.Members) > 0 {
				if cli, err := conn.Client(); err == nil {
					s.leaveLeadership(ctx, cli, lastSelf)
				}
			}
			continue
		}
		lastSelf = self
		if conn == nil {
			conn = s.etcd.Conn([]string{self.ClientURL}, 2*time.Second)
		}
		cli, err := conn.Client()
		var st *clientv3.StatusResponse
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err = cli.Status(sctx, self.ClientURL)
			cancel()
		}
		if err != nil {
			// etcd is not serving (yet), or, with authentication, refuses the login.
			s.authRefused(err, &lastAuthLog)
			if s.auth != nil {
				// A learner takes no login (etcd serves it only status and serializable reads),
				// neither at the dial nor when a client's token has to be renewed (after a
				// restore, say): it is found and promoted through the voters.
				s.promoteListedLearner(ctx, spec, self, &lastStalledLog)
			}
			if since := s.learnerSince.Load(); since != 0 {
				s.awaitLearner(ctx, spec, time.Unix(0, since), &lastNudge, &lastStalledLog)
			}
			continue
		}
		s.recordIdentity(spec, st.Header.MemberId, st.Header.ClusterId, st.Leader != 0)

		if !st.IsLearner && s.learnerSince.Load() != 0 {
			s.learnerSince.Store(0) // started as a listed member, or promoted meanwhile
			s.metrics.learnerStalled.Set(0)
		}
		if st.IsLearner {
			// A learner serves no member API itself: promotion goes through the voters.
			if voters, err := s.etcd.New(others(spec, s.cfg.Name), 2*time.Second); err == nil {
				s.promote(ctx, voters, st.Header.MemberId, &lastStalledLog)
				voters.Close()
			}
			continue
		}
		if st.Leader == st.Header.MemberId && snap.Directive == nil {
			if s.keepAuth(ctx, cli, fmt.Sprintf("%x/%x/%d", st.Header.ClusterId, st.Header.MemberId, st.RaftTerm)) {
				conn.Reset() // it holds the old password, or no token
				continue
			}
			s.removeSuperfluous(ctx, cli, spec, st.Header.MemberId)
			if s.fullAfterStart.Load() {
				if a := s.backups.Agent(); a != nil && a.Status().Leader {
					fctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
					if res, err := a.RequestFull(fctx); err == nil {
						s.fullAfterStart.Store(false)
						s.lg.Info("full snapshot after the restore", zap.String("event", "full-after-restore"), zap.String("key", res.Key), zap.Int64("revision", res.Revision))
					}
					cancel()
				}
			}
		}
	}
}

// recordIdentity writes the identity file once the running etcd proves whose data this is.
// The cluster ID is recorded once the cluster has formed (etcd knows a leader): it says so
// to whoever reads the dir later.
func (s *Sidecar) recordIdentity(spec cluster.Spec, memberID, clusterID uint64, formed bool) {
	want := datadir.Identity{ClusterName: spec.Name, ClusterToken: spec.Token, MemberName: s.cfg.Name,
		MemberID: fmt.Sprintf("%x", memberID)}
	have, ok, _ := datadir.ReadIdentity(s.cfg.DataDir)
	if formed || (ok && have.ClusterID == fmt.Sprintf("%x", clusterID)) {
		want.ClusterID = fmt.Sprintf("%x", clusterID)
	}
	want.RecoveryEpoch = max(have.RecoveryEpoch, s.pendingEpoch.Load())
	want.RestoredTimeline, want.RestoredRevision = have.RestoredTimeline, have.RestoredRevision
	if ok && have.ClusterToken == want.ClusterToken && have.MemberName == want.MemberName &&
		have.MemberID == want.MemberID && have.ClusterID == want.ClusterID && have.RecoveryEpoch == want.RecoveryEpoch {
		return
	}
	if err := s.writeIdentity(want); err != nil {
		s.lg.Warn("cannot record the data dir identity", zap.Error(err))
		return
	}
	s.lg.Info("recorded the data dir identity", zap.String("memberID", want.MemberID), zap.String("clusterID", want.ClusterID))
}

// awaitLearner runs while this member, added as a learner, does not serve yet. etcd does not
// count a raft snapshot as applied: a member that joins through one has its own requests,
// publishing itself first, refused as "too many requests" while the cluster's commit index
// is more than 5000 past the last entry it applied, until some entry is applied after the
// snapshot. An idle cluster writes none, so the learner would wait forever: after
// nudgeAfter, each pass makes the voters commit one harmless entry (a lease granted and
// revoked; no key is touched). A learner that still does not serve is reported.
func (s *Sidecar) awaitLearner(ctx context.Context, spec cluster.Spec, since time.Time, lastNudge, lastLog *time.Time) {
	waited := time.Since(since)
	if waited > learnerServeTimeout {
		s.metrics.learnerStalled.Set(1)
		if time.Since(*lastLog) > time.Minute {
			*lastLog = time.Now()
			s.lg.Error("the new learner does not serve; see its etcd log (snapshot transfer, disk space, peer connectivity)",
				zap.Duration("since", waited))
		}
	}
	// Nudging helps only while the voters are past the learner by a few thousand entries; a
	// learner that still does not serve after learnerServeTimeout is stuck for another
	// reason (reported above), and nudging it forever would only add entries.
	if waited < nudgeAfter || waited > learnerServeTimeout || time.Since(*lastNudge) < nudgeAfter {
		return
	}
	*lastNudge = time.Now()
	voters, err := s.etcd.New(others(spec, s.cfg.Name), time.Second)
	if err != nil {
		return
	}
	defer voters.Close()
	nctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	lease, err := voters.Grant(nctx, 60)
	if err != nil {
		return
	}
	_, _ = voters.Revoke(nctx, lease.ID) // left alone, it expires in a minute
}

// promoteListedLearner promotes this member through the voters if they list it as a learner.
func (s *Sidecar) promoteListedLearner(ctx context.Context, spec cluster.Spec, self cluster.MemberSpec, lastLog *time.Time) {
	voters, err := s.etcd.New(others(spec, s.cfg.Name), time.Second)
	if err != nil {
		return
	}
	defer voters.Close()
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	ml, err := voters.MemberList(lctx)
	cancel()
	if err != nil {
		return
	}
	for _, m := range ml.Members {
		if m.IsLearner && slices.Contains(m.PeerURLs, self.PeerURL) {
			s.promote(ctx, voters, m.ID, lastLog)
			return
		}
	}
}

// promote asks the cluster to promote this learner; etcd refuses until it has caught up.
func (s *Sidecar) promote(ctx context.Context, cli *clientv3.Client, id uint64, lastLog *time.Time) {
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := cli.MemberPromote(pctx, id)
	cancel()
	since := time.Unix(0, s.learnerSince.Load())
	if s.learnerSince.Load() == 0 {
		since = start
		s.learnerSince.Store(start.UnixNano())
	}
	switch {
	case err == nil:
		s.metrics.membership.WithLabelValues("promote", "ok").Inc()
		s.metrics.membershipSeconds.WithLabelValues("promote").Observe(time.Since(start).Seconds())
		s.metrics.membershipSeconds.WithLabelValues("catch_up").Observe(time.Since(since).Seconds())
		s.metrics.learnerStalled.Set(0)
		s.learnerSince.Store(0)
		s.lg.Info("promoted to voting member", zap.String("event", "promoted"), zap.String("id", fmt.Sprintf("%x", id)), zap.Duration("catchUp", time.Since(since)))
	case errors.Is(err, rpctypes.ErrMemberLearnerNotReady):
		if time.Since(since) > learnerStallTimeout {
			s.metrics.learnerStalled.Set(1)
			if time.Since(*lastLog) > time.Minute {
				*lastLog = time.Now()
				s.lg.Error("learner has not caught up; it stays a non-voting learner", zap.Duration("since", time.Since(since)))
			}
		}
	default:
		s.metrics.membership.WithLabelValues("promote", "failed").Inc()
		s.lg.Warn("promotion failed; retrying", zap.Error(err))
	}
}

// removeSuperfluous removes one member that the desired cluster does not have (a superfluous
// member entry). Without RemoveUndesired only members that do not answer go: one
// that still answers is left to the supervisor, which removes it in order (leadership moved
// away first, then its processes stopped). With RemoveUndesired (Kubernetes: the operator
// drops a leaving member from the spec and stops its pod only once etcd no longer lists it)
// answering members go too; a leaving leader hands leadership over first (leaveLeadership).
func (s *Sidecar) removeSuperfluous(ctx context.Context, cli *clientv3.Client, spec cluster.Spec, self uint64) {
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	list, err := cli.MemberList(lctx)
	cancel()
	if err != nil {
		return
	}
	desiredPeers := map[string]bool{}
	for _, m := range spec.Members {
		desiredPeers[m.PeerURL] = true
	}
	for _, m := range list.Members {
		if m.ID == self || (len(m.PeerURLs) > 0 && desiredPeers[m.PeerURLs[0]]) || (!s.cfg.RemoveUndesired && answers(ctx, s.etcd, m.ClientURLs)) {
			continue
		}
		start := time.Now()
		if err := etcdutil.RemoveMember(ctx, cli, m.ID); err != nil {
			s.metrics.membership.WithLabelValues("remove_superfluous", "failed").Inc()
			s.lg.Warn("cannot remove a member that is not in the desired cluster", zap.String("id", fmt.Sprintf("%x", m.ID)), zap.Error(err))
			return
		}
		s.metrics.membership.WithLabelValues("remove_superfluous", "ok").Inc()
		s.metrics.membershipSeconds.WithLabelValues("remove").Observe(time.Since(start).Seconds())
		s.lg.Info("removed a member that is not in the desired cluster", zap.String("id", fmt.Sprintf("%x", m.ID)), zap.String("name", m.Name))
		return
	}
}

// leaveLeadership hands leadership away when this member leads but is no longer desired, so
// that the new leader removes it (a leader does not remove itself: it would stop leading
// mid-request).
func (s *Sidecar) leaveLeadership(ctx context.Context, cli *clientv3.Client, self cluster.MemberSpec) {
	if self.ClientURL == "" {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	st, err := cli.Status(sctx, self.ClientURL)
	cancel()
	if err != nil || st.Leader != st.Header.MemberId {
		return
	}
	if _, _, err := maintenance.MoveLeader(ctx, cli, ""); err != nil {
		s.lg.Warn("this member is leaving the cluster but cannot hand leadership over yet", zap.Error(err))
		return
	}
	s.lg.Info("this member is leaving the cluster: leadership handed over")
}

// answers reports whether an etcd member answers on one of its client URLs.
func answers(ctx context.Context, etcd etcdutil.Dialer, urls []string) bool {
	if len(urls) == 0 {
		return false
	}
	c, err := etcd.New(urls, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = c.Status(sctx, urls[0])
	return err == nil
}
