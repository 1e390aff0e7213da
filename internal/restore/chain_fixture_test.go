package restore

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/store"
)

// chainFixture is a backup chain captured from a real etcd while a history ran on it: two full
// snapshots (Full) and continuous deltas (RunDeltas) in a mem:// store, and the source's key
// space at every revision from the first full snapshot to the last revision.
type chainFixture struct {
	storeURL   string
	fulls      []snapshotter.FullResult
	compactRev int64 // the source compacted here, between the two full snapshots
	last       int64
	clusterID  uint64
	states     map[int64][]*mvccpb.KeyValue
	err        error
}

var (
	chainOnce    sync.Once
	theChain     chainFixture
	chainDirOnce string
)

func getChain(t *testing.T) *chainFixture {
	t.Helper()
	chainOnce.Do(func() {
		dir, err := os.MkdirTemp("", "steward-restore-chain-")
		if err != nil {
			theChain.err = err
			return
		}
		chainDirOnce = dir
		theChain.err = fmt.Errorf("chain fixture build did not finish (see the first failing test)")
		theChain.err = buildChain(t, dir, &theChain)
	})
	if theChain.err != nil {
		t.Fatalf("build chain fixture: %v", theChain.err)
	}
	return &theChain
}

func buildChain(t *testing.T, dir string, f *chainFixture) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	src := startMember(t, filepath.Join(dir, "source"), "source", freeURL(t))
	defer src.stop()
	f.storeURL = "mem://restore-chain-fixture"
	s, err := store.Open(ctx, f.storeURL, store.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	m := snapshotter.Member{Client: src.cli, Endpoint: src.clientURL}
	h := &history{cli: src.cli, rnd: rand.New(rand.NewSource(2))}
	f.states = map[int64][]*mvccpb.KeyValue{}
	recorded := int64(0)
	record := func() error {
		rev, err := h.currentRev(ctx)
		if err != nil {
			return err
		}
		for r := max(recorded+1, f.fulls[0].Revision); r <= rev; r++ {
			resp, err := src.cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(r))
			if err != nil {
				return fmt.Errorf("read source at revision %d: %w", r, err)
			}
			f.states[r] = resp.Kvs
		}
		recorded = rev
		return nil
	}

	// Before the first full snapshot: history, a compaction, and a key deleted before the
	// snapshot that is put again after it.
	if err := h.grant(ctx); err != nil {
		return err
	}
	if err := h.steps(ctx, 40); err != nil {
		return err
	}
	rev, err := h.currentRev(ctx)
	if err != nil {
		return err
	}
	if _, err := src.cli.Compact(ctx, rev-10, clientv3.WithCompactPhysical()); err != nil {
		return err
	}
	if _, err := src.cli.Put(ctx, "reborn", "1"); err != nil {
		return err
	}
	if _, err := src.cli.Delete(ctx, "reborn"); err != nil {
		return err
	}
	st, err := src.cli.Status(ctx, src.clientURL)
	if err != nil {
		return err
	}
	tl := snapshotter.Timeline{ID: 1, ClusterID: st.Header.ClusterId}
	full, err := snapshotter.Full(ctx, m, s, tl, nil)
	if err != nil {
		return fmt.Errorf("first full snapshot: %w", err)
	}
	f.fulls = append(f.fulls, full)
	f.clusterID = uint64(full.ClusterID)

	var current atomic.Int64
	notify := make(chan struct{}, 1)
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	deltaErr := make(chan error, 1)
	go func() {
		deltaErr <- snapshotter.RunDeltas(dctx, m, s, full.Revision+1, snapshotter.DeltaOptions{
			// Deltas end at 400 bytes (many deltas between the full snapshots) or every 100 ms
			// (several revisions each while a put takes well under that): the shapes the tests need.
			Period: 100 * time.Millisecond, MaxBytes: 400, Timeline: tl, EtcdVersion: "3.6.16",
			OnCurrent: func(rev int64, _ time.Time) {
				current.Store(rev)
				select {
				case notify <- struct{}{}:
				default:
				}
			},
		})
	}()
	waitDeltas := func(rev int64) error {
		deadline := time.After(30 * time.Second)
		for current.Load() < rev {
			select {
			case <-notify:
			case err := <-deltaErr:
				return fmt.Errorf("delta capture stopped: %v", err)
			case <-deadline:
				return fmt.Errorf("deltas reached revision %d, want %d after 30s", current.Load(), rev)
			}
		}
		return nil
	}

	if _, err := src.cli.Put(ctx, "reborn", "2"); err != nil {
		return err
	}
	if err := h.grant(ctx); err != nil {
		return err
	}
	if err := h.steps(ctx, 100); err != nil {
		return err
	}
	if err := record(); err != nil {
		return err
	}
	// A compaction after the deltas have everything (else the watch would be compacted).
	if err := waitDeltas(recorded); err != nil {
		return err
	}
	f.compactRev = recorded - 20
	if _, err := src.cli.Compact(ctx, f.compactRev, clientv3.WithCompactPhysical()); err != nil {
		return err
	}
	if err := h.steps(ctx, 60); err != nil {
		return err
	}
	if err := record(); err != nil {
		return err
	}
	full, err = snapshotter.Full(ctx, m, s, tl, nil)
	if err != nil {
		return fmt.Errorf("second full snapshot: %w", err)
	}
	f.fulls = append(f.fulls, full)
	if err := h.steps(ctx, 100); err != nil {
		return err
	}
	if err := record(); err != nil {
		return err
	}
	f.last = recorded
	if err := waitDeltas(f.last); err != nil {
		return err
	}
	dcancel()
	if err := <-deltaErr; err != nil {
		return fmt.Errorf("delta capture: %w", err)
	}
	c, err := backup.ListChain(ctx, s)
	if err != nil {
		return err
	}
	if issues := c.Check(); len(issues) > 0 {
		return fmt.Errorf("captured chain has issues: %v", issues)
	}
	if len(c.Deltas) < 20 {
		return fmt.Errorf("only %d deltas captured; the tests want many small ones", len(c.Deltas))
	}
	t.Logf("chain: full snapshots at %d and %d, compaction at %d, last %d, %d deltas",
		f.fulls[0].Revision, f.fulls[1].Revision, f.compactRev, f.last, len(c.Deltas))
	return nil
}

