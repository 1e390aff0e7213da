package restore

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
)

// plantFull writes, into the chain fixture's copy s, a full snapshot newer than every backup,
// with a sound header (the newest full snapshot's, at a higher revision), payload and
// trailer, holding data: what anyone who may write to the store can plant. It returns the key.
func plantFull(t *testing.T, c *chainFixture, s *store.Store, compression backup.Compression, data []byte) string {
	t.Helper()
	hdr, err := backup.ReadHeader(testCtx(t), s, c.fulls[len(c.fulls)-1].Key)
	if err != nil {
		t.Fatal(err)
	}
	hdr.FirstRev, hdr.LastRev, hdr.Created, hdr.Compression = c.last+100, c.last+100, hdr.Created.Add(time.Hour), compression
	key := backup.FullKey(hdr.Timeline, hdr.FirstRev, hdr.Created)
	if _, err := backup.WriteObject(testCtx(t), s, key, hdr, func(w *backup.ObjectWriter) error {
		_, err := w.Write(data)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return key
}

// withSHA is data followed by its SHA-256: it passes etcd's own check when its size is whole
// 512-byte pages.
func withSHA(data []byte) []byte {
	sum := sha256.Sum256(data)
	return append(data, sum[:]...)
}

// TestRestoreRefusesPlantedNonDatabase: a planted full snapshot whose payload is not a
// database (zeros, or garbage of a database's size, each with etcd's SHA-256) is refused with
// an error naming it, without a panic and without a .part dir; a restore of a sound revision
// into the same data dir then works.
func TestRestoreRefusesPlantedNonDatabase(t *testing.T) {
	c := getChain(t)
	garbage := make([]byte, 1<<20)
	rand.Read(garbage)
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"zeros", withSHA(make([]byte, 8<<20))},
		{"garbage", withSHA(garbage)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := copyStore(t, c.storeURL, nil)
			key := plantFull(t, c, s, backup.CompressionZstd, tc.data)
			o := restoreOptions(t, s)
			_, err := Restore(testCtx(t), o)
			if !errors.Is(err, backup.ErrCorrupt) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "not an etcd snapshot") {
				t.Fatalf("err %v, want ErrCorrupt naming %s, not an etcd snapshot", err, key)
			}
			checkUntouched(t, o, false)
			o.ToRevision = c.last
			if res, err := Restore(testCtx(t), o); err != nil || res.Revision != c.last {
				t.Fatalf("restore of revision %d into the same data dir after the refusal: %+v, %v", c.last, res, err)
			}
			checkRestored(t, c, o, c.last)
		})
	}
}

