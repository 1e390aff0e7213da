package restore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/testutil"
)

// restoreOptions restores from s into a new dir for member "restored".
func restoreOptions(t *testing.T, s *store.Store) Options {
	t.Helper()
	peer := freeURL(t)
	return Options{
		Store:               s,
		DataDir:             filepath.Join(t.TempDir(), "member.etcd"),
		Name:                "restored",
		InitialCluster:      "restored=" + peer,
		InitialClusterToken: "steward-test",
		PeerURLs:            []string{peer},
	}
}

// checkRestored starts a member on the restored dir: its revision and every key (value,
// create_revision, mod_revision, version, lease) must be the source's at rev, and it must take
// a write at rev+1.
func checkRestored(t *testing.T, c *chainFixture, o Options, rev int64) {
	t.Helper()
	want, ok := c.states[rev]
	if !ok {
		t.Fatalf("the fixture has no source state at revision %d", rev)
	}
	m := startMember(t, o.DataDir, o.Name, o.PeerURLs[0])
	defer m.stop()
	resp, err := m.cli.Get(testCtx(t), "", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read the restored member: %v", err)
	}
	if resp.Header.Revision != rev {
		t.Fatalf("restored member is at revision %d, want %d", resp.Header.Revision, rev)
	}
	if diff := diffKVs(want, resp.Kvs); diff != "" {
		t.Fatalf("restored key space differs from the source at revision %d:\n%s", rev, diff)
	}
	put, err := m.cli.Put(testCtx(t), "after-restore", "x")
	if err != nil || put.Header.Revision != rev+1 {
		t.Fatalf("put on the restored member: %v, %v; want revision %d", put, err, rev+1)
	}
}

// checkUntouched asserts that a failed restore left no trace: DataDir as it was (absent, or
// the empty dir it was), no .part dir, nothing beside them.
func checkUntouched(t *testing.T, o Options, existedEmpty bool) {
	t.Helper()
	entries, err := os.ReadDir(o.DataDir)
	switch {
	case existedEmpty && err != nil:
		t.Fatalf("data dir %s was removed: %v", o.DataDir, err)
	case existedEmpty && len(entries) > 0:
		t.Fatalf("data dir %s was written: %v", o.DataDir, entries)
	case !existedEmpty && !errors.Is(err, os.ErrNotExist):
		t.Fatalf("data dir %s exists after a failed restore (%v)", o.DataDir, err)
	}
	if _, err := os.Stat(o.DataDir + partSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s%s left behind (%v)", o.DataDir, partSuffix, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(o.DataDir), ".*")); len(left) > 0 {
		t.Fatalf("files left behind: %v", left)
	}
}

// TestRestoreMatchesSource restores the captured chain to the newest revision and to points
// in the middle (either side of the second full snapshot, at the source's compaction) and
// starts a member on each: revision and keys must be the source's at the target.
func TestRestoreMatchesSource(t *testing.T) {
	c := getChain(t)
	s := openStore(t, c.storeURL)
	f1, f2 := c.fulls[0], c.fulls[1]
	cases := []struct {
		name   string
		target int64
		full   int
	}{
		{"newest", 0, 1},
		{"first-full", f1.Revision, 0},
		{"after-first-full", f1.Revision + 1, 0},
		{"source-compaction", c.compactRev, 0},
		{"before-second-full", f2.Revision - 1, 0},
		{"second-full", f2.Revision, 1},
		{"middle-after-second-full", (f2.Revision + c.last) / 2, 1},
		{"newest-explicit", c.last, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := restoreOptions(t, s)
			o.ToRevision = tc.target
			if tc.name == "newest" {
				// An existing empty data dir is fine; the restore is renamed over it.
				if err := os.Mkdir(o.DataDir, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			var phases []Phase
			var replayDone, replayTotal int64
			o.Progress = func(p Progress) {
				if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
					phases = append(phases, p.Phase)
				}
				if p.Phase == PhaseReplay {
					replayDone, replayTotal = p.Done, p.Total
				}
			}
			res, err := Restore(testCtx(t), o)
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			want := tc.target
			if want == 0 {
				want = c.last
			}
			full := c.fulls[tc.full]
			if res.Target != want || res.Revision != want || res.Partial || res.StartRevision != full.Revision ||
				res.Full.Key != full.Key || res.Revisions != want-full.Revision || res.BumpedRevision != 0 {
				t.Fatalf("result %+v: want target and revision %d from %s at %d", res, want, full.Key, full.Revision)
			}
			if uint64(res.ClusterID) != c.clusterID || res.Bytes < res.Full.Size || res.DBSize <= 0 || res.AsOf.IsZero() {
				t.Fatalf("result %+v: want cluster ID %x, bytes read, db size, as-of time", res, c.clusterID)
			}
			if want > full.Revision && (replayTotal != want-full.Revision || replayDone != replayTotal) {
				t.Fatalf("replay progress ended at %d/%d, want %d", replayDone, replayTotal, want-full.Revision)
			}
			if phases[0] != PhaseDownload || phases[len(phases)-1] != PhaseFinish {
				t.Fatalf("progress phases %v", phases)
			}
			if entries, _ := os.ReadDir(filepath.Dir(o.DataDir)); len(entries) != 1 {
				t.Fatalf("beside the data dir after success: %v, want nothing (no .part dir, no other file)", entries)
			}
			checkRestored(t, c, o, want)
		})
	}
}

