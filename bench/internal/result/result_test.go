package result

import "testing"

func TestDirection(t *testing.T) {
	for _, c := range []struct {
		row  Row
		want string
	}{
		{Row{Unit: "MiB/s"}, HigherBetter},
		{Row{Unit: "revisions/s"}, HigherBetter},
		{Row{Unit: "puts/s"}, HigherBetter},
		{Row{Unit: "s"}, LowerBetter},
		{Row{Unit: "ms"}, LowerBetter},
		{Row{Unit: "MiB"}, LowerBetter},
		{Row{Unit: "CPU ms"}, LowerBetter},
		{Row{Unit: "req"}, LowerBetter},
		{Row{Unit: "%"}, LowerBetter},
		{Row{Unit: "widgets"}, ""},
		{Row{Unit: ""}, ""},
		// An explicit direction wins over the unit.
		{Row{Unit: "%", Better: HigherBetter}, HigherBetter},
		{Row{Unit: "MiB/s", Better: LowerBetter}, LowerBetter},
		{Row{Unit: "widgets"}.WithBetter(HigherBetter), HigherBetter},
	} {
		if got := c.row.Direction(); got != c.want {
			t.Errorf("%+v: Direction() = %q, want %q", c.row, got, c.want)
		}
	}
}
