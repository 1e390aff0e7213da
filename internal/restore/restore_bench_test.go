package restore

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
)

// BenchmarkRestoreDeltas restores a file:// store holding a full snapshot of `keys` keys and
// then `puts` puts of new 256-byte keys in delta objects of 5,000 revisions (the first delta
// also holds the snapshot's own revisions, which the restore skips); one put in ten is on a
// lease the snapshot lacks, so the missing-lease pass has work. Sizes from
// STEWARD_BENCH_RESTORE_KEYS and STEWARD_BENCH_RESTORE_PUTS (default 20,000 and 200,000):
//
//	go test -run '^$' -bench RestoreDeltas -benchtime 3x -benchmem ./internal/restore/
func BenchmarkRestoreDeltas(b *testing.B) {
	keys, puts := envInt("STEWARD_BENCH_RESTORE_KEYS", 20_000), envInt("STEWARD_BENCH_RESTORE_PUTS", 200_000)
	s, want := benchHistory(b, keys, puts)
	dir := b.TempDir()
	peer := freeURL(b)
	var res Result
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		o := Options{
			Store: s, DataDir: filepath.Join(dir, "m"+strconv.Itoa(i)), Name: "restored",
			InitialCluster: "restored=" + peer, PeerURLs: []string{peer}, MissingLeaseTTL: DefaultMissingLeaseTTL,
		}
		var err error
		if res, err = Restore(context.Background(), o); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(o.DataDir)
		b.StartTimer()
	}
	if res.Revision != want || res.Revisions != int64(puts) || res.LeasesCreated != 1 {
		b.Fatalf("restored revision %d (%d revisions replayed, %d leases created), want %d (%d, 1)", res.Revision, res.Revisions, res.LeasesCreated, want, puts)
	}
	b.ReportMetric(float64(res.Revisions)*float64(b.N)/b.Elapsed().Seconds(), "revisions/s")
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// benchHistory writes the history of BenchmarkRestoreDeltas into a new file:// store and returns
// it with its last revision.
func benchHistory(b *testing.B, keys, puts int) (*store.Store, int64) {
	b.Helper()
	ctx := testCtx(b)
	m := startMember(b, filepath.Join(b.TempDir(), "source.etcd"), "source", freeURL(b))
	rnd := rand.New(rand.NewPCG(1, 2))
	value := func() []byte {
		v := make([]byte, 256)
		for i := range v {
			v[i] = byte('a' + rnd.IntN(26))
		}
		return v
	}
	// The snapshot's keys, one revision each, as the first delta records them.
	var events []*mvccpb.Event
	for i := 0; i < keys; i += 100 {
		var ops []clientv3.Op
		for j := i; j < min(i+100, keys); j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/bench/%08d", j), string(value())))
		}
		if _, err := m.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	wch := m.cli.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(2))
	for len(events) < keys {
		resp := <-wch
		if err := resp.Err(); err != nil {
			b.Fatal(err)
		}
		for _, ev := range resp.Events {
			events = append(events, (*mvccpb.Event)(ev))
		}
	}
	snapRev := events[len(events)-1].Kv.ModRevision

	s, err := store.Open(ctx, "file://"+filepath.Join(b.TempDir(), "store"), store.Options{Create: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	rc, err := m.cli.Snapshot(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	created := time.Now().UTC()
	hdr := backup.Header{Kind: backup.KindFull, Timeline: 1, Compression: backup.CompressionZstd, EtcdVersion: "3.6.16",
		FirstRev: snapRev, LastRev: snapRev, Created: created}
	if _, err := backup.WriteObject(ctx, s, backup.FullKey(1, snapRev, created), hdr, func(w *backup.ObjectWriter) error {
		_, err := io.Copy(w, rc)
		return err
	}); err != nil {
		b.Fatal(err)
	}

	const missingLease = 0x5757 // granted after the snapshot: no backup holds it
	rev := snapRev
	for j := 0; j < puts; j++ {
		rev++
		kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "/registry/bench/%08d", keys+j), Value: value(), CreateRevision: rev, ModRevision: rev, Version: 1}
		if j%10 == 0 {
			kv.Lease = missingLease
		}
		events = append(events, &mvccpb.Event{Type: mvccpb.PUT, Kv: kv})
	}
	for i := 0; i < len(events); {
		end := min(i+5000, len(events))
		if i == 0 {
			end = min(keys+5000, len(events)) // across the snapshot
		}
		first, last := events[i].Kv.ModRevision, events[end-1].Kv.ModRevision
		hdr := backup.Header{Kind: backup.KindDelta, Timeline: 1, Compression: backup.CompressionZstd, EtcdVersion: "3.6.16",
			FirstRev: first, LastRev: last, Created: created.Add(time.Duration(i) * time.Millisecond)}
		if _, err := backup.WriteObject(ctx, s, backup.DeltaKey(1, first, last), hdr, func(w *backup.ObjectWriter) error {
			ew := backup.NewEventWriter(w)
			for _, ev := range events[i:end] {
				if err := ew.WriteEvent(ev); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		i = end
	}
	m.stop()
	return s, rev
}
