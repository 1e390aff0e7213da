// Package heapbound keeps a batch job's Go memory close to its live heap (a restore: mostly
// long-lived data, churning through the rest), where the default lets the heap grow to twice
// its live size.
package heapbound

import (
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// Bound is a heap bound: Floor bytes, or Percent above the live heap once that is larger.
type Bound struct {
	Floor   int64
	Percent int
}

// held is taken by the bound in force: a second Apply while one holds changes nothing (the
// first's settings serve both), so the settings put back are always the ones found.
var held sync.Mutex

// Apply makes the garbage collector keep the process's Go memory within b.Floor bytes, or
// within b.Percent above its live heap once that is larger, until stop is called, instead
// of letting the heap grow to twice the live heap (GOGC=100) as it does by default: a restore
// keeps mostly long-lived data (the replay's index of live keys, the deltas held) and churns
// through the rest, so the default's headroom was a third of its peak RSS. Below the floor the
// collector does not run at all, so a small heap costs no more collections than by default.
//
// It sets GOGC off and a soft memory limit (debug.SetMemoryLimit), which a goroutine raises
// after each collection to percent above the live heap (plus the runtime's own memory), so a
// heap that outgrows the floor is collected as with GOGC=percent, never continuously. stop
// puts the previous settings back. With GOGC or GOMEMLIMIT in the environment it does nothing:
// the user's settings win. It bounds the whole process: a long-running one (the sidecar)
// applies it only for the batch job's time.
func (b Bound) Apply() (stop func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" || !held.TryLock() {
		return func() {}
	}
	prevLimit := debug.SetMemoryLimit(b.Floor)
	prevPercent := debug.SetGCPercent(-1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		s := []metrics.Sample{
			{Name: "/gc/cycles/total:gc-cycles"},
			{Name: "/gc/heap/live:bytes"},
			{Name: "/memory/classes/total:bytes"},
			{Name: "/memory/classes/heap/released:bytes"},
			{Name: "/memory/classes/heap/objects:bytes"},
			{Name: "/memory/classes/heap/unused:bytes"},
			{Name: "/memory/classes/heap/free:bytes"},
		}
		var cycles uint64
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			metrics.Read(s)
			if c := s[0].Value.Uint64(); c == cycles {
				continue
			} else {
				cycles = c
			}
			live := s[1].Value.Uint64()
			// What the limit counts besides the heap's spans: stacks, the runtime's structures.
			other := s[2].Value.Uint64() - s[3].Value.Uint64() - s[4].Value.Uint64() - s[5].Value.Uint64() - s[6].Value.Uint64()
			debug.SetMemoryLimit(boundFor(b.Floor, b.Percent, live, other))
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		debug.SetGCPercent(prevPercent)
		debug.SetMemoryLimit(prevLimit)
		held.Unlock()
	}
}

// boundFor is Apply's memory limit for a live heap of live bytes, the runtime using other
// bytes besides.
func boundFor(floor int64, percent int, live, other uint64) int64 {
	want := float64(live)*(1+float64(percent)/100) + float64(other)
	if want >= math.MaxInt64 {
		return math.MaxInt64
	}
	return max(floor, int64(want))
}
