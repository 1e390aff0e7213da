package etcdproc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWatchDataRemoved: removing or moving away the data dir, member/, member/wal, member/snap
// or the database is told, naming what went; what etcd itself does there first (a
// snapshot's database renamed into place, old snapshot and WAL files purged, a
// defragmentation's temporary file) is not.
func TestWatchDataRemoved(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(dir string) error
		want   string
	}{
		// rm -rf removes the entries in the order the dir lists them: any of them is first.
		{"the whole data dir (rm -rf)", func(dir string) error { return os.RemoveAll(dir) }, "/data/member/"},
		{"the data dir moved away", func(dir string) error { return os.Rename(dir, dir+".old") }, "data was removed"},
		{"member/ (rm -rf)", func(dir string) error { return os.RemoveAll(filepath.Join(dir, "member")) }, "/data/member/"},
		{"member/snap moved away", func(dir string) error {
			return os.Rename(filepath.Join(dir, "member", "snap"), filepath.Join(dir, "snap.old"))
		}, "/member/snap was removed"},
		{"the database alone", func(dir string) error { return os.Remove(filepath.Join(dir, "member", "snap", "db")) }, "/member/snap/db was removed"},
		{"the database moved away", func(dir string) error {
			return os.Rename(filepath.Join(dir, "member", "snap", "db"), filepath.Join(dir, "db.old"))
		}, "/member/snap/db was removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			snap, wal := filepath.Join(dir, "member", "snap"), filepath.Join(dir, "member", "wal")
			for _, d := range []string{snap, wal} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range []string{filepath.Join(snap, "db"), filepath.Join(snap, "0000000000000002-0000000000000010.snap"), filepath.Join(wal, "0000000000000000-0000000000000000.wal")} {
				if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			removed, err := watchDataRemoved(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			// etcd's own work, which must not be told: were it, the first message would name it.
			incoming := filepath.Join(snap, "0000000000000020.snap.db")
			steps := []func() error{
				func() error { return os.WriteFile(incoming, []byte("y"), 0o600) },
				func() error { return os.Rename(incoming, filepath.Join(snap, "db")) },
				func() error { return os.Remove(filepath.Join(snap, "0000000000000002-0000000000000010.snap")) },
				func() error { return os.WriteFile(filepath.Join(snap, "db.tmp"), []byte("z"), 0o600) },
				func() error { return os.Rename(filepath.Join(snap, "db.tmp"), filepath.Join(snap, "db")) },
				func() error { return os.Remove(filepath.Join(wal, "0000000000000000-0000000000000000.wal")) },
				func() error { return tc.remove(dir) },
			}
			for _, step := range steps {
				if err := step(); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case what := <-removed:
				if !strings.Contains(what, tc.want) {
					t.Fatalf("told %q; want it to say %q", what, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the removal was not told within 10 s")
			}
		})
	}
}
