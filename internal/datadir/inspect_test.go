package datadir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcddatadir "go.etcd.io/etcd/server/v3/storage/datadir"
)

// walMarker is a value written through etcd, so that its WAL record can be found and damaged.
const walMarker = "steward-wal-marker-0123456789"

type member struct {
	dir             string
	memberID, cluID uint64
	rev, compactRev int64
	newestWALFile   string // relative to dir
}

// realMember runs an embedded etcd, writes and compacts through it, stops it and returns its
// data dir with what etcd reported.
func realMember(t *testing.T) member {
	t.Helper()
	e, c, _ := testutil.EmbeddedEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var resp *clientv3.PutResponse
	var err error
	for i := 0; i < 20; i++ {
		if resp, err = c.Put(ctx, fmt.Sprintf("/k/%02d", i), strings.Repeat("v", 100)); err != nil {
			t.Fatal(err)
		}
	}
	compactAt := resp.Header.Revision
	if _, err := c.Put(ctx, "/marker", walMarker); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, compactAt, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	// A deleted key: the newest revision is a tombstone.
	del, err := c.Delete(ctx, "/k/00")
	if err != nil {
		t.Fatal(err)
	}
	m := member{dir: e.Config().Dir, memberID: uint64(e.Server.MemberID()), cluID: uint64(e.Server.Cluster().ID()),
		rev: del.Header.Revision, compactRev: compactAt}
	// Stop the server (raft, WAL, backend closed); the listeners close at the test's end.
	e.Server.Stop()
	name, err := newestWALFile(etcddatadir.ToWALDir(m.dir))
	if err != nil {
		t.Fatal(err)
	}
	m.newestWALFile = filepath.Join("member", "wal", name)
	return m
}

func TestInspectRealMember(t *testing.T) {
	m := realMember(t)
	const (
		valid = iota
		walInvalid
		dbInvalid
	)
	cases := []struct {
		name   string
		clean  bool
		damage func(t *testing.T, dir string)
		want   int
		// problem is a substring of the one problem reported.
		problem string
	}{
		{name: "clean shutdown: quick check", clean: true, want: valid},
		{name: "unclean shutdown: deep check", clean: false, want: valid},
		{name: "unclean shutdown, damaged WAL record after the head: found by the full WAL read",
			damage: func(t *testing.T, dir string) { flipIn(t, filepath.Join(dir, m.newestWALFile), []byte(walMarker)) },
			want:   walInvalid, problem: "crc mismatch"},
		// After a clean shutdown etcd synced the WAL and nothing wrote it since: the quick
		// check reads the newest file's head only. (Were the disk to damage a record later,
		// etcd's start would fail, the marker being gone by then, and the next inspection
		// would be a deep one.)
		{name: "clean shutdown, damaged WAL record after the head: not read by the quick check", clean: true,
			damage: func(t *testing.T, dir string) { flipIn(t, filepath.Join(dir, m.newestWALFile), []byte(walMarker)) },
			want:   valid},
		{name: "clean shutdown, damaged newest WAL head", clean: true,
			damage: func(t *testing.T, dir string) {
				flipIn(t, filepath.Join(dir, m.newestWALFile), walMetadata(t, m.memberID, m.cluID))
			},
			want: walInvalid, problem: m.newestWALFile},
		{name: "unclean shutdown, damaged newest WAL head",
			damage: func(t *testing.T, dir string) {
				flipIn(t, filepath.Join(dir, m.newestWALFile), walMetadata(t, m.memberID, m.cluID))
			},
			want: walInvalid, problem: m.newestWALFile},
		{name: "unclean shutdown, WAL files renamed to .tmp",
			damage: func(t *testing.T, dir string) {
				for _, p := range walFiles(t, etcddatadir.ToWALDir(dir)) {
					if err := os.Rename(p, p+".tmp"); err != nil {
						t.Fatal(err)
					}
				}
			},
			want: -1, problem: "database"},
		{name: "clean shutdown, database meta pages overwritten", clean: true,
			damage: overwriteMetaPages, want: dbInvalid, problem: "database"},
		{name: "unclean shutdown, database meta pages overwritten",
			damage: overwriteMetaPages, want: dbInvalid, problem: "database"},
		{name: "unclean shutdown, database missing",
			damage: func(t *testing.T, dir string) {
				if err := os.Remove(DBPath(dir)); err != nil {
					t.Fatal(err)
				}
			},
			want: dbInvalid, problem: "is missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			testutil.CopyDir(t, m.dir, dir)
			if c.clean {
				if err := MarkCleanShutdown(dir, Shutdown{Time: time.Now()}); err != nil {
					t.Fatal(err)
				}
			}
			if c.damage != nil {
				c.damage(t, dir)
			}
			st, err := Inspect(dir)
			if err != nil {
				t.Fatal(err)
			}
			if st.CleanShutdown != c.clean || st.HasDB && st.DeepChecked == c.clean {
				t.Fatalf("clean %t, deep-checked %t; want clean %t and a deep check after an unclean stop", st.CleanShutdown, st.DeepChecked, c.clean)
			}
			switch c.want {
			case valid:
				if !st.Valid() || len(st.Problems) > 0 || st.MemberID != m.memberID || st.ClusterID != m.cluID ||
					st.Revision != m.rev || st.CompactRevision != m.compactRev {
					t.Fatalf("Inspect = %+v; want valid, member %x, cluster %x, revision %d, compacted %d",
						st, m.memberID, m.cluID, m.rev, m.compactRev)
				}
				return
			case walInvalid:
				if st.WALValid || !st.HasWAL || !st.DBValid || st.MemberID != 0 || len(st.Problems) != 1 ||
					!strings.Contains(st.Problems[0], "WAL") {
					t.Fatalf("Inspect = %+v; want a WAL problem only", st)
				}
			case dbInvalid:
				if !st.WALValid || st.DBValid || len(st.Problems) != 1 || !strings.Contains(st.Problems[0], "database") {
					t.Fatalf("Inspect = %+v; want a database problem only", st)
				}
			default: // no WAL file: the WAL counts as absent, as etcd sees it
				if st.HasWAL || st.WALValid || !st.DBValid || len(st.Problems) != 0 || st.Valid() {
					t.Fatalf("Inspect = %+v; want no WAL, a valid database, not valid", st)
				}
				return
			}
			if !strings.Contains(st.Problems[0], c.problem) {
				t.Fatalf("problem %q does not mention %q", st.Problems[0], c.problem)
			}
		})
	}
}

// overwriteMetaPages overwrites both bbolt meta pages, as `steward local fault corrupt` does.
func overwriteMetaPages(t *testing.T, dir string) {
	t.Helper()
	f, err := os.OpenFile(DBPath(dir), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := []byte(strings.Repeat("junk", 8192/4))
	if _, err := f.WriteAt(junk, 0); err != nil {
		t.Fatal(err)
	}
}

func TestReadDBRevisionErrors(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := ReadDBRevision(DBPath(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadDBRevision of a missing database: %v; want a not-exist error", err)
	}
	p := filepath.Join(dir, "db")
	if err := os.WriteFile(p, []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := CheckDB(p, true); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("CheckDB of garbage: %v; want an error naming %s", err, p)
	}
}
