package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/etcd-steward/steward/internal/store"
)

func openStore(t *testing.T, u string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), u, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fakeDB returns bytes shaped like etcd's snapshot stream: a bbolt database of 512-byte pages
// (a sound meta page 0, the rest made up), then its SHA-256.
func fakeDB(pages int, seed int64) []byte {
	db := payload(pages*512, seed)
	copy(db, boltMeta(512, uint64(pages)))
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

// boltMeta is a sound bbolt meta page 0 of a database of pages pages of pageSize bytes: its
// page header and meta (TestSnapshotCheckRealDatabase checks the layout against bbolt's own).
func boltMeta(pageSize uint32, pages uint64) []byte {
	b := make([]byte, boltMetaEnd)
	le := binary.NativeEndian
	le.PutUint16(b[8:], boltMetaPage)
	m := b[boltPageHeader:]
	le.PutUint32(m, boltMagic)
	le.PutUint32(m[4:], boltVersion)
	le.PutUint32(m[8:], pageSize)
	le.PutUint64(m[40:], pages)
	h := fnv.New64a()
	h.Write(m[:boltMetaSummed])
	le.PutUint64(m[boltMetaSummed:], h.Sum64())
	return b
}

func putFull(t *testing.T, s *store.Store, rev int64, data []byte) string {
	t.Helper()
	key := FullKey(1, rev, t0)
	hdr := Header{Kind: KindFull, Timeline: 1, Compression: CompressionZstd, EtcdVersion: "3.6.4", ClusterID: 42, FirstRev: rev, Created: t0}
	if _, err := WriteObject(context.Background(), s, key, hdr, func(w *ObjectWriter) error {
		_, err := w.Write(data)
		w.SetLastRev(rev)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return key
}

// putDelta writes a delta named first-last holding one put per revision
// in evFirst..evLast.
func putDelta(t *testing.T, s *store.Store, first, last, evFirst, evLast int64) string {
	t.Helper()
	var revs []int64
	for r := evFirst; r <= evLast; r++ {
		revs = append(revs, r)
	}
	return putDeltaRevs(t, s, first, last, revs)
}

// putDeltaRevs writes a delta named first-last holding one put per revision in revs.
func putDeltaRevs(t *testing.T, s *store.Store, first, last int64, revs []int64) string {
	t.Helper()
	key := DeltaKey(1, first, last)
	hdr := Header{Kind: KindDelta, Timeline: 1, Compression: CompressionZstd, EtcdVersion: "3.6.4", ClusterID: 42, FirstRev: first, LastRev: last}
	if _, err := WriteObject(context.Background(), s, key, hdr, func(w *ObjectWriter) error {
		ew := NewEventWriter(w)
		for _, r := range revs {
			if err := ew.WriteEvent(put("/k", strings.Repeat("x", int(r%50)), 1, r, r)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return key
}

func rewrite(t *testing.T, s *store.Store, key string, edit func([]byte) []byte) {
	t.Helper()
	r, err := s.NewReader(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.NewWriter(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(edit(b))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyCleanChain(t *testing.T) {
	s := openStore(t, "mem://")
	putFull(t, s, 100, fakeDB(40, 1))
	putDelta(t, s, 101, 150, 101, 150)
	putDelta(t, s, 151, 200, 151, 200)
	putFull(t, s, 200, fakeDB(10, 2))
	putDelta(t, s, 190, 260, 190, 260) // overlaps: info only

	var calls, lastDone, lastTotal int64
	rep, err := Verify(context.Background(), s, func(done, total int64) {
		if done < lastDone {
			t.Errorf("progress went back from %d to %d", lastDone, done)
		}
		calls++
		lastDone, lastTotal = done, total
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || len(rep.Bad) != 0 {
		t.Fatalf("clean chain not OK: bad %v, issues %v", rep.Bad, rep.Issues)
	}
	if rep.Objects != 5 || rep.Events != 50+50+71 {
		t.Fatalf("read %d objects and %d events", rep.Objects, rep.Events)
	}
	if len(rep.Issues) != 1 || rep.Issues[0].Kind != IssueOverlap {
		t.Fatalf("issues = %v, want one overlap", rep.Issues)
	}
	if len(rep.Timelines) != 1 || rep.Timelines[0].ClusterID != 42 || fmt.Sprint(rep.Timelines[0].Coverage) != "[100-260]" {
		t.Fatalf("timelines = %+v", rep.Timelines)
	}
	if calls < 2 || lastDone != lastTotal || lastTotal != rep.Bytes {
		t.Fatalf("progress: %d calls, ended at %d/%d, read %d", calls, lastDone, lastTotal, rep.Bytes)
	}
}

func TestVerifyNamesEveryBadObject(t *testing.T) {
	s := openStore(t, "mem://")
	putFull(t, s, 100, fakeDB(20, 3))
	putDelta(t, s, 101, 103, 101, 103)
	flipped := putDelta(t, s, 104, 110, 104, 110)
	putDelta(t, s, 111, 120, 111, 120)
	short := putDelta(t, s, 121, 130, 121, 125) // claims more than it holds
	truncated := putDelta(t, s, 131, 140, 131, 140)
	holed := putDeltaRevs(t, s, 151, 160, []int64{151, 152, 153, 154, 157, 158, 159, 160}) // both ends, a gap inside
	mislabelled := DeltaKey(1, 141, 150)
	badDB := FullKey(1, 300, t0)
	putFull(t, s, 300, append(fakeDB(4, 4)[:4*512], make([]byte, 32)...)) // wrong etcd SHA-256
	putDelta(t, s, 141, 149, 141, 149)
	// Copy the 141-149 object under a 141-150 name: header and name disagree.
	r, _ := s.NewReader(context.Background(), DeltaKey(1, 141, 149))
	b, _ := io.ReadAll(r)
	r.Close()
	s.Delete(context.Background(), DeltaKey(1, 141, 149))
	w, _ := s.NewWriter(context.Background(), mislabelled)
	w.Write(b)
	w.Close()
	// A stranger in the layout.
	w, _ = s.NewWriter(context.Background(), "v1/full/README")
	w.Write([]byte("hello"))
	w.Close()

	rewrite(t, s, flipped, func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b })
	rewrite(t, s, truncated, func(b []byte) []byte { return b[:len(b)-TrailerSize/2] })

	rep, err := Verify(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() {
		t.Fatal("report is OK despite damage")
	}
	want := map[string]string{
		flipped:     "damaged",
		short:       "events span revisions 121-125 but the object claims 121-130",
		truncated:   "truncated",
		mislabelled: "the header says revisions 141-149, the name says 141-150",
		badDB:       "etcd snapshot's own SHA-256",
		holed:       "revisions 155-156 are missing inside the object",
	}
	var gotKeys []string
	for _, b := range rep.Bad {
		gotKeys = append(gotKeys, b.Key)
		w, ok := want[b.Key]
		if !ok {
			t.Errorf("unexpected bad object %s: %v", b.Key, b.Err)
			continue
		}
		if !strings.Contains(b.Err.Error(), w) || !strings.Contains(b.Err.Error(), b.Key) || !errors.Is(b.Err, ErrCorrupt) {
			t.Errorf("%s: error %q does not name it and say %q", b.Key, b.Err, w)
		}
	}
	sort.Strings(gotKeys)
	if len(gotKeys) != len(want) {
		t.Errorf("bad objects = %v, want %d of them", gotKeys, len(want))
	}
	if len(rep.Foreign) != 1 || rep.Foreign[0] != "v1/full/README" {
		t.Errorf("foreign = %v", rep.Foreign)
	}
	// Damaged objects count as missing: the damaged delta leaves a hole
	// (the damage after 120 is at the end of the chain, so no hole there).
	if got := describeIssues(rep.Issues); got != "error hole 104-110 [D101-103 D111-120]" {
		t.Errorf("issues = %q", got)
	}
	if got := rep.Timelines[0].Coverage; len(got) != 1 || got[0] != (Range{100, 103}) {
		t.Errorf("coverage = %v, want 100-103", got)
	}
}

func TestWriteObjectDiscardsFailures(t *testing.T) {
	s := openStore(t, "mem://")
	hdr := Header{Kind: KindDelta, Timeline: 1, Compression: CompressionZstd, FirstRev: 1, LastRev: 2}
	boom := errors.New("watch broke")
	_, err := WriteObject(context.Background(), s, DeltaKey(1, 1, 2), hdr, func(w *ObjectWriter) error {
		w.Write(make([]byte, 1<<20))
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), DeltaKey(1, 1, 2)) {
		t.Fatalf("WriteObject = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, err = WriteObject(ctx, s, DeltaKey(1, 1, 2), hdr, func(w *ObjectWriter) error {
		w.Write([]byte("x"))
		cancel()
		return nil
	})
	if err == nil {
		t.Fatal("WriteObject with a cancelled context succeeded")
	}
	if c, _ := ListChain(context.Background(), s); len(c.Objects()) != 0 {
		t.Fatalf("failed writes left %v", c.Objects())
	}
}

func TestOpenObject(t *testing.T) {
	s := openStore(t, "mem://")
	db := fakeDB(3, 9)
	key := putFull(t, s, 77, db)
	hdr, or, err := OpenObject(context.Background(), s, key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(or)
	if err != nil || !bytes.Equal(got, db) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	if hdr.ClusterID != 42 || hdr.EtcdVersion != "3.6.4" || or.LastRev() != 77 {
		t.Fatalf("header %+v, last rev %d", hdr, or.LastRev())
	}
	if err := or.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenObject(context.Background(), s, FullKey(1, 1, t0)); !store.IsNotFound(err) {
		t.Fatalf("missing object: %v", err)
	}
}

// The whole path through a real S3 wire protocol: write a chain with the
// AWS SDK behind gocloud, list it, verify it, plan and read a restore.
func TestChainOverS3(t *testing.T) {
	be := s3mem.New()
	if err := be.CreateBucket("etcd-backups"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(be).Server())
	t.Cleanup(srv.Close)
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "steward", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": empty, "AWS_SHARED_CREDENTIALS_FILE": empty, "AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
	s := openStore(t, "s3://etcd-backups/clusters/a?endpoint="+srv.URL+"&use_path_style=true&region=us-east-1")

	db := fakeDB(3000, 5) // 1.5 MiB
	putFull(t, s, 10, db)
	putDelta(t, s, 11, 60, 11, 60)
	putDelta(t, s, 61, 90, 61, 90)

	rep, err := Verify(context.Background(), s, nil)
	if err != nil || !rep.OK() || rep.Objects != 3 || rep.Events != 80 {
		t.Fatalf("verify over S3: %+v, %v", rep, err)
	}
	c, err := ListChain(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Plan(75)
	if err != nil || p.Full.FirstRev != 10 || len(p.Deltas) != 2 {
		t.Fatalf("plan: %+v, %v", p, err)
	}
	_, or, err := OpenObject(context.Background(), s, p.Full.Key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(or)
	or.Close()
	if err != nil || !bytes.Equal(got, db) {
		t.Fatalf("full snapshot over S3: %d bytes, %v", len(got), err)
	}
	_, or, err = OpenObject(context.Background(), s, p.Deltas[1].Key)
	if err != nil {
		t.Fatal(err)
	}
	defer or.Close()
	er := NewEventReader(or, p.Deltas[1].Key)
	var revs []int64
	for {
		ev, err := er.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != mvccpb.PUT {
			t.Fatalf("event type %v", ev.Type)
		}
		revs = append(revs, ev.Kv.ModRevision)
	}
	if len(revs) != 30 || revs[0] != 61 || revs[29] != 90 {
		t.Fatalf("delta revisions %v", revs)
	}
}

// TestVerifyFindsTwoClustersInOneTimeline: a timeline whose objects hold two clusters'
// histories (written before timelines, or by hand) is an error, though every object is sound
// and the revisions follow each other.
func TestVerifyFindsTwoClustersInOneTimeline(t *testing.T) {
	s := openStore(t, "mem://"+t.Name())
	putFull(t, s, 100, fakeDB(4, 1))
	putDelta(t, s, 101, 110, 101, 110)
	key := DeltaKey(1, 111, 120)
	hdr := Header{Kind: KindDelta, Timeline: 1, Compression: CompressionZstd, EtcdVersion: "3.6.4", ClusterID: 43, FirstRev: 111, LastRev: 120}
	if _, err := WriteObject(context.Background(), s, key, hdr, func(w *ObjectWriter) error {
		ew := NewEventWriter(w)
		for r := int64(111); r <= 120; r++ {
			if err := ew.WriteEvent(put("/k", "other", 1, r, r)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || len(rep.Bad) != 0 || len(rep.Issues) != 1 || rep.Issues[0].Kind != IssueClusters || rep.Issues[0].Timeline != 1 ||
		!strings.Contains(rep.Issues[0].String(), "cluster 2b (1 objects, e.g. "+key+")") {
		t.Fatalf("report: %+v", rep)
	}
}

// TestVerifyFindsDivergedOverlaps: overlapping deltas that agree are an overlap (info); ones
// that hold different events at a revision are two histories in one timeline: an error that
// names both deltas and the first revision where they differ.
func TestVerifyFindsDivergedOverlaps(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "mem://")
	putFull(t, s, 10, fakeDB(4, 1))
	a := putDelta(t, s, 11, 20, 11, 20)
	putDelta(t, s, 15, 25, 15, 25) // the same events at 15-20: a hand-off between leaders
	rep, err := Verify(ctx, s, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("agreeing overlap: %+v, %v", rep, err)
	}
	// Another history's delta at 17-30: one event differs at 18.
	key := DeltaKey(1, 17, 30)
	hdr := Header{Kind: KindDelta, Timeline: 1, Compression: CompressionZstd, EtcdVersion: "3.6.4", ClusterID: 42, FirstRev: 17, LastRev: 30}
	if _, err := WriteObject(ctx, s, key, hdr, func(w *ObjectWriter) error {
		ew := NewEventWriter(w)
		for r := int64(17); r <= 30; r++ {
			v := strings.Repeat("x", int(r%50))
			if r == 18 {
				v = "another history"
			}
			if err := ew.WriteEvent(put("/k", v, 1, r, r)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rep, err = Verify(ctx, s, nil)
	if err != nil || rep.OK() {
		t.Fatalf("diverged overlap passed: %+v, %v", rep, err)
	}
	i := slices.IndexFunc(rep.Issues, func(is Issue) bool { return is.Kind == IssueDiverged })
	if i < 0 || rep.Issues[i].From != 18 || !slices.Contains(rep.Issues[i].Keys, key) || !slices.Contains(rep.Issues[i].Keys, a) || !strings.Contains(rep.Issues[i].Message, "revision 18") {
		t.Fatalf("issues %+v: want revision 18 of %s and %s named", rep.Issues, a, key)
	}
}
