package restore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/etcd-steward/steward/internal/units"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
)

// CompactOptions describe a compaction of a backup chain.
type CompactOptions struct {
	Store *store.Store
	// Timeline is the timeline compacted (the new full snapshot goes to it); 0 means the
	// newest.
	Timeline uint32
	// MissingLeaseTTL is Options.MissingLeaseTTL: the new snapshot holds a lease record with
	// this TTL for every lease its keys refer to and the chain does not hold (granted after
	// the full snapshot). 0 leaves those keys with leases that do not exist: they would never
	// expire after a restore.
	MissingLeaseTTL int64
	// ScratchDir holds the scratch data dir (the database, twice while it is defragmented);
	// default os.TempDir(). It is removed on every exit path.
	ScratchDir string
	// Progress, if set, gets the restore's phases, then PhaseCompact and PhaseUpload (bytes).
	Progress func(Progress)
	// Logger receives etcd's logs; nil discards them.
	Logger *zap.Logger
}

// Phases of Compact after the restore.
const (
	PhaseCompact Phase = "compact" // mvcc compaction and defragmentation; no counts
	PhaseUpload  Phase = "upload"  // the new full snapshot; Done/Total in bytes
	PhaseVerify  Phase = "verify"  // the uploaded object read back; no counts
)

// CompactResult says what Compact stored.
type CompactResult struct {
	// Key is the new full snapshot, at Revision.
	Key      string `json:"key"`
	Revision int64  `json:"revision"`
	// Restore is how the newest state was rebuilt from the chain (nil when Skipped).
	Restore *Result `json:"restore,omitempty"`
	// Skipped says why nothing was done (no delta follows the newest full snapshot); Key is
	// then empty.
	Skipped string `json:"skipped,omitempty"`
	// DBSizeBefore and DBSizeAfter are the database's size before and after compaction and
	// defragmentation; Size is the stored object's size.
	DBSizeBefore int64          `json:"dbSizeBefore"`
	DBSizeAfter  int64          `json:"dbSizeAfter"`
	Size         int64          `json:"size"`
	Duration     units.Duration `json:"duration"`
}

// Compact shortens the chain: it restores the newest revision into a scratch data dir,
// compacts away all history before it, defragments, and uploads the result as a new full
// snapshot at that revision, so later restores start there. The older objects are left to the
// retention policy. The new snapshot's header carries the cluster ID and etcd version of the
// newest object applied and, as its creation time, Result.AsOf: a time the revision is known to
// have existed, so time-based restores stay truthful.
func Compact(ctx context.Context, o CompactOptions) (res CompactResult, err error) {
	start := time.Now()
	defer func() { res.Duration = units.Duration(time.Since(start)) }()
	if o.Store == nil {
		return res, errors.New("compact: no backup store")
	}
	lg := o.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	ix, err := backup.ReadIndex(ctx, o.Store)
	if err != nil {
		return res, fmt.Errorf("compact: %w", err)
	}
	tl := o.Timeline
	if tl == 0 {
		tl = ix.NewestTimeline()
	}
	ti, _ := ix.Timeline(tl)
	if newest, ok := ti.NewestFull(); ok && ti.NewestRevision() <= newest.FirstRev {
		res.Skipped = fmt.Sprintf("no delta follows the newest full snapshot %s of timeline %d: the chain is as short as it gets", newest.Key, newest.Timeline)
		return res, nil
	}
	progress := func(p Phase, done, total int64) {
		if o.Progress != nil {
			o.Progress(Progress{Phase: p, Done: done, Total: total})
		}
	}

	// Only the database is uploaded, and any restore of it gets a new identity from etcdutl.
	scratch, release, rres, err := scratchRestore(ctx, o.ScratchDir, "compact", Options{
		Store: o.Store, Timeline: o.Timeline, MissingLeaseTTL: o.MissingLeaseTTL, Progress: o.Progress, Logger: lg,
	})
	defer release()
	res.Restore = &rres
	if err != nil {
		return res, fmt.Errorf("compact: %w", err)
	}
	dataDir := scratchDataDir(scratch)
	rev := rres.Revision
	res.Revision = rev
	key := backup.FullKey(rres.Timeline, rev, rres.AsOf)
	if _, err := o.Store.Stat(ctx, key); err == nil {
		return res, fmt.Errorf("compact: %s already exists: the chain is already compacted at revision %d", key, rev)
	} else if !store.IsNotFound(err) {
		return res, fmt.Errorf("compact: %w", err)
	}

	progress(PhaseCompact, 0, 0)
	dbPath := DBPath(dataDir)
	if res.DBSizeBefore, res.DBSizeAfter, err = compactDB(lg, dbPath, rev); err != nil {
		return res, err
	}
	if got, _, err := ReadRevision(dataDir); err != nil || got != rev {
		return res, fmt.Errorf("compact: after compaction the database is at revision %d (%v), expected %d; nothing was uploaded", got, err, rev)
	}

	hdr := backup.Header{Kind: backup.KindFull, Timeline: rres.Timeline, Compression: backup.CompressionZstd, EtcdVersion: rres.EtcdVersion,
		ClusterID: uint64(rres.ClusterID), FirstRev: rev, LastRev: rev, Created: rres.AsOf.UTC()}
	total := res.DBSizeAfter
	tr, err := uploadSnapshot(ctx, o.Store, key, hdr, dbPath, func(done int64) { progress(PhaseUpload, done, total) })
	if err != nil {
		return res, fmt.Errorf("compact: %w", err)
	}
	res.Key, res.Size = key, tr.PayloadSize
	progress(PhaseVerify, 0, 0)
	obj, err := backup.ParseKey(key)
	if err != nil {
		return res, fmt.Errorf("compact: %w", err)
	}
	if err := backup.VerifyObject(ctx, o.Store, obj); err != nil {
		// Never leave a snapshot behind that does not read back.
		_ = o.Store.Delete(context.WithoutCancel(ctx), key)
		return res, fmt.Errorf("compact: the uploaded snapshot %s does not read back and was deleted: %w", key, err)
	}
	return res, nil
}

