package restore

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fixture is a real etcd history: a snapshot at snapRev, every event after it (recorded with a
// watch), and the source's key space at every revision from compactRev to lastRev.
type fixture struct {
	snapshot   string
	snapRev    int64
	compactRev int64 // the source was compacted here after the snapshot; reads start here
	lastRev    int64
	sourceDB   string // the source member's database, stopped at lastRev
	events     []*mvccpb.Event
	states     map[int64][]*mvccpb.KeyValue
	err        error
}

var (
	fixtureOnce sync.Once
	theFixture  fixture
	fixtureDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtureDir != "" {
		os.RemoveAll(fixtureDir)
	}
	if chainDirOnce != "" {
		os.RemoveAll(chainDirOnce)
	}
	os.Exit(code)
}

// getFixture builds the shared history once per test binary.
func getFixture(t *testing.T) *fixture {
	t.Helper()
	fixtureOnce.Do(func() {
		dir, err := os.MkdirTemp("", "steward-restore-fixture-")
		if err != nil {
			theFixture.err = err
			return
		}
		fixtureDir = dir
		theFixture.err = fmt.Errorf("fixture build did not finish (see the first failing test)")
		theFixture.err = buildFixture(t, dir, &theFixture)
	})
	if theFixture.err != nil {
		t.Fatalf("build fixture: %v", theFixture.err)
	}
	return &theFixture
}

// watchLog collects watch events and lets the test wait until a revision has arrived.
type watchLog struct {
	mu     sync.Mutex
	events []*mvccpb.Event
	rev    int64
	err    error
	notify chan struct{}
}

func (w *watchLog) run(wch clientv3.WatchChan) {
	for resp := range wch {
		w.mu.Lock()
		if err := resp.Err(); err != nil {
			w.err = err
		}
		for _, ev := range resp.Events {
			w.events = append(w.events, (*mvccpb.Event)(ev))
			w.rev = ev.Kv.ModRevision
		}
		w.mu.Unlock()
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
}

func (w *watchLog) waitRev(rev int64) error {
	deadline := time.After(30 * time.Second)
	for {
		w.mu.Lock()
		got, err := w.rev, w.err
		w.mu.Unlock()
		if err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		if got >= rev {
			return nil
		}
		select {
		case <-w.notify:
		case <-deadline:
			return fmt.Errorf("watch reached revision %d, want %d after 30s", got, rev)
		}
	}
}

// history writes a deterministic random mix of operations: puts, overwrites, deletes, range
// deletes, multi-key transactions, puts with leases (granted before and after the snapshot),
// lease revocations deleting several keys at once, and puts that keep their lease.
type history struct {
	cli    *clientv3.Client
	rnd    *rand.Rand
	leases []clientv3.LeaseID
	rev    int64
}

var historyKeys = func() []string {
	keys := make([]string, 0, 26)
	for i := 0; i < 25; i++ {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	return append(keys, "bin\x00\xff")
}()

func (h *history) key() string { return historyKeys[h.rnd.Intn(len(historyKeys))] }

func (h *history) value() string {
	b := make([]byte, h.rnd.Intn(48))
	h.rnd.Read(b)
	return string(b)
}

func (h *history) note(rev int64) {
	if rev > h.rev {
		h.rev = rev
	}
}

func (h *history) grant(ctx context.Context) error {
	l, err := h.cli.Grant(ctx, 3600)
	if err != nil {
		return err
	}
	h.leases = append(h.leases, l.ID)
	return nil
}

func (h *history) step(ctx context.Context) error {
	kv := h.cli.KV
	switch p := h.rnd.Intn(100); {
	case p < 35:
		r, err := kv.Put(ctx, h.key(), h.value())
		if err != nil {
			return err
		}
		h.note(r.Header.Revision)
	case p < 45 && len(h.leases) > 0:
		l := h.leases[h.rnd.Intn(len(h.leases))]
		r, err := kv.Put(ctx, h.key(), h.value(), clientv3.WithLease(l))
		if err != nil {
			return err
		}
		h.note(r.Header.Revision)
	case p < 55:
		r, err := kv.Delete(ctx, h.key())
		if err != nil {
			return err
		}
		h.note(r.Header.Revision)
	case p < 60:
		r, err := kv.Delete(ctx, "k1", clientv3.WithPrefix()) // k1, k10..k19
		if err != nil {
			return err
		}
		h.note(r.Header.Revision)
	case p < 75:
		perm := h.rnd.Perm(len(historyKeys))
		var ops []clientv3.Op
		for _, i := range perm[:2+h.rnd.Intn(3)] {
			ops = append(ops, clientv3.OpPut(historyKeys[i], h.value()))
		}
		for _, i := range perm[5 : 6+h.rnd.Intn(2)] {
			ops = append(ops, clientv3.OpDelete(historyKeys[i]))
		}
		h.rnd.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
		r, err := kv.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return err
		}
		h.note(r.Header.Revision)
	case p < 80:
		// A txn deleting a range and writing outside it.
		r, err := kv.Txn(ctx).Then(
			clientv3.OpDelete("k2", clientv3.WithPrefix()),
			clientv3.OpPut("k3", h.value()),
			clientv3.OpPut("k4", h.value()),
		).Commit()
		if err != nil {
			return err
		}
		h.note(r.Header.Revision)
	case p < 85:
		if err := h.grant(ctx); err != nil {
			return err
		}
		l := h.leases[len(h.leases)-1]
		for i := 0; i < 3; i++ {
			r, err := kv.Put(ctx, h.key(), h.value(), clientv3.WithLease(l))
			if err != nil {
				return err
			}
			h.note(r.Header.Revision)
		}
	case p < 90 && len(h.leases) > 1:
		// Revoking deletes all of the lease's keys in one revision.
		i := h.rnd.Intn(len(h.leases))
		l := h.leases[i]
		h.leases = append(h.leases[:i], h.leases[i+1:]...)
		r, err := h.cli.Revoke(ctx, l)
		if err != nil {
			return err
		}
		h.note(r.Header.Revision)
	case p < 95:
		// Overwrite keeping the key's lease; fails if the key does not exist.
		r, err := kv.Put(ctx, h.key(), h.value(), clientv3.WithIgnoreLease())
		if err == nil {
			h.note(r.Header.Revision)
		}
	default:
		// The same value again: only mod_revision and version move.
		k := h.key()
		g, err := kv.Get(ctx, k)
		if err != nil {
			return err
		}
		v := "same"
		if len(g.Kvs) > 0 {
			v = string(g.Kvs[0].Value)
		}
		r, err := kv.Put(ctx, k, v)
		if err != nil {
			return err
		}
		h.note(r.Header.Revision)
	}
	return nil
}

func (h *history) steps(ctx context.Context, n int) error {
	for i := 0; i < n; i++ {
		if err := h.step(ctx); err != nil {
			return fmt.Errorf("history step %d: %w", i, err)
		}
	}
	return nil
}

func (h *history) currentRev(ctx context.Context) (int64, error) {
	r, err := h.cli.Get(ctx, "k0")
	if err != nil {
		return 0, err
	}
	return r.Header.Revision, nil
}

func buildFixture(t *testing.T, dir string, f *fixture) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	src := startMember(t, filepath.Join(dir, "source"), "source", freeURL(t))
	defer src.stop()
	f.sourceDB = DBPath(filepath.Join(dir, "source"))
	h := &history{cli: src.cli, rnd: rand.New(rand.NewSource(1))}

	// Before the snapshot: a history, a compaction in its middle, and a key that is deleted
	// before the snapshot and put again after it (its create_revision must reset).
	if err := h.grant(ctx); err != nil {
		return err
	}
	if err := h.steps(ctx, 60); err != nil {
		return err
	}
	rev, err := h.currentRev(ctx)
	if err != nil {
		return err
	}
	if _, err := src.cli.Compact(ctx, rev-10, clientv3.WithCompactPhysical()); err != nil {
		return err
	}
	if err := h.steps(ctx, 30); err != nil {
		return err
	}
	if _, err := src.cli.Put(ctx, "reborn", "1"); err != nil {
		return err
	}
	if _, err := src.cli.Delete(ctx, "reborn"); err != nil {
		return err
	}
	if f.snapRev, err = h.currentRev(ctx); err != nil {
		return err
	}

	f.snapshot = filepath.Join(dir, "snapshot.db")
	rc, err := src.cli.Snapshot(ctx)
	if err != nil {
		return err
	}
	out, err := os.Create(f.snapshot)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, rc)
	rc.Close()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("save snapshot: %w", err)
	}

	w := &watchLog{notify: make(chan struct{}, 1)}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go w.run(src.cli.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(f.snapRev+1)))

	// After the snapshot: more history, then a compaction (after the watch caught up), then
	// more history. Reads at compactRev and later are comparable.
	if _, err := src.cli.Put(ctx, "reborn", "2"); err != nil {
		return err
	}
	if err := h.grant(ctx); err != nil {
		return err
	}
	if err := h.steps(ctx, 150); err != nil {
		return err
	}
	if f.compactRev, err = h.currentRev(ctx); err != nil {
		return err
	}
	if err := w.waitRev(f.compactRev); err != nil {
		return err
	}
	if _, err := src.cli.Compact(ctx, f.compactRev, clientv3.WithCompactPhysical()); err != nil {
		return err
	}
	if err := h.steps(ctx, 150); err != nil {
		return err
	}
	if f.lastRev, err = h.currentRev(ctx); err != nil {
		return err
	}
	if err := w.waitRev(f.lastRev); err != nil {
		return err
	}
	w.mu.Lock()
	f.events = w.events
	w.mu.Unlock()

	f.states = make(map[int64][]*mvccpb.KeyValue)
	for rev := f.compactRev; rev <= f.lastRev; rev++ {
		r, err := src.cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			return fmt.Errorf("read source at revision %d: %w", rev, err)
		}
		f.states[rev] = r.Kvs
	}
	if err := checkCoverage(f); err != nil {
		return err
	}
	t.Logf("fixture: snapshot at %d, compacted at %d, last %d, %d events", f.snapRev, f.compactRev, f.lastRev, len(f.events))
	return nil
}

