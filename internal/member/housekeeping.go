package member

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/maintenance"
	"github.com/etcd-steward/steward/internal/units"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// MaintenanceConfig configures the leader's housekeeping.
type MaintenanceConfig struct {
	// DefragSchedule is when the leader's sidecar checks which members are worth
	// defragmenting (cron, or MaintenanceOff).
	DefragSchedule string
	// Defrag says which members are worth it.
	Defrag maintenance.Policy
}

// MaintenanceOff turns scheduled defragmentation off.
const MaintenanceOff = "off"

// DefaultMaintenance is a sidecar's housekeeping unless configured otherwise.
var DefaultMaintenance = MaintenanceConfig{DefragSchedule: "@hourly", Defrag: maintenance.DefaultPolicy}

// housekeepingInterval is how often the leader's sidecar looks at the alarms and the schedule.
const housekeepingInterval = 10 * time.Second

func (s *Sidecar) recoverCorrupt(ctx context.Context, cli *clientv3.Client) *cluster.CorruptReport {
	res, err := maintenance.RecoverCorrupt(ctx, cli, func(st maintenance.Step) {
		if st.Kind != maintenance.StepDone {
			s.lg.Warn("CORRUPT alarm", zap.String("step", string(st.Kind)), zap.String("member", st.Member.Name), zap.String("why", st.Reason))
		}
	})
	r := &cluster.CorruptReport{At: time.Now(), CorruptResult: res}
	if res.Replaced != "" {
		s.housekeepingMetrics.replaced.Inc()
	}
	if err != nil {
		r.Error = err.Error()
		s.lg.Warn("CORRUPT alarm not resolved", zap.Error(err))
	}
	return r
}

// chore is what the housekeeping does in one pass.
type chore int

const (
	choreNone chore = iota
	choreCorrupt
	choreNoSpace
	choreDefrag
)

// roundFresh is how old a report may be and still show a round running: a sidecar that
// died mid-round stops reporting, and its round stops holding the others back.
const roundFresh = 30 * time.Second

// nextChore decides one housekeeping pass of the leader's sidecar self: replace a member
// marked CORRUPT (maintenance.NextCorrupt), recover NOSPACE at once, defragment when the schedule is due (due), nothing while another member's sidecar
// still runs a round (it began while it led, and moves leadership on its own). The reason
// says why nothing happens when that is not the ordinary case.
func nextChore(st cluster.Status, self string, alarms []maintenance.Alarm, due bool, now time.Time) (chore, string) {
	if hasAlarm(alarms, "CORRUPT") {
		return choreCorrupt, "" // etcd refuses every request meanwhile; a round waits for it
	}
	if !hasAlarm(alarms, "NOSPACE") && !due {
		return choreNone, ""
	}
	for _, m := range st.Members {
		r := m.Report
		if m.Name == self || r == nil || r.Maintenance == nil || r.Maintenance.RoundSince.IsZero() || now.Sub(r.At) > roundFresh {
			continue
		}
		return choreNone, fmt.Sprintf("%s's sidecar runs a round since %s", m.Name, r.Maintenance.RoundSince.Format(time.RFC3339))
	}
	if hasAlarm(alarms, "NOSPACE") {
		return choreNoSpace, ""
	}
	return choreDefrag, ""
}

// parseDefragSchedule parses the schedule (nil: off).
func parseDefragSchedule(s string) (cron.Schedule, error) {
	if s == MaintenanceOff {
		return nil, nil
	}
	sched, err := units.ParseSchedule(s)
	if err != nil {
		return nil, fmt.Errorf("defragmentation schedule %q: %v; give a cron expression (\"0 3 * * *\", \"@hourly\") or %q", s, err, MaintenanceOff)
	}
	return sched, nil
}

// What starts a defragmentation round, and how it ends (labels of steward_defrag_rounds_total).
const (
	defragTriggerSchedule = "schedule"
	defragTriggerNoSpace  = "NOSPACE"
	defragCompleted       = "completed"
	defragPostponed       = "postponed"
	defragFailed          = "failed"
)

type housekeepingMetrics struct {
	rounds    *prometheus.CounterVec
	reclaimed prometheus.Counter
	alarms    *prometheus.GaugeVec
	replaced  prometheus.Counter
}

func newHousekeepingMetrics(reg *prometheus.Registry) *housekeepingMetrics {
	m := &housekeepingMetrics{
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_defrag_rounds_total",
			Help: "Defragmentation rounds run by this sidecar while its etcd led, by trigger (schedule, NOSPACE) and result (completed, postponed, failed)."},
			[]string{"trigger", "result"}),
		reclaimed: prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_defrag_reclaimed_bytes_total",
			Help: "Bytes given back by the defragmentations this sidecar ran."}),
		alarms: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steward_alarms_active",
			Help: "Active etcd alarms of the cluster by type, as the leader's sidecar last saw them."}, []string{"type"}),
	}
	m.replaced = prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_corrupt_members_replaced_total",
		Help: "Members that etcd marked CORRUPT and this sidecar removed to rejoin with empty data."})
	// Every round's series exists at 0 from the start: an increase() sees the first failure.
	for _, trigger := range []string{defragTriggerSchedule, defragTriggerNoSpace} {
		for _, result := range []string{defragCompleted, defragPostponed, defragFailed} {
			m.rounds.WithLabelValues(trigger, result)
		}
	}
	reg.MustRegister(m.rounds, m.reclaimed, m.alarms, m.replaced)
	return m
}

