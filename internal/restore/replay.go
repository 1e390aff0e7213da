package restore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/lease/leasepb"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
)

// EventSource yields delta events in revision order; an event's revision is ev.Kv.ModRevision
// (also for DELETE events). io.EOF at the end. All events of one revision must be delivered
// together, in the order the source applied them. Replay keeps the events of the revision in
// progress, so Next must return a new event each time.
type EventSource interface {
	Next() (*mvccpb.Event, error)
}

// ReplayOptions tunes Replay. The zero value replays everything with default batching.
type ReplayOptions struct {
	// ToRevision stops after this revision; 0 replays until the source ends. Replay fails if
	// the source ends before ToRevision or the database is already past it.
	ToRevision int64
	// BatchEvents commits the backend after at least this many events (default 10000; larger
	// batches were not faster in bench/replay and hold more memory).
	BatchEvents int
	// BatchBytes commits the backend after at least this many key+value bytes (default 32 MiB).
	// Together with BatchEvents it bounds the memory of the open bbolt transaction.
	BatchBytes int64
	// MissingLeaseTTL, if > 0, creates a lease record with this TTL (seconds) for every lease
	// that a live key refers to after the replay but that the database does not know (granted
	// after the snapshot: lease grants are not key events; or missing from the snapshot
	// itself). The restored member then expires those keys unless the lease's holder keeps it
	// alive. With 0 such keys keep their lease ID but etcd never expires them.
	MissingLeaseTTL int64
	// Progress, if set, is called after each batch commit and at the end with the newest
	// applied revision.
	Progress func(rev int64)
	// Logger receives etcd's storage logs; nil discards them.
	Logger *zap.Logger
}

// DefaultMissingLeaseTTL (seconds) is the TTL Steward gives a lease that restored keys refer
// to but no backup holds the grant of: an hour, a Kubernetes API server's event TTL (the
// leases it grants), so such keys expire instead of living forever.
const DefaultMissingLeaseTTL = 3600

// ReplayResult tells what Replay did.
type ReplayResult struct {
	// FromRevision is the database's revision before the replay.
	FromRevision int64
	// ToRevision is the database's revision after the replay.
	ToRevision int64
	// Revisions and Events count what was applied.
	Revisions int64
	Events    int64
	// Skipped counts events at or below the database's revision (already in the snapshot, or
	// an overlap between delta objects).
	Skipped int64
	// LeasesCreated counts lease records written for MissingLeaseTTL.
	LeasesCreated int64
}

var (
	// ErrMissingRevisions means the events have a hole (or end before the target): the
	// database holds everything before the hole and a later Replay can continue from there.
	ErrMissingRevisions = errors.New("revisions missing from the delta events")
	// ErrEventMismatch means an event does not fit the database (wrong create_revision or
	// version, a delete of a missing key): snapshot and deltas are not one history. The data dir
	// may hold part of that revision and must be discarded.
	ErrEventMismatch = errors.New("delta event does not match the database")
	// ErrPartialRevision means the source failed in the middle of a revision too large to
	// buffer, after part of it was applied: discard the data dir.
	ErrPartialRevision = errors.New("delta events failed in the middle of a revision")
	// ErrPastTarget means the database is already beyond ToRevision: pick an older full
	// snapshot.
	ErrPastTarget = errors.New("database is already past the target revision")
)

const (
	defaultBatchEvents = 10_000
	defaultBatchBytes  = 32 << 20
)

