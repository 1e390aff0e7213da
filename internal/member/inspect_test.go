package member

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/datadir"
)

// The reused inspection must end as soon as anything in the data dir changes.
func TestFingerprintChangesWithTheDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	db := datadir.DBPath(dir)
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Written an hour ago: modification times have the kernel's coarse clock granularity.
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(db, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	print := func() string {
		t.Helper()
		p, err := fingerprint(dir)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := print()
	if again := print(); again != base {
		t.Fatal("fingerprint of an unchanged data dir changed")
	}
	steps := []struct {
		name   string
		change func() error
	}{
		{"a file rewritten with the same size", func() error { return os.WriteFile(db, []byte("two"), 0o600) }},
		{"a file added", func() error { return os.WriteFile(filepath.Join(dir, "member", "x"), nil, 0o600) }},
		{"a file replaced by a rename", func() error {
			tmp := db + ".new"
			if err := os.WriteFile(tmp, []byte("two"), 0o600); err != nil {
				return err
			}
			return os.Rename(tmp, db)
		}},
		{"an unfinished restore beside it", func() error { return os.MkdirAll(datadir.PartDir(dir), 0o700) }},
		{"the data dir removed", func() error { return os.RemoveAll(dir) }},
	}
	for _, step := range steps {
		if err := step.change(); err != nil {
			t.Fatal(err)
		}
		if now := print(); now == base {
			t.Fatalf("%s: fingerprint unchanged", step.name)
		} else {
			base = now
		}
	}
}