// TestRestoreFromS3 restores through the S3 wire protocol, to the newest revision and to a time.
func TestRestoreFromS3(t *testing.T) {
	c := getChain(t)
	s3 := testutil.FakeS3(t, "backups")
	s := copyStore(t, c.storeURL, openStore(t, s3.StoreURL("backups", "cluster-a")))
	o := restoreOptions(t, s)
	res, err := Restore(testCtx(t), o)
	if err != nil {
		t.Fatalf("Restore from S3: %v", err)
	}
	if res.Revision != c.last {
		t.Fatalf("restored revision %d, want %d", res.Revision, c.last)
	}
	checkRestored(t, c, o, c.last)

	chain := listChain(t, s)
	d := chain.Deltas[len(chain.Deltas)/2]
	hdr, _ := readEvents(t, s, d.Key)
	o = restoreOptions(t, s)
	o.ToTime = hdr.Created
	res, err = Restore(testCtx(t), o)
	if err != nil {
		t.Fatalf("Restore to a time from S3: %v", err)
	}
	if want := expectedAt(t, s, chain, hdr.Created); res.Revision != want || want < d.LastRev {
		t.Fatalf("restored revision %d for time %s, want %d (delta %s ends at %d)", res.Revision, hdr.Created, want, d.Key, d.LastRev)
	}
	checkRestored(t, c, o, res.Revision)
}

// expectedAt is RevisionAt's rule applied to every object, reading every header.
func expectedAt(t *testing.T, s *store.Store, chain backup.Chain, at time.Time) int64 {
	t.Helper()
	var rev int64
	for _, f := range chain.Fulls {
		if !f.Created.Add(time.Second).After(at) {
			rev = max(rev, f.FirstRev)
		}
	}
	for _, d := range chain.Deltas {
		hdr, _ := readEvents(t, s, d.Key)
		if !hdr.Created.After(at) {
			rev = max(rev, d.LastRev)
		}
	}
	return rev
}