// sliceSource is an EventSource over recorded events.
type sliceSource struct {
	evs []*mvccpb.Event
	i   int
	// failAt, if set, makes Next fail when it reaches that index.
	failAt int
}

func (s *sliceSource) Next() (*mvccpb.Event, error) {
	if s.failAt > 0 && s.i == s.failAt {
		return nil, fmt.Errorf("injected read failure at event %d", s.i)
	}
	if s.i >= len(s.evs) {
		return nil, io.EOF
	}
	ev := s.evs[s.i]
	s.i++
	return ev, nil
}

// checkCoverage makes sure the random history exercised what the replay must get right.
func checkCoverage(f *fixture) error {
	perRev := map[int64][]*mvccpb.Event{}
	for _, ev := range f.events {
		perRev[ev.Kv.ModRevision] = append(perRev[ev.Kv.ModRevision], ev)
	}
	var multiDelete, mixed, leased, reborn int
	for _, evs := range perRev {
		var puts, dels int
		for _, ev := range evs {
			if ev.Type == mvccpb.DELETE {
				dels++
			} else {
				puts++
			}
		}
		if dels > 1 {
			multiDelete++
		}
		if dels > 0 && puts > 1 {
			mixed++
		}
	}
	for _, ev := range f.events {
		if ev.Type == mvccpb.PUT && ev.Kv.Lease != 0 {
			leased++
		}
		if ev.Type == mvccpb.PUT && string(ev.Kv.Key) == "reborn" && ev.Kv.Version == 1 && ev.Kv.CreateRevision == ev.Kv.ModRevision {
			reborn++
		}
	}
	if multiDelete == 0 || mixed == 0 || leased == 0 || reborn == 0 {
		return fmt.Errorf("history lacks coverage: %d multi-delete revisions, %d put+delete txns, %d leased puts, %d re-created keys",
			multiDelete, mixed, leased, reborn)
	}
	return nil
}
