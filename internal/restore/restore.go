package restore

import (
	"context"
	"errors"
	"fmt"
	"github.com/etcd-steward/steward/internal/heapbound"
	"github.com/etcd-steward/steward/internal/units"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
)

// Options describe one restore from a backup store into a new data dir.
type Options struct {
	// Store holds the backups (full snapshots and deltas).
	Store *store.Store
	// DataDir is the member data dir to create. It must not exist or be empty: a restore never
	// overwrites a member's data. The restore is built in DataDir+".part" and renamed into place
	// once verified, so DataDir must not be a mount point (use a directory inside the volume).
	DataDir string

	// The restored member's identity, as for `etcdutl snapshot restore`: the data dir belongs to
	// a new cluster whose ID derives from InitialCluster and InitialClusterToken.
	Name                string
	InitialCluster      string // "name=peerURL,..."; must contain Name with PeerURLs
	InitialClusterToken string
	PeerURLs            []string

	// Timeline is the timeline to restore from (see backup.Chain); a restore never reads
	// another. 0 means the newest timeline, or with ToTime the one that holds the history at
	// that time (TimelineAt), of the timelines of ClusterIDs.
	Timeline uint32
	// ClusterIDs, when set, are the etcd cluster IDs of the cluster restored (cluster.IDs):
	// without Timeline, only its own timelines are read, never another cluster's on the same
	// prefix (see ResolveTarget). nil: every timeline of the store.
	ClusterIDs []uint64
	// ToRevision restores to exactly this revision. ToTime restores to the newest revision the
	// backups prove existed at that time (see RevisionAt). At most one may be set; neither means
	// the newest revision of the timeline.
	ToRevision int64
	ToTime     time.Time
	// AllowPartial restores up to a hole (missing, or damaged, backups) instead of failing; the
	// result says what is missing.
	AllowPartial bool

	// BumpRevision raises the restored revision by this much and MarkCompacted marks the new
	// revision compacted, as `etcdutl snapshot restore --bump-revision --mark-compacted` does:
	// clients and watchers (a Kubernetes API server) see revisions only grow and re-list. The two
	// go together.
	BumpRevision  int64
	MarkCompacted bool
	// MissingLeaseTTL is ReplayOptions.MissingLeaseTTL: a TTL (seconds) for the leases that
	// restored keys refer to and the restored database lacks (granted after the full snapshot,
	// whose TTL is in no backup). Steward's callers use DefaultMissingLeaseTTL.
	MissingLeaseTTL int64
	// RootPassword, when set, becomes the restored root user's password (SetRootPassword):
	// the cluster restored into logs in with its own password, whatever the backup holds.
	RootPassword string

	// DryRun plans the restore and reports what it would read, without writing anything.
	DryRun bool
	// KeepFree is the space, in bytes, a restore leaves free on the file system of DataDir:
	// it refuses, before writing, a full snapshot whose declared size would not fit with that
	// much left (a drill on a live member's volume keeps the member's room).
	KeepFree int64
	// DeltaMemory bounds the bytes of a delta object (as stored: compressed, and encrypted if
	// it is) held from its verification to its replay (default 32 MiB); about two objects are
	// held at a time, the next one and what is left of the current one. A larger object is
	// verified in a first read and read again from the store to be replayed, so it is read
	// twice but never held.
	DeltaMemory int64
	// Progress, if set, is called as the restore moves on.
	Progress func(Progress)
	// Logger receives etcd's and etcdutl's logs; nil discards them.
	Logger *zap.Logger
}

// HeapBound is the Go memory bound a process applies while it restores, compacts or drills
// (heapbound.Bound.Apply): on a restore of 20,000 keys and 200,000 delta revisions the
// default (the heap growing to twice the live heap) made a third of the peak RSS.
var HeapBound = heapbound.Bound{Floor: 40 << 20, Percent: 25}

// Phase names a step of a restore.
type Phase string

const (
	PhaseDownload Phase = "download" // full snapshot from the store; Done/Total in bytes
	PhaseSnapshot Phase = "snapshot" // etcdutl writes the member dir; no counts
	PhaseReplay   Phase = "replay"   // delta revisions applied; Done/Total in revisions
	PhaseFinish   Phase = "finish"   // verify, bump, sync and rename; no counts
)

