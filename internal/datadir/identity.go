package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// identityName is the file in a data dir that says whose data it is. The sidecar writes it
// once the member has joined; a data dir whose identity does not match the member and
// cluster it is mounted for is never started on (it is moved aside and the member re-seeded).
const identityName = "steward-identity.json"

// Identity names the member and cluster a data dir belongs to.
type Identity struct {
	ClusterName string `json:"clusterName"`
	// ClusterToken is unique per cluster incarnation (the initial-cluster-token).
	ClusterToken string `json:"clusterToken"`
	// ClusterID is recorded once the cluster has formed (a quorum elected a leader).
	ClusterID  string `json:"clusterID"`
	MemberName string `json:"memberName"`
	MemberID   string `json:"memberID"`
	// RecoveryEpoch is the newest quorum-loss directive this data dir carried out.
	RecoveryEpoch int64 `json:"recoveryEpoch,omitempty"`
	// RestoredTimeline and RestoredRevision are the point of the backup a restore wrote this
	// data from: the founders of a recovery restore the point their seed restored.
	RestoredTimeline uint32    `json:"restoredTimeline,omitempty"`
	RestoredRevision int64     `json:"restoredRevision,omitempty"`
	WrittenAt        time.Time `json:"writtenAt"`
}

// WriteIdentity records id in dataDir.
func WriteIdentity(dataDir string, id Identity) error {
	return writeJSON(filepath.Join(dataDir, identityName), id)
}

// ReadIdentity returns the identity recorded in dataDir, ok=false if there is none.
func ReadIdentity(dataDir string) (Identity, bool, error) {
	return readJSON[Identity](filepath.Join(dataDir, identityName), "identity file in "+dataDir)
}

// lastStartName is the file in a data dir that holds the etcd configuration its member last
// started with. A member whose cluster view cannot be read restarts on its own data with it.
const lastStartName = "steward-last-start.yaml"

// WriteLastStart records config, the etcd configuration the member of dataDir starts with.
func WriteLastStart(dataDir string, config []byte) error {
	return WriteFileAtomic(filepath.Join(dataDir, lastStartName), config, 0o600)
}

// ReadLastStart returns the configuration WriteLastStart recorded in dataDir, ok=false if
// there is none.
func ReadLastStart(dataDir string) (config []byte, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dataDir, lastStartName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	return b, err == nil, err
}

// fenceName is the file in a data dir that records that its member is fenced: a restart that
// cannot read the cluster view keeps etcd held while it is there.
const fenceName = "steward-fenced"

// WriteFence records in dataDir that its member is fenced.
func WriteFence(dataDir string) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dataDir, fenceName), nil, 0o600)
}

// Fenced reports whether dataDir records that its member is fenced.
func Fenced(dataDir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dataDir, fenceName))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// ClearFence removes the record of WriteFence (none is no error).
func ClearFence(dataDir string) error {
	if err := os.Remove(filepath.Join(dataDir, fenceName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// supersededName is the file in a data dir that records that a restore (the recovery
// directive of the epoch it holds) replaces the data in it. The sidecar writes it before the
// restore's seed may act, inside the dir it marks: it moves with the data (a swap, a move
// aside) and goes with it (a wipe). Data marked so is never restarted, adopted or counted as
// the cluster's: once the restored cluster serves, it is the only copy of what is written.
const supersededName = "steward-superseded.json"

// supersededRecord is the content of the superseded record.
type supersededRecord struct {
	Epoch     int64     `json:"epoch"`
	WrittenAt time.Time `json:"writtenAt"`
}

// WriteSuperseded records in dataDir that the restore of directive epoch replaces its data.
func WriteSuperseded(dataDir string, epoch int64) error {
	return writeJSON(filepath.Join(dataDir, supersededName), supersededRecord{Epoch: epoch, WrittenAt: time.Now().UTC()})
}

// ReadSuperseded returns the epoch WriteSuperseded recorded in dataDir (0: none).
func ReadSuperseded(dataDir string) (int64, error) {
	rec, _, err := readJSON[supersededRecord](filepath.Join(dataDir, supersededName), "superseded record in "+dataDir)
	return rec.Epoch, err
}

// ClearSuperseded removes the record of WriteSuperseded (none is no error).
func ClearSuperseded(dataDir string) error {
	if err := os.Remove(filepath.Join(dataDir, supersededName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// writeJSON writes v as JSON to path, atomically.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, b, 0o600)
}

// readJSON reads the JSON file at path; ok=false if there is none. what names the file in
// the error for a damaged one.
func readJSON[T any](path, what string) (v T, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return v, false, nil
	}
	if err != nil {
		return v, false, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, false, fmt.Errorf("%s is damaged: %w", what, err)
	}
	return v, true, nil
}

// PartDir is where a restore builds a data dir before renaming it into place.
func PartDir(dataDir string) string { return filepath.Clean(dataDir) + ".part" }

// MoveAside renames dataDir to a sibling named <dataDir>.<reason>-<unix time> and creates
// an empty dataDir in its place; foreign or damaged data is kept for inspection, never
// deleted by the sidecar. It returns the new path.
func MoveAside(dataDir, reason string) (string, error) {
	dst := fmt.Sprintf("%s.%s-%d", filepath.Clean(dataDir), reason, time.Now().Unix())
	if err := os.Rename(dataDir, dst); err != nil {
		return "", fmt.Errorf("move %s aside: %w", dataDir, err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return dst, err
	}
	return dst, nil
}

// Wipe empties dataDir (keeping the directory itself, which may be a mount point).
func Wipe(dataDir string) error {
	entries, err := os.ReadDir(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(dataDir, 0o700)
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dataDir, e.Name())); err != nil {
			return fmt.Errorf("wipe %s: %w", dataDir, err)
		}
	}
	return nil
}
