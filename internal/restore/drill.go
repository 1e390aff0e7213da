package restore

import (
	"context"
	"errors"
	"fmt"
	"github.com/etcd-steward/steward/internal/units"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/storage/mvcc"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
)

// DrillOptions describe a restore drill: a restore of a timeline's newest revision into a
// scratch dir that proves the backups restore exactly.
type DrillOptions struct {
	Store *store.Store
	// Timeline is the timeline drilled; 0 means the newest.
	Timeline uint32
	// Live, if set, is a client of the live cluster, and LiveEndpoint the member whose HashKV
	// the restored data is compared with (one HashKV at one revision: the drill's whole cost
	// to the cluster).
	Live         *clientv3.Client
	LiveEndpoint string
	// ScratchDir holds the scratch data dir (the database and etcd's 64 MiB WAL); default
	// os.TempDir().
	// It is removed on every exit path.
	ScratchDir string
	// KeepFree is Options.KeepFree: the space the drill leaves free where it restores.
	KeepFree int64
	// Progress, if set, gets the restore's phases, then PhaseHash.
	Progress func(Progress)
	// Logger receives etcd's logs; nil discards them.
	Logger *zap.Logger
}

// PhaseHash is the drill's last phase: the restored data is compacted to the live member's
// compact revision and hashed as etcd's HashKV does; no counts.
const PhaseHash Phase = "hash"

// DrillResult says what a drill restored and what it compared.
type DrillResult struct {
	Timeline uint32 `json:"timeline"`
	// Revision is the chain's last revision, and the restored database's.
	Revision int64 `json:"revision"`
	// CompactRevision is the compact revision both hashes are at (the restored data's own
	// without Live).
	CompactRevision int64 `json:"compactRevision"`
	// Hash is etcd's HashKV of the restored data at Revision.
	Hash uint32 `json:"hash"`
	// LiveEndpoint and LiveHash are the live member's HashKV at Revision (empty without Live).
	LiveEndpoint string `json:"liveEndpoint,omitempty"`
	LiveHash     uint32 `json:"liveHash,omitempty"`
	// Restore is how the data was restored.
	Restore  *Result        `json:"restore,omitempty"`
	Duration units.Duration `json:"duration"`
}

// ErrDrillMismatch means the restored data is not what the live cluster had at that revision.
var ErrDrillMismatch = errors.New("restore drill: the restored data differs from the live cluster")

// Drill restores the newest revision of a timeline into a scratch dir and proves it exact: the
// restored database is at the chain's last revision, and etcd's HashKV of it at that revision
// is computed. With Live it is compared with the live member's HashKV at the same revision,
// after the restored copy is compacted to the live member's compact revision (HashKV covers
// the revisions above it); the live cluster is never compacted. A difference is an error
// wrapping ErrDrillMismatch that names the timeline, the revision and both hashes.
func Drill(ctx context.Context, o DrillOptions) (res DrillResult, err error) {
	start := time.Now()
	defer func() { res.Duration = units.Duration(time.Since(start)) }()
	if o.Store == nil {
		return res, errors.New("restore drill: no backup store")
	}
	if o.Live != nil && o.LiveEndpoint == "" {
		return res, errors.New("restore drill: a live cluster needs the endpoint of the member to compare with")
	}
	lg := o.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	if o.Live != nil {
		// Before restoring a whole database: the live member must be of the timeline's cluster.
		if err := sameCluster(ctx, o); err != nil {
			return res, err
		}
	}
	scratch, release, rres, err := scratchRestore(ctx, o.ScratchDir, "drill", Options{Store: o.Store, Timeline: o.Timeline, KeepFree: o.KeepFree, Progress: o.Progress, Logger: lg})
	defer release()
	res.Restore = &rres
	res.Timeline, res.Revision = rres.Timeline, rres.Target
	if err != nil {
		if rres.Timeline == 0 { // none chosen yet
			return res, fmt.Errorf("restore drill: %w", err)
		}
		return res, fmt.Errorf("restore drill of timeline %d: %w", rres.Timeline, err)
	}
	if o.Progress != nil {
		o.Progress(Progress{Phase: PhaseHash})
	}
	var compactTo int64
	if o.Live != nil {
		res.LiveEndpoint = o.LiveEndpoint
		st, err := o.Live.Status(ctx, o.LiveEndpoint)
		if err != nil {
			return res, fmt.Errorf("restore drill of timeline %d: status of the live member %s: %w", res.Timeline, o.LiveEndpoint, err)
		}
		if id := st.Header.GetClusterId(); id != uint64(rres.ClusterID) {
			return res, otherCluster(res.Timeline, o.LiveEndpoint, id, uint64(rres.ClusterID))
		}
		live, err := o.Live.HashKV(ctx, o.LiveEndpoint, res.Revision)
		if err != nil {
			return res, fmt.Errorf("restore drill of timeline %d: HashKV at revision %d on the live member %s (the member must still hold that revision: a revision it compacted away cannot be compared, so drill more often than the cluster compacts): %w",
				res.Timeline, res.Revision, o.LiveEndpoint, err)
		}
		res.LiveHash, compactTo = live.Hash, live.CompactRevision
	}
	h, rev, err := hashDB(lg, DBPath(scratchDataDir(scratch)), compactTo, res.Revision)
	if rev != 0 && rev != res.Revision {
		return res, fmt.Errorf("%w: timeline %d: the restored database is at revision %d, the chain's last revision is %d",
			ErrDrillMismatch, res.Timeline, rev, res.Revision)
	}
	if err != nil {
		return res, fmt.Errorf("restore drill of timeline %d: %w", res.Timeline, err)
	}
	res.Hash, res.CompactRevision = h.Hash, h.CompactRevision
	if o.Live == nil {
		return res, nil
	}
	if h.CompactRevision != compactTo {
		return res, fmt.Errorf("restore drill of timeline %d: the restored data is compacted at revision %d, above the live member %s's compact revision %d, so their hashes at revision %d cannot be compared; the drill can compare once the cluster compacts to %d or later",
			res.Timeline, h.CompactRevision, o.LiveEndpoint, compactTo, res.Revision, h.CompactRevision)
	}
	if h.Hash != res.LiveHash {
		return res, fmt.Errorf("%w: timeline %d, revision %d (compact revision %d): restored hash %d, live member %s hash %d; the backups or the member's data are damaged: compare the members (etcdctl endpoint hashkv --cluster --rev %d); if they agree, take a full snapshot now (steward backup save) so that restores past it are exact",
			ErrDrillMismatch, res.Timeline, res.Revision, compactTo, h.Hash, o.LiveEndpoint, res.LiveHash, res.Revision)
	}
	return res, nil
}