// Progress reports how far a restore is.
type Progress struct {
	Phase       Phase
	Done, Total int64
}

// ObjectRef names a backup object a restore reads.
type ObjectRef struct {
	Key      string `json:"key"`
	FirstRev int64  `json:"firstRevision"`
	LastRev  int64  `json:"lastRevision"`
	Size     int64  `json:"size"`
}

func refOf(o backup.Object) ObjectRef {
	return ObjectRef{Key: o.Key, FirstRev: o.FirstRev, LastRev: o.LastRev, Size: o.Size}
}

// Result says what a restore did (or, for a dry run, would do).
type Result struct {
	DryRun  bool   `json:"dryRun"`
	DataDir string `json:"dataDir,omitempty"`
	// Target is the revision asked for, resolved: the newest revision in the store when no
	// target was given, the revision RevisionAt found for ToTime.
	Target int64 `json:"targetRevision"`
	// For ToTime: the time asked for, and the object whose creation time dates Target.
	TargetTime  *time.Time `json:"targetTime,omitempty"`
	TargetBasis string     `json:"targetBasis,omitempty"`
	// TargetAfterEnd (for ToTime) says that the time is after the newest backup: Target is
	// the newest revision stored, and writes made between that backup and the time are in
	// no backup.
	TargetAfterEnd string `json:"targetAfterEnd,omitempty"`

	// Timeline is the timeline restored from: every object read is of it.
	Timeline uint32 `json:"timeline"`
	// PassedOver names the timelines not chosen because their newest full snapshot does not
	// vouch for itself (backup.VouchFull: planted, altered, damaged or of keys not given), each
	// with why.
	PassedOver []string `json:"passedOver,omitempty"`
	// Full is the full snapshot used; SkippedFulls are newer ones whose database turned out to
	// be past the target.
	Full         ObjectRef `json:"full"`
	SkippedFulls []string  `json:"skippedFulls,omitempty"`
	// StartRevision is the full snapshot's true revision, read from its database (0 in a dry
	// run: the name only gives a lower bound).
	StartRevision int64 `json:"startRevision"`
	// Deltas are the delta objects read, in order.
	Deltas []ObjectRef `json:"deltas"`
	// Revisions and Events were applied from the deltas; Trimmed events were skipped because
	// the database or an earlier delta already held their revision.
	Revisions int64 `json:"revisions"`
	Events    int64 `json:"events"`
	Trimmed   int64 `json:"trimmed"`
	// LeasesCreated counts lease records made for MissingLeaseTTL.
	LeasesCreated int64 `json:"leasesCreated,omitempty"`

	// Revision is the restored data's revision before any bump; BumpedRevision the revision
	// after BumpRevision (0 without).
	Revision       int64 `json:"revision"`
	BumpedRevision int64 `json:"bumpedRevision,omitempty"`
	// Partial is set when AllowPartial stopped the restore short of Target; Missing says which
	// revisions could not be restored and why.
	Partial bool          `json:"partial"`
	Missing *backup.Range `json:"missing,omitempty"`
	Reason  string        `json:"reason,omitempty"`

	// Bytes were read from the store (dry run: would be read). DBSize is the restored database
	// file's size.
	Bytes  int64 `json:"bytes"`
	DBSize int64 `json:"dbSize,omitempty"`
	// ClusterID and EtcdVersion come from the header of the newest object applied; AsOf is a
	// time at which the restored revision is known to have existed: that delta's creation time,
	// or the full snapshot's store time when no delta was applied.
	ClusterID   units.ID  `json:"clusterID,omitempty"`
	EtcdVersion string    `json:"etcdVersion,omitempty"`
	AsOf        time.Time `json:"asOf,omitzero"`

	Duration units.Duration `json:"duration"`
}

var (
	// ErrOutOfRange means the target is not a revision the backups cover; the error gives the
	// restorable revisions.
	ErrOutOfRange = errors.New("target is outside the backed-up revisions")
	// ErrDataDirNotEmpty means the data dir already holds something; a restore never
	// overwrites it.
	ErrDataDirNotEmpty = errors.New("data dir is not empty")
	// ErrNoSpace means a disk filled up; the partial restore was removed.
	ErrNoSpace = errors.New("no space left on device")
)

const defaultDeltaMemory = 32 << 20

// partSuffix marks the directory a restore is built in.
const partSuffix = ".part"