// housekeeping runs while the sidecar lives. While its etcd leads and no directive is in
// force, it recovers from a NOSPACE alarm at once and defragments on its schedule, the
// leader last (maintenance.Next), one round in the cluster at a time (nextChore).
func (s *Sidecar) housekeeping(ctx context.Context, sched cron.Schedule, interval time.Duration) {
	var conn *etcdutil.Conn
	defer func() {
		if conn != nil {
			conn.Reset()
		}
	}()
	var next time.Time
	var waiting string // why the last pass did nothing, logged once
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		snap, err := s.cfg.View.Snapshot(ctx)
		if err != nil || snap.Directive != nil {
			continue // a recovery owns the members
		}
		self, ok := snap.Spec.Member(s.cfg.Name)
		if !ok {
			continue
		}
		if conn == nil {
			conn = s.etcd.Conn([]string{self.ClientURL}, time.Second)
		}
		cli, err := conn.Client()
		if err != nil {
			continue
		}
		if !etcdutil.Leads(ctx, cli, self.ClientURL, 5*time.Second) {
			continue
		}
		now := time.Now()
		if sched != nil && next.IsZero() {
			next = sched.Next(now)
		}
		rep := s.lastMaintenance()
		rep.NextDefrag = next
		alarms, err := maintenance.Alarms(ctx, cli)
		if err == nil {
			rep.Alarms = s.recordAlarms(alarms)
		}
		do, why := nextChore(snap.Status, s.cfg.Name, alarms, sched != nil && !now.Before(next), now)
		if why != "" && why != waiting {
			s.lg.Info("maintenance waits", zap.String("why", why))
		}
		waiting = why
		if do == choreNoSpace || do == choreDefrag { // advertised while it runs
			running := rep
			running.RoundSince = now
			s.maintenance.Store(&running)
			s.kickReport()
		}
		var round *cluster.DefragReport
		switch do {
		case choreCorrupt:
			rep.LastCorrupt = s.recoverCorrupt(ctx, cli)
		case choreNoSpace:
			round = s.recoverNoSpace(ctx, cli)
		case choreDefrag:
			round = s.defragRound(ctx, cli)
			next = sched.Next(time.Now())
			rep.NextDefrag = next
		}
		if round != nil {
			rep.LastCheck = round.End
			if len(round.Members) > 0 || round.Error != "" {
				rep.LastDefrag = round
			}
		}
		s.maintenance.Store(&rep)
		if do != choreNone {
			s.kickReport() // the round's result, and that it no longer runs
		}
	}
}

func (s *Sidecar) lastMaintenance() cluster.MaintenanceReport {
	if p := s.maintenance.Load(); p != nil {
		return *p
	}
	return cluster.MaintenanceReport{}
}

func hasAlarm(alarms []maintenance.Alarm, typ string) bool {
	for _, a := range alarms {
		if a.Type == typ {
			return true
		}
	}
	return false
}

func (s *Sidecar) recordAlarms(alarms []maintenance.Alarm) []string {
	counts := map[string]float64{"NOSPACE": 0, "CORRUPT": 0}
	var out []string
	for _, a := range alarms {
		counts[a.Type]++
		out = append(out, fmt.Sprintf("%s on %x", a.Type, a.MemberID))
	}
	for typ, n := range counts {
		s.housekeepingMetrics.alarms.WithLabelValues(typ).Set(n)
	}
	return out
}

func (s *Sidecar) defragRound(ctx context.Context, cli *clientv3.Client) *cluster.DefragReport {
	r := &cluster.DefragReport{Start: time.Now(), Trigger: defragTriggerSchedule}
	res, err := maintenance.Defragment(ctx, cli, maintenance.Options{Policy: s.cfg.Maintenance.Defrag, Progress: s.logStep})
	return s.finishRound(r, res, err)
}

func (s *Sidecar) recoverNoSpace(ctx context.Context, cli *clientv3.Client) *cluster.DefragReport {
	r := &cluster.DefragReport{Start: time.Now(), Trigger: defragTriggerNoSpace}
	s.lg.Warn("NOSPACE alarm: compacting the history, defragmenting every member (leader last), then disarming")
	res, err := maintenance.RecoverNoSpace(ctx, cli, maintenance.Options{Progress: s.logStep})
	if err == nil {
		s.lg.Info("NOSPACE alarm disarmed", zap.Int64("compactedAt", res.CompactedAt))
	}
	return s.finishRound(r, res.Defrag, err)
}

func (s *Sidecar) finishRound(r *cluster.DefragReport, res maintenance.Result, err error) *cluster.DefragReport {
	r.End, r.Members, r.Reclaimed = time.Now(), res.Members, res.Reclaimed()
	result := defragCompleted
	switch {
	case errors.Is(err, maintenance.ErrPostponed):
		result = defragPostponed
	case err != nil:
		result = defragFailed
	}
	if err != nil {
		r.Error = err.Error()
		s.lg.Warn("defragmentation stopped", zap.String("trigger", r.Trigger), zap.Error(err))
	}
	s.housekeepingMetrics.rounds.WithLabelValues(r.Trigger, result).Inc()
	s.housekeepingMetrics.reclaimed.Add(float64(r.Reclaimed))
	for _, m := range res.Members {
		s.lg.Info("defragmented", zap.String("target", m.Name), zap.Int64("before", m.Before), zap.Int64("after", m.After),
			zap.Duration("took", time.Duration(m.Duration)), zap.String("movedLeadershipTo", m.MovedTo))
	}
	return r
}

func (s *Sidecar) logStep(st maintenance.Step) {
	switch st.Kind {
	case maintenance.StepDefrag:
		s.lg.Info("defragmenting", zap.String("target", st.Member.Name), zap.String("why", st.Reason))
	case maintenance.StepMoveLeader:
		s.lg.Info("moving leadership before defragmenting the leader", zap.String("to", st.To.Name), zap.String("why", st.Reason))
	case maintenance.StepWait:
		s.lg.Info("defragmentation waits", zap.String("why", st.Reason))
	}
}