// TestRestoreToTime: --to-time restores the newest revision stored in an object created at or
// before the time, and says which object dates it.
func TestRestoreToTime(t *testing.T) {
	c := getChain(t)
	s := openStore(t, c.storeURL)
	chain := listChain(t, s)
	created := func(d backup.Object) time.Time {
		hdr, _ := readEvents(t, s, d.Key)
		return hdr.Created
	}
	type point struct {
		name  string
		at    time.Time
		start bool // start a member and compare the keys
	}
	var points []point
	for i, frac := range []int{0, 1, 2, 3} {
		d := chain.Deltas[frac*(len(chain.Deltas)-1)/3]
		at := created(d)
		points = append(points,
			point{fmt.Sprintf("at-delta-%d", frac), at, i%2 == 0},
			point{fmt.Sprintf("just-before-delta-%d", frac), at.Add(-time.Nanosecond), i%2 == 1})
	}
	f2 := chain.Fulls[len(chain.Fulls)-1]
	points = append(points, point{"second-full-second-ended", f2.Created.Add(time.Second), true})
	points = append(points, point{"after-everything", time.Now().Add(time.Hour), false})
	for _, p := range points {
		t.Run(p.name, func(t *testing.T) {
			want := expectedAt(t, s, chain, p.at)
			o := restoreOptions(t, s)
			o.ToTime = p.at
			res, err := Restore(testCtx(t), o)
			if want == 0 {
				// Nothing proves any revision existed yet (the first full snapshot's second
				// had not ended).
				if !errors.Is(err, ErrOutOfRange) {
					t.Fatalf("Restore to %s, before any backup counts: err %v, want ErrOutOfRange", p.at, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Restore to %s: %v", p.at, err)
			}
			if res.Target != want || res.Revision != want || res.TargetTime == nil || !res.TargetTime.Equal(p.at) || res.TargetBasis == "" {
				t.Fatalf("result %+v: want revision %d for %s", res, want, p.at)
			}
			if p.name == "after-everything" && want != c.last {
				t.Fatalf("a time after every backup gives %d, want the newest revision %d", want, c.last)
			}
			// A time after the newest backup says so: later writes are in no backup.
			newest := chain.Objects()[len(chain.Objects())-1]
			if afterEnd := want == chain.NewestRevision() && p.at.After(newest.Created); afterEnd != strings.Contains(res.TargetAfterEnd, "after the newest backup") {
				t.Fatalf("time %s (newest backup %s stored at %s): warning %q", p.at, newest.Key, newest.Created, res.TargetAfterEnd)
			}
			if p.start {
				checkRestored(t, c, o, want)
			}
		})
	}
	t.Run("before-everything", func(t *testing.T) {
		o := restoreOptions(t, s)
		o.ToTime = chain.Fulls[0].Created.Add(-time.Hour)
		_, err := Restore(testCtx(t), o)
		if !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), chain.Fulls[0].Key) {
			t.Fatalf("err %v, want ErrOutOfRange naming the oldest full snapshot", err)
		}
		checkUntouched(t, o, false)
	})
}

// deltasAfter returns the chain's deltas that start after rev.
func deltasAfter(chain backup.Chain, rev int64) []backup.Object {
	var out []backup.Object
	for _, d := range chain.Deltas {
		if d.FirstRev > rev {
			out = append(out, d)
		}
	}
	return out
}