// TestRestoreSnapshotDoesNotPanic: a restore of a file that is not a database, or of a bbolt
// database that is not etcd's (etcd's storage panics on each) is an error naming the file, and
// the data dir is left as it was.
func TestRestoreSnapshotDoesNotPanic(t *testing.T) {
	dir := t.TempDir()
	zeros := filepath.Join(dir, "zeros.snap")
	if err := os.WriteFile(zeros, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	notEtcd := filepath.Join(dir, "bolt.db")
	db, err := bolt.Open(notEtcd, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{zeros, notEtcd} {
		peer := freeURL(t)
		cfg := SnapshotRestoreConfig{SnapshotPath: path, DataDir: filepath.Join(dir, "member"), Name: "m", InitialCluster: "m=" + peer,
			PeerURLs: []string{peer}, SkipHashCheck: true}
		err := RestoreSnapshot(testCtx(t), cfg)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "etcd's storage failed") {
			t.Fatalf("err %v, want an error naming %s", err, path)
		}
		if _, err := os.Stat(cfg.DataDir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("data dir %s left behind (%v)", cfg.DataDir, err)
		}
	}
}

// forgeRawSize rewrites the raw size in an object's trailer with a matching CRC-32C, as anyone
// who may write to the store can.
func forgeRawSize(obj []byte, raw int64) []byte {
	tr := obj[len(obj)-backup.TrailerSize:]
	binary.BigEndian.PutUint64(tr[16:], uint64(raw))
	binary.BigEndian.PutUint32(tr[64:], crc32.Checksum(tr[:64], crc32.MakeTable(crc32.Castagnoli)))
	return obj
}

// TestRestoreRefusesDatabaseBeyondFreeSpace: a full snapshot whose trailer declares more than
// the file system has free is refused before anything is written, and so is one that fits
// only by eating into the space to keep free.
func TestRestoreRefusesDatabaseBeyondFreeSpace(t *testing.T) {
	c := getChain(t)
	o := restoreOptions(t, nil)
	var fs syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(o.DataDir), &fs); err != nil {
		t.Fatal(err)
	}
	free := int64(fs.Bavail) * int64(fs.Bsize)

	t.Run("declared beyond the free space", func(t *testing.T) {
		s := copyStore(t, c.storeURL, nil)
		// An uncompressed payload big enough that zstd could make the declared size of it.
		data := make([]byte, (free+1<<30)/(128<<10/4)+1<<20)
		key := plantFull(t, c, s, backup.CompressionNone, data)
		declared := free + 1<<30
		writeObject(t, s, key, forgeRawSize(readObject(t, s, key), declared))
		o := restoreOptions(t, s)
		_, err := Restore(testCtx(t), o)
		if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "nothing was written") {
			t.Fatalf("err %v, want ErrNoSpace naming %s, before writing", err, key)
		}
		checkUntouched(t, o, false)
	})
	t.Run("fits only in the space to keep free", func(t *testing.T) {
		const size = 64 << 20
		if free < 4*size {
			t.Skipf("%d bytes free: too few to keep some free and restore", free)
		}
		s := copyStore(t, c.storeURL, nil)
		key := plantFull(t, c, s, backup.CompressionZstd, withSHA(make([]byte, size)))
		o := restoreOptions(t, s)
		// A quarter of the database's size is left beyond the space to keep free: far less than
		// the database and its WAL need, with a margin of about 100 MiB for what other
		// processes write or delete on the file system meanwhile (free is read again here).
		if err := syscall.Statfs(filepath.Dir(o.DataDir), &fs); err != nil {
			t.Fatal(err)
		}
		o.KeepFree = int64(fs.Bavail)*int64(fs.Bsize) - size/4
		_, err := Restore(testCtx(t), o)
		if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "nothing was written") {
			t.Fatalf("err %v, want ErrNoSpace naming %s, before writing", err, key)
		}
		checkUntouched(t, o, false)
	})
}

// TestDrillPlantedNonDatabase: a drill of a timeline whose newest full snapshot was planted
// reports the object as not a database, without a panic, and leaves its scratch dir empty.
func TestDrillPlantedNonDatabase(t *testing.T) {
	c := getChain(t)
	s := copyStore(t, c.storeURL, nil)
	key := plantFull(t, c, s, backup.CompressionZstd, withSHA(make([]byte, 8<<20)))
	dir := t.TempDir()
	_, err := Drill(testCtx(t), DrillOptions{Store: s, ScratchDir: dir})
	if !errors.Is(err, backup.ErrCorrupt) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "not an etcd snapshot") {
		t.Fatalf("err %v, want ErrCorrupt naming %s", err, key)
	}
	checkEmpty(t, dir)
}

// TestRoomFor: the restored database with etcd's WAL must fit, with the space to keep free
// left besides.
func TestRoomFor(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name     string
		free     int64
		keepFree int64
		fits     bool
	}{
		{"the database and the WAL", gib + walPrealloc, 0, true},
		{"a byte short", gib + walPrealloc - 1, 0, false},
		{"room for the drill and as much again for etcd", 2*gib + walPrealloc, gib, true},
		{"room for the drill only: etcd would be left without", gib + walPrealloc, gib, false},
	} {
		err := roomFor("k", gib, tc.keepFree, fsSpace{dir: "/data", free: tc.free})
		if (err == nil) != tc.fits {
			t.Errorf("%s: roomFor = %v, want fits %t", tc.name, err, tc.fits)
		}
		if err != nil && (!errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "k declares")) {
			t.Errorf("%s: %v does not wrap ErrNoSpace and name the object", tc.name, err)
		}
	}
}
