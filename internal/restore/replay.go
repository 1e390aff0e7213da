package restore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/lease/leasepb"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"

	"github.com/etcd-steward/steward/internal/datadir"
)

// EventSource yields delta events in revision order; an event's revision is ev.Kv.ModRevision
// (also for DELETE events). io.EOF at the end. All events of one revision must be delivered
// together, in the order the source applied them. Replay keeps the events of the revision in
// progress, so Next must return a new event each time (or one Replay has released, see
// EventReleaser).
type EventSource interface {
	Next() (*mvccpb.Event, error)
}

// EventReleaser is an EventSource that uses its events (and their keys and values) again:
// Replay calls Release(rev) once it has applied every event at or below revision rev and keeps
// none of them, nor any of their bytes.
type EventReleaser interface {
	Release(rev int64)
}

// ReplayOptions tunes Replay. The zero value replays everything with default batching.
type ReplayOptions struct {
	// ToRevision stops after this revision; 0 replays until the source ends. Replay fails if
	// the source ends before ToRevision or the database is already past it.
	ToRevision int64
	// BatchEvents commits the backend after at least this many events (default 2000: the open
	// transaction holds its records and bbolt's nodes for them; 2,000 and 10,000 took the same
	// time on a restore of 200,000 revisions, and 10,000 held 7 MiB more).
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
	defaultBatchEvents = 2_000
	defaultBatchBytes  = 32 << 20
)

// Replay applies delta events on the database of the etcd data dir dataDir (made by
// RestoreSnapshot), bypassing raft and the client API: each event becomes the key bucket record
// etcd's mvcc store writes for it (a put's key-value under its revision and sub-revision, a
// delete's tombstone), and each source revision is one revision of the database, so revisions,
// create_revision, mod_revision, version and lease come out as in the source. Every event is
// checked against the database first: a put's create_revision and version must be what etcd
// computes from the key's previous state, a delete's key must be live. Events at or below the
// database's revision are skipped, which makes a repeated or resumed Replay harmless.
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
// transaction is bounded by BatchEvents/BatchBytes. What grows is one entry per live key (its
// create_revision, version and lease, 40 bytes whatever the key's length: see liveKeys),
// which the checks and MissingLeaseTTL need; the history of each key is not held (etcd's mvcc
// index holds one entry per revision).
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

	r := &replayer{src: src, opts: opts, res: res, dbPath: dbPath, rev: from, live: newLiveKeys()}
	r.release, _ = src.(EventReleaser)
	if err := r.open(); err != nil {
		return res, err
	}
	runErr := r.run(ctx)
	if r.broken {
		// A panic left bbolt's locks in an unknown state; closing could deadlock.
		return r.res, runErr
	}
	closeErr := r.close()
	if opts.Progress != nil && closeErr == nil {
		opts.Progress(r.rev)
	}
	return r.res, errors.Join(runErr, closeErr)
}

type replayer struct {
	src     EventSource
	release EventReleaser // src, if it is one
	opts    ReplayOptions
	res     ReplayResult
	dbPath  string

	db    *bolt.DB
	tx    *bolt.Tx        // the open batch
	keys  *bolt.Bucket    // tx's key bucket
	arena batchArena      // the records tx holds until it commits
	rec   mvccpb.KeyValue // the record being written (a field: no allocation per event)
	live  *liveKeys

	rev      int64           // the newest completed source revision
	txRev    int64           // source revision in progress (buffered or applying), or 0
	applying bool            // part of txRev is written: events go straight to the database
	sub      int64           // sub-revision of txRev's next event
	buf      []*mvccpb.Event // events of txRev not yet applied
	bufBytes int64

	pendingEvents int
	pendingBytes  int64
	broken        bool // a panic escaped bbolt; do not touch the database again
}

func (r *replayer) open() error {
	db, err := bolt.Open(r.dbPath, 0o600, &bolt.Options{
		Timeout: lockTimeout,
		// As etcd opens it, without fsync: one at the end instead of one per commit; a crash
		// mid-replay discards the dir.
		NoSync: true, NoGrowSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType,
	})
	if err != nil {
		return fmt.Errorf("replay: open %s (stop the etcd member using it): %w", r.dbPath, err)
	}
	r.db = db
	err = r.begin()
	if err == nil {
		err = r.loadKeys()
	}
	if err != nil {
		if r.tx != nil {
			_ = r.tx.Rollback()
		}
		_ = db.Close()
		return err
	}
	return nil
}

// begin opens the next batch.
func (r *replayer) begin() error {
	tx, err := r.db.Begin(true)
	if err != nil {
		return fmt.Errorf("replay: %s: %w", r.dbPath, err)
	}
	r.tx, r.keys = tx, tx.Bucket(schema.Key.Name())
	if r.keys == nil {
		return fmt.Errorf("replay: %s has no %q bucket: not an etcd v3 database", r.dbPath, schema.Key.Name())
	}
	r.keys.FillPercent = 0.9 // as etcd's backend, for records appended in order
	return nil
}