// TestRestoreDamagedObject: a damaged delta or full snapshot is never applied, the error names
// it, and nothing is left behind; --allow-partial restores up to the damaged delta.
func TestRestoreDamagedObject(t *testing.T) {
	c := getChain(t)
	s := copyStore(t, c.storeURL, nil)
	chain := listChain(t, s)
	after := deltasAfter(chain, c.fulls[1].Revision)
	bad := after[len(after)/2]
	b := readObject(t, s, bad.Key)
	b[len(b)/2] ^= 0xff
	writeObject(t, s, bad.Key, b)

	o := restoreOptions(t, s)
	if err := os.Mkdir(o.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := Restore(testCtx(t), o)
	if !errors.Is(err, backup.ErrCorrupt) || !strings.Contains(err.Error(), bad.Key) {
		t.Fatalf("err %v, want ErrCorrupt naming %s", err, bad.Key)
	}
	checkUntouched(t, o, true)

	o = restoreOptions(t, s)
	o.AllowPartial = true
	res, err := Restore(testCtx(t), o)
	if err != nil {
		t.Fatalf("Restore with --allow-partial: %v", err)
	}
	if !res.Partial || res.Revision != bad.FirstRev-1 || res.Missing == nil || res.Missing.From != bad.FirstRev ||
		!strings.Contains(res.Reason, bad.Key) {
		t.Fatalf("partial result %+v: want revision %d, missing from %d, reason naming %s", res, bad.FirstRev-1, bad.FirstRev, bad.Key)
	}
	checkRestored(t, c, o, bad.FirstRev-1)

	// A revision before the damage restores exactly without --allow-partial.
	o = restoreOptions(t, s)
	o.ToRevision = bad.FirstRev - 1
	if res, err := Restore(testCtx(t), o); err != nil || res.Revision != bad.FirstRev-1 || res.Partial {
		t.Fatalf("restore before the damage: %+v, %v", res, err)
	}

	t.Run("full-snapshot", func(t *testing.T) {
		s := copyStore(t, c.storeURL, nil)
		key := c.fulls[1].Key
		b := readObject(t, s, key)
		b[len(b)/3] ^= 0x01
		writeObject(t, s, key, b)
		o := restoreOptions(t, s)
		_, err := Restore(testCtx(t), o)
		if !errors.Is(err, backup.ErrCorrupt) || !strings.Contains(err.Error(), key) {
			t.Fatalf("err %v, want ErrCorrupt naming %s", err, key)
		}
		checkUntouched(t, o, false)
		// Revisions before it come from the older full snapshot.
		o = restoreOptions(t, s)
		o.ToRevision = c.fulls[1].Revision - 1
		if res, err := Restore(testCtx(t), o); err != nil || res.Full.Key != c.fulls[0].Key {
			t.Fatalf("restore below the damaged full snapshot: %+v, %v", res, err)
		}
	})
}

// TestRestoreHole: a missing delta is a hole; the error names the missing revisions, and
// --allow-partial restores up to it.
func TestRestoreHole(t *testing.T) {
	c := getChain(t)
	s := copyStore(t, c.storeURL, nil)
	chain := listChain(t, s)
	after := deltasAfter(chain, c.fulls[1].Revision)
	gone := after[len(after)/3]
	if err := s.Delete(testCtx(t), gone.Key); err != nil {
		t.Fatal(err)
	}
	missing := fmt.Sprintf("revisions %d-%d", gone.FirstRev, gone.LastRev)
	if gone.FirstRev == gone.LastRev {
		missing = fmt.Sprintf("revisions %d ", gone.FirstRev)
	}

	o := restoreOptions(t, s)
	_, err := Restore(testCtx(t), o)
	if !errors.Is(err, ErrMissingRevisions) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "--allow-partial") {
		t.Fatalf("err %v, want ErrMissingRevisions naming %q and --allow-partial", err, missing)
	}
	checkUntouched(t, o, false)

	// Inside the hole, too.
	o = restoreOptions(t, s)
	o.ToRevision = gone.LastRev
	if _, err := Restore(testCtx(t), o); !errors.Is(err, ErrMissingRevisions) {
		t.Fatalf("restore into the hole: err %v, want ErrMissingRevisions", err)
	}

	// A dry run says the same without writing.
	o = restoreOptions(t, s)
	o.DryRun, o.AllowPartial = true, true
	res, err := Restore(testCtx(t), o)
	if err != nil || !res.Partial || res.Revision != gone.FirstRev-1 || res.Target != c.last || *res.Missing != (backup.Range{From: gone.FirstRev, To: gone.LastRev}) {
		t.Fatalf("dry run over the hole: %+v, %v", res, err)
	}
	checkUntouched(t, o, false)

	o = restoreOptions(t, s)
	o.AllowPartial = true
	res, err = Restore(testCtx(t), o)
	if err != nil {
		t.Fatalf("Restore with --allow-partial: %v", err)
	}
	if !res.Partial || res.Revision != gone.FirstRev-1 || *res.Missing != (backup.Range{From: gone.FirstRev, To: gone.LastRev}) {
		t.Fatalf("partial result %+v: want revision %d, missing %d-%d", res, gone.FirstRev-1, gone.FirstRev, gone.LastRev)
	}
	checkRestored(t, c, o, gone.FirstRev-1)

	t.Run("before-a-newer-full", func(t *testing.T) {
		// A hole before the second full snapshot only affects targets before it.
		s := copyStore(t, c.storeURL, nil)
		early := deltasAfter(listChain(t, s), c.fulls[0].Revision)[2]
		if early.LastRev >= c.fulls[1].Revision {
			t.Fatalf("fixture: the chain must hold more than 3 deltas between the full snapshots; the third ends at %d, the second full is at %d", early.LastRev, c.fulls[1].Revision)
		}
		if err := s.Delete(testCtx(t), early.Key); err != nil {
			t.Fatal(err)
		}
		o := restoreOptions(t, s)
		if res, err := Restore(testCtx(t), o); err != nil || res.Revision != c.last {
			t.Fatalf("restore to the newest revision past an older hole: %+v, %v", res, err)
		}
		o = restoreOptions(t, s)
		o.ToRevision = c.fulls[1].Revision - 1
		if _, err := Restore(testCtx(t), o); !errors.Is(err, ErrMissingRevisions) {
			t.Fatalf("restore across the hole: err %v, want ErrMissingRevisions", err)
		}
	})
}