// Restore builds a data dir at an exact revision from the backups in o.Store: the newest full
// snapshot at or below the target (streamed into the member dir's database, which is then
// given the new cluster's identity as etcdutl's snapshot restore does), then the delta events after the snapshot's true revision up to the target (Replay,
// one storage transaction per source revision), verified, optionally bumped, then renamed into
// place. A failure anywhere removes what the restore built and leaves DataDir as it was.
//
// Errors wrap ErrOutOfRange, ErrMissingRevisions (a hole), backup.ErrCorrupt (a damaged
// object, named), store.ErrNotFound, ErrDataDirNotEmpty or ErrNoSpace where they apply.
func Restore(ctx context.Context, o Options) (res Result, err error) {
	start := time.Now()
	if err := o.validate(); err != nil {
		return res, err
	}
	res.DryRun, res.DataDir = o.DryRun, o.DataDir
	r := &restorer{o: o, lg: o.Logger, part: o.DataDir + partSuffix}
	if r.lg == nil {
		r.lg = zap.NewNop()
	}
	if r.o.DeltaMemory <= 0 {
		r.o.DeltaMemory = defaultDeltaMemory
	}
	defer func() {
		res.Duration = units.Duration(time.Since(start))
		if err != nil && isNoSpace(err) && !errors.Is(err, ErrNoSpace) {
			// etcd's wal.Create leaks its half-made WAL file when preallocation fails (v3.6.16);
			// the file is deleted but its space is held until the *os.File's finalizer closes it.
			runtime.GC()
			err = fmt.Errorf("%w: %w; the partial restore was removed: free space on the file system of %s (the database's size and 64 MiB are needed) and retry",
				ErrNoSpace, err, o.DataDir)
		}
	}()
	err = r.run(ctx, &res)
	return res, err
}

func (o Options) validate() error {
	var probs []string
	if o.Store == nil {
		probs = append(probs, "no backup store")
	}
	if !o.DryRun {
		if o.DataDir == "" {
			probs = append(probs, "no data dir")
		}
		if o.Name == "" || o.InitialCluster == "" || len(o.PeerURLs) == 0 {
			probs = append(probs, "the member name, initial cluster and peer URLs are all needed")
		}
	}
	if o.ToRevision < 0 {
		probs = append(probs, fmt.Sprintf("target revision %d is negative", o.ToRevision))
	}
	if o.ToRevision > 0 && !o.ToTime.IsZero() {
		probs = append(probs, "give a target revision or a target time, not both")
	}
	if o.BumpRevision < 0 {
		probs = append(probs, fmt.Sprintf("revision bump %d is negative", o.BumpRevision))
	}
	if (o.BumpRevision > 0) != o.MarkCompacted {
		probs = append(probs, "bumping the revision and marking it compacted go together (as in etcdutl): give both or neither")
	}
	if o.MissingLeaseTTL < 0 {
		probs = append(probs, fmt.Sprintf("missing-lease TTL %d is negative", o.MissingLeaseTTL))
	}
	if o.KeepFree < 0 {
		probs = append(probs, fmt.Sprintf("space to keep free %d is negative", o.KeepFree))
	}
	if len(probs) > 0 {
		return fmt.Errorf("restore: %s", strings.Join(probs, "; "))
	}
	if o.Name != "" || o.InitialCluster != "" {
		if err := verifyMember(o); err != nil {
			return err
		}
	}
	return nil
}

// verifyMember runs etcd's own bootstrap check of the member flags up front, so a typo fails
// before gigabytes are downloaded rather than once the database is written.
func verifyMember(o Options) error {
	if _, err := newCluster(zap.NewNop(), o.member()); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}

func (o Options) member() memberSpec {
	return memberSpec{name: o.Name, initialCluster: o.InitialCluster, token: o.InitialClusterToken, peerURLs: o.PeerURLs}
}

type restorer struct {
	o    Options
	lg   *zap.Logger
	part string
	made bool // we created part; remove it on failure
}

func (r *restorer) progress(p Phase, done, total int64) {
	if r.o.Progress != nil {
		r.o.Progress(Progress{Phase: p, Done: done, Total: total})
	}
}

