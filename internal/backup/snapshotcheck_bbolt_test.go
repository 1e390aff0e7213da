package backup_test

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/backup/backuptest"
)

// TestSnapshotCheckRealDatabase: a database bbolt itself wrote passes, however it is cut into
// writes; the same bytes with its meta page, its end or its SHA-256 damaged do not.
func TestSnapshotCheckRealDatabase(t *testing.T) {
	good := backuptest.Snapshot(t, 2000)
	for _, piece := range []int{0, 1, 31, 33, 4096, 1 << 20} {
		if err := backup.CheckSnapshot(good, piece); err != nil {
			t.Fatalf("bbolt's own snapshot in pieces of %d: %v", piece, err)
		}
	}
	damage := func(edit func([]byte) []byte) []byte { return edit(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name   string
		stream []byte
		want   string
	}{
		{"meta page's checksum", damage(func(b []byte) []byte { b[16+48] ^= 1; return b }), "checksum does not match"},
		{"magic", damage(func(b []byte) []byte { b[16] ^= 1; return b }), "does not begin with a bbolt database"},
		{"no SHA-256", good[:len(good)-sha256.Size], "not whole pages followed by etcd's SHA-256"},
		{"a page short", append(append([]byte(nil), good[:len(good)-sha256.Size-4096]...), good[len(good)-sha256.Size:]...), "fewer than the"},
		{"SHA-256", damage(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), "own SHA-256 does not match"},
		{"data", damage(func(b []byte) []byte { b[3*4096+7] ^= 1; return b }), "own SHA-256 does not match"},
	} {
		err := backup.CheckSnapshot(tc.stream, 4096)
		if !errors.Is(err, backup.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), backup.TestKey) {
			t.Errorf("%s damaged: %v, want backup.ErrCorrupt naming the object and saying %q", tc.name, err, tc.want)
		}
	}
}