var storeCopies atomic.Int64

// copyStore copies every object of the fixture's store into a new private mem:// store (or
// into dst if given), so a test can damage it.
func copyStore(t *testing.T, srcURL string, dst *store.Store) *store.Store {
	t.Helper()
	ctx := testCtx(t)
	src, err := store.Open(ctx, srcURL, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if dst == nil {
		dst = openStore(t, fmt.Sprintf("mem://restore-copy-%d", storeCopies.Add(1)))
	}
	infos, err := src.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		r, err := src.NewReader(ctx, info.Key)
		if err != nil {
			t.Fatal(err)
		}
		w, err := dst.NewWriter(ctx, info.Key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, r); err != nil {
			t.Fatal(err)
		}
		r.Close()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func openStore(t *testing.T, url string) *store.Store {
	t.Helper()
	s, err := store.Open(testCtx(t), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func listChain(t *testing.T, s *store.Store) backup.Chain {
	t.Helper()
	c, err := backup.ListChain(testCtx(t), s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// readObject and writeObject move an object's raw bytes, for damaging it.
func readObject(t *testing.T, s *store.Store, key string) []byte {
	t.Helper()
	r, err := s.NewReader(testCtx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeObject(t *testing.T, s *store.Store, key string, b []byte) {
	t.Helper()
	w, err := s.NewWriter(testCtx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// readEvents decodes a delta object's events.
func readEvents(t *testing.T, s *store.Store, key string) (backup.Header, []*mvccpb.Event) {
	t.Helper()
	hdr, or, err := backup.OpenObject(testCtx(t), s, key)
	if err != nil {
		t.Fatal(err)
	}
	defer or.Close()
	er := backup.NewEventReader(or, key)
	var evs []*mvccpb.Event
	for {
		ev, err := er.ReadEvent()
		if err == io.EOF {
			return hdr, evs
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
}
