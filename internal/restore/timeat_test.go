package restore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
)

// modelObject is one backup object of a generated history: a full snapshot (first == last)
// or a delta, with the time its header records.
type modelObject struct {
	full        bool
	first, last int64
	created     time.Time
}

func (o modelObject) key() string {
	if o.full {
		return backup.FullKey(1, o.last, o.created)
	}
	return backup.DeltaKey(1, o.first, o.last)
}

// provenAt is RevisionAt's rule for one object: a delta proves its last revision from the
// time in its header, a full snapshot from the end of the second in its name.
func (o modelObject) provenAt(t time.Time) bool {
	if o.full {
		return !o.created.Truncate(time.Second).Add(time.Second).After(t)
	}
	return !o.created.After(t)
}

// handoverHistory generates one timeline written by a series of backup leaders. A leader
// learns that it lost leadership only at its next check, so the next one starts (from what
// the store holds then, sometimes with a full snapshot) while the old one still captures,
// and the old one's last delta may be stored late. Creation times then do not grow with
// revisions. Objects written twice under one name keep the later write, as a store does.
func handoverHistory(r *rand.Rand) []modelObject {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const span = 20_000 // ms
	// commits[i] is when revision i+1 was committed.
	var commits []int
	for ms := 0; ms < span+5_000; ms += 1 + r.IntN(150) {
		commits = append(commits, ms)
	}
	revAt := func(ms int) int64 {
		var n int64
		for _, c := range commits {
			if c <= ms {
				n++
			}
		}
		return n
	}
	byKey := map[string]modelObject{}
	put := func(o modelObject) {
		if old, ok := byKey[o.key()]; !ok || o.created.After(old.created) {
			byKey[o.key()] = o
		}
	}
	storedAt := func(ms int) int64 {
		var n int64
		for _, o := range byKey {
			if !o.created.After(at(ms)) {
				n = max(n, o.last)
			}
		}
		return n
	}
	put(modelObject{full: true, first: 1, last: 1, created: at(0)})
	for start := 10; start < span; {
		end := start + 300 + r.IntN(4_000)
		resume := storedAt(start)
		if r.IntN(3) == 0 { // the new leader's session begins with a full snapshot
			ms := start + 5 + r.IntN(50)
			rev := revAt(ms)
			put(modelObject{full: true, first: rev, last: rev, created: at(ms)})
			resume = max(resume, rev)
		}
		flush := start
		for {
			flush += 100 + r.IntN(500)
			if flush > end {
				break
			}
			if last := revAt(flush); last > resume {
				put(modelObject{first: resume + 1, last: last, created: at(flush)})
				resume = last
			}
		}
		if last := revAt(end); last > resume && r.IntN(2) == 0 { // stored late, or dropped
			put(modelObject{first: resume + 1, last: last, created: at(end + r.IntN(1_500))})
		}
		start = max(start+1, end-r.IntN(1_000)) // the next leader starts before this one stops
	}
	objs := make([]modelObject, 0, len(byKey))
	for _, o := range byKey {
		objs = append(objs, o)
	}
	return objs
}

// TestRevisionAtThroughLeaderHandovers checks RevisionAt against every object of generated
// histories: at every time, the newest revision that some object proves.
func TestRevisionAtThroughLeaderHandovers(t *testing.T) {
	ctx := testCtx(t)
	for seed := range 25 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 15))
			objs := handoverHistory(r)
			s := openStore(t, "file://"+t.TempDir())
			for _, o := range objs {
				kind := backup.KindDelta
				if o.full {
					kind = backup.KindFull
				}
				hdr := backup.Header{Kind: kind, Timeline: 1, Compression: backup.CompressionZstd, FirstRev: o.first, LastRev: o.last, Created: o.created}
				if _, err := backup.WriteObject(ctx, s, o.key(), hdr, func(w *backup.ObjectWriter) error {
					w.SetLastRev(o.last)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			c, err := backup.LoadTimeline(ctx, s, 1, func(backup.Object) bool { return true })
			if err != nil {
				t.Fatal(err)
			}
			var times []time.Time
			for range 30 {
				o := objs[r.IntN(len(objs))]
				tm := o.created
				if o.full {
					tm = tm.Truncate(time.Second).Add(time.Second)
				}
				times = append(times, tm.Add(time.Duration(r.IntN(3)-1)))
			}
			for _, tm := range times {
				var want int64
				for _, o := range objs {
					if o.provenAt(tm) {
						want = max(want, o.last)
					}
				}
				got, basis, err := RevisionAt(ctx, s, c, tm)
				switch {
				case want == 0 && !errors.Is(err, ErrOutOfRange):
					t.Fatalf("RevisionAt(%s) = %d, %v; nothing proves a revision by then: want ErrOutOfRange", tm.Format(time.StampMicro), got, err)
				case want != 0 && (err != nil || got != want || basis.LastRev != want):
					t.Fatalf("RevisionAt(%s) = %d (from %s), %v; want %d", tm.Format(time.StampMicro), got, basis.Key, err, want)
				}
			}
		})
	}
}
