package agent

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the backup leader's Prometheus metrics, registered once per sidecar.
type Metrics struct {
	backupReady         prometheus.Gauge
	backupFailures      *prometheus.CounterVec
	deltaEvents         prometheus.Counter
	latestDeltaRevision prometheus.Gauge
	latestDeltaTime     prometheus.Gauge
	latestFullRevision  prometheus.Gauge
	latestFullTime      prometheus.Gauge
	fullDuration        prometheus.Histogram

	drillRevision prometheus.Gauge
	drillTime     prometheus.Gauge
	drillDuration prometheus.Gauge
	drillOK       prometheus.Gauge
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// NewMetrics makes the backup metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	m.backupReady = gauge("steward_backup_ready", "1 while backups are current (BackupReady), on the backup leader.")
	m.backupFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_backup_failures_total",
		Help: "Backup failures by step (full, delta, session, retention)."}, []string{"step"})
	m.deltaEvents = prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_backup_delta_events_total", Help: "Events stored in delta snapshots."})
	m.latestDeltaRevision = gauge("steward_backup_latest_delta_revision", "Last revision of the newest stored delta.")
	m.latestDeltaTime = gauge("steward_backup_latest_delta_timestamp_seconds", "Unix time the newest delta was stored.")
	m.latestFullRevision = gauge("steward_backup_latest_full_revision", "Revision of the newest full snapshot.")
	m.latestFullTime = gauge("steward_backup_latest_full_timestamp_seconds", "Unix time of the newest full snapshot.")
	m.fullDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "steward_backup_full_duration_seconds",
		Help: "Time to stream one full snapshot into the store.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)})
	reg.MustRegister(m.backupReady, m.backupFailures, m.deltaEvents, m.latestDeltaRevision, m.latestDeltaTime,
		m.latestFullRevision, m.latestFullTime, m.fullDuration)
	m.drillRevision = gauge("steward_backup_drill_revision", "Revision the newest restore drill restored and compared.")
	m.drillTime = gauge("steward_backup_drill_timestamp_seconds", "Unix time the newest restore drill began.")
	m.drillDuration = gauge("steward_backup_drill_duration_seconds", "Time the newest restore drill took.")
	m.drillOK = gauge("steward_backup_drill_success", "1 if the newest restore drill restored data equal to the member's (HashKV), 0 if not.")
	reg.MustRegister(m.drillRevision, m.drillTime, m.drillDuration, m.drillOK)
	return m
}
