package agent

import (
	"strings"
	"testing"
)

// TestValidateSchedules: a bad --full-schedule or --drill-schedule is refused with the flag's
// name and the forms it takes (the sidecar calls this at start, before anything runs);
// defaults, cron expressions, descriptors and "off" for drills are taken.
func TestValidateSchedules(t *testing.T) {
	for _, tc := range []struct {
		full, drill string
		bad         string // the flag the error must name; "" = valid
	}{
		{"", "", ""},
		{"0 * * * *", "@daily", ""},
		{"@every 30m", DrillOff, ""},
		{"@hourly", "0 3 * * 1", ""},
		{"every hour", "", "--full-schedule"},
		{"61 * * * *", "", "--full-schedule"},
		{"", "@nightly", "--drill-schedule"},
		{"", "0 3 * *", "--drill-schedule"},
	} {
		err := ValidateSchedules(Config{FullSchedule: tc.full, DrillSchedule: tc.drill})
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("full %q drill %q: refused: %v", tc.full, tc.drill, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad) || !strings.Contains(err.Error(), "@every")):
			t.Errorf("full %q drill %q: %v; want an error naming %s and the accepted forms", tc.full, tc.drill, err, tc.bad)
		}
	}
}