func (r *restorer) run(ctx context.Context, res *Result) (err error) {
	s := r.o.Store
	// The listing is summarised (backup.ReadIndex), then read again for the deltas of this
	// restore only: a store holds a month of deltas, a restore reads one full snapshot's worth.
	ix, err := backup.ReadIndex(ctx, s)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	tl, notes, err := chooseTimeline(ctx, s, ix, r.o.ClusterIDs, r.o.Timeline, r.o.ToRevision, r.o.ToTime)
	for _, n := range notes {
		r.lg.Warn("timeline passed over", zap.String("why", n))
	}
	res.PassedOver = notes
	if err != nil {
		return err
	}
	ti, _ := ix.Timeline(tl)
	res.Timeline = tl
	target := r.o.ToRevision
	if !r.o.ToTime.IsZero() {
		t := r.o.ToTime
		around, err := backup.LoadTimeline(ctx, s, tl, deltasAround(ti, t))
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		rev, basis, err := RevisionAt(ctx, s, around, t)
		if err != nil {
			return err
		}
		target, res.TargetTime, res.TargetBasis = rev, &t, basis.Key
		if newest := ti.NewestRevision(); rev >= newest && t.After(basis.Created) {
			res.TargetAfterEnd = fmt.Sprintf("%s is after the newest backup (%s, stored at %s): revision %d is the newest stored; writes made after it are in no backup",
				t.Format(time.RFC3339Nano), basis.Key, basis.Created.Format(time.RFC3339Nano), rev)
		}
	}
	explicit := target > 0

	if r.o.DryRun && r.o.DataDir != "" {
		if err := checkDataDir(r.o.DataDir); err != nil {
			return err
		}
	}
	if !r.o.DryRun {
		if err := r.claimDataDir(); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				r.removePart()
			}
		}()
	}

	// Pick a full snapshot; fall back to older ones while the chosen one's database turns out
	// to be past the target (a full snapshot's name only gives a lower bound of its revision).
	excluded := map[string]bool{}
	var p plan
	var hdr backup.Header
	for {
		var keep func(backup.Object) bool // none without a base: planFrom refuses
		if base, to := planBase(ti, target, excluded); base > 0 {
			keep = backup.DeltasBetween(base, to)
		}
		c, err := backup.LoadTimeline(ctx, s, tl, keep)
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		if len(excluded) > 0 {
			c = c.Without(excluded)
		}
		p, err = planFrom(c, ti, target, r.o.AllowPartial, s.String())
		if err != nil {
			if len(excluded) > 0 {
				return fmt.Errorf("%w (full snapshots %s were skipped: their databases are past revision %d)", err, strings.Join(res.SkippedFulls, ", "), target)
			}
			return err
		}
		res.Target, res.Full = p.requested, refOf(p.full)
		res.Partial, res.Missing, res.Reason = p.missing != nil, p.missing, ""
		if p.missing != nil {
			res.Reason = fmt.Sprintf("revisions %s are in no backup", p.missing)
		}
		if r.o.DryRun {
			r.describeDryRun(p, res)
			return nil
		}
		if hdr, err = r.restoreFull(ctx, p.full, res); err != nil {
			return err
		}
		if explicit && res.StartRevision > p.target {
			r.lg.Info("full snapshot is past the target; trying an older one",
				zap.String("key", p.full.Key), zap.Int64("revision", res.StartRevision), zap.Int64("target", p.target))
			excluded[p.full.Key] = true
			res.SkippedFulls = append(res.SkippedFulls, p.full.Key)
			if err := r.resetPart(); err != nil {
				return err
			}
			continue
		}
		break
	}
	res.ClusterID, res.EtcdVersion = units.ID(hdr.ClusterID), hdr.EtcdVersion
	res.AsOf = p.full.ModTime
	// Without an explicit target, a full snapshot newer than every delta is the newest state.
	want := max(p.target, res.StartRevision)
	if !explicit {
		res.Target = max(res.Target, want)
	}

	res.Revision = res.StartRevision
	// With no deltas to apply, the replay still gives the keys of the snapshot whose leases it
	// lacks a lease (a snapshot compacted without them).
	if want > res.StartRevision || r.o.MissingLeaseTTL > 0 {
		if err := r.replay(ctx, p, want, res); err != nil {
			return err
		}
	}
	return r.finish(ctx, want, res)
}

