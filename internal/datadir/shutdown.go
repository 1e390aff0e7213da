package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
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
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dataDir, shutdownMarkerName), b, 0o600)
}

// ReadShutdown returns the clean-shutdown record, or ok=false if the last run did not end
// cleanly (or never ran).
func ReadShutdown(dataDir string) (s Shutdown, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dataDir, shutdownMarkerName))
	if errors.Is(err, os.ErrNotExist) {
		return s, false, nil
	}
	if err != nil {
		return s, false, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, false, fmt.Errorf("clean-shutdown marker in %s is damaged: %w", dataDir, err)
	}
	return s, true, nil
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