// TestRestoreOutOfRange: targets before the oldest full snapshot or after the newest delta get
// an error with the restorable revisions.
func TestRestoreOutOfRange(t *testing.T) {
	c := getChain(t)
	s := openStore(t, c.storeURL)
	for _, target := range []int64{c.fulls[0].Revision - 1, c.last + 1} {
		o := restoreOptions(t, s)
		o.ToRevision = target
		_, err := Restore(testCtx(t), o)
		want := fmt.Sprintf("restorable revisions: %d-%d", c.fulls[0].Revision, c.last)
		if !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), want) {
			t.Fatalf("target %d: err %v, want ErrOutOfRange with %q", target, err, want)
		}
		checkUntouched(t, o, false)
	}
	empty := openStore(t, "mem://restore-empty")
	if _, err := Restore(testCtx(t), restoreOptions(t, empty)); !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), "no backups") {
		t.Fatalf("empty store: err %v", err)
	}
}

// writeDelta stores events as a delta object named by their revisions, framing them by hand so
// that a test can also store them out of order.
func writeDelta(t *testing.T, s *store.Store, key string, first, last int64, evs []*mvccpb.Event) {
	t.Helper()
	hdr := backup.Header{Kind: backup.KindDelta, Timeline: 1, Compression: backup.CompressionZstd, FirstRev: first, LastRev: last, Created: time.Now()}
	_, err := backup.WriteObject(testCtx(t), s, key, hdr, func(w *backup.ObjectWriter) error {
		for _, ev := range evs {
			b, err := ev.Marshal()
			if err != nil {
				return err
			}
			if _, err := w.Write(binary.AppendUvarint(nil, uint64(len(b)))); err != nil {
				return err
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// eventsIn returns the events of the chain's deltas with revisions in [from, to].
func eventsIn(t *testing.T, s *store.Store, chain backup.Chain, from, to int64) []*mvccpb.Event {
	t.Helper()
	var out []*mvccpb.Event
	for _, d := range chain.Deltas {
		if d.LastRev < from || d.FirstRev > to {
			continue
		}
		_, evs := readEvents(t, s, d.Key)
		for _, ev := range evs {
			if ev.Kv.ModRevision >= from && ev.Kv.ModRevision <= to {
				out = append(out, ev)
			}
		}
	}
	return out
}

// TestRestoreOverlapsAndDisorder: overlapping deltas (two writers around a hand-off) are
// trimmed to an exact result; events out of order, or not matching the object's name, are
// damage naming the object.
func TestRestoreOverlapsAndDisorder(t *testing.T) {
	c := getChain(t)
	after := func(s *store.Store) []backup.Object {
		ds := deltasAfter(listChain(t, s), c.fulls[1].Revision)
		for i := 1; i+2 < len(ds); i++ {
			if ds[i].FirstRev < ds[i].LastRev && ds[i+2].FirstRev < ds[i+2].LastRev {
				return ds[i:]
			}
		}
		t.Fatal("fixture: the chain must hold a run of multi-revision deltas after the second full snapshot")
		return nil
	}

	t.Run("overlap", func(t *testing.T) {
		s := copyStore(t, c.storeURL, nil)
		ds := after(s)
		// An object from the last revision of ds[0] to the first of ds[2]: it overlaps both.
		first, last := ds[0].LastRev, ds[2].FirstRev
		writeDelta(t, s, backup.DeltaKey(1, first, last), first, last, eventsIn(t, s, listChain(t, s), first, last))
		o := restoreOptions(t, s)
		res, err := Restore(testCtx(t), o)
		if err != nil {
			t.Fatalf("Restore over overlapping deltas: %v", err)
		}
		var used bool
		for _, d := range res.Deltas {
			used = used || d.Key == backup.DeltaKey(1, first, last)
		}
		if !used || res.Trimmed == 0 || res.Revision != c.last {
			t.Fatalf("result %+v: want the overlapping delta used, events trimmed, revision %d", res, c.last)
		}
		checkRestored(t, c, o, c.last)
	})

	t.Run("events-out-of-order", func(t *testing.T) {
		s := copyStore(t, c.storeURL, nil)
		d := after(s)[0]
		_, evs := readEvents(t, s, d.Key)
		evs[0], evs[len(evs)-1] = evs[len(evs)-1], evs[0]
		writeDelta(t, s, d.Key, d.FirstRev, d.LastRev, evs)
		o := restoreOptions(t, s)
		_, err := Restore(testCtx(t), o)
		if !errors.Is(err, backup.ErrCorrupt) || !strings.Contains(err.Error(), d.Key) {
			t.Fatalf("err %v, want ErrCorrupt naming %s", err, d.Key)
		}
		checkUntouched(t, o, false)
	})

	t.Run("name-claims-more", func(t *testing.T) {
		s := copyStore(t, c.storeURL, nil)
		d := after(s)[0]
		_, evs := readEvents(t, s, d.Key)
		var short []*mvccpb.Event
		for _, ev := range evs {
			if ev.Kv.ModRevision < d.LastRev {
				short = append(short, ev)
			}
		}
		writeDelta(t, s, d.Key, d.FirstRev, d.LastRev, short)
		o := restoreOptions(t, s)
		_, err := Restore(testCtx(t), o)
		if !errors.Is(err, backup.ErrCorrupt) || !strings.Contains(err.Error(), d.Key) {
			t.Fatalf("err %v, want ErrCorrupt naming %s", err, d.Key)
		}
		checkUntouched(t, o, false)
	})
}

// TestRestoreFallsBackToOlderFull: a full snapshot whose name is below the target but whose
// database is past it (writes during the snapshot) is skipped for the older one.
func TestRestoreFallsBackToOlderFull(t *testing.T) {
	c := getChain(t)
	s := copyStore(t, c.storeURL, nil)
	f2 := c.fulls[1]
	// The second full snapshot again, named 3 revisions lower, as if taken during writes.
	hdr, or, err := backup.OpenObject(testCtx(t), s, f2.Key)
	if err != nil {
		t.Fatal(err)
	}
	hdr.FirstRev, hdr.LastRev = f2.Revision-3, f2.Revision-3
	early := backup.FullKey(1, hdr.FirstRev, hdr.Created)
	_, err = backup.WriteObject(testCtx(t), s, early, hdr, func(w *backup.ObjectWriter) error {
		_, err := io.Copy(w, or)
		return err
	})
	or.Close()
	if err != nil {
		t.Fatal(err)
	}
	o := restoreOptions(t, s)
	o.ToRevision = f2.Revision - 2
	res, err := Restore(testCtx(t), o)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if len(res.SkippedFulls) != 1 || res.SkippedFulls[0] != early || res.Full.Key != c.fulls[0].Key || res.Revision != f2.Revision-2 {
		t.Fatalf("result %+v: want %s skipped, %s used, revision %d", res, early, c.fulls[0].Key, f2.Revision-2)
	}
	checkRestored(t, c, o, f2.Revision-2)
	// At or above its true revision, it is used.
	o = restoreOptions(t, s)
	o.ToRevision = f2.Revision + 1
	if res, err := Restore(testCtx(t), o); err != nil || len(res.SkippedFulls) != 0 || res.StartRevision != f2.Revision {
		t.Fatalf("restore above its true revision: %+v, %v", res, err)
	}
}

// TestRestoreNeverOverwrites: a non-empty data dir or a leftover .part dir stops the restore
// before anything is read, and stays as it was.
func TestRestoreNeverOverwrites(t *testing.T) {
	c := getChain(t)
	s := openStore(t, c.storeURL)

	o := restoreOptions(t, s)
	keep := filepath.Join(o.DataDir, "member", "keep")
	if err := os.MkdirAll(filepath.Dir(keep), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keep, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Restore(testCtx(t), o)
	if !errors.Is(err, ErrDataDirNotEmpty) {
		t.Fatalf("err %v, want ErrDataDirNotEmpty", err)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "precious" {
		t.Fatalf("existing data touched: %q, %v", b, err)
	}
	if _, err := os.Stat(o.DataDir + partSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf(".part dir created: %v", err)
	}

	o = restoreOptions(t, s)
	part := filepath.Join(o.DataDir+partSuffix, "leftover")
	if err := os.MkdirAll(part, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = Restore(testCtx(t), o)
	if err == nil || !strings.Contains(err.Error(), o.DataDir+partSuffix) {
		t.Fatalf("err %v, want it to name the leftover .part dir", err)
	}
	if _, err := os.Stat(part); err != nil {
		t.Fatalf("leftover .part dir was touched: %v", err)
	}
	if _, err := os.Stat(o.DataDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data dir created: %v", err)
	}
}

// TestRestoreNoSpace restores onto a small tmpfs: one without room for the snapshot, and one
// with room for it but not for etcd's WAL. The error says so and nothing is left on the file
// system. Needs root (mount).
func TestRestoreNoSpace(t *testing.T) {
	c := getChain(t)
	s := openStore(t, c.storeURL)
	// The snapshot's size, from a read of the newest full snapshot.
	full := listChain(t, s).Fulls[1]
	_, or, err := backup.OpenObject(testCtx(t), s, full.Key)
	if err != nil {
		t.Fatal(err)
	}
	dbSize, err := io.Copy(io.Discard, or)
	or.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"download", dbSize / 2},
		{"wal", dbSize + 1<<20}, // the snapshot fits, the 64 MiB WAL does not
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			size := (tc.size + 4095) / 4096 * 4096
			if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
				t.Skipf("cannot mount a tmpfs to fill (needs root): %v", err)
			}
			t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
			o := restoreOptions(t, s)
			o.DataDir = filepath.Join(dir, "member.etcd")
			_, err := Restore(testCtx(t), o)
			if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "free space") {
				t.Fatalf("err %v, want ErrNoSpace saying to free space", err)
			}
			checkUntouched(t, o, false)
			if entries, _ := os.ReadDir(dir); len(entries) > 0 {
				t.Fatalf("left on the full file system: %v", entries)
			}
			// Space is only free once no file on it is open (etcd leaks one on this path until
			// its finalizer runs; Restore triggers a GC for it).
			testutil.Eventually(t, 10*time.Second, "files on the full file system closed", func() error {
				runtime.GC()
				fds, _ := os.ReadDir("/proc/self/fd")
				for _, fd := range fds {
					if l, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); strings.HasPrefix(l, dir) {
						return fmt.Errorf("still open: %s", l)
					}
				}
				return nil
			})
		})
	}
}

// TestRestoreDryRun reports the objects, revisions and bytes without writing.
func TestRestoreDryRun(t *testing.T) {
	c := getChain(t)
	s := openStore(t, c.storeURL)
	chain := listChain(t, s)
	o := Options{Store: s, DataDir: filepath.Join(t.TempDir(), "member.etcd"), DryRun: true, ToRevision: c.last - 5}
	res, err := Restore(testCtx(t), o)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	want := chain.Fulls[1].Size
	var reach int64 = c.fulls[1].Revision
	for _, d := range res.Deltas {
		want += d.Size
		if d.FirstRev > reach+1 {
			t.Fatalf("dry run lists %s after revision %d: not contiguous", d.Key, reach)
		}
		reach = max(reach, d.LastRev)
	}
	if !res.DryRun || res.Full.Key != c.fulls[1].Key || res.Bytes != want || res.Target != c.last-5 || reach < c.last-5 || len(res.Deltas) == 0 {
		t.Fatalf("dry run result %+v", res)
	}
	checkUntouched(t, o, false)
}

// TestRestoreBumpRevision: --bump-revision --mark-compacted, for Kubernetes.
func TestRestoreBumpRevision(t *testing.T) {
	c := getChain(t)
	s := openStore(t, c.storeURL)
	o := restoreOptions(t, s)
	o.BumpRevision = 1000
	if _, err := Restore(testCtx(t), o); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Fatalf("bump without mark-compacted: err %v", err)
	}
	o.MarkCompacted = true
	res, err := Restore(testCtx(t), o)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if res.Revision != c.last || res.BumpedRevision != c.last+1000 {
		t.Fatalf("result %+v: want revision %d bumped to %d", res, c.last, c.last+1000)
	}
	m := startMember(t, o.DataDir, o.Name, o.PeerURLs[0])
	resp, err := m.cli.Get(testCtx(t), "", clientv3.WithPrefix())
	if err != nil || resp.Header.Revision != c.last+1000 {
		t.Fatalf("bumped member: %v, %v", resp, err)
	}
	if diff := diffKVs(c.states[c.last], resp.Kvs); diff != "" {
		t.Fatalf("keys after the bump differ:\n%s", diff)
	}
	if _, err := m.cli.Get(testCtx(t), "k0", clientv3.WithRev(c.last)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("read below the bumped revision: err %v, want compacted", err)
	}
}