// compactDB compacts the mvcc store at dbPath to rev (dropping every older revision) and
// defragments the file. It works on the storage directly, as etcd would, with no member.
func compactDB(lg *zap.Logger, dbPath string, rev int64) (before, after int64, err error) {
	if st, err := os.Stat(dbPath); err == nil {
		before = st.Size()
	}
	lg = lg.WithOptions(zap.WithFatalHook(zapcore.WriteThenPanic))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("compact: etcd storage failed on %s: %v", dbPath, p)
		}
	}()
	kv, be := openScratch(lg, dbPath)
	done, cerr := kv.Compact(traceutil.TODO(), rev)
	switch {
	case cerr == nil:
		<-done
	case errors.Is(cerr, mvcc.ErrCompacted):
		// Already compacted at rev (the source compacted there); defragmenting still helps.
	default:
		_ = kv.Close()
		_ = be.Close()
		return before, 0, fmt.Errorf("compact: compact %s to revision %d: %w", dbPath, rev, cerr)
	}
	kv.Commit()
	if err := kv.Close(); err != nil {
		_ = be.Close()
		return before, 0, fmt.Errorf("compact: close the mvcc store: %w", err)
	}
	if err := be.Defrag(); err != nil {
		_ = be.Close()
		return before, 0, fmt.Errorf("compact: defragment %s: %w", dbPath, err)
	}
	if err := be.Close(); err != nil {
		return before, 0, fmt.Errorf("compact: close %s: %w", dbPath, err)
	}
	st, err := os.Stat(dbPath)
	if err != nil {
		return before, 0, fmt.Errorf("compact: %w", err)
	}
	return before, st.Size(), nil
}

// scratchRestore restores the newest revision of o.Timeline (with o's other settings) into a
// data dir inside a new scratch directory under dir (default os.TempDir()), for work on its
// database alone: no member is started on it, so its identity does not matter. The caller
// removes scratch, which is "" only if it could not be created.
func scratchRestore(ctx context.Context, dir, name string, o Options) (scratch string, release func(), res Result, err error) {
	release = func() {}
	if dir == "" {
		dir = os.TempDir()
	}
	removeStaleScratch(dir, name)
	scratch, err = os.MkdirTemp(dir, "steward-"+name+"-")
	if err != nil {
		return "", release, res, fmt.Errorf("create a scratch dir (give a writable directory with room for twice the database): %w", err)
	}
	lock, err := lockScratch(scratch)
	if err != nil {
		os.RemoveAll(scratch)
		return "", release, res, err
	}
	// Held until the caller is done with the scratch dir: another drill or compaction sweeping
	// stale ones leaves a locked one alone.
	release = func() {
		os.RemoveAll(scratch)
		lock.Close()
	}
	const peer = "http://127.0.0.1:2380"
	o.DataDir = scratchDataDir(scratch)
	o.Name, o.InitialCluster, o.PeerURLs, o.InitialClusterToken = name, name+"="+peer, []string{peer}, "steward-"+name
	res, err = Restore(ctx, o)
	return scratch, release, res, err
}

