package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/robfig/cron/v3"

	stewardtest "github.com/etcd-steward/steward/internal/testutil"
)

func TestNextDrill(t *testing.T) {
	daily, err := cron.ParseStandard("@daily")
	if err != nil {
		t.Fatal(err)
	}
	day := func(d, h, m int) time.Time { return time.Date(2026, 11, d, h, m, 0, 0, time.Local) }
	const off = 17 * time.Minute
	for _, tc := range []struct {
		name        string
		offset      time.Duration
		last, since time.Time
		want        time.Time
	}{
		{"no drill yet: the first scheduled time after the session began", 0, time.Time{}, day(23, 10, 0), day(24, 0, 0)},
		{"a drill before this session: counted from the session's start, not at once", 0, day(20, 0, 0), day(23, 10, 0), day(24, 0, 0)},
		{"a drill in this session: the next scheduled time after it", 0, day(24, 0, 0), day(23, 10, 0), day(25, 0, 0)},
		{"a drill that ran late: the next scheduled time after it", 0, day(24, 5, 0), day(23, 10, 0), day(25, 0, 0)},
		{"offset: the slot plus the offset", off, time.Time{}, day(23, 10, 0), day(24, 0, 17)},
		{"offset: a session that began between the slot and its offset drills at that slot's offset", off, time.Time{}, day(24, 0, 5), day(24, 0, 17)},
		{"offset: after a drill at its offset, the next slot's", off, day(24, 0, 17), day(23, 10, 0), day(25, 0, 17)},
		{"offset: after a drill that ran late, the next slot's", off, day(24, 3, 0), day(23, 10, 0), day(25, 0, 17)},
	} {
		if got := nextDrill(daily, tc.offset, tc.last, tc.since); !got.Equal(tc.want) {
			t.Errorf("%s: next drill %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestDrillOffset: a store's drills run a fixed time after each scheduled one, below 30
// minutes and a quarter of the schedule's period; stores get offsets spread over that range.
func TestDrillOffset(t *testing.T) {
	for _, tc := range []struct {
		schedule string
		limit    time.Duration
	}{
		{"@daily", 30 * time.Minute},
		{"0 3 * * *", 30 * time.Minute},
		{"@hourly", 15 * time.Minute},
		{"@every 1s", 250 * time.Millisecond},
		{"*/4 * * * *", time.Minute},
	} {
		sched, err := cron.ParseStandard(tc.schedule)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[time.Duration]bool{}
		for i := range 200 {
			url := fmt.Sprintf("s3://backups/cluster-%d?region=eu-west-1", i)
			off := drillOffset(sched, url)
			if off < 0 || off >= tc.limit {
				t.Fatalf("%s, %s: offset %s outside [0, %s)", tc.schedule, url, off, tc.limit)
			}
			if again := drillOffset(sched, url); again != off {
				t.Fatalf("%s, %s: offset %s then %s", tc.schedule, url, off, again)
			}
			seen[off.Truncate(tc.limit/20)] = true
		}
		if len(seen) < 15 {
			t.Errorf("%s: 200 stores fall in %d of 20 slices of the offset range", tc.schedule, len(seen))
		}
	}
}

// TestSidecarDrill: on a real 3-member cluster whose three sidecars back up into one store,
// the backup leader's sidecar drills the timeline it writes on schedule and reports an equal
// HashKV in its status and metrics; the others do not drill.
func TestSidecarDrill(t *testing.T) {
	ctx := context.Background()
	ms := stewardtest.Cluster(t, 3)
	s := openTestStore(t)
	var agents []*Agent
	for _, m := range ms {
		a, _ := startBackupsWith(t, Config{DrillSchedule: "@every 1s", DrillScratchDir: t.TempDir()}, s, m.Endpoint)
		agents = append(agents, a)
	}
	for i := range 30 {
		if _, err := ms[i%3].Client.Put(ctx, fmt.Sprintf("/k/%d", i%4), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := ms[0].Client.Get(ctx, "/k/0")
	if err != nil {
		t.Fatal(err)
	}
	written := resp.Header.Revision
	var leader *Agent
	stewardtest.Eventually(t, 60*time.Second, fmt.Sprintf("a drill at revision %d or later on the backup leader", written), func() error {
		for _, a := range agents {
			st := a.Status()
			if !st.Leader {
				continue
			}
			d := st.LastDrill
			if d.Time.IsZero() || d.Revision < written {
				return fmt.Errorf("newest drill: %+v", d)
			}
			if !d.OK || d.Result != "ok" || d.Timeline != 1 || d.Duration <= 0 {
				return fmt.Errorf("drill failed: %+v", d)
			}
			leader = a
			return nil
		}
		return fmt.Errorf("no backup leader")
	})
	if got := testutil.ToFloat64(leader.metrics.drillOK); got != 1 {
		t.Errorf("steward_backup_drill_success = %v, want 1", got)
	}
	if got := testutil.ToFloat64(leader.metrics.drillRevision); got < float64(written) {
		t.Errorf("steward_backup_drill_revision = %v, want %d or more", got, written)
	}
	// GET /v1/backup carries it.
	body, err := json.Marshal(StatusResponse{Enabled: true, BackupStatus: leader.Status()})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		LastDrill struct {
			Timeline uint32 `json:"timeline"`
			Revision int64  `json:"revision"`
			Time     string `json:"time"`
			Duration int64  `json:"duration"`
			OK       bool   `json:"ok"`
			Result   string `json:"result"`
		} `json:"lastDrill"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if d := got.LastDrill; d.Timeline != 1 || d.Revision < written || d.Time == "" || d.Duration <= 0 || !d.OK || d.Result != "ok" {
		t.Errorf("GET /v1/backup lastDrill: %s", body)
	}
	for i, a := range agents {
		if st := a.Status(); !st.Leader && !st.LastDrill.Time.IsZero() {
			t.Errorf("member %d is not the backup leader and drilled: %+v", i, st.LastDrill)
		}
	}
}