// TestRestoreStreamsLargeDeltas: deltas too large for the prefetch memory are verified in a
// first read and streamed in a second, with the same result.
func TestRestoreStreamsLargeDeltas(t *testing.T) {
	c := getChain(t)
	s := openStore(t, c.storeURL)
	o := restoreOptions(t, s)
	o.DeltaMemory = 1
	o.ToRevision = c.fulls[1].Revision - 1 // from the first full snapshot: many deltas
	res, err := Restore(testCtx(t), o)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	var once int64
	for _, d := range res.Deltas {
		once += d.Size
	}
	if res.Bytes-res.Full.Size < 2*once-res.Deltas[len(res.Deltas)-1].Size {
		t.Fatalf("read %d delta bytes, want about twice %d (every delta read twice)", res.Bytes-res.Full.Size, once)
	}
	checkRestored(t, c, o, o.ToRevision)
}

func TestRestoreValidatesOptions(t *testing.T) {
	s := openStore(t, "mem://restore-validate")
	base := func() Options {
		return Options{Store: s, DataDir: filepath.Join(t.TempDir(), "d"), Name: "m", InitialCluster: "m=http://127.0.0.1:2380", PeerURLs: []string{"http://127.0.0.1:2380"}}
	}
	cases := map[string]func(o *Options){
		"both targets":        func(o *Options) { o.ToRevision, o.ToTime = 5, time.Now() },
		"no data dir":         func(o *Options) { o.DataDir = "" },
		"name not in cluster": func(o *Options) { o.Name = "other" },
		"peer URL mismatch":   func(o *Options) { o.PeerURLs = []string{"http://127.0.0.1:2390"} },
		"bad peer URL":        func(o *Options) { o.PeerURLs = []string{"::"} },
		"mark without bump":   func(o *Options) { o.MarkCompacted = true },
		"negative revision":   func(o *Options) { o.ToRevision = -1 },
	}
	for name, mutate := range cases {
		o := base()
		mutate(&o)
		if _, err := Restore(testCtx(t), o); err == nil || !strings.HasPrefix(err.Error(), "restore:") {
			t.Errorf("%s: err %v, want a validation error", name, err)
		}
		checkUntouched(t, o, false)
	}
}

// TestRestoreCancelledCleansUp: Ctrl-C (a cancelled context) in the download or in the replay
// removes everything the restore made.
func TestRestoreCancelledCleansUp(t *testing.T) {
	c := getChain(t)
	s := openStore(t, c.storeURL)
	for _, phase := range []Phase{PhaseDownload, PhaseReplay} {
		t.Run(string(phase), func(t *testing.T) {
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			o := restoreOptions(t, s)
			o.ToRevision = c.fulls[1].Revision - 1 // from the first full snapshot, with deltas
			o.Progress = func(p Progress) {
				if p.Phase == phase {
					cancel()
				}
			}
			_, err := Restore(ctx, o)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v, want context.Canceled", err)
			}
			checkUntouched(t, o, false)
		})
	}
}