// scratchLock is the file in a scratch dir that its user holds locked (flock) while it works.
const scratchLock = ".lock"

func lockScratch(scratch string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(scratch, scratchLock), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the scratch dir %s: %w", scratch, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock the scratch dir %s: %w", scratch, err)
	}
	return f, nil
}

// removeStaleScratch removes the scratch dirs of this kind in dir that a process killed
// mid-way left behind (each may hold a whole database): those whose lock no one holds. One
// without a lock file (killed between creating it and locking it) goes once it is an hour old.
func removeStaleScratch(dir, name string) {
	old, _ := filepath.Glob(filepath.Join(dir, "steward-"+name+"-*"))
	for _, scratch := range old {
		f, err := os.OpenFile(filepath.Join(scratch, scratchLock), os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			if fi, err := os.Stat(scratch); err == nil && fi.IsDir() && time.Since(fi.ModTime()) > time.Hour {
				os.RemoveAll(scratch)
			}
			continue
		}
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.RemoveAll(scratch) // no one works in it
		}
		f.Close()
	}
}

// scratchDataDir is the data dir scratchRestore restores into.
func scratchDataDir(scratch string) string { return filepath.Join(scratch, "data") }

// openScratch opens the mvcc store of a scratch copy of a database at dbPath, as etcd would
// with no member: no fsync, one batch, compaction at full speed. lg must turn etcd's fatal logs
// into panics for the caller to recover.
func openScratch(lg *zap.Logger, dbPath string) (mvcc.KV, backend.Backend) {
	bcfg := backend.DefaultBackendConfig(lg)
	bcfg.Path = dbPath
	bcfg.BatchInterval = 24 * time.Hour
	bcfg.BatchLimit = math.MaxInt32
	bcfg.BackendFreelistType = bolt.FreelistMapType
	bcfg.UnsafeNoFsync = true // a scratch copy: it is deleted after use
	be := backend.New(bcfg)
	return mvcc.NewStore(lg, be, inertLessor{}, mvcc.StoreConfig{CompactionBatchLimit: 10_000, CompactionSleepInterval: time.Microsecond}), be
}

// uploadSnapshot stores the database file at dbPath as a full snapshot under key, in the form
// etcd's Maintenance.Snapshot streams it: the database followed by its SHA-256.
func uploadSnapshot(ctx context.Context, s *store.Store, key string, hdr backup.Header, dbPath string, progress func(int64)) (backup.Trailer, error) {
	f, err := os.Open(dbPath)
	if err != nil {
		return backup.Trailer{}, err
	}
	defer f.Close()
	return backup.WriteObject(ctx, s, key, hdr, func(w *backup.ObjectWriter) error {
		h := sha256.New()
		src := &countingReader{r: f, progress: progress}
		if _, err := io.CopyBuffer(io.MultiWriter(w, h), src, make([]byte, copyBuffer)); err != nil {
			return fmt.Errorf("upload %s: %w", dbPath, err)
		}
		if _, err := w.Write(h.Sum(nil)); err != nil {
			return err
		}
		w.SetLastRev(hdr.FirstRev)
		return nil
	})
}

// inertLessor satisfies the mvcc store of a scratch copy: keys keep their lease IDs, and no
// lease is attached, detached, revoked or expired. Any other Lessor method panics (nil embedded
// interface), which the caller recovers.
type inertLessor struct{ lease.Lessor }

func (inertLessor) SetRangeDeleter(lease.RangeDeleter)            {}
func (inertLessor) GetLease(lease.LeaseItem) lease.LeaseID        { return lease.NoLease }
func (inertLessor) Attach(lease.LeaseID, []lease.LeaseItem) error { return nil }
func (inertLessor) Detach(lease.LeaseID, []lease.LeaseItem) error { return nil }
