// Package restore turns a full snapshot plus delta events into an etcd data dir at an exact
// revision: etcdutl's snapshot restore writes the member dir, then Replay applies the deltas
// directly on etcd's storage, each source revision one revision of the database, written as
// the key bucket records etcd's mvcc store writes.
package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
)

// SnapshotRestoreConfig describes the member that a snapshot is restored for. The restored
// data dir belongs to a new single-cluster identity built from these fields (a new cluster ID),
// exactly as `etcdutl snapshot restore` does.
type SnapshotRestoreConfig struct {
	// SnapshotPath is an etcd snapshot file as written by Maintenance.Snapshot (with its
	// SHA-256 trailer, unless SkipHashCheck).
	SnapshotPath string
	// DataDir is the data dir to create; it must not exist or be empty.
	DataDir string
	// Name is the member name; it must appear in InitialCluster.
	Name string
	// InitialCluster is "name=peerURL,..." for the restored cluster.
	InitialCluster string
	// InitialClusterToken seeds the new cluster ID.
	InitialClusterToken string
	// PeerURLs are this member's advertised peer URLs.
	PeerURLs []string
	// SkipHashCheck accepts a snapshot without a SHA-256 trailer (a db file copied from a data
	// dir).
	SkipHashCheck bool
	// InitialMmapSize is passed to bbolt; 0 uses etcd's default.
	InitialMmapSize uint64
	// Logger receives etcdutl's logs; nil discards them.
	Logger *zap.Logger
}

// RestoreSnapshot writes an etcd member dir (member/snap/db, member/snap/*.snap, member/wal)
// from a snapshot file, using etcdutl's snapshot restore as a library. On failure it removes
// what it created. It does not bump revisions: replay deltas first (Replay), then call
// BumpRevision if needed, because a bumped database would make Replay skip every event.
//
// etcdutl's restore cannot be interrupted; ctx is checked before it starts.
func RestoreSnapshot(ctx context.Context, cfg SnapshotRestoreConfig) (err error) {
	if err := validateSnapshotConfig(cfg); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("restore snapshot %s: %w", cfg.SnapshotPath, err)
	}
	if _, err := os.Stat(cfg.SnapshotPath); err != nil {
		return fmt.Errorf("restore snapshot: cannot read snapshot file: %w", err)
	}
	created, err := prepareEmptyDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			cleanupDir(cfg.DataDir, created)
		}
	}()

	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	err = etcdutlRestore(lg, snapshot.RestoreConfig{
		SnapshotPath:        cfg.SnapshotPath,
		Name:                cfg.Name,
		OutputDataDir:       cfg.DataDir,
		PeerURLs:            cfg.PeerURLs,
		InitialCluster:      cfg.InitialCluster,
		InitialClusterToken: cfg.InitialClusterToken,
		SkipHashCheck:       cfg.SkipHashCheck,
		InitialMmapSize:     cfg.InitialMmapSize,
	})
	if err != nil {
		return fmt.Errorf("restore snapshot %s into %s (check that the file is a complete etcd snapshot and that the member flags are valid): %w",
			cfg.SnapshotPath, cfg.DataDir, err)
	}
	return nil
}

// etcdutlRestore runs etcdutl's snapshot restore, turning its panics (etcd's storage panics on
// a database it cannot read, and logs Fatal where it would exit) into an error.
func etcdutlRestore(lg *zap.Logger, cfg snapshot.RestoreConfig) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("etcd's storage failed on the snapshot: %v", p)
		}
	}()
	return snapshot.NewV3(lg.WithOptions(zap.WithFatalHook(zapcore.WriteThenPanic))).Restore(cfg)
}

func validateSnapshotConfig(cfg SnapshotRestoreConfig) error {
	var missing []string
	if cfg.SnapshotPath == "" {
		missing = append(missing, "SnapshotPath")
	}
	if cfg.DataDir == "" {
		missing = append(missing, "DataDir")
	}
	if cfg.Name == "" {
		missing = append(missing, "Name")
	}
	if cfg.InitialCluster == "" {
		missing = append(missing, "InitialCluster")
	}
	if len(cfg.PeerURLs) == 0 {
		missing = append(missing, "PeerURLs")
	}
	if len(missing) > 0 {
		return fmt.Errorf("restore snapshot: missing %v in SnapshotRestoreConfig", missing)
	}
	return nil
}

// prepareEmptyDir makes sure dir exists and is empty; created tells whether we made it, so a
// failure can put things back as they were.
func prepareEmptyDir(dir string) (created bool, err error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return false, fmt.Errorf("restore snapshot: create data dir: %w", err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("restore snapshot: read data dir: %w", err)
	case len(entries) > 0:
		return false, fmt.Errorf("restore snapshot: data dir %s is not empty; restore into a new directory", dir)
	}
	return false, nil
}

func cleanupDir(dir string, created bool) {
	if created {
		_ = os.RemoveAll(dir)
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}