// hashDB compacts the database at dbPath to compactTo, unless it is compacted there or above
// already, and returns etcd's HashKV of it at rev with the database's current revision.
func hashDB(lg *zap.Logger, dbPath string, compactTo, rev int64) (h mvcc.KeyValueHash, current int64, err error) {
	lg = lg.WithOptions(zap.WithFatalHook(zapcore.WriteThenPanic))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("etcd storage failed on %s: %v", dbPath, p)
		}
	}()
	kv, be := openScratch(lg, dbPath)
	defer func() {
		_ = kv.Close()
		_ = be.Close()
	}()
	if compactTo > 0 {
		done, err := kv.Compact(traceutil.TODO(), compactTo)
		switch {
		case err == nil:
			<-done
		case errors.Is(err, mvcc.ErrCompacted):
			// Compacted there or above; HashByRev says where.
		default:
			return h, 0, fmt.Errorf("compact %s to revision %d: %w", dbPath, compactTo, err)
		}
	}
	h, current, err = kv.HashStorage().HashByRev(rev)
	if err != nil {
		return h, current, fmt.Errorf("hash %s at revision %d: %w", dbPath, rev, err)
	}
	return h, current, nil
}

// sameCluster checks, from the header of the newest full snapshot of the timeline the drill
// restores, that the live member is of the cluster whose backups they are.
func sameCluster(ctx context.Context, o DrillOptions) error {
	st, err := o.Live.Status(ctx, o.LiveEndpoint)
	if err != nil {
		return fmt.Errorf("restore drill: status of the live member %s: %w", o.LiveEndpoint, err)
	}
	ix, err := backup.ReadIndex(ctx, o.Store)
	if err != nil {
		return fmt.Errorf("restore drill: %w", err)
	}
	tl := o.Timeline
	if tl == 0 {
		tl = ix.NewestTimeline()
	}
	ti, ok := ix.Timeline(tl)
	if !ok || len(ti.Fulls) == 0 {
		return nil // the restore says what is missing
	}
	hdr, err := backup.ReadHeader(ctx, o.Store, ti.Fulls[len(ti.Fulls)-1].Key)
	if err != nil {
		return nil // the restore falls back to an older full snapshot, or says why it cannot
	}
	if id := st.Header.GetClusterId(); id != hdr.ClusterID {
		return otherCluster(tl, o.LiveEndpoint, id, hdr.ClusterID)
	}
	return nil
}

func otherCluster(tl uint32, endpoint string, live, backups uint64) error {
	return fmt.Errorf("restore drill of timeline %d: the live member %s is of cluster %x, the timeline's backups of cluster %x: their revisions are unrelated; drill that cluster's timeline (steward backup list shows each timeline's cluster)",
		tl, endpoint, live, backups)
}
