package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"time"
)

// shutdownMarkerName is written into the data dir when etcd stops cleanly and removed when it
// starts, so its presence at start-up means the previous run ended cleanly.
const shutdownMarkerName = "steward-clean-shutdown.json"

// Shutdown describes a clean stop.
type Shutdown struct {
	Time     time.Time `json:"time"`
	MemberID string    `json:"memberID,omitempty"`
	Revision int64     `json:"revision,omitempty"`
}

// MarkCleanShutdown records a clean stop in dataDir.
func MarkCleanShutdown(dataDir string, s Shutdown) error {
	return writeJSON(filepath.Join(dataDir, shutdownMarkerName), s)
}

// ReadShutdown returns the clean-shutdown record, or ok=false if the last run did not end
// cleanly (or never ran).
func ReadShutdown(dataDir string) (Shutdown, bool, error) {
	return readJSON[Shutdown](filepath.Join(dataDir, shutdownMarkerName), "clean-shutdown marker in "+dataDir)
}

// ClearShutdown removes the marker; called as etcd starts so that a crash leaves none.
func ClearShutdown(dataDir string) error {
	err := os.Remove(filepath.Join(dataDir, shutdownMarkerName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// WriteFileAtomic writes data to a temporary file beside path, syncs it and renames it into
// place, so readers see either the old or the new content.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
