package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/etcd-steward/steward/internal/cluster"
	stewardtest "github.com/etcd-steward/steward/internal/testutil"
)

// exported are the series of reg by name (with the step, for the failure counter).
func exported(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += "/" + l.GetValue()
			}
			out[key] = valueOf(m)
		}
	}
	return out
}

func valueOf(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return float64(m.GetHistogram().GetSampleCount())
}

// leaderSeriesOf are the backup leader's series among those of reg.
func leaderSeriesOf(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for name, v := range exported(t, reg) {
		switch name {
		case "steward_backup_delta_events_total", "steward_backup_full_duration_seconds":
		default:
			if !slices.ContainsFunc(failureSteps, func(s string) bool { return name == "steward_backup_failures_total/"+s }) {
				out[name] = v
			}
		}
	}
	return out
}

// TestMetricsAtStart: a sidecar's backup counters exist at 0 from the start (an increase()
// sees the first failure), and it exports none of the backup leader's series before it leads.
func TestMetricsAtStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	got := exported(t, reg)
	want := map[string]float64{"steward_backup_delta_events_total": 0, "steward_backup_full_duration_seconds": 0}
	for _, step := range failureSteps {
		want["steward_backup_failures_total/"+step] = 0
	}
	if !maps.Equal(got, want) {
		t.Errorf("series at start: %v, want %v", got, want)
	}
}

// TestMetricsPublish: the leader's series follow its status, each present once it has a value
// (drill_success only after a drill of the timeline being written); a member that stops
// leading exports none of them.
func TestMetricsPublish(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	at := time.Unix(1_800_000_000, 0)
	s := cluster.BackupStatus{Leader: true, Timeline: 2, CurrentRevision: 40, CurrentAt: at,
		LatestFullRevision: 30, LatestFullTime: at.Add(-time.Minute), LatestDeltaRevision: 40, LatestDeltaTime: at}
	m.publish(s)
	want := map[string]float64{"steward_backup_ready": 0, "steward_backup_current_timestamp_seconds": float64(at.Unix()),
		"steward_backup_latest_full_revision": 30, "steward_backup_latest_full_timestamp_seconds": float64(at.Unix() - 60),
		"steward_backup_latest_delta_revision": 40, "steward_backup_latest_delta_timestamp_seconds": float64(at.Unix())}
	if got := leaderSeriesOf(t, reg); !maps.Equal(got, want) {
		t.Errorf("leader without a drill: %v, want %v", got, want)
	}

	s.Ready = true
	s.LastDrill = cluster.DrillStatus{Timeline: 2, Revision: 35, Time: at, Duration: 3 * time.Second, OK: false}
	m.publish(s)
	want["steward_backup_ready"] = 1
	maps.Copy(want, map[string]float64{"steward_backup_drill_success": 0, "steward_backup_drill_revision": 35,
		"steward_backup_drill_timestamp_seconds": float64(at.Unix()), "steward_backup_drill_duration_seconds": 3})
	if got := leaderSeriesOf(t, reg); !maps.Equal(got, want) {
		t.Errorf("leader after a failed drill: %v, want %v", got, want)
	}

	s.Timeline, s.CurrentRevision, s.CurrentAt = 3, 0, time.Time{}
	s.LatestFullRevision, s.LatestFullTime, s.LatestDeltaRevision, s.LatestDeltaTime = 0, time.Time{}, 0, time.Time{}
	m.publish(s)
	if got := leaderSeriesOf(t, reg); !maps.Equal(got, map[string]float64{"steward_backup_ready": 1}) {
		t.Errorf("leader on a new timeline, nothing stored on it yet: %v, want only steward_backup_ready", got)
	}

	s.Leader = false
	m.publish(s)
	if got := leaderSeriesOf(t, reg); len(got) != 0 {
		t.Errorf("a member that no longer leads exports %v, want none of the leader's series", got)
	}
}

// TestMetricsOneBackupLeader: on a real 3-member cluster, only the backup leader's sidecar
// exports backup readiness and the stored revisions; once leadership moves, the former leader
// exports none of them and the new one does. No sidecar exports a drill result before a drill.
func TestMetricsOneBackupLeader(t *testing.T) {
	ctx := context.Background()
	ms := stewardtest.Cluster(t, 3)
	s := openTestStore(t)
	regs := make([]*prometheus.Registry, len(ms))
	for i, m := range ms {
		regs[i] = prometheus.NewRegistry()
		startBackupsMetrics(t, Config{DrillSchedule: DrillOff}, s, m.Endpoint, NewMetrics(regs[i]))
	}
	if _, err := ms[0].Client.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	exporting := func(rev int64) (int, error) {
		leader := -1
		for i, reg := range regs {
			series := leaderSeriesOf(t, reg)
			if len(series) == 0 {
				continue
			}
			if leader >= 0 {
				return 0, fmt.Errorf("members %d and %d both export leader series: %v", leader, i, series)
			}
			stored := max(series["steward_backup_latest_full_revision"], series["steward_backup_latest_delta_revision"])
			if series["steward_backup_ready"] != 1 || stored < float64(rev) {
				return 0, fmt.Errorf("member %d: %v, want ready and revision %d stored", i, series, rev)
			}
			if _, ok := series["steward_backup_drill_success"]; ok {
				return 0, fmt.Errorf("member %d exports a drill result without a drill: %v", i, series)
			}
			leader = i
		}
		if leader < 0 {
			return 0, fmt.Errorf("no member exports backup readiness")
		}
		return leader, nil
	}
	var first int
	stewardtest.Eventually(t, 60*time.Second, "one backup leader exporting its series", func() (err error) {
		first, err = exporting(1)
		return err
	})

	next := (first + 1) % len(ms)
	if _, err := ms[first].Client.MoveLeader(ctx, uint64(ms[next].Etcd.Server.MemberID())); err != nil {
		t.Fatal(err)
	}
	resp, err := ms[next].Client.Put(ctx, "/k", "again")
	if err != nil {
		t.Fatal(err)
	}
	stewardtest.Eventually(t, 60*time.Second, fmt.Sprintf("member %d exporting the series instead of %d", next, first), func() error {
		leader, err := exporting(resp.Header.Revision)
		if err == nil && leader != next {
			return fmt.Errorf("member %d exports them", leader)
		}
		return err
	})
}
