package snapshotter

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/testutil"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func stores(t *testing.T) map[string]string {
	s3 := testutil.FakeS3(t, "backups")
	return map[string]string{
		"file": "file://" + t.TempDir(),
		"mem":  "mem://" + t.Name(),
		"s3":   s3.StoreURL("backups", "cluster-a"),
	}
}

// timelineOf is timeline 1 of the cluster of the member at ep.
func timelineOf(t *testing.T, cli *clientv3.Client, ep string) Timeline {
	t.Helper()
	st, err := cli.Status(context.Background(), ep)
	if err != nil {
		t.Fatal(err)
	}
	return Timeline{ID: 1, ClusterID: st.Header.ClusterId}
}

func openStore(t *testing.T, url string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// bothConnections runs f with the stream on a connection of its own (what a plain http
// member gets) and on the client's connection (TLS or authentication).
func bothConnections(t *testing.T, f func(t *testing.T)) {
	for _, own := range []bool{true, false} {
		name := map[bool]string{true: "own-connection", false: "client-connection"}[own]
		t.Run(name, func(t *testing.T) {
			defer func(was bool) { ownConnections = was }(ownConnections)
			ownConnections = own
			f(t)
		})
	}
}

func TestFullSnapshotRoundTrip(t *testing.T) { bothConnections(t, testFullSnapshotRoundTrip) }

func testFullSnapshotRoundTrip(t *testing.T) {
	_, cli, ep := testutil.EmbeddedEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < 100; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("/k/%03d", i), fmt.Sprintf("value-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for name, url := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := openStore(t, url)
			var progressed int64
			res, err := Full(ctx, Member{Client: cli, Endpoint: ep}, s, timelineOf(t, cli, ep), func(n int64) { progressed = n })
			if err != nil {
				t.Fatal(err)
			}
			if res.Revision < 101 || res.DBSize <= 0 || res.Size <= 0 || progressed != res.DBSize+32 {
				t.Fatalf("result %+v, progress %d", res, progressed)
			}
			// The stored object decodes to the database etcd streamed: open it and read its revision.
			hdr, or, err := backup.OpenObject(ctx, s, res.Key)
			if err != nil {
				t.Fatal(err)
			}
			defer or.Close()
			if hdr.Kind != backup.KindFull || hdr.Timeline != 1 || res.Timeline != 1 || hdr.FirstRev != res.Revision || hdr.ClusterID != uint64(res.ClusterID) {
				t.Fatalf("header %+v vs result %+v", hdr, res)
			}
			path := filepath.Join(t.TempDir(), "snapshot.db")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, or); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if got := dbRevision(t, path); got < res.Revision {
				t.Fatalf("database revision %d below the recorded lower bound %d", got, res.Revision)
			}
		})
	}
}