// loadKeys reads the live keys of the database, as etcd's mvcc store builds its index when it
// opens: the key bucket in revision order, each record the key's newest state, a tombstone the
// key's end.
func (r *replayer) loadKeys() error {
	if rev, _, err := datadir.TxRevision(r.tx); err != nil || rev != r.rev {
		return fmt.Errorf("replay: %s: the database reads revision %d, then %d (%v); the database is inconsistent", r.dbPath, r.rev, rev, err)
	}
	var kv mvccpb.KeyValue
	c := r.keys.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		kv = mvccpb.KeyValue{Key: kv.Key[:0], Value: kv.Value[:0]} // Unmarshal reuses them
		if err := kv.Unmarshal(v); err != nil {
			return fmt.Errorf("replay: %s: key bucket record %x: %w; the database is damaged", r.dbPath, k, err)
		}
		switch {
		case len(kv.Key) == 0:
			// A revision without a key (etcdutl's --bump-revision writes one).
		case mvcc.IsTombstone(k):
			r.live.delete(kv.Key)
		default:
			r.live.set(kv.Key, keyState{create: kv.CreateRevision, version: kv.Version, lease: kv.Lease})
		}
	}
	return nil
}

func (r *replayer) run(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.broken = true
			err = fmt.Errorf("replay: etcd's storage failed at revision %d: %v; discard the data dir and restore again", r.txRev, p)
		}
	}()
	err = r.loop(ctx)
	if r.applying {
		// Count the revision written in part as it stands, so that the result says where the
		// database is; the error already says to discard the data dir.
		if endErr := r.endRevision(); err == nil {
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
// buffered (up to BatchBytes) before any is written, so a source error in the middle of a
// revision leaves the database at the previous revision, ready to resume.
func (r *replayer) loop(ctx context.Context) error {
	done := ctx.Done()
	for {
		ev, err := r.src.Next()
		if errors.Is(err, io.EOF) {
			return r.flush()
		}
		if err != nil {
			if r.applying {
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
		if r.applying {
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
	return r.endRevision()
}

// applyBuffered writes the buffered events of r.txRev; the rest of the revision follows them.
func (r *replayer) applyBuffered() error {
	r.applying = true
	for i, ev := range r.buf {
		r.buf[i] = nil
		if err := r.apply(ev); err != nil {
			return err
		}
	}
	r.buf, r.bufBytes = r.buf[:0], 0
	return nil
}

// apply writes what etcd's mvcc store writes for ev (storeTxnWrite.put and delete), after
// checking that ev is what the store would make of it.
func (r *replayer) apply(ev *mvccpb.Event) error {
	kv := ev.Kv
	if len(kv.Key) == 0 {
		return fmt.Errorf("replay: %w: %s event at revision %d has an empty key", ErrEventMismatch, ev.Type, r.txRev)
	}
	rev := mvcc.Revision{Main: r.txRev, Sub: r.sub}
	id := r.live.id(kv.Key)
	switch ev.Type {
	case mvccpb.PUT:
		// A live key keeps its create_revision and counts one more version; any other key
		// starts a new life at this revision.
		create, version := r.txRev, int64(1)
		if st, ok := r.live.m[id]; ok {
			create, version = st.create, st.version+1
		}
		if kv.CreateRevision != create || kv.Version != version {
			return fmt.Errorf("replay: %w: put %q at revision %d: the source has create_revision %d version %d, replaying gives create_revision %d version %d; discard the data dir and check that the deltas follow this snapshot",
				ErrEventMismatch, kv.Key, r.txRev, kv.CreateRevision, kv.Version, create, version)
		}
		r.rec = mvccpb.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: create, ModRevision: r.txRev, Version: version, Lease: kv.Lease}
		if err := r.put(mvcc.RevToBytes(rev, r.arena.alloc(revBytesLen)), &r.rec); err != nil {
			return err
		}
		r.live.m[id] = keyState{create: create, version: version, lease: kv.Lease}
		r.pendingBytes += int64(len(kv.Key) + len(kv.Value))
	case mvccpb.DELETE:
		if _, ok := r.live.m[id]; !ok {
			return fmt.Errorf("replay: %w: delete %q at revision %d: the key does not exist in the database; discard the data dir and check that the deltas follow this snapshot",
				ErrEventMismatch, kv.Key, r.txRev)
		}
		key := append(mvcc.RevToBytes(rev, r.arena.alloc(revBytesLen + 1)[:revBytesLen]), tombstoneMark)
		r.rec = mvccpb.KeyValue{Key: kv.Key}
		if err := r.put(key, &r.rec); err != nil {
			return err
		}
		delete(r.live.m, id)
		r.pendingBytes += int64(len(kv.Key))
	default:
		return fmt.Errorf("replay: %w: unknown event type %d at revision %d", ErrEventMismatch, ev.Type, r.txRev)
	}
	r.sub++
	r.pendingEvents++
	r.res.Events++
	return nil
}

const (
	revBytesLen   = 17  // a key bucket key: main revision, '_', sub-revision
	tombstoneMark = 't' // appended to a delete's key bucket key
)

// put writes one key bucket record; its bytes stay in r.arena, since bbolt holds them until
// the batch commits.
func (r *replayer) put(key []byte, rec *mvccpb.KeyValue) error {
	v := r.arena.alloc(rec.Size())
	if _, err := rec.MarshalToSizedBuffer(v); err != nil {
		return fmt.Errorf("replay: %w: revision %d: %v", ErrEventMismatch, r.txRev, err)
	}
	if err := r.keys.Put(key, v); err != nil {
		return fmt.Errorf("replay: write revision %d into %s: %w", r.txRev, r.dbPath, err)
	}
	return nil
}

// endRevision completes r.txRev and commits the batch when it is full.
func (r *replayer) endRevision() error {
	r.rev, r.txRev, r.sub, r.applying = r.txRev, 0, 0, false
	r.res.Revisions++
	r.res.ToRevision = r.rev
	if r.release != nil {
		// Every record is copied into r.arena and every key's state into r.live.
		r.release.Release(r.rev)
	}
	if r.pendingEvents < r.opts.BatchEvents && r.pendingBytes < r.opts.BatchBytes {
		return nil
	}
	if err := r.commit(); err != nil {
		return err
	}
	if r.opts.Progress != nil {
		r.opts.Progress(r.rev)
	}
	return r.begin()
}

func (r *replayer) commit() error {
	tx := r.tx
	r.tx, r.keys = nil, nil
	r.pendingEvents, r.pendingBytes = 0, 0
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("replay: commit %s at revision %d (discard the data dir): %w", r.dbPath, r.rev, err)
	}
	r.arena.reset()
	return nil
}

// close commits what was applied, closes the database and makes it durable.
func (r *replayer) close() error {
	var err error
	if r.tx != nil {
		err = r.commit()
	}
	if cerr := r.db.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("replay: close %s: %w", r.dbPath, cerr)
	}
	if err != nil {
		return err
	}
	return fsyncFile(r.dbPath)
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

// createMissingLeases writes a lease record for every lease that a live key refers to but the
// lease bucket lacks, as etcd's lessor would have it: no key is read again.
func (r *replayer) createMissingLeases() error {
	used := map[int64]struct{}{}
	r.live.leases(func(lease int64) { used[lease] = struct{}{} })
	lb, err := r.tx.CreateBucketIfNotExists(schema.Lease.Name())
	if err != nil {
		return fmt.Errorf("replay: %s: lease bucket: %w", r.dbPath, err)
	}
	for id := range used {
		key := binary.BigEndian.AppendUint64(nil, uint64(id)) // as etcd keys its lease records
		if lb.Get(key) != nil {
			continue
		}
		rec, err := (&leasepb.Lease{ID: id, TTL: r.opts.MissingLeaseTTL}).Marshal()
		if err == nil {
			err = lb.Put(key, rec)
		}
		if err != nil {
			return fmt.Errorf("replay: %s: write lease %x: %w", r.dbPath, id, err)
		}
		r.res.LeasesCreated++
	}
	return nil
}

// batchArena holds the records of the open bbolt transaction, which refers to them until it
// commits: one allocation per chunk instead of one per record, reused by the next batch.
type batchArena struct {
	chunks [][]byte
	cur    int // the chunk being filled
}

const (
	arenaChunk = 1 << 20
	// arenaKeep chunks are kept for the next batch; a batch of huge values does not pin its
	// memory for the rest of the replay.
	arenaKeep = 8
)

// alloc returns n bytes that stay valid until reset.
func (a *batchArena) alloc(n int) []byte {
	for ; a.cur < len(a.chunks); a.cur++ {
		if c := a.chunks[a.cur]; cap(c)-len(c) >= n {
			a.chunks[a.cur] = c[:len(c)+n]
			return c[len(c) : len(c)+n : len(c)+n]
		}
	}
	a.chunks = append(a.chunks, make([]byte, n, max(n, arenaChunk)))
	return a.chunks[a.cur][:n:n]
}

// reset makes the arena's memory free for the next batch.
func (a *batchArena) reset() {
	a.chunks = a.chunks[:min(len(a.chunks), arenaKeep)]
	for i := range a.chunks {
		a.chunks[i] = a.chunks[i][:0]
	}
	a.cur = 0
}