// describeDryRun fills in what a restore following p would read.
func (r *restorer) describeDryRun(p plan, res *Result) {
	res.Bytes = p.full.Size
	res.Deltas = []ObjectRef{}
	for _, d := range p.deltas {
		res.Deltas = append(res.Deltas, refOf(d))
		res.Bytes += d.Size
	}
	res.Revision = p.target
}

// claimDataDir checks that DataDir may be restored into and creates the .part dir, which also
// keeps a second restore into the same DataDir out.
func (r *restorer) claimDataDir() error {
	dir := r.o.DataDir
	if err := checkDataDir(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(filepath.Clean(dir)), 0o700); err != nil {
		return fmt.Errorf("restore: create the parent of %s: %w", dir, err)
	}
	if err := os.Mkdir(r.part, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("restore: %s exists: another restore into %s is running or was interrupted; if none is running, remove %s and retry", r.part, dir, r.part)
		}
		return fmt.Errorf("restore: create %s: %w", r.part, err)
	}
	r.made = true
	return nil
}

// checkDataDir fails unless dir is absent or an empty directory.
func checkDataDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("restore: data dir %s: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("restore: %w: %s is a file, not a directory; choose a new data dir", ErrDataDirNotEmpty, dir)
	default:
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("restore: read data dir %s: %w", dir, err)
		}
		if len(entries) > 0 {
			return fmt.Errorf("restore: %w: %s holds %d entries (e.g. %s); a restore never overwrites a member's data: choose a new directory or move this one away",
				ErrDataDirNotEmpty, dir, len(entries), entries[0].Name())
		}
	}
	return nil
}

func (r *restorer) removePart() {
	if r.made {
		_ = os.RemoveAll(r.part)
		r.made = false
	}
}

// resetPart empties the .part dir for another attempt.
func (r *restorer) resetPart() error {
	r.removePart()
	if err := os.Mkdir(r.part, 0o700); err != nil {
		return fmt.Errorf("restore: recreate %s: %w", r.part, err)
	}
	r.made = true
	return nil
}

// restoreFull streams the full snapshot straight into the .part dir's database, checking it on
// the way, makes the dir a member of the new cluster (writeMember) and reads the database's
// true revision.
func (r *restorer) restoreFull(ctx context.Context, full backup.Object, res *Result) (backup.Header, error) {
	// The trailer declares the database's size: the download never writes more, and it must fit.
	t, err := backup.ReadTrailer(ctx, r.o.Store, full)
	if err != nil {
		return backup.Header{}, fmt.Errorf("restore: %w", err)
	}
	if err := checkRoom(full.Key, t.RawSize, r.o.KeepFree, r.part); err != nil {
		return backup.Header{}, err
	}
	f, err := createDB(r.part)
	if err != nil {
		return backup.Header{}, fmt.Errorf("restore: %s: %w", r.part, err)
	}
	hdr, n, err := downloadFull(ctx, r.o.Store, full, t.RawSize, f, func(done int64) { r.progress(PhaseDownload, done, full.Size) })
	res.Bytes += n
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("restore: write %s: %w", f.Name(), cerr)
	}
	if err != nil {
		return hdr, err
	}
	r.progress(PhaseSnapshot, 0, 0)
	if err := writeMember(r.lg, r.part, r.o.member()); err != nil {
		return hdr, fmt.Errorf("restore %s: %w", full.Key, err)
	}
	rev, _, err := ReadRevision(r.part)
	if err != nil {
		return hdr, fmt.Errorf("restore %s: %w", full.Key, err)
	}
	if rev < full.FirstRev {
		return hdr, fmt.Errorf("restore: %s: %w: its database is at revision %d, below the revision %d in its name", full.Key, backup.ErrCorrupt, rev, full.FirstRev)
	}
	res.StartRevision = rev
	return hdr, nil
}

