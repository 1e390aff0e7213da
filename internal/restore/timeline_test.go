package restore

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/backup/backuptest"
)

// TestTimelineAt: a time resolves to the newest timeline whose range holds it; after every
// range, to the newest that began before it.
func TestTimelineAt(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	delta := func(tl uint32, first, last int64, created time.Time) backup.Object {
		o, err := backup.ParseKey(backup.DeltaKey(tl, first, last))
		if err != nil {
			t.Fatal(err)
		}
		o.Created, o.ModTime = created, created
		return o
	}
	full := func(tl uint32, rev int64, created time.Time) backup.Object {
		o, err := backup.ParseKey(backup.FullKey(tl, rev, created))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	// Timeline 1 from 10:00 to 11:00; timeline 2 (a restore to an older revision) from
	// 10:30 to 11:30; timeline 3 (another cluster) from 12:00 to 12:10; timeline 4 has no
	// full snapshot.
	c := backup.NewChain([]backup.Object{
		full(1, 100, at(0)), delta(1, 101, 200, at(30)), delta(1, 201, 300, at(60)),
		full(2, 150, at(30)), delta(2, 151, 400, at(90)),
		full(3, 5, at(120)), delta(3, 6, 10, at(130)),
		delta(4, 1, 2, at(100)),
	})
	for _, tc := range []struct {
		name string
		t    time.Time
		want uint32
	}{
		{"before timeline 2 began: timeline 1", at(20), 1},
		{"in the second timeline 2 began: not yet begun", at(30).Add(500 * time.Millisecond), 1},
		{"both hold it: the newer, whose history it was", at(45), 2},
		{"after timeline 1 ended, in timeline 2", at(80), 2},
		{"between timelines 2 and 3: after timeline 2's end", at(100), 2},
		{"in timeline 3", at(125), 3},
		{"after every timeline: the newest that began", at(200), 3},
		{"before any backup: the newest (the restore says no backup was made by then)", at(-10), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TimelineAt(backup.IndexOf(c), tc.t); got != tc.want {
				t.Fatalf("TimelineAt(%s) = %d, want %d", tc.t.Format(time.TimeOnly), got, tc.want)
			}
		})
	}
}

// TestRestoreVersion1Objects: a store written before timelines (names without a timeline,
// headers of format version 1) restores exactly, as timeline 1.
func TestRestoreVersion1Objects(t *testing.T) {
	c := getChain(t)
	src := openStore(t, c.storeURL)
	s := openStore(t, "mem://"+t.Name())
	ctx := testCtx(t)
	infos, err := src.List(ctx, backup.LayoutPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		r, err := src.NewReader(ctx, info.Key)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		v1, err := backuptest.Version1(obj)
		if err != nil {
			t.Fatal(err)
		}
		key, err := backuptest.Version1Key(info.Key)
		if err != nil {
			t.Fatal(err)
		}
		w, err := s.NewWriter(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(v1); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	o := restoreOptions(t, s)
	res, err := Restore(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Timeline != 1 || res.Revision != c.last || !strings.HasPrefix(res.Full.Key, "v1/full/") {
		t.Fatalf("restore of version 1 objects: %+v", res)
	}
	checkRestored(t, c, o, c.last)
}

// TestRestoreTimelineSelection: --timeline reads that timeline only; one the store does not
// hold is an error naming those it holds.
func TestRestoreTimelineSelection(t *testing.T) {
	c := getChain(t)
	s := openStore(t, c.storeURL)
	o := restoreOptions(t, s)
	o.Timeline, o.DryRun = 1, true
	res, err := Restore(testCtx(t), o)
	if err != nil || res.Timeline != 1 || res.Revision != c.last {
		t.Fatalf("dry run of timeline 1: %+v, %v", res, err)
	}
	o.Timeline = 2
	if _, err := Restore(testCtx(t), o); !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), "holds no timeline 2; its timelines: [1]") {
		t.Fatalf("restore of a timeline the store does not hold: %v", err)
	}
}
