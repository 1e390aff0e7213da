package backup_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/backup/backuptest"
	"github.com/etcd-steward/steward/internal/store"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestVersion1ObjectsStillRead: a store written before timelines (names without a timeline,
// headers of format version 1) is timeline 1, verifies, and is continued by objects of the
// current format on the same timeline.
func TestVersion1ObjectsStillRead(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(ctx, "mem://"+t.Name(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	db := backuptest.Snapshot(t, 10)
	write := func(key string, hdr backup.Header, fill func(w io.Writer) error) {
		t.Helper()
		if _, err := backup.WriteObject(ctx, s, key, hdr, func(w *backup.ObjectWriter) error { return fill(w) }); err != nil {
			t.Fatal(err)
		}
	}
	deltaOf := func(first, last int64) func(w io.Writer) error {
		return func(w io.Writer) error {
			ew := backup.NewEventWriter(w)
			for r := first; r <= last; r++ {
				if err := ew.WriteEvent(&mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte("/k"), Value: []byte("v"), CreateRevision: first, ModRevision: r, Version: r - first + 1}}); err != nil {
					return err
				}
			}
			return nil
		}
	}
	hdr := func(kind backup.Kind, first, last int64) backup.Header {
		return backup.Header{Kind: kind, Timeline: 1, Compression: backup.CompressionZstd, EtcdVersion: "3.5.17", ClusterID: 0xabc, FirstRev: first, LastRev: last, Created: at}
	}
	// Written as today, then turned into what format version 1 wrote.
	old := []string{backup.FullKey(1, 100, at), backup.DeltaKey(1, 101, 110)}
	write(old[0], hdr(backup.KindFull, 100, 100), func(w io.Writer) error { _, err := w.Write(db); return err })
	write(old[1], hdr(backup.KindDelta, 101, 110), deltaOf(101, 110))
	for _, key := range old {
		r, err := s.NewReader(ctx, key)
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
		v1Key, err := backuptest.Version1Key(key)
		if err != nil {
			t.Fatal(err)
		}
		w, err := s.NewWriter(ctx, v1Key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(v1); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	// A writer of today continues the timeline.
	write(backup.DeltaKey(1, 111, 120), hdr(backup.KindDelta, 111, 120), deltaOf(111, 120))

	c, err := backup.ListChain(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Foreign) != 0 || len(c.Fulls) != 1 || len(c.Deltas) != 2 || c.Fulls[0].Key != "v1/full/00000000000000000100-1748736000.snap.zst" {
		t.Fatalf("chain: %+v", c)
	}
	for _, o := range c.Objects() {
		if o.Timeline != 1 {
			t.Fatalf("%s is timeline %d, want 1", o.Key, o.Timeline)
		}
	}
	rep, err := backup.Verify(ctx, s, nil)
	if err != nil || !rep.OK() || rep.Objects != 3 || rep.Events != 20 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
	if cov := c.Coverage(); len(cov) != 1 || cov[0] != (backup.Range{From: 100, To: 120}) {
		t.Fatalf("coverage %v, want 100-120", cov)
	}
	tls, err := backup.ObserveTimelines(ctx, s, c)
	if err != nil || len(tls) != 1 || tls[0].Timeline != 1 || tls[0].ClusterID != 0xabc || tls[0].Newest.LastRev != 120 || tls[0].Disagrees != "" {
		t.Fatalf("ObserveTimelines = %+v, %v", tls, err)
	}
	h, or, err := backup.OpenObject(ctx, s, c.Deltas[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	or.Close()
	if h.Timeline != 1 || h.ClusterID != 0xabc || h.FirstRev != 101 || h.EtcdVersion != "3.5.17" {
		t.Fatalf("version 1 header read as %+v", h)
	}
}