// replay applies the plan's deltas after the database's revision up to want.
func (r *restorer) replay(ctx context.Context, p plan, want int64, res *Result) error {
	var deltas []backup.Object
	for _, d := range p.deltas {
		if d.LastRev > res.StartRevision {
			deltas = append(deltas, d)
		}
	}
	res.Deltas = make([]ObjectRef, 0, len(deltas))
	for _, d := range deltas {
		res.Deltas = append(res.Deltas, refOf(d))
	}
	src := newDeltaSource(ctx, r.o.Store, deltas, res.StartRevision, r.o.DeltaMemory)
	defer src.Close()
	total := want - res.StartRevision
	r.progress(PhaseReplay, 0, total)
	rr, err := Replay(ctx, r.part, src, ReplayOptions{
		ToRevision:      want,
		MissingLeaseTTL: r.o.MissingLeaseTTL,
		Progress:        func(rev int64) { r.progress(PhaseReplay, rev-res.StartRevision, total) },
	})
	res.Revisions, res.Events, res.LeasesCreated = rr.Revisions, rr.Events, rr.LeasesCreated
	res.Revision = rr.ToRevision
	res.Trimmed = src.Trimmed() + rr.Skipped
	res.Bytes += src.Bytes()
	if h, ok := src.LastHeader(); ok && rr.Revisions > 0 {
		res.ClusterID, res.EtcdVersion, res.AsOf = units.ID(h.ClusterID), h.EtcdVersion, h.Created
	}
	stop := src.StopErr()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("restore: stopped at revision %d: %w", rr.ToRevision, ctx.Err())
	case err == nil && stop == nil:
		return nil
	case err != nil && !errors.Is(err, ErrMissingRevisions):
		// A mismatch, a damaged second read, a failed disk: nothing to keep.
		return fmt.Errorf("restore: %w", err)
	case stop != nil && !r.o.AllowPartial:
		return fmt.Errorf("restore: %w: the restore stopped at revision %d; restorable up to there with --allow-partial", stop, rr.ToRevision)
	case stop == nil && !r.o.AllowPartial:
		return fmt.Errorf("restore: the delta objects do not hold what their names say: %w", err)
	}
	// AllowPartial: keep what was applied, which ends at a revision boundary.
	res.Partial = true
	res.Missing = &backup.Range{From: rr.ToRevision + 1, To: want}
	if stop != nil {
		res.Reason = stop.Error()
	} else {
		res.Reason = err.Error()
	}
	if p.missing != nil {
		res.Missing.To = max(res.Missing.To, p.missing.To)
	}
	return nil
}

// finish verifies the revision, bumps it if asked, makes the .part dir durable and renames it
// into place.
func (r *restorer) finish(ctx context.Context, want int64, res *Result) error {
	r.progress(PhaseFinish, 0, 0)
	rev, _, err := ReadRevision(r.part)
	if err != nil {
		return fmt.Errorf("restore: verify: %w", err)
	}
	if rev != res.Revision || (!res.Partial && rev != want) {
		return fmt.Errorf("restore: verify: the restored database is at revision %d, expected %d (target %d); the backups are inconsistent: run `steward backup verify`", rev, res.Revision, want)
	}
	if r.o.BumpRevision > 0 {
		if res.BumpedRevision, err = BumpRevision(r.part, r.o.BumpRevision); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
	if r.o.RootPassword != "" {
		if err := SetRootPassword(r.part, r.o.RootPassword); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
	if st, err := os.Stat(DBPath(r.part)); err == nil {
		res.DBSize = st.Size()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := syncTree(r.part); err != nil {
		return fmt.Errorf("restore: make %s durable: %w", r.part, err)
	}
	// rename(2) itself, because os.Rename refuses to replace even an empty directory; the
	// kernel replaces it only if it is still empty, so nothing written meanwhile is lost.
	if err := syscall.Rename(r.part, r.o.DataDir); err != nil {
		hint := "is something writing into it?"
		if errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EBUSY) {
			hint = "is it a mount point? restore into a directory inside the volume"
		}
		return fmt.Errorf("restore: move %s into place as %s (%s): %w", r.part, r.o.DataDir, hint, err)
	}
	r.made = false
	if err := syncDir(filepath.Dir(filepath.Clean(r.o.DataDir))); err != nil {
		return fmt.Errorf("restore: %s is in place but its parent could not be synced: %w", r.o.DataDir, err)
	}
	r.progress(PhaseFinish, 1, 1)
	return nil
}

// syncTree fsyncs the database and every directory of the member dir, so the rename publishes
// durable data.
func syncTree(dir string) error {
	if err := fsyncFile(DBPath(dir)); err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return syncDir(path)
		}
		return nil
	})
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// isNoSpace recognises a full disk, also where etcd or bbolt lost the error's type.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		strings.Contains(err.Error(), syscall.ENOSPC.Error())
}
