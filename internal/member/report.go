package member

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// reportInterval is how often the sidecar reports its member when nothing changed.
const reportInterval = time.Second

// kickReport asks the report loop to report at once (the initialisation decided something).
func (s *Sidecar) kickReport() {
	select {
	case s.reportKick <- struct{}{}:
	default:
	}
}

// reportLoop sends this member's live report to the cluster view every reportInterval and
// whenever something changed, and acknowledges a directive this member carried out.
func (s *Sidecar) reportLoop(ctx context.Context) {
	var conn *etcdutil.Conn
	defer func() {
		if conn != nil {
			conn.Reset()
		}
	}()
	tick := time.NewTicker(reportInterval)
	defer tick.Stop()
	for {
		snap, err := s.cfg.View.Snapshot(ctx)
		if err == nil {
			if self, ok := snap.Spec.Member(s.cfg.Name); ok {
				if conn == nil {
					conn = s.etcd.Conn([]string{self.ClientURL}, time.Second)
				}
				cli, err := conn.Client()
				if err != nil {
					s.logUnreachable(fmt.Errorf("connect: %w", err))
				}
				r := s.buildReport(ctx, cli, self, snap)
				s.lastReport.Store(&r)
				if err := s.cfg.View.Report(ctx, r); err != nil && ctx.Err() == nil {
					s.lg.Warn("cannot report to the cluster view", zap.Error(err))
				} else if err == nil {
					s.delivered.Store(r.At.UnixNano())
				}
				s.ackDirective(ctx, snap.Directive, r)
				s.publishBackup(ctx)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.reportKick:
		}
	}
}

// publishBackup hands the backup leader's status to a view that publishes it.
func (s *Sidecar) publishBackup(ctx context.Context) {
	p, ok := s.cfg.View.(cluster.BackupPublisher)
	a := s.backups.Agent()
	if !ok || a == nil {
		return
	}
	if st := a.Status(); st.Leader {
		if err := p.PublishBackup(ctx, st); err != nil && ctx.Err() == nil {
			s.lg.Warn("cannot publish the backup status", zap.Error(err))
		}
	}
}

// logUnreachable logs, once per distinct error and at most every minute, why this member's
// report comes from its data dir rather than from its etcd.
func (s *Sidecar) logUnreachable(err error) {
	msg := err.Error()
	if last := s.lastUnreachable.Load(); last != nil && last.msg == msg && time.Since(last.at) < time.Minute {
		return
	}
	s.lastUnreachable.Store(&unreachable{msg: msg, at: time.Now()})
	s.lg.Info("etcd does not answer this member's status: reporting from the data dir", zap.Error(err))
}

type unreachable struct {
	msg string
	at  time.Time
}

// buildReport reports from the running etcd when it answers, else from the data dir.
func (s *Sidecar) buildReport(ctx context.Context, cli *clientv3.Client, self cluster.MemberSpec, snap cluster.Snapshot) cluster.Report {
	r := cluster.Report{Name: s.cfg.Name, At: time.Now().UTC(), Maintenance: s.maintenance.Load()}
	s.mu.Lock()
	if s.plan != nil {
		r.Case, r.Reason, r.Fenced = s.plan.Case, s.plan.Reason, s.plan.Case == CaseFenced
	}
	r.InitError = s.initError
	s.mu.Unlock()
	if id, ok, _ := datadir.ReadIdentity(s.cfg.DataDir); ok {
		r.AppliedEpoch, r.RestoredTimeline, r.RestoredRevision = id.RecoveryEpoch, id.RestoredTimeline, id.RestoredRevision
	}
	if cli != nil && !etcdutil.Listening(self.ClientURL) {
		// An etcd that exited is reported from the data dir at once, not after the timeout.
		s.logUnreachable(fmt.Errorf("nothing listens at %s", self.ClientURL))
		cli = nil
	}
	if cli != nil {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, self.ClientURL)
		cancel()
		if err != nil {
			s.logUnreachable(err)
		}
		if err == nil {
			r.Source, r.Serving, r.Learner, r.DataValid, r.Owner = cluster.ReportFromEtcd, true, st.IsLearner, true, s.cfg.Name
			r.MemberID, r.ClusterID = fmt.Sprintf("%x", st.Header.MemberId), fmt.Sprintf("%x", st.Header.ClusterId)
			// etcd's status has no last log index: the commit index stands in for it, which a
			// serving member's log reaches within a heartbeat.
			r.Term, r.Commit, r.LastIndex, r.Applied = st.RaftTerm, st.RaftIndex, st.RaftIndex, st.RaftAppliedIndex
			r.Revision, r.Formed, r.Leader = st.Header.Revision, st.Leader != 0, st.Leader == st.Header.MemberId
			if st.Leader != 0 {
				r.LeaderID = fmt.Sprintf("%x", st.Leader)
			}
			mctx, cancel := context.WithTimeout(ctx, time.Second)
			if ml, err := cli.MemberList(mctx, clientv3.WithSerializable()); err == nil {
				for _, m := range ml.Members {
					r.Members = append(r.Members, cluster.LiveMember{ID: fmt.Sprintf("%x", m.ID), Name: m.Name, IsLearner: m.IsLearner})
				}
			}
			cancel()
			return r
		}
	}
	r.Source = cluster.ReportFromDisk
	// One look at the files for both reads: a report from disk comes every second.
	print, fpErr := fingerprint(s.cfg.DataDir)
	data, err := s.inspectAt(print, fpErr)
	if err != nil {
		r.Problem = err.Error()
		return r
	}
	// The record that a restore supersedes the data is kept here too: a member the
	// supervisor holds stopped runs no initialisation, and the restore's seed acts only once
	// every member's report shows the record.
	if rec := s.recordSuperseded(snap.Directive, data); rec != data.SupersededBy {
		print, fpErr = fingerprint(s.cfg.DataDir)
		if data, err = s.inspectAt(print, fpErr); err != nil {
			r.Problem = err.Error()
			return r
		}
	}
	if data.Superseded() {
		r.SupersededBy = data.SupersededBy
	}
	r.DataValid, r.DataEmpty = data.Valid(), data.Empty()
	r.MemberID, r.ClusterID, r.Revision, r.Applied = data.MemberIDHex(), data.ClusterIDHex(), data.Revision, data.ConsistentIndex
	if len(data.Problems) > 0 {
		r.Problem = strings.Join(data.Problems, "; ")
	}
	// The identity says whether the cluster formed, even when the data is damaged or is
	// another member's of this cluster.
	if id := data.Identity; id != nil && id.ClusterToken == snap.Spec.Token {
		r.Formed = id.ClusterID != ""
	}
	if data.Valid() {
		o := Observation{Self: s.cfg.Name, ClusterToken: snap.Spec.Token, Status: snap.Status, Data: data}
		r.Foreign, r.Owner = o.foreignReason(), o.dataOwner()
		if r.Foreign == "" && r.Owner != "" && r.Owner != s.cfg.Name {
			r.Foreign = fmt.Sprintf("its WAL is of member %s, which the cluster knows as %q", data.MemberIDHex(), r.Owner)
		}
		if r.Foreign == "" {
			r.Owner = s.cfg.Name
			for _, m := range data.Members {
				r.Members = append(r.Members, cluster.LiveMember{ID: m.ID, Name: m.Name, IsLearner: m.Learner})
				r.Learner = r.Learner || (m.ID == r.MemberID && m.Learner)
			}
		}
		log, err := s.raftLogAt(print, fpErr)
		if err != nil {
			r.Problem = err.Error()
		} else {
			r.Term, r.LastTerm, r.LastIndex, r.Commit = log.Term, log.LastTerm, log.LastIndex, log.Commit
		}
	}
	return r
}

