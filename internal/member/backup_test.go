package member

import (
	"strings"
	"testing"
	"time"
)

func TestBackupReady(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	const period = 5 * time.Second
	current := func(ago time.Duration, wasReady bool) BackupStatus {
		return BackupStatus{Leader: true, Ready: wasReady, Timeline: 2, CurrentRevision: 42, CurrentAt: now.Add(-ago)}
	}
	tests := []struct {
		name   string
		s      BackupStatus
		ready  bool
		reason string // a substring of the reason when not ready
	}{
		{"not the leader", BackupStatus{CurrentAt: now}, false, "does not lead"},
		{"no timeline chosen yet", BackupStatus{Leader: true}, false, "own timeline in the store is not known yet"},
		{"the member's history restarted: ready at once false, whatever was stored before",
			BackupStatus{Leader: true, Ready: true, TimelineReason: "delta capture: the member's history restarted: the member's revision 90 is below revision 100"},
			false, "not known yet: delta capture: the member's history restarted: the member's revision 90 is below revision 100"},
		{"nothing stored on the member's timeline", BackupStatus{Leader: true, Timeline: 3, TimelineReason: "timeline 3 starts: the store holds no timeline of cluster a"},
			false, "nothing of the member's history is stored on timeline 3 yet (timeline 3 starts: the store holds no timeline of cluster a)"},
		{"current", current(time.Second, false), true, ""},
		{"between 2 and 3 periods, was ready: stays ready", current(12*time.Second, true), true, ""},
		{"between 2 and 3 periods, was not ready: stays not ready", current(12*time.Second, false), false, "not yet back within 10s"},
		{"older than 3 periods", current(20*time.Second, true), false, "revision 42 on timeline 2 was the member's revision 20s ago, more than 15s"},
		{"older than 3 periods, with the last error", func() BackupStatus { s := current(time.Minute, true); s.LastError = "store down"; return s }(), false, "last error: store down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready, reason := backupReady(tt.s, now, period)
			if ready != tt.ready || (ready && reason != "") || (!ready && !strings.Contains(reason, tt.reason)) {
				t.Fatalf("backupReady = %t %q; want %t and a reason with %q", ready, reason, tt.ready, tt.reason)
			}
		})
	}
}
