package restore

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
)

// TestDeltaSourceKeepsEventsUntilReleased: the source yields every event above what is
// applied once, in order (the objects' overlap and the revisions below the start skipped),
// and the events a replay holds (those of the revision in progress, which may span several of
// the decoder's batches, and the next revision's first event) keep their keys and values until
// Release passes their revision, though the batches they were decoded into are used again.
// Objects held in memory and objects too large to hold (read again from the store) alike.
func TestDeltaSourceKeepsEventsUntilReleased(t *testing.T) {
	poisonReleased = true
	t.Cleanup(func() { poisonReleased = false })

	s, err := store.Open(testCtx(t), "mem://delta-source-release", store.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const after = 10
	var evs []*mvccpb.Event
	put := func(rev int64, key string, value []byte) *mvccpb.Event {
		ev := &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: value, CreateRevision: rev, ModRevision: rev, Version: 1}}
		evs = append(evs, ev)
		return ev
	}
	value := func(rev int64, n int) []byte { return bytes.Repeat([]byte{byte('a' + rev%26)}, n) }
	for rev := int64(5); rev <= 3001; rev++ {
		switch {
		case rev == 11 || rev == 3001:
			// Revisions of many events (transactions): more than a batch.
			for i := 0; i < 700; i++ {
				put(rev, fmt.Sprintf("/txn/%d/%04d", rev, i), value(rev, 100+i))
			}
		case rev%500 == 0:
			put(rev, fmt.Sprintf("/big/%d", rev), value(rev, 300<<10)) // more than a batch's bytes
		case rev%7 == 0:
			ev := put(rev, fmt.Sprintf("/k/%d", rev), value(rev, 10))
			ev.PrevKv = &mvccpb.KeyValue{Key: ev.Kv.Key, Value: []byte("before")} // decoded by copy
		default:
			put(rev, fmt.Sprintf("/k/%d", rev), value(rev, int(rev%300)))
		}
	}
	between := func(first, last int64) (out []*mvccpb.Event) {
		for _, ev := range evs {
			if r := ev.Kv.ModRevision; r >= first && r <= last {
				out = append(out, ev)
			}
		}
		return out
	}
	objs := []backup.Object{}
	for _, r := range [][2]int64{{5, 499}, {400, 1500}, {1501, 1501}, {1502, 3001}} { // the second overlaps the first
		key := backup.DeltaKey(1, r[0], r[1])
		writeDelta(t, s, key, r[0], r[1], between(r[0], r[1]))
		o, err := backup.ParseKey(key)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}

	for _, limit := range []int64{defaultDeltaMemory, 1} {
		t.Run(fmt.Sprintf("memory-%d", limit), func(t *testing.T) {
			src := newDeltaSource(testCtx(t), s, objs, after, limit)
			defer src.Close()
			type kept struct {
				ev   *mvccpb.Event
				want string
			}
			var holding []kept // what a replay holds: the revision in progress
			var got []string
			check := func() {
				for _, k := range holding {
					if s := eventString(k.ev); s != k.want {
						t.Fatalf("an event held since before its release changed: %.80s, was %.80s", s, k.want)
					}
				}
			}
			var cur int64
			for {
				ev, err := src.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				k := kept{ev, eventString(ev)}
				if rev := ev.Kv.ModRevision; rev != cur {
					// Revision cur is complete: Replay applies it, lets its events go and
					// releases them, holding the next revision's first event.
					check()
					done := cur
					holding, cur = append(holding[:0], k), rev
					src.Release(done)
					check()
				} else {
					holding = append(holding, k)
				}
				got = append(got, eventString(ev))
			}
			check()
			if src.StopErr() != nil {
				t.Fatalf("stopped: %v", src.StopErr())
			}
			var want []string
			for _, ev := range evs {
				if ev.Kv.ModRevision > after {
					want = append(want, eventString(ev))
				}
			}
			if len(got) != len(want) {
				t.Fatalf("%d events, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("event %d: %.80s, want %.80s", i, got[i], want[i])
				}
			}
			// The snapshot's revisions 5-10, and 400-499 of the second object.
			if tr := src.Trimmed(); tr != 6+100 {
				t.Fatalf("trimmed %d events, want %d", tr, 6+100)
			}
		})
	}
}

func eventString(ev *mvccpb.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q=%q c%d m%d v%d l%d", ev.Type, ev.Kv.Key, ev.Kv.Value, ev.Kv.CreateRevision, ev.Kv.ModRevision, ev.Kv.Version, ev.Kv.Lease)
	if ev.PrevKv != nil {
		fmt.Fprintf(&b, " prev %q=%q", ev.PrevKv.Key, ev.PrevKv.Value)
	}
	return b.String()
}