// ackDirective acknowledges directive d in the cluster status once this member, its seed,
// carried it out and serves: the supervisor or operator then lets the others rejoin. The
// acknowledgement is repeated until the status shows it.
func (s *Sidecar) ackDirective(ctx context.Context, d *cluster.Directive, r cluster.Report) {
	if d == nil || d.Phase != cluster.PhaseSeeding || d.Seed != s.cfg.Name || d.Ack != nil || !r.Serving || r.Learner || r.AppliedEpoch < d.Epoch {
		return
	}
	res := cluster.DirectiveResult{Member: s.cfg.Name, MemberID: r.MemberID, ClusterID: r.ClusterID, Revision: r.Revision, At: time.Now().UTC()}
	if err := s.cfg.View.AckDirective(ctx, d.Epoch, res); err != nil {
		s.lg.Warn("cannot acknowledge the directive", zap.Int64("epoch", d.Epoch), zap.Error(err))
		return
	}
	s.lg.Info("acknowledged the directive", zap.Int64("epoch", d.Epoch), zap.String("mode", d.Mode), zap.Int64("revision", r.Revision))
}

// freshReportTimeout bounds the wait for a report asked for now: one report takes at most
// a status call (1 s) and a write to the view.
const freshReportTimeout = 3 * time.Second

// reportNow makes the report loop report at once and waits until the view took a report
// made after the call: whoever runs the cluster asks when it needs the members' state as of
// now (a lost quorum is proven lost only by reports made after it was lost).
func (s *Sidecar) reportNow(ctx context.Context) error {
	asked := time.Now().UnixNano()
	s.kickReport()
	ctx, cancel := context.WithTimeout(ctx, freshReportTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for s.delivered.Load() < asked {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no report reached the cluster view within %s (see the sidecar's log)", freshReportTimeout)
		case <-tick.C:
		}
	}
	return nil
}

// handleReport serves GET /v1/report: the member's last report, or with ?fresh=1 one made
// after the request.
func (s *Sidecar) handleReport(w http.ResponseWriter, req *http.Request) {
	if req.URL.Query().Get("fresh") != "" {
		if err := s.reportNow(req.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	r := s.lastReport.Load()
	if r == nil {
		http.Error(w, "no report yet: the sidecar is starting", http.StatusServiceUnavailable)
		return
	}
	sidecarapi.WriteJSON(w, http.StatusOK, r)
}
