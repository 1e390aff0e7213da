package backup

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)

func full(rev int64) Object {
	o, _ := ParseKey(FullKey(1, rev, t0.Add(time.Duration(rev)*time.Second)))
	return o
}

func delta(first, last int64) Object {
	o, _ := ParseKey(DeltaKey(1, first, last))
	return o
}

// fullOn and deltaOn are full and delta on timeline tl.
func fullOn(tl uint32, rev int64) Object {
	o, _ := ParseKey(FullKey(tl, rev, t0.Add(time.Duration(rev)*time.Second)))
	return o
}

func deltaOn(tl uint32, first, last int64) Object {
	o, _ := ParseKey(DeltaKey(tl, first, last))
	return o
}

func describe(o Object) string {
	tl := ""
	if o.Timeline != 1 {
		tl = fmt.Sprintf("%d:", o.Timeline)
	}
	if o.Kind == KindFull {
		return fmt.Sprintf("%sF%d", tl, o.FirstRev)
	}
	return fmt.Sprintf("%sD%d-%d", tl, o.FirstRev, o.LastRev)
}

func describeIssues(is []Issue) string {
	var parts []string
	for _, i := range is {
		var keys []string
		for _, k := range i.Keys {
			o, _ := ParseKey(k)
			keys = append(keys, describe(o))
		}
		parts = append(parts, fmt.Sprintf("%s %s %d-%d [%s]", i.Severity, i.Kind, i.From, i.To, strings.Join(keys, " ")))
	}
	return strings.Join(parts, "; ")
}

func TestChainCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		objs []Object
		want string
	}{
		{"empty", nil, ""},
		{"clean", []Object{full(100), delta(101, 200), delta(201, 300)}, ""},
		{"delta straddles the full snapshot", []Object{delta(51, 150), full(100), delta(151, 200)}, ""},
		{"full snapshot in the middle", []Object{full(100), delta(101, 200), full(150), delta(201, 300)}, ""},
		{"full snapshot at the end", []Object{full(100), delta(101, 200), full(200)}, ""},
		{"hole between deltas", []Object{full(100), delta(101, 200), delta(251, 300)},
			"error hole 201-250 [D101-200 D251-300]"},
		{"hole right after the full snapshot", []Object{full(100), delta(150, 200)},
			"error hole 101-149 [F100 D150-200]"},
		{"overlap", []Object{full(100), delta(101, 200), delta(150, 250)},
			"info overlap 150-200 [D101-200 D150-250]"},
		{"delta inside another", []Object{full(100), delta(101, 200), delta(120, 180), delta(201, 210)},
			"info overlap 120-180 [D101-200 D120-180]"},
		{"gap closed by a full snapshot", []Object{full(100), delta(101, 200), full(300), delta(301, 400)},
			"warning gap 201-299 [D101-200 F300]"},
		{"hole then a full snapshot", []Object{full(100), delta(101, 200), delta(301, 400), full(500), delta(501, 600)},
			"error hole 201-300 [D101-200 D301-400]; warning gap 401-499 [D301-400 F500]"},
		{"delta before the oldest full snapshot", []Object{delta(10, 50), full(100), delta(101, 120)},
			"info unused 10-50 [D10-50]"},
		{"deltas without a full snapshot", []Object{delta(10, 50), delta(51, 60)},
			"error no-full 10-60 [D10-50 D51-60]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := describeIssues(NewChain(tc.objs).Check())
			if got != tc.want {
				t.Fatalf("Check()\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestIssueMessagesNameObjects(t *testing.T) {
	c := NewChain([]Object{full(100), delta(101, 200), delta(251, 300)})
	is := c.Check()
	if len(is) != 1 {
		t.Fatalf("issues: %v", is)
	}
	msg := is[0].String()
	for _, want := range []string{"error:", "201-250", DeltaKey(1, 101, 200), DeltaKey(1, 251, 300), "take a full snapshot"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
}

func TestChainPlan(t *testing.T) {
	contiguous := []Object{full(100), full(300), delta(101, 200), delta(201, 300), delta(301, 400), delta(401, 500)}
	overlapping := []Object{full(100), delta(101, 200), delta(150, 260), delta(201, 250), delta(261, 300)}
	holes := []Object{full(100), delta(101, 200), delta(251, 300), full(400), delta(401, 450)}
	for _, tc := range []struct {
		name   string
		objs   []Object
		target int64
		want   string // plan as "F<rev> D<a-b>... -> target", or "error: <substring>"
	}{
		{"between full snapshots", contiguous, 250, "F100 D101-200 D201-300 -> 250"},
		{"exactly a full snapshot", contiguous, 300, "F300 -> 300"},
		{"after the newest full snapshot", contiguous, 450, "F300 D301-400 D401-500 -> 450"},
		{"latest", contiguous, 0, "F300 D301-400 D401-500 -> 500"},
		{"exactly the end", contiguous, 500, "F300 D301-400 D401-500 -> 500"},
		{"before the oldest full snapshot", contiguous, 50, "error: no full snapshot at or below revision 50: the oldest is at revision 100; restorable revisions: 100-500"},
		{"beyond the backups", contiguous, 600, "error: revision 600 is beyond the backups: from " + FullKey(1, 300, t0.Add(300*time.Second)) + " they reach revision 500; restorable revisions: 100-500"},
		{"overlaps take the furthest delta", overlapping, 280, "F100 D101-200 D150-260 D261-300 -> 280"},
		{"into a hole", holes, 220, "error: revisions 201-220 are missing from the backups after " + FullKey(1, 100, t0.Add(100*time.Second)) + ": cannot reach revision 220; restorable revisions: 100-200, 400-450"},
		{"across a hole", holes, 280, "error: revisions 201-250 are missing"},
		{"before a hole", holes, 150, "F100 D101-200 -> 150"},
		{"after a hole", holes, 420, "F400 D401-450 -> 420"},
		{"latest with holes", holes, 0, "F400 D401-450 -> 450"},
		{"delta straddles the full snapshot", []Object{full(100), delta(51, 150)}, 120, "F100 D51-150 -> 120"},
		{"no full snapshot", []Object{delta(1, 10)}, 5, "error: no full snapshot in the store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewChain(tc.objs).Plan(tc.target)
			var got string
			if err != nil {
				got = "error: " + err.Error()
				if !strings.HasPrefix(got, tc.want) {
					t.Fatalf("Plan(%d)\n got %s\nwant %s", tc.target, got, tc.want)
				}
				return
			}
			parts := []string{describe(p.Full)}
			for _, d := range p.Deltas {
				parts = append(parts, describe(d))
			}
			got = strings.Join(parts, " ") + fmt.Sprintf(" -> %d", p.Target)
			if got != tc.want {
				t.Fatalf("Plan(%d)\n got %s\nwant %s", tc.target, got, tc.want)
			}
		})
	}
}

func TestChainCoverage(t *testing.T) {
	for _, tc := range []struct {
		name string
		objs []Object
		want string
	}{
		{"none", nil, ""},
		{"one full", []Object{full(7)}, "7"},
		{"contiguous", []Object{full(100), delta(101, 200), full(150), delta(201, 300)}, "100-300"},
		{"hole", []Object{full(100), delta(101, 200), delta(251, 300), full(400), delta(401, 450)}, "100-200 400-450"},
		{"adjacent full", []Object{full(100), delta(101, 200), full(201), delta(202, 210)}, "100-210"},
		{"delta from the hole reaches past the next full", []Object{full(100), delta(101, 200), delta(250, 420), full(400), delta(421, 430)}, "100-200 400-430"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var parts []string
			for _, r := range NewChain(tc.objs).Coverage() {
				parts = append(parts, r.String())
			}
			if got := strings.Join(parts, " "); got != tc.want {
				t.Fatalf("Coverage() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestChainTimelinesNeverMix: each timeline is checked, covered and planned on its own. The
// same objects as one history would be overlaps, unused deltas and a mixed restore.
func TestChainTimelinesNeverMix(t *testing.T) {
	c := NewChain([]Object{
		fullOn(1, 100), deltaOn(1, 101, 200), deltaOn(1, 201, 300),
		fullOn(2, 150), deltaOn(2, 151, 180), // restarted below timeline 1's newest
		fullOn(3, 10), deltaOn(3, 11, 20), deltaOn(3, 31, 40), // another cluster, with a hole
	})
	if got := fmt.Sprint(c.Timelines()); got != "[1 2 3]" {
		t.Fatalf("Timelines() = %s", got)
	}
	if c.NewestTimeline() != 3 {
		t.Fatalf("NewestTimeline() = %d", c.NewestTimeline())
	}
	if got, want := describeIssues(c.Check()), "error hole 21-30 [3:D11-20 3:D31-40]"; got != want {
		t.Fatalf("Check()\n got %s\nwant %s", got, want)
	}
	if is := c.Check(); is[0].Timeline != 3 || !strings.Contains(is[0].String(), "timeline 3: ") {
		t.Fatalf("the issue does not name its timeline: %+v", is[0])
	}
	var parts []string
	for _, o := range c.Timeline(2).Objects() {
		parts = append(parts, describe(o))
	}
	if got := strings.Join(parts, " "); got != "2:F150 2:D151-180" {
		t.Fatalf("Timeline(2) = %s", got)
	}
	// The newest timeline by default: its coverage, newest revision and restore plan.
	if got := fmt.Sprint(c.Coverage()); got != "[10-20]" {
		t.Fatalf("Coverage() = %s", got)
	}
	if c.NewestRevision() != 40 {
		t.Fatalf("NewestRevision() = %d", c.NewestRevision())
	}
	if f, _ := c.Newest(); describe(f) != "3:F10" {
		t.Fatalf("Newest() = %s", describe(f))
	}
	p, err := c.Timeline(2).Plan(0)
	if err != nil || describe(p.Full) != "2:F150" || len(p.Deltas) != 1 || p.Target != 180 {
		t.Fatalf("Timeline(2).Plan(0) = %+v, %v", p, err)
	}
	p, err = c.Timeline(1).Plan(250)
	if err != nil || describe(p.Full) != "F100" || len(p.Deltas) != 2 {
		t.Fatalf("Timeline(1).Plan(250) = %+v, %v", p, err)
	}
	if _, err := c.Plan(100); err == nil {
		t.Fatal("Plan(100) on the newest timeline (from revision 10, reaching 20) did not fail")
	}
}
