package heapbound

import (
	"math"
	"runtime/debug"
	"testing"
)

// TestApply: Apply turns GOGC off under a memory limit of the floor, and stop puts the
// previous settings back; with GOGC or GOMEMLIMIT in the environment, or a bound already in
// force, it changes nothing.
func TestApply(t *testing.T) {
	settings := func() (percent int, limit int64) {
		percent = debug.SetGCPercent(-1)
		debug.SetGCPercent(percent)
		return percent, debug.SetMemoryLimit(-1) // a negative limit only reads it
	}
	p0, l0 := settings()

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	b := Bound{Floor: 40 << 20, Percent: 25}
	stop := b.Apply()
	if p, l := settings(); p != -1 || l != 40<<20 {
		t.Errorf("bounded: GOGC %d, memory limit %d; want off and %d", p, l, 40<<20)
	}
	// A second bound while the first holds (two restores at once in one sidecar) leaves it.
	Bound{Floor: 80 << 20, Percent: 10}.Apply()()
	if p, l := settings(); p != -1 || l != 40<<20 {
		t.Errorf("after a second bound's stop: GOGC %d, memory limit %d; want the first's, off and %d", p, l, 40<<20)
	}
	stop()
	if p, l := settings(); p != p0 || l != l0 {
		t.Errorf("after stop: GOGC %d, memory limit %d; want %d and %d as before", p, l, p0, l0)
	}

	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Setenv(env, "200")
		stop := b.Apply()
		if p, l := settings(); p != p0 || l != l0 {
			t.Errorf("with %s set: GOGC %d, memory limit %d; want them untouched", env, p, l)
		}
		stop()
		t.Setenv(env, "")
	}
}

func TestBoundFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, other uint64
		want        int64
	}{
		{live: 10 * mib, other: 8 * mib, want: 40 * mib},          // the floor
		{live: 40 * mib, other: 8 * mib, want: 58 * mib},          // 25% above the live heap, plus the runtime's
		{live: math.MaxUint64 / 2, other: 0, want: math.MaxInt64}, // no overflow
	} {
		if got := boundFor(40*mib, 25, c.live, c.other); got != c.want {
			t.Errorf("boundFor(live %d, other %d) = %d, want %d", c.live, c.other, got, c.want)
		}
	}
}
