package member

import (
	"testing"

	"go.uber.org/zap"
)

// TestCountersAtStart: a new sidecar's counters of failures exist at 0 before anything
// happened (an increase() sees the first one): each defragmentation round's trigger and
// result, each membership change's outcome, each backup step's failures.
func TestCountersAtStart(t *testing.T) {
	sc, err := New(Config{Name: "test", DataDir: t.TempDir(), View: staticView{}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	families, err := sc.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if m.GetCounter() == nil {
				continue
			}
			key := f.GetName()
			for _, l := range m.GetLabel() { // in the order of the label names
				key += "/" + l.GetValue()
			}
			got[key] = m.GetCounter().GetValue()
		}
	}
	for _, name := range []string{
		"steward_defrag_rounds_total/completed/schedule", "steward_defrag_rounds_total/failed/schedule",
		"steward_defrag_rounds_total/completed/NOSPACE", "steward_defrag_rounds_total/postponed/NOSPACE", "steward_defrag_rounds_total/failed/NOSPACE",
		"steward_defrag_reclaimed_bytes_total", "steward_corrupt_members_replaced_total", "steward_etcd_auth_errors_total",
		"steward_member_membership_changes_total/add_learner/failed", "steward_member_membership_changes_total/promote/failed",
		"steward_member_membership_changes_total/remove/ok", "steward_member_membership_changes_total/restore/failed",
		"steward_backup_failures_total/delta", "steward_backup_failures_total/drill", "steward_backup_delta_events_total",
	} {
		if v, ok := got[name]; !ok || v != 0 {
			t.Errorf("%s = %v (exported: %t), want 0 from the start", name, v, ok)
		}
	}
}
