package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// checkSnapshot writes stream to a SnapshotCheck in pieces of at most piece bytes (0: one
// write) and returns its verdict.
func checkSnapshot(stream []byte, piece int) error {
	c := NewSnapshotCheck(testKey)
	for rest := stream; len(rest) > 0; {
		n := len(rest)
		if piece > 0 {
			n = min(n, piece)
		}
		if _, err := c.Write(rest[:n]); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return c.Done()
}

// zerosSnapshot is the shape a planted object takes to pass etcd's SHA-256 rule: n pages of
// nothing, then their SHA-256.
func zerosSnapshot(n int) []byte {
	db := make([]byte, n*512)
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

// TestVerifyRefusesWhatIsNotADatabase: full snapshots with sound framing whose payload is not a
// bbolt database (zeros or garbage of a database's size, each with a correct etcd SHA-256), or a
// database without etcd's SHA-256, are bad objects, named; a database is not.
func TestVerifyRefusesWhatIsNotADatabase(t *testing.T) {
	s := openStore(t, "mem://")
	good := putFull(t, s, 100, fakeDB(8, 1))
	garbage := payload(64*512, 2)
	sum := sha256.Sum256(garbage)
	shortDB := make([]byte, 8*512) // its meta page counts 9 pages
	copy(shortDB, boltMeta(512, 9))
	shortSum := sha256.Sum256(shortDB)
	shortDB = append(shortDB, shortSum[:]...)
	want := map[string]string{
		putFull(t, s, 200, zerosSnapshot(16<<10)):        "not an etcd snapshot: it does not begin with a bbolt database's meta page",
		putFull(t, s, 300, append(garbage, sum[:]...)):   "not an etcd snapshot",
		putFull(t, s, 400, fakeDB(8, 3)[:8*512]):         "not whole pages followed by etcd's SHA-256",
		putFull(t, s, 500, fakeDB(8, 4)[:boltMetaEnd-1]): "too few for a database",
		putFull(t, s, 600, shortDB):                      "fewer than the 4608 its meta page counts",
	}
	rep, err := Verify(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range rep.Bad {
		w, ok := want[b.Key]
		if !ok {
			t.Errorf("%s is bad: %v", b.Key, b.Err)
			continue
		}
		delete(want, b.Key)
		if !errors.Is(b.Err, ErrCorrupt) || !strings.Contains(b.Err.Error(), b.Key) || !strings.Contains(b.Err.Error(), w) {
			t.Errorf("%s: %v, want ErrCorrupt naming it and saying %q", b.Key, b.Err, w)
		}
	}
	for key := range want {
		t.Errorf("%s verifies", key)
	}
	if got := rep.Timelines[0].Coverage; len(got) != 1 || got[0] != (Range{100, 100}) {
		t.Errorf("coverage %v, want only %s's revision 100", got, good)
	}
}

// forgeRawSize rewrites the raw size in an object's trailer, with a matching CRC-32C: anyone
// can, so nothing may trust it before the payload is read.
func forgeRawSize(obj []byte, raw int64) []byte {
	tr := obj[len(obj)-TrailerSize:]
	binary.BigEndian.PutUint64(tr[16:], uint64(raw))
	binary.BigEndian.PutUint32(tr[64:], crc32.Checksum(tr[:64], castagnoli))
	return obj
}

// TestReadTrailer: the trailer is read without the payload; one that declares a raw size no
// zstd stream of its payload's size can make is refused.
func TestReadTrailer(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "mem://")
	key := putFull(t, s, 100, zerosSnapshot(1<<10))
	o := Object{Key: key, Kind: KindFull, Timeline: 1, FirstRev: 100, LastRev: 100}
	info, err := s.Stat(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	o.Size = info.Size
	tr, err := ReadTrailer(ctx, s, o)
	if err != nil || tr.RawSize != 1<<10*512+sha256.Size || tr.PayloadSize <= 0 || tr.LastRev != 100 {
		t.Fatalf("ReadTrailer = %+v, %v", tr, err)
	}
	rewrite(t, s, key, func(b []byte) []byte { return forgeRawSize(b, (tr.PayloadSize+1)*maxExpansion) })
	if _, err := ReadTrailer(ctx, s, o); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "more than zstd can make") || !strings.Contains(err.Error(), key) {
		t.Fatalf("a raw size beyond zstd's expansion: %v", err)
	}
}

// TestLimitRaw: a payload that decompresses to more than the raw size read ahead stops there,
// as damage.
func TestLimitRaw(t *testing.T) {
	obj := forgeRawSize(writeObject(t, testHeader(CompressionZstd), zerosSnapshot(2<<10), 100), 1000)
	_, or, err := NewObjectReader(bytes.NewReader(obj), testKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer or.Close()
	or.LimitRaw(1000)
	n, err := io.Copy(io.Discard, or)
	if n > 1000 || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "more than the 1000 bytes its trailer declares") {
		t.Fatalf("read %d bytes, %v; want at most 1000 and ErrCorrupt", n, err)
	}
}

// FuzzSnapshotCheck: however a snapshot stream is cut into writes (pieces shorter and longer
// than the 32-byte hash and the meta page, or one piece), the verdict is the same.
func FuzzSnapshotCheck(f *testing.F) {
	db := fakeDB(2, 1)
	f.Add(db, uint64(1))
	f.Add(db, uint64(3))
	bad := append([]byte(nil), db...)
	bad[600] ^= 1
	f.Add(bad, uint64(7))
	f.Add(zerosSnapshot(2), uint64(2))
	f.Add(db[:boltMetaEnd+3], uint64(5))
	f.Fuzz(func(t *testing.T, stream []byte, seed uint64) {
		rnd := rand.New(rand.NewPCG(seed, seed>>32))
		c := NewSnapshotCheck(testKey)
		var err error
		for rest := stream; len(rest) > 0 && err == nil; {
			n := min(len(rest), 1+rnd.IntN(2*boltMetaEnd))
			_, err = c.Write(rest[:n])
			rest = rest[n:]
		}
		if err == nil {
			err = c.Done()
		}
		if whole := checkSnapshot(stream, 0); (err == nil) != (whole == nil) {
			t.Fatalf("a %d-byte stream: cut into pieces %v, in one piece %v", len(stream), err, whole)
		}
	})
}