// Replay applies delta events on the mvcc store of the etcd data dir dataDir (made by
// RestoreSnapshot), bypassing raft and the client API: each source revision becomes exactly
// one mvcc write transaction, so revisions, create_revision, mod_revision and version come out
// as in the source. Events at or below the database's revision are skipped, which makes a
// repeated or resumed Replay harmless.
//
// Leases are kept as recorded in each put; nothing is attached, revoked or expired. The raft
// metadata (consistent index, term, WAL) is not touched, so the member starts as etcdutl left it.
//
// Commits are batched at revision boundaries without fsync; the database file is fsynced once
// at the end. After an error or a killed process Replay can resume from the database's
// revision (except after ErrEventMismatch or ErrPartialRevision); after a machine crash during
// Replay discard the data dir, since unsynced bbolt pages may be lost.
//
// Memory: events are streamed (one revision, up to BatchBytes, is held) and the open bbolt
// transaction is bounded by BatchEvents/BatchBytes. What grows is the mvcc in-memory index (one
// entry per key plus one per revision of history), the same index the etcd member builds when
// it starts on the result; with MissingLeaseTTL also one entry per live key whose lease the
// database lacks, as the member's lessor holds.
func Replay(ctx context.Context, dataDir string, src EventSource, opts ReplayOptions) (res ReplayResult, err error) {
	dbPath := DBPath(dataDir)
	from, _, err := readDBRevision(dbPath)
	if err != nil {
		return res, fmt.Errorf("replay: %w", err)
	}
	res.FromRevision, res.ToRevision = from, from
	if opts.ToRevision > 0 && opts.ToRevision < from {
		return res, fmt.Errorf("replay to revision %d: %w: %s is at revision %d", opts.ToRevision, ErrPastTarget, dbPath, from)
	}
	if opts.BatchEvents <= 0 {
		opts.BatchEvents = defaultBatchEvents
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = defaultBatchBytes
	}
	lg := opts.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	// etcd's storage reports broken invariants with Fatal (os.Exit); turn them into panics we
	// can recover and return as errors.
	lg = lg.WithOptions(zap.WithFatalHook(zapcore.WriteThenPanic))

	r := &replayer{src: src, opts: opts, res: res}
	if err := r.open(lg, dbPath); err != nil {
		return res, err
	}
	if r.rev != from {
		r.closeStore()
		return res, fmt.Errorf("replay: %s: the mvcc store opened at revision %d but the database reads %d; the database is inconsistent", dbPath, r.rev, from)
	}
	runErr := r.run(ctx)
	if r.broken {
		// A panic left backend locks in an unknown state; closing could deadlock.
		return r.res, runErr
	}
	closeErr := r.close(dbPath)
	if opts.Progress != nil && closeErr == nil {
		opts.Progress(r.rev)
	}
	return r.res, errors.Join(runErr, closeErr)
}

type replayer struct {
	src  EventSource
	opts ReplayOptions
	res  ReplayResult

	be backend.Backend
	kv mvcc.KV

	rev      int64           // store revision: the newest completed source revision
	txRev    int64           // source revision in progress (buffered or in tw), or 0
	buf      []*mvccpb.Event // events of txRev not yet applied
	bufBytes int64
	tw       mvcc.TxnWrite // open write txn for txRev, or nil
	trace    *traceutil.Trace

	leases        *leaseTracker // with MissingLeaseTTL: the leases of live keys the database lacks
	pendingEvents int
	pendingBytes  int64
	broken        bool // a panic escaped etcd's storage; do not touch the backend again
}

func (r *replayer) open(lg *zap.Logger, dbPath string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("replay: open etcd storage %s: %v", dbPath, p)
		}
	}()
	bcfg := backend.DefaultBackendConfig(lg)
	bcfg.Path = dbPath
	// We commit ourselves, at revision boundaries, sized by BatchEvents/BatchBytes.
	bcfg.BatchInterval = 24 * time.Hour
	bcfg.BatchLimit = math.MaxInt32
	bcfg.BackendFreelistType = bolt.FreelistMapType
	// One fsync at the end instead of one per commit; a crash mid-replay discards the dir.
	bcfg.UnsafeNoFsync = true
	r.be = backend.New(bcfg)
	var le lease.Lessor = inertLessor{}
	if r.opts.MissingLeaseTTL > 0 {
		// The store tells the lessor every key's lease as it restores its index from the
		// snapshot and as puts and deletes change them: that is how the leases live keys
		// refer to are known at the end, without scanning the keys.
		r.leases = newLeaseTracker(r.be)
		le = r.leases
	}
	r.kv = mvcc.NewStore(lg, r.be, le, mvcc.StoreConfig{})
	r.trace = traceutil.TODO()
	r.rev = r.currentRev()
	return nil
}

