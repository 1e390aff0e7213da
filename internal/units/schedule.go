package units

import (
	"fmt"

	"github.com/robfig/cron/v3"
)

// ParseSchedule parses a standard cron schedule ("0 3 * * *", "@hourly", "@every 1h").
// The cron library panics on some input (a "TZ=" prefix with nothing after it): that is
// refused as an error like any other bad schedule, never a crash.
func ParseSchedule(s string) (sched cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			sched, err = nil, fmt.Errorf("unreadable schedule %q", s)
		}
	}()
	return cron.ParseStandard(s)
}
