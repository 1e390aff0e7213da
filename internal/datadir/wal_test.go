package datadir

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

func walMetadata(t *testing.T, member, cluster uint64) []byte {
	t.Helper()
	b, err := (&etcdserverpb.Metadata{NodeID: member, ClusterID: cluster}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// makeWAL writes a WAL with etcd's wal package into dir, with files files (2 KiB entries
// with the segment size lowered: the WAL is cut once the written part of a file exceeds
// it), and returns the WAL file names, oldest first.
func makeWAL(t *testing.T, dir string, member, cluster uint64, files int) []string {
	t.Helper()
	defer func(old int64) { wal.SegmentSizeBytes = old }(wal.SegmentSizeBytes)
	wal.SegmentSizeBytes = 1024
	w, err := wal.Create(zap.NewNop(), dir, walMetadata(t, member, cluster))
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); len(walFiles(t, dir)) < files; i++ {
		if i > 100 {
			t.Fatalf("no more than %d WAL files after %d entries", len(walFiles(t, dir)), i)
		}
		e := raftpb.Entry{Term: 1, Index: i, Data: bytes.Repeat([]byte{'x'}, 2048)}
		if err := w.Save(raftpb.HardState{Term: 1, Commit: i}, []raftpb.Entry{e}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return walFiles(t, dir)
}

func walFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(m)
	return m
}

// flipIn flips the last byte of the first occurrence of what in the file at path.
func flipIn(t *testing.T, path string, what []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, what)
	if i < 0 {
		t.Fatalf("%x not in %s", what, path)
	}
	b[i+len(what)-1] ^= 0x55
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReadWALMetadata(t *testing.T) {
	newest := func(names []string) string { return names[len(names)-1] }
	cases := []struct {
		name string
		// prepare damages or extends the WAL in dir (files: its WAL files, oldest first) and
		// returns the file whose head is expected to be read.
		prepare     func(t *testing.T, dir string, files []string) string
		wantMember  uint64
		wantCluster uint64
		wantErr     string // substring; the error must also name the newest file
	}{
		{name: "one file", wantMember: 0x1a, wantCluster: 0x2b,
			prepare: func(t *testing.T, dir string, files []string) string {
				// Keep only the first file: CRC record 0, then the metadata.
				for _, f := range files[1:] {
					os.Remove(f)
				}
				return files[0]
			}},
		{name: "several files: the newest head is read", wantMember: 0x1a, wantCluster: 0x2b,
			prepare: func(t *testing.T, dir string, files []string) string {
				// An older file's damaged head is not read (the deep check's full read is
				// what looks at older files).
				flipIn(t, files[0], walMetadata(t, 0x1a, 0x2b))
				return newest(files)
			}},
		{name: "several files: the newest by sequence wins", wantMember: 0x3c, wantCluster: 0x4d,
			prepare: func(t *testing.T, dir string, files []string) string {
				// The head of another WAL's file under the highest sequence number.
				other := makeWAL(t, filepath.Join(t.TempDir(), "wal"), 0x3c, 0x4d, 1)
				b, err := os.ReadFile(other[0])
				if err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(dir, fmt.Sprintf("%016x-%016x.wal", 0x100, 0x1000))
				if err := os.WriteFile(p, b, 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			}},
		{name: "tmp files ignored", wantMember: 0x1a, wantCluster: 0x2b,
			prepare: func(t *testing.T, dir string, files []string) string {
				for _, n := range []string{"0.tmp", "1.tmp", fmt.Sprintf("%016x-%016x.wal.tmp", 0x100, 0x1000), "junk.wal"} {
					if err := os.WriteFile(filepath.Join(dir, n), []byte("garbage, not a WAL file"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.Mkdir(filepath.Join(dir, fmt.Sprintf("%016x-%016x.wal", 0x200, 0x2000)), 0o700); err != nil {
					t.Fatal(err)
				}
				return newest(files)
			}},
		{name: "newest head: metadata CRC mismatch", wantErr: "metadata record: walpb: crc mismatch",
			prepare: func(t *testing.T, dir string, files []string) string {
				flipIn(t, newest(files), walMetadata(t, 0x1a, 0x2b))
				return newest(files)
			}},
		{name: "newest head: truncated", wantErr: "unexpected EOF",
			prepare: func(t *testing.T, dir string, files []string) string {
				if err := os.Truncate(newest(files), 30); err != nil {
					t.Fatal(err)
				}
				return newest(files)
			}},
		{name: "newest file empty", wantErr: "no record",
			prepare: func(t *testing.T, dir string, files []string) string {
				if err := os.Truncate(newest(files), 0); err != nil {
					t.Fatal(err)
				}
				return newest(files)
			}},
		{name: "newest file zeroed (preallocated, never written)", wantErr: "no record",
			prepare: func(t *testing.T, dir string, files []string) string {
				if err := os.WriteFile(newest(files), make([]byte, 4096), 0o600); err != nil {
					t.Fatal(err)
				}
				return newest(files)
			}},
		{name: "newest file garbage", wantErr: "first record",
			prepare: func(t *testing.T, dir string, files []string) string {
				if err := os.WriteFile(newest(files), bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 1024), 0o600); err != nil {
					t.Fatal(err)
				}
				return newest(files)
			}},
		{name: "newest file with huge record length", wantErr: "max entry size limit exceeded",
			prepare: func(t *testing.T, dir string, files []string) string {
				b := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00}, make([]byte, 64)...)
				if err := os.WriteFile(newest(files), b, 0o600); err != nil {
					t.Fatal(err)
				}
				return newest(files)
			}},
		{name: "metadata without IDs", wantErr: "no member or cluster ID",
			prepare: func(t *testing.T, dir string, files []string) string {
				other := makeWAL(t, filepath.Join(t.TempDir(), "wal"), 0, 0x4d, 1)
				b, err := os.ReadFile(other[0])
				if err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(dir, fmt.Sprintf("%016x-%016x.wal", 0x100, 0x1000))
				if err := os.WriteFile(p, b, 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			}},
		{name: "no WAL file, only tmp files", wantErr: "no WAL file in",
			prepare: func(t *testing.T, dir string, files []string) string {
				for _, f := range files {
					if err := os.Rename(f, f+".tmp"); err != nil {
						t.Fatal(err)
					}
				}
				return ""
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "wal")
			files := makeWAL(t, dir, 0x1a, 0x2b, 4)
			read := c.prepare(t, dir, files)
			member, cluster, raw, err := readWALMetadata(dir)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), read) {
					t.Fatalf("readWALMetadata = %x, %x, %v; want an error with %q naming %s", member, cluster, err, c.wantErr, read)
				}
				return
			}
			if err != nil || member != c.wantMember || cluster != c.wantCluster {
				t.Fatalf("readWALMetadata = %x, %x, %v; want %x, %x", member, cluster, err, c.wantMember, c.wantCluster)
			}
			if !bytes.Equal(raw, walMetadata(t, c.wantMember, c.wantCluster)) {
				t.Fatalf("raw metadata %x", raw)
			}
			if name, _ := newestWALFile(dir); filepath.Join(dir, name) != read {
				t.Fatalf("newest WAL file %s, want %s", name, read)
			}
		})
	}
}

func TestParseWALName(t *testing.T) {
	for name, want := range map[string]bool{
		"0000000000000000-0000000000000000.wal":     true,
		"00000000000000ff-0000000000abcdef.wal":     true,
		"0.tmp":                                     false,
		"0000000000000000-0000000000000000.wal.tmp": false,
		"junk.wal":                          false,
		"0000000000000000-0000000000000000": false,
	} {
		if _, ok := parseWALName(name); ok != want {
			t.Errorf("parseWALName(%q) ok = %t, want %t", name, ok, want)
		}
	}
}