func (r *replayer) run(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.broken = true
			err = fmt.Errorf("replay: etcd storage failed at revision %d: %v; discard the data dir and restore again", r.txRev, p)
		}
	}()
	// The mvcc store records a trace step per put and never drops them; StepWithFunction turns
	// stepping off while the loop runs, so the trace stays empty and costs nothing.
	r.trace.StepWithFunction(func() { err = r.loop(ctx) }, "replay")
	if r.tw != nil {
		// Close the open revision even after an error so the backend can be closed; the
		// error already says to discard the data dir.
		if endErr := r.endTxn(); err == nil {
			err = endErr
		}
	}
	if err == nil && r.opts.ToRevision > 0 && r.rev < r.opts.ToRevision {
		err = fmt.Errorf("replay to revision %d: %w: the events end at revision %d, so revisions %d..%d are missing",
			r.opts.ToRevision, ErrMissingRevisions, r.rev, r.rev+1, r.opts.ToRevision)
	}
	if err == nil && r.opts.MissingLeaseTTL > 0 {
		err = r.createMissingLeases()
	}
	return err
}

// loop reads events and applies them one source revision at a time. A revision's events are
// buffered (up to BatchBytes) before its write txn opens, so a source error in the middle of
// a revision leaves the database at the previous revision, ready to resume.
func (r *replayer) loop(ctx context.Context) error {
	done := ctx.Done()
	for {
		ev, err := r.src.Next()
		if errors.Is(err, io.EOF) {
			return r.flush()
		}
		if err != nil {
			if r.tw != nil {
				return fmt.Errorf("replay: %w: revision %d: read the next event: %w", ErrPartialRevision, r.txRev, err)
			}
			return fmt.Errorf("replay: read the events after revision %d: %w", r.rev, err)
		}
		if ev == nil || ev.Kv == nil {
			return fmt.Errorf("replay: %w: an event after revision %d has no key-value", ErrEventMismatch, r.rev)
		}
		rev := ev.Kv.ModRevision
		if rev <= r.rev {
			r.res.Skipped++
			continue
		}
		if r.opts.ToRevision > 0 && rev > r.opts.ToRevision {
			return r.flush()
		}
		if r.txRev != 0 && rev != r.txRev {
			if err := r.flush(); err != nil {
				return err
			}
		}
		if r.txRev == 0 {
			if rev != r.rev+1 {
				return fmt.Errorf("replay: %w: revisions %d..%d (the database is at %d, the next event is at %d)",
					ErrMissingRevisions, r.rev+1, rev-1, r.rev, rev)
			}
			select {
			case <-done:
				return fmt.Errorf("replay stopped at revision %d: %w", r.rev, ctx.Err())
			default:
			}
			r.txRev = rev
		}
		if r.tw != nil {
			if err := r.apply(ev); err != nil {
				return err
			}
			continue
		}
		r.buf = append(r.buf, ev)
		r.bufBytes += int64(len(ev.Kv.Key) + len(ev.Kv.Value))
		if r.bufBytes >= r.opts.BatchBytes {
			// A huge revision (a range delete, a lease revoke): stream the rest of it.
			if err := r.applyBuffered(); err != nil {
				return err
			}
		}
	}
}

// flush applies and ends the revision in progress, if any.
func (r *replayer) flush() error {
	if r.txRev == 0 {
		return nil
	}
	if err := r.applyBuffered(); err != nil {
		return err
	}
	return r.endTxn()
}

