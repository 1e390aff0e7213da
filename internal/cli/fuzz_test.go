package cli

import (
	"regexp"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/agent"
	retentionpkg "github.com/etcd-steward/steward/internal/backup/retention"
	"github.com/etcd-steward/steward/internal/member"
	"github.com/etcd-steward/steward/internal/units"
)

// FuzzClusterConfig: the ClusterConfig a sidecar reads from its ConfigMap (cluster.yaml,
// YAML or JSON). Whatever it holds, parsing and applying it never panics, and what is applied
// is usable: a positive delta period (or the default), schedules that parse and give a next
// time, a retention policy that prints as it parses.
func FuzzClusterConfig(f *testing.F) {
	for _, s := range []string{
		"name: c\nnamespace: ns\ntoken: uid\nmembers:\n- name: c-0\n  clientURL: http://c-0:2379\n  peerURL: http://c-0:2380\n  sidecarURL: http://c-0:2381\netcd:\n  snapshotCount: 10000\nbackup:\n  store: s3://b/c\n  fullSchedule: '@hourly'\n  deltaPeriod: 5s\n  retention: limit:3\n",
		`{"backup":{"deltaPeriod":"-5s"}}`,
		`{"backup":{"deltaPeriod":"0s"}}`,
		`{"backup":{"fullSchedule":"@every -1s"}}`,
		`{"backup":{"fullSchedule":"0 0 30 2 *","drillSchedule":"off"}}`,
		`{"backup":{"retention":"limit:0"}}`,
		`{"etcd":{"heartbeatMillis":-1}}`,
		`{"maintenance":{"defragSchedule":"@every 1m","defragThreshold":0.3,"defragMinReclaim":1048576}}`,
		`{"maintenance":{"defragSchedule":"off","defragThreshold":1.5,"defragMinReclaim":-1}}`,
		"members: [",
		"backup: null",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cc, err := v1alpha1.ParseClusterConfig(map[string]string{v1alpha1.ClusterConfigKey: s})
		if err != nil {
			return
		}
		cfg := member.Config{}
		cfg.Backup.DeltaPeriod, cfg.Backup.FullSchedule, cfg.Backup.DrillSchedule = 5*time.Second, "@hourly", "@daily"
		if err := applyClusterConfig(&cfg, cc); err != nil {
			return
		}
		if cfg.Backup.DeltaPeriod <= 0 {
			t.Fatalf("delta period %v accepted", cfg.Backup.DeltaPeriod)
		}
		if p := cfg.Maintenance.Defrag; p.Threshold < 0 || p.Threshold > 1 || p.MinReclaim < 0 {
			t.Fatalf("defragmentation policy %+v accepted", p)
		}
		if s := cfg.Maintenance.DefragSchedule; s != "" && s != member.MaintenanceOff {
			if _, err := units.ParseSchedule(s); err != nil {
				t.Fatalf("defragmentation schedule %q accepted but does not parse: %v", s, err)
			}
		}
		for _, sched := range []string{cfg.Backup.FullSchedule, cfg.Backup.DrillSchedule} {
			if sched == "" || sched == agent.DrillOff {
				continue
			}
			sc, err := units.ParseSchedule(sched)
			if err != nil {
				t.Fatalf("schedule %q accepted but does not parse: %v", sched, err)
			}
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			if next := sc.Next(now); !next.IsZero() && !next.After(now) {
				t.Fatalf("schedule %q: next %v is not after %v", sched, next, now)
			}
		}
		if p := cfg.Backup.Retention; p.Name != "" {
			again, err := retentionpkg.ParsePolicy(p.String())
			if err != nil || again != p {
				t.Fatalf("retention %+v prints as %q, parses as %+v (%v)", p, p.String(), again, err)
			}
		}
	})
}

// retentionPattern is the pattern the API server checks spec.backup.retention against.
var retentionPattern = regexp.MustCompile(retentionpkg.PolicyPattern)

// FuzzCLIDurationsAndSchedules: the flag values a user types: retention policies, durations,
// cron schedules, restore times. None panics; a retention policy is accepted exactly when the
// API server's pattern matches it, prints as it parses, and keeps at least one snapshot or a
// positive age; a schedule's next time is after now.
func FuzzCLIDurationsAndSchedules(f *testing.F) {
	for _, s := range []string{"exponential", "keep", "limit:3", "limit=1", "limit:-1", "limit:99999999999999999999", "age:30d", "age:0h", "age:9999w", "5s", "-1h", "1e9h",
		"@hourly", "@every 1s", "@every -1s", "*/0 * * * *", "0 0 31 2 *", "TZ=Nowhere 0 * * * *", "2026-01-01T00:00:00Z", "2026-13-01T00:00:00+25:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := retentionpkg.ParsePolicy(s)
		if (err == nil) != retentionPattern.MatchString(s) {
			t.Fatalf("retention %q: parses as %+v (%v), but the API server's pattern matches it: %t", s, p, err, retentionPattern.MatchString(s))
		}
		if err == nil {
			again, err := retentionpkg.ParsePolicy(p.String())
			if err != nil || again != p || p.Name == retentionpkg.Limit && p.Limit < 1 || p.Name == retentionpkg.Age && p.Age <= 0 {
				t.Fatalf("retention %q: %+v prints as %q, parses as %+v (%v)", s, p, p.String(), again, err)
			}
		}
		_, _ = time.ParseDuration(s)
		_, _ = time.Parse(time.RFC3339Nano, s)
		if sc, err := units.ParseSchedule(s); err == nil {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			if next := sc.Next(now); !next.IsZero() && !next.After(now) {
				t.Fatalf("schedule %q: next %v is not after %v", s, next, now)
			}
		}
	})
}
