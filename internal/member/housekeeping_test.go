package member

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/maintenance"
	stewardtest "github.com/etcd-steward/steward/internal/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/robfig/cron/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// TestHousekeeping: on a real 3-member cluster, the leader's sidecar alone recovers a NOSPACE
// alarm with every acknowledged write kept, then defragments on its schedule once the members
// are fragmented, the leader last.
func TestHousekeeping(t *testing.T) {
	const quota = 8 << 20
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ms := stewardtest.Cluster(t, 3, func(c *embed.Config) { c.QuotaBackendBytes = quota })
	spec := cluster.Spec{Name: "c", Token: "t"}
	for i, m := range ms {
		spec.Members = append(spec.Members, cluster.MemberSpec{Name: fmt.Sprintf("m%d", i), ClientURL: m.Endpoint})
	}
	every, err := cron.ParseStandard("@every 1s")
	if err != nil {
		t.Fatal(err)
	}
	var sidecars []*Sidecar
	for _, m := range spec.Members {
		sc, err := New(Config{Name: m.Name, DataDir: filepath.Join(t.TempDir(), "data"), View: staticView{cluster.Snapshot{Spec: spec}}, Logger: zap.NewNop(),
			Maintenance: MaintenanceConfig{DefragSchedule: "@every 1s", Defrag: maintenance.Policy{Threshold: 0.3, MinReclaim: 2 << 20}}})
		if err != nil {
			t.Fatal(err)
		}
		sidecars = append(sidecars, sc)
	}
	// No schedule yet: the NOSPACE recovery comes first, whatever the schedule.
	nospaceCtx, stopNoSpace := context.WithCancel(ctx)
	for _, sc := range sidecars {
		go sc.housekeeping(nospaceCtx, nil, 200*time.Millisecond)
	}

	cli := ms[0].Client
	filled := stewardtest.FillUntilNoSpace(t, cli)
	stewardtest.Eventually(t, 60*time.Second, "NOSPACE recovered by the leader's sidecar", func() error {
		if _, err := cli.Put(ctx, "after-nospace", "ok"); err != nil {
			return err
		}
		if leaderReport(sidecars, "NOSPACE") == nil {
			return errors.New("no sidecar reports a NOSPACE round")
		}
		return nil
	})
	filled.Check(t, cli)

	stopNoSpace()
	// Fragment every member; once all three are worth it, the schedule starts and its first
	// round defragments all three.
	value := strings.Repeat("v", 64<<10)
	for i := 0; i < 64; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("bulk/%d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	del, err := cli.Delete(ctx, "bulk/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	policy := sidecars[0].cfg.Maintenance.Defrag
	stewardtest.Eventually(t, 60*time.Second, "every member fragmented", func() error {
		// Pages a compaction freed are counted free once a later write commits.
		if _, err := cli.Put(ctx, "tick", time.Now().String()); err != nil {
			return err
		}
		members, err := maintenance.Observe(ctx, cli)
		if err != nil {
			return err
		}
		for _, m := range members {
			if ok, why := policy.Worth(m); !ok {
				return fmt.Errorf("%s: %s", m.Name, why)
			}
		}
		return nil
	})
	for _, sc := range sidecars {
		go sc.housekeeping(ctx, every, 200*time.Millisecond)
	}
	stewardtest.Eventually(t, 60*time.Second, "a scheduled round over the three fragmented members", func() error {
		r := leaderReport(sidecars, "schedule")
		if r == nil || len(r.Members) != 3 || r.Error != "" {
			return fmt.Errorf("newest scheduled round: %+v", r)
		}
		if last := r.Members[2]; last.MovedTo == "" {
			return fmt.Errorf("the last member defragmented, %s, did not hand leadership over first: %+v", last.Name, r.Members)
		}
		return nil
	})
	rounds := 0.0
	for _, sc := range sidecars {
		rounds += testutil.ToFloat64(sc.housekeepingMetrics.rounds.WithLabelValues("schedule", "completed"))
	}
	if rounds == 0 {
		t.Fatal("steward_defrag_rounds_total{trigger=schedule,result=completed} stayed 0")
	}
}

// leaderReport is the newest round with trigger that any sidecar reports (nil: none).
func leaderReport(sidecars []*Sidecar, trigger string) *cluster.DefragReport {
	var newest *cluster.DefragReport
	for _, sc := range sidecars {
		if m := sc.maintenance.Load(); m != nil && m.LastDefrag != nil && m.LastDefrag.Trigger == trigger &&
			(newest == nil || m.LastDefrag.End.After(newest.End)) {
			newest = m.LastDefrag
		}
	}
	return newest
}

func TestNextChore(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	nospace := []maintenance.Alarm{{MemberID: 1, Type: "NOSPACE"}}
	corrupt := []maintenance.Alarm{{MemberID: 1, Type: "CORRUPT"}}
	status := func(name string, reportAge time.Duration, roundSince time.Time) cluster.Status {
		st := cluster.Status{Members: []cluster.StatusMember{{Name: "m0"}, {Name: "m1"}, {Name: "m2"}}}
		for i := range st.Members {
			if st.Members[i].Name == name {
				st.Members[i].Report = &cluster.Report{Name: name, At: now.Add(-reportAge), Maintenance: &cluster.MaintenanceReport{RoundSince: roundSince}}
			}
		}
		return st
	}
	quiet := status("m1", time.Second, time.Time{})
	running := status("m1", time.Second, now.Add(-time.Minute))
	for _, tc := range []struct {
		name   string
		st     cluster.Status
		alarms []maintenance.Alarm
		due    bool
		want   chore
		reason string
	}{
		{name: "nothing due", st: quiet, want: choreNone},
		{name: "CORRUPT: the member is replaced first, round or not", st: running, alarms: append(corrupt, nospace...), due: true, want: choreCorrupt},
		{name: "NOSPACE: recovered at once, whatever the schedule", st: quiet, alarms: nospace, want: choreNoSpace},
		{name: "the schedule is due", st: quiet, due: true, want: choreDefrag},
		{name: "NOSPACE while the former leader's round runs: it finishes the recovery", st: running, alarms: nospace, want: choreNone,
			reason: "m1's sidecar runs a round"},
		{name: "schedule due while another round runs: wait", st: running, due: true, want: choreNone, reason: "m1's sidecar runs a round"},
		{name: "a round in a stale report (its sidecar died): no longer holds back", st: status("m1", time.Minute, now.Add(-2*time.Minute)),
			alarms: nospace, want: choreNoSpace},
		{name: "its own round, as last reported, does not hold itself back", st: status("m0", time.Second, now.Add(-time.Minute)), due: true,
			want: choreDefrag},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := nextChore(tc.st, "m0", tc.alarms, tc.due, now)
			if got != tc.want || !strings.Contains(why, tc.reason) || (tc.reason == "" && why != "") {
				t.Fatalf("nextChore = %d (%q), want %d (reason with %q)", got, why, tc.want, tc.reason)
			}
		})
	}
}
