package restore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/seal"
	"github.com/etcd-steward/steward/internal/store"
)

// encryptedCopy writes every object of the chain fixture, encrypted with a new keyring, into a
// new store read with that keyring.
func encryptedCopy(t *testing.T, c *chainFixture) *store.Store {
	t.Helper()
	keys, err := seal.NewKeyring("test keys", "k1", map[string][]byte{"k1": bytes.Repeat([]byte{7}, seal.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	src := openStore(t, c.storeURL)
	dst := openStore(t, "mem://"+t.Name())
	dst.SetKeys(keys)
	for _, o := range listChain(t, src).Objects() {
		hdr, or, err := backup.OpenObject(testCtx(t), src, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(or)
		or.Close()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := backup.WriteObject(testCtx(t), dst, o.Key, hdr, func(w *backup.ObjectWriter) error {
			w.SetLastRev(or.LastRev())
			_, err := w.Write(data)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// plantTimeline writes into s, as anyone who may write to it can (without its keys when
// keyless), a whole full snapshot of timeline tl of cluster id, newer than every backup.
func plantTimeline(t *testing.T, c *chainFixture, s *store.Store, tl uint32, id uint64, keyless bool) string {
	t.Helper()
	hdr, err := backup.ReadHeader(testCtx(t), s, c.fulls[len(c.fulls)-1].Key)
	if err != nil {
		t.Fatal(err)
	}
	hdr.Timeline, hdr.ClusterID, hdr.Created = tl, id, hdr.Created.Add(time.Hour)
	hdr.FirstRev, hdr.LastRev = c.last+100, c.last+100
	if keyless {
		keys := s.Keys()
		s.SetKeys(nil)
		defer s.SetKeys(keys)
	}
	key := backup.FullKey(tl, hdr.FirstRev, hdr.Created)
	if _, err := backup.WriteObject(testCtx(t), s, key, hdr, func(w *backup.ObjectWriter) error {
		_, err := w.Write(withSHA(make([]byte, 1<<20)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return key
}

func dryRun(t *testing.T, s *store.Store, mod func(*Options)) (Result, error) {
	t.Helper()
	o := Options{Store: s, DryRun: true}
	if mod != nil {
		mod(&o)
	}
	return Restore(testCtx(t), o)
}

// TestRestorePassesOverForgedTimeline: in an encrypted store, a newer timeline planted without
// the keys does not change what a restore picks, with or without the cluster's IDs: it
// restores the newest revision of the genuine timeline and says which it passed over and why.
func TestRestorePassesOverForgedTimeline(t *testing.T) {
	c := getChain(t)
	s := encryptedCopy(t, c)
	key := plantTimeline(t, c, s, 2, c.clusterID, true)
	for _, own := range [][]uint64{nil, {c.clusterID}} {
		res, err := dryRun(t, s, func(o *Options) { o.ClusterIDs = own })
		if err != nil || res.Timeline != 1 || res.Revision != c.last {
			t.Fatalf("cluster IDs %x: restore of a store with a planted timeline: %+v, %v; want timeline 1 at revision %d", own, res, err, c.last)
		}
		if own == nil && (len(res.PassedOver) != 1 || !strings.Contains(res.PassedOver[0], key) || !strings.Contains(res.PassedOver[0], "not encrypted")) {
			t.Fatalf("passed over %q, want timeline 2's %s, not encrypted", res.PassedOver, key)
		}
	}
}

// TestRestoreRefusesTamperedHeader: in an encrypted store, a genuine full snapshot copied to a
// new timeline with its header's timeline rewritten (and its checksum made to match) does not
// decrypt: a default restore passes it over, and a restore of that timeline is refused.
func TestRestoreRefusesTamperedHeader(t *testing.T) {
	c := getChain(t)
	s := encryptedCopy(t, c)
	newest := c.fulls[len(c.fulls)-1].Key
	hdr, err := backup.ReadHeader(testCtx(t), s, newest)
	if err != nil {
		t.Fatal(err)
	}
	obj := readObject(t, s, newest)
	n := int(binary.BigEndian.Uint16(obj[10:]))
	binary.BigEndian.PutUint32(obj[48:], 2) // the timeline
	binary.BigEndian.PutUint32(obj[n-4:], crc32.Checksum(obj[:n-4], crc32.MakeTable(crc32.Castagnoli)))
	key := backup.FullKey(2, hdr.FirstRev, hdr.Created)
	writeObject(t, s, key, obj)
	if got, err := backup.ReadHeader(testCtx(t), s, key); err != nil || got.Timeline != 2 {
		t.Fatalf("the tampered header reads as %+v, %v; want a sound header of timeline 2", got, err)
	}

	res, err := dryRun(t, s, nil)
	if err != nil || res.Timeline != 1 || res.Revision != c.last || len(res.PassedOver) != 1 || !strings.Contains(res.PassedOver[0], "does not decrypt") {
		t.Fatalf("restore of a store with a tampered header: %+v, %v; want timeline 1 at revision %d, timeline 2 passed over as not decrypting", res, err, c.last)
	}
	_, err = dryRun(t, s, func(o *Options) { o.Timeline = 2 })
	if !errors.Is(err, backup.ErrCorrupt) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "does not decrypt") {
		t.Fatalf("restore of the tampered timeline: %v; want it refused as not decrypting, naming %s", err, key)
	}
}

// TestRestoreRefusesAnotherClustersTimeline: another cluster's timeline copied into the store
// is not restored by default: without cluster IDs the restore is refused naming both
// clusters; with the cluster's IDs it restores its own; named, the other one is read.
func TestRestoreRefusesAnotherClustersTimeline(t *testing.T) {
	c := getChain(t)
	s := copyStore(t, c.storeURL, nil)
	const other = 0xbad
	plantTimeline(t, c, s, 2, other, false)

	_, err := dryRun(t, s, nil)
	if !errors.Is(err, backup.ErrSeveralClusters) || !strings.Contains(err.Error(), "cluster bad (timelines 2)") ||
		!strings.Contains(err.Error(), "--cluster-id") {
		t.Fatalf("default restore of a store with two clusters' timelines: %v; want it refused, naming cluster bad and --cluster-id", err)
	}
	if res, err := dryRun(t, s, func(o *Options) { o.ClusterIDs = []uint64{c.clusterID} }); err != nil || res.Timeline != 1 || res.Revision != c.last {
		t.Fatalf("restore of its own cluster: %+v, %v; want timeline 1 at revision %d", res, err, c.last)
	}
	if res, err := dryRun(t, s, func(o *Options) { o.ClusterIDs = []uint64{other} }); err != nil || res.Timeline != 2 {
		t.Fatalf("restore of the other cluster, named: %+v, %v; want timeline 2", res, err)
	}
	if res, err := dryRun(t, s, func(o *Options) { o.Timeline = 2 }); err != nil || res.Timeline != 2 {
		t.Fatalf("restore of timeline 2, named: %+v, %v", res, err)
	}
}