// dbRevision reads the newest revision from a snapshot file (etcd's sha256 trailer after the
// bbolt pages does not disturb bbolt).
func dbRevision(t *testing.T, path string) int64 {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(datadir.DBPath(dir), b[:len(b)-32], 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(datadir.DBPath(dir), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	st, err := datadir.Inspect(dir)
	if err != nil || !st.DBValid {
		t.Fatalf("snapshot database: %+v %v", st, err)
	}
	return st.Revision
}

func TestTrailerVerifierCatchesDamage(t *testing.T) {
	good := []byte("some database bytes that are long enough to matter.....")
	sum := sha256Sum(good)
	v := newTrailerVerifier(io.Discard, nil)
	_, _ = v.Write(append(append([]byte{}, good...), sum...))
	if err := v.verify(); err != nil {
		t.Fatalf("intact stream: %v", err)
	}
	bad := append([]byte{}, good...)
	bad[3] ^= 0xff
	v = newTrailerVerifier(io.Discard, nil)
	// Written in odd pieces to exercise the held-back tail.
	stream := append(bad, sum...)
	for i := 0; i < len(stream); i += 7 {
		_, _ = v.Write(stream[i:min(i+7, len(stream))])
	}
	if err := v.verify(); !errors.Is(err, errSnapshotHash) {
		t.Fatalf("damaged stream: %v", err)
	}
	v = newTrailerVerifier(io.Discard, nil)
	_, _ = v.Write([]byte("short"))
	if err := v.verify(); !errors.Is(err, errSnapshotHash) {
		t.Fatalf("short stream: %v", err)
	}
}

// TestDeltasAreGaplessAndExact writes a history with puts, overwrites, deletes and
// multi-key transactions, captures it as deltas and checks that the stored events are
// exactly the watch history: every revision once, in order, whole revisions per object.
func TestDeltasAreGaplessAndExact(t *testing.T) { bothConnections(t, testDeltasAreGaplessAndExact) }

func testDeltasAreGaplessAndExact(t *testing.T) {
	_, cli, ep := testutil.EmbeddedEtcd(t)
	s := openStore(t, "file://"+t.TempDir()) // fresh each run (a mem:// store lives as long as the process)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := cli.Status(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	from := st.Header.Revision + 1

	done := make(chan error, 1)
	var flushes []Delta
	var current atomic.Int64
	go func() {
		done <- RunDeltas(ctx, Member{Client: cli, Endpoint: ep}, s, from, DeltaOptions{
			Period: 50 * time.Millisecond, MaxBytes: 2048, Timeline: Timeline{ID: 1, ClusterID: st.Header.ClusterId},
			OnFlush:   func(d Delta) { flushes = append(flushes, d) },
			OnCurrent: func(rev int64, _ time.Time) { current.Store(rev) },
		})
	}()
	var last int64
	for i := 0; i < 200; i++ {
		k := fmt.Sprintf("/k/%d", i%20)
		switch i % 5 {
		case 0, 1:
			r, err := cli.Put(ctx, k, fmt.Sprintf("v%d-%s", i, string(make([]byte, 64))))
			if err != nil {
				t.Fatal(err)
			}
			last = r.Header.Revision
		case 2:
			r, err := cli.Delete(ctx, "/k/", clientv3.WithPrefix(), clientv3.WithLimit(0))
			if err != nil {
				t.Fatal(err)
			}
			if r.Deleted > 0 {
				last = r.Header.Revision
			}
		default:
			r, err := cli.Txn(ctx).Then(clientv3.OpPut(k+"a", "x"), clientv3.OpPut(k+"b", "y"), clientv3.OpDelete(k)).Commit()
			if err != nil {
				t.Fatal(err)
			}
			last = r.Header.Revision
		}
	}
	testutil.Eventually(t, 30*time.Second, "deltas current", func() error {
		if c := current.Load(); c < last {
			return fmt.Errorf("current %d < %d", c, last)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(flushes) < 2 {
		t.Fatalf("expected several delta objects with a 2 KiB limit, got %d", len(flushes))
	}

	// Read back every stored event and compare with etcd's own history.
	chain, err := backup.ListChain(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	for _, is := range chain.Check() {
		if is.Kind == backup.IssueHole || is.Kind == backup.IssueOverlap {
			t.Fatalf("chain issue: %s", is)
		}
	}
	var stored []*clientv3.Event
	prevLast := from - 1
	for _, o := range chain.Deltas {
		if o.FirstRev != prevLast+1 {
			t.Fatalf("delta %s does not continue from %d", o.Key, prevLast)
		}
		prevLast = o.LastRev
		_, or, err := backup.OpenObject(context.Background(), s, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		er := backup.NewEventReader(or, o.Key)
		for {
			ev, err := er.ReadEvent()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			stored = append(stored, (*clientv3.Event)(ev))
		}
		or.Close()
	}
	if prevLast != last {
		t.Fatalf("chain ends at %d, history at %d", prevLast, last)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	var want []*clientv3.Event
	for resp := range cli.Watch(wctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(from)) {
		want = append(want, resp.Events...)
		if n := len(want); n > 0 && want[n-1].Kv.ModRevision >= last {
			break
		}
	}
	if len(stored) != len(want) {
		t.Fatalf("stored %d events, history has %d", len(stored), len(want))
	}
	for i := range want {
		if want[i].Type != stored[i].Type || string(want[i].Kv.Key) != string(stored[i].Kv.Key) ||
			want[i].Kv.ModRevision != stored[i].Kv.ModRevision || want[i].Kv.CreateRevision != stored[i].Kv.CreateRevision ||
			want[i].Kv.Version != stored[i].Kv.Version || string(want[i].Kv.Value) != string(stored[i].Kv.Value) {
			t.Fatalf("event %d: stored %v, history %v", i, stored[i], want[i])
		}
	}
}

func TestDeltasReportCompaction(t *testing.T) { bothConnections(t, testDeltasReportCompaction) }

func testDeltasReportCompaction(t *testing.T) {
	_, cli, ep := testutil.EmbeddedEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rev int64
	for i := 0; i < 10; i++ {
		r, err := cli.Put(ctx, "/k", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	if _, err := cli.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	err := RunDeltas(ctx, Member{Client: cli, Endpoint: ep}, openStore(t, "mem://"+t.Name()), 2, DeltaOptions{Period: time.Second, Timeline: timelineOf(t, cli, ep)})
	if !errors.Is(err, ErrCompacted) {
		t.Fatalf("RunDeltas from a compacted revision: %v", err)
	}
}

// Revisions read but not stored yet when the history breaks off (compacted) are stored, not
// dropped: the gap before the next full snapshot is no wider than it must be.
func TestDeltasStoreWhatWasReadBeforeCompaction(t *testing.T) {
	_, cli, ep := testutil.EmbeddedEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put := func() int64 {
		r, err := cli.Put(ctx, "/k", "v")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	var read int64
	for i := 0; i < 5; i++ {
		read = put()
	}
	s := openStore(t, "mem://"+t.Name())
	var readUpTo atomic.Int64
	done := make(chan error, 1)
	go func() {
		// A period long enough that nothing is stored by time.
		done <- RunDeltas(ctx, Member{Client: cli, Endpoint: ep}, s, 2, DeltaOptions{Period: time.Hour, Timeline: timelineOf(t, cli, ep), OnRead: func(rev int64) { readUpTo.Store(rev) }})
	}()
	testutil.Eventually(t, 20*time.Second, "the first revisions read", func() error {
		if got := readUpTo.Load(); got < read {
			return fmt.Errorf("read up to %d of %d", got, read)
		}
		return nil
	})
	put()
	if _, err := cli.Compact(ctx, put()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrCompacted) {
		t.Fatalf("RunDeltas across a compaction: %v", err)
	}
	objs, err := s.List(ctx, backup.TimelineDir(1)+"delta/")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Key != backup.DeltaKey(1, 2, read) {
		t.Fatalf("stored %v, want one delta of revisions 2-%d", objs, read)
	}
}

// TestDeltasStoredWhenTheCaptureStops: revisions read but not yet due (a Period of an hour)
// are stored when the capture is told to stop, as a sidecar is when its pod is deleted.
func TestDeltasStoredWhenTheCaptureStops(t *testing.T) {
	_, cli, ep := testutil.EmbeddedEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last int64
	for i := 0; i < 5; i++ {
		r, err := cli.Put(ctx, "/k", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	s := openStore(t, "mem://"+t.Name())
	var readUpTo atomic.Int64
	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- RunDeltas(dctx, Member{Client: cli, Endpoint: ep}, s, 2, DeltaOptions{Period: time.Hour, Timeline: timelineOf(t, cli, ep),
			OnRead: func(rev int64) { readUpTo.Store(rev) }})
	}()
	testutil.Eventually(t, 20*time.Second, "the revisions read", func() error {
		if got := readUpTo.Load(); got < last {
			return fmt.Errorf("read up to %d of %d", got, last)
		}
		return nil
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("RunDeltas told to stop: %v", err)
	}
	objs, err := s.List(ctx, backup.TimelineDir(1)+"delta/")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Key != backup.DeltaKey(1, 2, last) {
		t.Fatalf("stored %v, want one delta of revisions 2-%d", objs, last)
	}
}

func TestDeltaBufferDetectsHole(t *testing.T) {
	payload, err := backup.NewPayloadBuffer(backup.KindDelta)
	if err != nil {
		t.Fatal(err)
	}
	d := &deltaBuffer{next: 10, payload: payload}
	add := func(rev int64) error {
		b, err := (&mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte("k"), ModRevision: rev}}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return d.add(rev, b)
	}
	if err := add(10); err != nil {
		t.Fatal(err)
	}
	if err := add(10); err != nil {
		t.Fatalf("second event of the same revision: %v", err)
	}
	if err := add(11); err != nil {
		t.Fatal(err)
	}
	if err := add(13); !errors.Is(err, ErrHole) {
		t.Fatalf("skipped revision 12: %v", err)
	}
	if err := add(9); !errors.Is(err, ErrHole) {
		t.Fatalf("revision 9 after 11: %v", err)
	}
}

func sha256Sum(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// A round that gets nothing in its time ends with an error that RunDeltas retries; one that
// read something ends where it is, and the next round goes on from there.
func TestDeltaRoundTimeLimit(t *testing.T) {
	_, cli, ep := testutil.EmbeddedEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last int64
	for i := 0; i < 50; i++ {
		r, err := cli.Put(ctx, fmt.Sprintf("/k/%d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	payload, err := backup.NewPayloadBuffer(backup.KindDelta)
	if err != nil {
		t.Fatal(err)
	}
	d := &deltaBuffer{opts: DeltaOptions{MaxBytes: 1 << 20, Timeline: timelineOf(t, cli, ep)}, next: 2, payload: payload}
	conn, own, err := memberConn(Member{Client: cli, Endpoint: ep}, watchWindow, watchReadBuffer)
	if err != nil {
		t.Fatal(err)
	}
	if own {
		defer conn.(io.Closer).Close()
	}
	s := openStore(t, "file://"+t.TempDir())
	_, complete, err := d.round(ctx, conn, s, time.Nanosecond)
	if complete || !resumable(err) || !errors.As(err, new(errRoundStalled)) || d.next != 2 {
		t.Fatalf("round with no time: complete %v, err %v, next %d", complete, err, d.next)
	}
	target, complete, err := d.round(ctx, conn, s, 10*time.Second)
	if err != nil || !complete || target != last || d.next != last+1 {
		t.Fatalf("round: target %d, complete %v, err %v, next %d; want target %d", target, complete, err, d.next, last)
	}
}
