// Package restore turns a full snapshot plus delta events into an etcd data dir at an exact
// revision: the snapshot's database is written into the member dir and given a new cluster's
// identity as etcdutl's snapshot restore does (writeMember), then Replay applies the deltas
// directly on etcd's storage, each source revision one revision of the database, written as
// the key bucket records etcd's mvcc store writes.
package restore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.uber.org/zap"
)

// SnapshotRestoreConfig describes the member that a snapshot is restored for. The restored
// data dir belongs to a new cluster identity built from these fields (a new cluster ID),
// exactly as `etcdutl snapshot restore` makes it.
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
	// Logger receives etcd's logs; nil discards them.
	Logger *zap.Logger
}

// RestoreSnapshot writes an etcd member dir (member/snap/db, member/snap/*.snap, member/wal)
// from a snapshot file, as `etcdutl snapshot restore` does: the database is copied into place
// while its SHA-256 trailer is checked, then given the new cluster's identity (writeMember),
// then synced. On failure it removes what it created. It does not bump revisions: replay
// deltas first (Replay), then call BumpRevision if needed, because a bumped database would make
// Replay skip every event.
//
// ctx is checked before the copy starts.
func RestoreSnapshot(ctx context.Context, cfg SnapshotRestoreConfig) (err error) {
	if err := validateSnapshotConfig(cfg); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("restore snapshot %s: %w", cfg.SnapshotPath, err)
	}
	src, err := os.Open(cfg.SnapshotPath)
	if err != nil {
		return fmt.Errorf("restore snapshot: cannot read snapshot file: %w", err)
	}
	defer src.Close()
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
	if err := copySnapshot(src, cfg.DataDir, cfg.SkipHashCheck); err != nil {
		return fmt.Errorf("restore snapshot %s into %s: %w", cfg.SnapshotPath, cfg.DataDir, err)
	}
	m := memberSpec{name: cfg.Name, initialCluster: cfg.InitialCluster, token: cfg.InitialClusterToken, peerURLs: cfg.PeerURLs, mmapSize: cfg.InitialMmapSize}
	if err := writeMember(lg, cfg.DataDir, m); err != nil {
		return fmt.Errorf("restore snapshot %s into %s (check that the file is a complete etcd snapshot and that the member flags are valid): %w",
			cfg.SnapshotPath, cfg.DataDir, err)
	}
	if err := syncTree(cfg.DataDir); err != nil {
		return fmt.Errorf("restore snapshot %s: make %s durable: %w", cfg.SnapshotPath, cfg.DataDir, err)
	}
	return nil
}

// copySnapshot copies the database of snapshot file src into dataDir's member dir, hashing it
// on the way, and checks the SHA-256 etcd appends to a snapshot. etcd's rule tells whether there
// is one: a database is whole 512-byte sectors, so a file 32 bytes longer ends with its hash.
// skipHash accepts a file without one (a db file copied from a data dir) and leaves one
// unchecked.
func copySnapshot(src *os.File, dataDir string, skipHash bool) error {
	st, err := src.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	hasSum := size%512 == sha256.Size
	if !hasSum && !skipHash {
		return fmt.Errorf("the file has no SHA-256 trailer (its %d bytes are not whole 512-byte sectors plus 32); if it is a db file copied from a data dir, skip the hash check", size)
	}
	if hasSum {
		size -= sha256.Size
	}
	f, err := createDB(dataDir)
	if err != nil {
		return err
	}
	defer f.Close()
	fw := &fileWriter{f: f}
	var w io.Writer = fw
	h := sha256.New()
	check := hasSum && !skipHash
	if check {
		// The hash first: the writer's error is then the file's.
		w = io.MultiWriter(h, fw)
	}
	if err := pipeCopy(w, io.LimitReader(src, size)); err != nil {
		return fmt.Errorf("copy the database to %s: %w", f.Name(), err)
	}
	if fw.n != size {
		return fmt.Errorf("the file ended after %d of its %d bytes: was it being written?", fw.n, size)
	}
	if check {
		sum := make([]byte, sha256.Size)
		if _, err := src.ReadAt(sum, size); err != nil {
			return fmt.Errorf("read the SHA-256 trailer: %w", err)
		}
		if !bytes.Equal(sum, h.Sum(nil)) {
			return errors.New("the SHA-256 at its end does not match its database: the file is damaged or incomplete")
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return nil
}

// createDB creates the empty database file of dataDir's member dir, and the dirs above it as
// etcd makes them (owner only).
func createDB(dataDir string) (*os.File, error) {
	path := DBPath(dataDir)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create the database file: %w", err)
	}
	return f, nil
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