// applyBuffered opens the write txn for r.txRev if needed and applies the buffered events.
func (r *replayer) applyBuffered() error {
	if r.tw == nil {
		r.tw = r.kv.Write(r.trace)
		if got := r.tw.Rev(); got != r.rev {
			return fmt.Errorf("replay: %w: the store is at revision %d, expected %d", ErrEventMismatch, got, r.rev)
		}
	}
	for i, ev := range r.buf {
		r.buf[i] = nil
		if err := r.apply(ev); err != nil {
			return err
		}
	}
	r.buf, r.bufBytes = r.buf[:0], 0
	return nil
}

func (r *replayer) apply(ev *mvccpb.Event) error {
	kv := ev.Kv
	if len(kv.Key) == 0 {
		return fmt.Errorf("replay: %w: %s event at revision %d has an empty key", ErrEventMismatch, ev.Type, r.txRev)
	}
	switch ev.Type {
	case mvccpb.PUT:
		rev := r.tw.Put(kv.Key, kv.Value, lease.LeaseID(kv.Lease))
		changes := r.tw.Changes()
		got := changes[len(changes)-1]
		if rev != r.txRev || got.CreateRevision != kv.CreateRevision || got.Version != kv.Version {
			return fmt.Errorf("replay: %w: put %q at revision %d: the source has create_revision %d version %d, replaying gives create_revision %d version %d at revision %d; discard the data dir and check that the deltas follow this snapshot",
				ErrEventMismatch, kv.Key, r.txRev, kv.CreateRevision, kv.Version, got.CreateRevision, got.Version, rev)
		}
		r.pendingBytes += int64(len(kv.Key) + len(kv.Value))
	case mvccpb.DELETE:
		if n, _ := r.tw.DeleteRange(kv.Key, nil); n != 1 {
			return fmt.Errorf("replay: %w: delete %q at revision %d: the key does not exist in the database; discard the data dir and check that the deltas follow this snapshot",
				ErrEventMismatch, kv.Key, r.txRev)
		}
		r.pendingBytes += int64(len(kv.Key))
	default:
		return fmt.Errorf("replay: %w: unknown event type %d at revision %d", ErrEventMismatch, ev.Type, r.txRev)
	}
	r.pendingEvents++
	r.res.Events++
	return nil
}

// endTxn ends the open write txn and checks that the store landed on the source revision.
func (r *replayer) endTxn() error {
	rev := r.txRev
	r.tw.End()
	r.tw, r.txRev = nil, 0
	if got := r.currentRev(); got != rev {
		return fmt.Errorf("replay: %w: after applying revision %d the store is at revision %d; discard the data dir",
			ErrEventMismatch, rev, got)
	}
	r.rev = rev
	r.res.Revisions++
	r.res.ToRevision = r.rev
	if r.pendingEvents >= r.opts.BatchEvents || r.pendingBytes >= r.opts.BatchBytes {
		r.kv.Commit()
		r.pendingEvents, r.pendingBytes = 0, 0
		if r.opts.Progress != nil {
			r.opts.Progress(r.rev)
		}
	}
	return nil
}

// currentRev reads the store's revision through a shared-buffer read txn, which costs no copy.
func (r *replayer) currentRev() int64 {
	tr := r.kv.Read(mvcc.SharedBufReadTxMode, r.trace)
	defer tr.End()
	return tr.Rev()
}

func (r *replayer) closeStore() {
	_ = r.kv.Close()
	_ = r.be.Close()
}

// close commits, closes the store and backend, and makes the database durable.
func (r *replayer) close(dbPath string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("replay: commit %s: %v; discard the data dir", dbPath, p)
		}
	}()
	r.kv.Commit()
	if err := r.kv.Close(); err != nil {
		return fmt.Errorf("replay: close the mvcc store: %w", err)
	}
	if err := r.be.Close(); err != nil {
		return fmt.Errorf("replay: close %s: %w", dbPath, err)
	}
	return fsyncFile(dbPath)
}

func fsyncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("replay: open %s for fsync: %w", path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("replay: fsync %s (the disk may be failing; discard the data dir): %w", path, err)
	}
	return nil
}

// inertLessor satisfies the mvcc store during replay: keys keep the lease ID recorded in the
// source, and no lease is attached, detached, revoked or expired. The etcd member attaches
// keys to their leases when it starts. Any other Lessor method panics (nil embedded interface),
// which Replay reports as an error.
type inertLessor struct{ lease.Lessor }

func (inertLessor) SetRangeDeleter(lease.RangeDeleter)            {}
func (inertLessor) GetLease(lease.LeaseItem) lease.LeaseID        { return lease.NoLease }
func (inertLessor) Attach(lease.LeaseID, []lease.LeaseItem) error { return nil }
func (inertLessor) Detach(lease.LeaseID, []lease.LeaseItem) error { return nil }

// leaseTracker is the lessor of a Replay with MissingLeaseTTL: it is inertLessor (nothing
// is granted, revoked or expired), and it also keeps, for every key whose lease the database
// lacks, that lease. mvcc.NewStore attaches each live key of the snapshot to its lease as it
// restores the index, and every put or delete detaches a key from its previous lease
// (GetLease) and attaches it to its new one, so at the end the tracker holds exactly the live
// keys on missing leases. Memory: one entry per such key and one per lease the database
// holds; keys on the database's own leases are not kept.
type leaseTracker struct {
	inertLessor
	known   map[lease.LeaseID]struct{} // leases in the database's lease bucket
	missing map[string]lease.LeaseID   // live key -> its lease, which known lacks
}

func newLeaseTracker(be backend.Backend) *leaseTracker {
	t := &leaseTracker{known: map[lease.LeaseID]struct{}{}, missing: map[string]lease.LeaseID{}}
	tx := be.ReadTx()
	tx.RLock()
	defer tx.RUnlock()
	// Lease bucket keys are the IDs, 8 bytes big-endian; the records need no decoding.
	_ = tx.UnsafeForEach(schema.Lease, func(k, _ []byte) error {
		if len(k) == 8 {
			t.known[lease.LeaseID(binary.BigEndian.Uint64(k))] = struct{}{}
		}
		return nil
	})
	return t
}

func (t *leaseTracker) GetLease(it lease.LeaseItem) lease.LeaseID {
	if id, ok := t.missing[it.Key]; ok {
		return id
	}
	return lease.NoLease
}

func (t *leaseTracker) Attach(id lease.LeaseID, items []lease.LeaseItem) error {
	if _, ok := t.known[id]; ok || id == lease.NoLease {
		return nil
	}
	for _, it := range items {
		t.missing[it.Key] = id
	}
	return nil
}

func (t *leaseTracker) Detach(id lease.LeaseID, items []lease.LeaseItem) error {
	for _, it := range items {
		if t.missing[it.Key] == id {
			delete(t.missing, it.Key)
		}
	}
	return nil
}

// createMissingLeases writes a lease record for every lease that a live key refers to but the
// lease bucket lacks, as the lease tracker knows them: no key is read again.
func (r *replayer) createMissingLeases() error {
	used := map[lease.LeaseID]struct{}{}
	for _, id := range r.leases.missing {
		used[id] = struct{}{}
	}
	tx := r.be.BatchTx()
	tx.LockOutsideApply()
	defer tx.Unlock()
	schema.UnsafeCreateLeaseBucket(tx)
	for id := range used {
		if schema.MustUnsafeGetLease(tx, int64(id)) != nil {
			continue // cannot happen: the tracker read the bucket and Replay writes no lease
		}
		schema.MustUnsafePutLease(tx, &leasepb.Lease{ID: int64(id), TTL: r.opts.MissingLeaseTTL})
		r.res.LeasesCreated++
	}
	return nil
}
