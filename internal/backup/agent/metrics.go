package agent

import (
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a sidecar's backup metrics, registered once per sidecar. The series that
// describe the cluster's backups (readiness, the newest stored revisions, the newest drill)
// come from the backup leader only, so that a cluster has one of each: a member that does not
// lead, or no longer leads, exports none of them (publish). The counters exist at 0 from the
// start, so that an increase() sees the first failure.
type Metrics struct {
	backupFailures *prometheus.CounterVec
	deltaEvents    prometheus.Counter
	fullDuration   prometheus.Histogram

	// The backup leader's series: unlabelled vectors, so that each can be absent.
	ready               *prometheus.GaugeVec
	currentTime         *prometheus.GaugeVec
	latestDeltaRevision *prometheus.GaugeVec
	latestDeltaTime     *prometheus.GaugeVec
	latestFullRevision  *prometheus.GaugeVec
	latestFullTime      *prometheus.GaugeVec
	drillRevision       *prometheus.GaugeVec
	drillTime           *prometheus.GaugeVec
	drillDuration       *prometheus.GaugeVec
	drillOK             *prometheus.GaugeVec
}

// failureSteps are the steps steward_backup_failures_total counts failures of.
var failureSteps = []string{"store", "keys", "session", "full", "delta", "retention", "drill"}

func leaderGauge(name, help string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help + " Exported by the backup leader only."}, nil)
}

// NewMetrics makes the backup metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		backupFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_backup_failures_total",
			Help: "Backup failures by step (store, keys, session, full, delta, retention, drill)."}, []string{"step"}),
		deltaEvents: prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_backup_delta_events_total", Help: "Events stored in delta snapshots."}),
		fullDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "steward_backup_full_duration_seconds",
			Help: "Time to stream one full snapshot into the store.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)}),

		ready: leaderGauge("steward_backup_ready", "1 while backups are current (BackupReady: the member's newest revision stored within 2 delta periods; 0 after 3), else 0."),
		currentTime: leaderGauge("steward_backup_current_timestamp_seconds",
			"Unix time when the newest stored revision was the member's own: the backups hold the cluster's data as of then."),
		latestDeltaRevision: leaderGauge("steward_backup_latest_delta_revision", "Last revision of the newest stored delta of the timeline being written."),
		latestDeltaTime:     leaderGauge("steward_backup_latest_delta_timestamp_seconds", "Unix time the newest delta of the timeline being written was stored."),
		latestFullRevision:  leaderGauge("steward_backup_latest_full_revision", "Revision of the newest full snapshot of the timeline being written."),
		latestFullTime:      leaderGauge("steward_backup_latest_full_timestamp_seconds", "Unix time of the newest full snapshot of the timeline being written."),
		drillRevision:       leaderGauge("steward_backup_drill_revision", "Revision the newest restore drill of the timeline being written restored and compared."),
		drillTime:           leaderGauge("steward_backup_drill_timestamp_seconds", "Unix time the newest restore drill began."),
		drillDuration:       leaderGauge("steward_backup_drill_duration_seconds", "Time the newest restore drill took."),
		drillOK: leaderGauge("steward_backup_drill_success",
			"1 if the newest restore drill restored data equal to the member's (HashKV), 0 if not; absent before the first drill."),
	}
	for _, step := range failureSteps {
		m.backupFailures.WithLabelValues(step)
	}
	reg.MustRegister(m.backupFailures, m.deltaEvents, m.fullDuration)
	for _, g := range m.leaderSeries() {
		reg.MustRegister(g)
	}
	return m
}

func (m *Metrics) leaderSeries() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{m.ready, m.currentTime, m.latestDeltaRevision, m.latestDeltaTime, m.latestFullRevision,
		m.latestFullTime, m.drillRevision, m.drillTime, m.drillDuration, m.drillOK}
}

// publish sets the backup leader's series from its status s; a member that does not lead
// exports none. Each series is present only once it has a value: the revisions once stored on
// the timeline being written, the drill's once a drill of that timeline ran.
func (m *Metrics) publish(s cluster.BackupStatus) {
	if !s.Leader {
		for _, g := range m.leaderSeries() {
			g.Reset()
		}
		return
	}
	m.ready.WithLabelValues().Set(boolGauge(s.Ready))
	setIf(m.currentTime, !s.CurrentAt.IsZero(), unix(s.CurrentAt))
	setIf(m.latestDeltaRevision, s.LatestDeltaRevision != 0, float64(s.LatestDeltaRevision))
	setIf(m.latestDeltaTime, !s.LatestDeltaTime.IsZero(), unix(s.LatestDeltaTime))
	setIf(m.latestFullRevision, s.LatestFullRevision != 0, float64(s.LatestFullRevision))
	setIf(m.latestFullTime, !s.LatestFullTime.IsZero(), unix(s.LatestFullTime))
	d := s.LastDrill
	drilled := !d.Time.IsZero() && d.Timeline == s.Timeline
	setIf(m.drillRevision, drilled, float64(d.Revision))
	setIf(m.drillTime, drilled, unix(d.Time))
	setIf(m.drillDuration, drilled, d.Duration.Seconds())
	setIf(m.drillOK, drilled, boolGauge(d.OK))
}

// setIf sets the unlabelled g to v if ok, else removes its series.
func setIf(g *prometheus.GaugeVec, ok bool, v float64) {
	if !ok {
		g.Reset()
		return
	}
	g.WithLabelValues().Set(v)
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / float64(time.Second) }

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
