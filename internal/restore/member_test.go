package restore

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/datadir"
)

// The member restored in the comparisons, in a three-member cluster: the membership, the
// WAL's entries and the voters then have an order to get wrong.
const (
	cmpName    = "m1"
	cmpCluster = "m0=http://10.0.0.1:2380,m1=http://10.0.0.2:2380,m2=http://10.0.0.3:2380"
	cmpToken   = "steward-compare"
	cmpPeer    = "http://10.0.0.2:2380"
)

// etcdutlRestore restores snapshotPath into dir with etcdutl's own library: the reference.
func etcdutlRestore(t *testing.T, snapshotPath, dir string, skipHashCheck bool) {
	t.Helper()
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath: snapshotPath, Name: cmpName, OutputDataDir: dir, PeerURLs: []string{cmpPeer},
		InitialCluster: cmpCluster, InitialClusterToken: cmpToken, SkipHashCheck: skipHashCheck,
	})
	if err != nil {
		t.Fatalf("etcdutl's restore: %v", err)
	}
}

// TestRestoreSnapshotMatchesEtcdutl: a data dir written from a snapshot file by RestoreSnapshot
// is the one etcdutl's library writes from the same file (diffDataDirs), and holds what the
// new cluster needs: its ID from the token and membership, this member's ID, the consistent
// index of the membership entries, the snapshot's revision and keys, none of the source's
// members.
func TestRestoreSnapshotMatchesEtcdutl(t *testing.T) {
	f := getFixture(t)
	want, got := filepath.Join(t.TempDir(), "etcdutl.etcd"), filepath.Join(t.TempDir(), "steward.etcd")
	etcdutlRestore(t, f.snapshot, want, false)
	err := RestoreSnapshot(testCtx(t), SnapshotRestoreConfig{
		SnapshotPath: f.snapshot, DataDir: got, Name: cmpName, InitialCluster: cmpCluster, InitialClusterToken: cmpToken, PeerURLs: []string{cmpPeer},
	})
	if err != nil {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	if d := diffDataDirs(t, want, got); d != "" {
		t.Fatalf("RestoreSnapshot's data dir differs from etcdutl's:\n%s", d)
	}
	checkNewMember(t, got, f.snapRev, -1) // the fixture records no key space at the snapshot
}

// TestRestoreSnapshotMatchesEtcdutlWithoutBuckets: the same for a db file (no SHA-256 trailer,
// the hash check skipped) lacking the membership buckets, which both restores create.
func TestRestoreSnapshotMatchesEtcdutlWithoutBuckets(t *testing.T) {
	f := getFixture(t)
	dir := t.TempDir()
	dbFile := filepath.Join(dir, "db")
	data, err := os.ReadFile(f.snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dbFile, data[:len(data)-sha256.Size], 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(dbFile, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range []backend.Bucket{schema.Members, schema.MembersRemoved, schema.Cluster} {
			if err := tx.DeleteBucket(b.Name()); err != nil {
				return fmt.Errorf("delete bucket %s: %w", b.Name(), err)
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	want, got := filepath.Join(dir, "etcdutl.etcd"), filepath.Join(dir, "steward.etcd")
	etcdutlRestore(t, dbFile, want, true)
	err = RestoreSnapshot(testCtx(t), SnapshotRestoreConfig{
		SnapshotPath: dbFile, DataDir: got, Name: cmpName, InitialCluster: cmpCluster, InitialClusterToken: cmpToken, PeerURLs: []string{cmpPeer},
		SkipHashCheck: true,
	})
	if err != nil {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	if d := diffDataDirs(t, want, got); d != "" {
		t.Fatalf("RestoreSnapshot's data dir differs from etcdutl's:\n%s", d)
	}
	checkNewMember(t, got, f.snapRev, -1)
}

// TestRestoreMatchesEtcdutl: the same for a restore from the store, which writes the database
// straight from the object: the data dir of Restore at a full snapshot's revision is the one
// etcdutl's library writes from that snapshot's payload.
func TestRestoreMatchesEtcdutl(t *testing.T) {
	c := getChain(t)
	s := openStore(t, c.storeURL)
	full := c.fulls[1]
	_, or, err := backup.OpenObject(testCtx(t), s, full.Key)
	if err != nil {
		t.Fatal(err)
	}
	payload := filepath.Join(t.TempDir(), "snapshot.db")
	pf, err := os.Create(payload)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pf.ReadFrom(or)
	or.Close()
	if cerr := pf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("read %s: %v", full.Key, err)
	}
	want := filepath.Join(t.TempDir(), "etcdutl.etcd")
	etcdutlRestore(t, payload, want, false)

	o := restoreOptions(t, s)
	o.Name, o.InitialCluster, o.InitialClusterToken, o.PeerURLs = cmpName, cmpCluster, cmpToken, []string{cmpPeer}
	o.ToRevision = full.Revision
	res, err := Restore(testCtx(t), o)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if res.Full.Key != full.Key || res.Revisions != 0 {
		t.Fatalf("result %+v: want %s alone", res, full.Key)
	}
	if d := diffDataDirs(t, want, o.DataDir); d != "" {
		t.Fatalf("Restore's data dir differs from etcdutl's:\n%s", d)
	}
	checkNewMember(t, o.DataDir, full.Revision, len(c.states[full.Revision]))
}

// checkNewMember checks the restored dir's identity and data on its own terms: keys live keys
// at revision rev (-1: some).
func checkNewMember(t *testing.T, dir string, rev int64, keys int) {
	t.Helper()
	urls, err := types.NewURLsMap(cmpCluster)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := membership.NewClusterFromURLsMap(zap.NewNop(), cmpToken, urls)
	if err != nil {
		t.Fatal(err)
	}
	memberID, clusterID, err := datadir.ReadWALMetadata(filepath.Join(dir, "member", "wal"))
	if err != nil {
		t.Fatalf("WAL metadata: %v", err)
	}
	if clusterID != uint64(cl.ID()) || memberID != uint64(cl.MemberByName(cmpName).ID) {
		t.Fatalf("WAL names member %x of cluster %x, want %s of %s", memberID, clusterID, cl.MemberByName(cmpName).ID, cl.ID())
	}
	var ids []string
	for _, id := range cl.MemberIDs() {
		ids = append(ids, id.String())
	}
	db := dumpDB(t, DBPath(dir))
	if members := slices.Sorted(maps.Keys(db[string(schema.Members.Name())])); !slices.Equal(members, ids) {
		t.Fatalf("database members %v, want %v", members, ids)
	}
	if removed := db[string(schema.MembersRemoved.Name())]; len(removed) > 0 {
		t.Fatalf("database keeps removed members %v", slices.Collect(maps.Keys(removed)))
	}
	if index, term := consistentIndex(t, dir); index != 3 || term != 1 {
		t.Fatalf("consistent index %d, term %d; want 3 and 1 (the three membership entries)", index, term)
	}
	if got, _, err := ReadRevision(dir); err != nil || got != rev {
		t.Fatalf("revision %d (%v), want %d", got, err, rev)
	}
	if live := countLiveKeys(db[string(schema.Key.Name())]); live != keys && (keys >= 0 || live == 0) {
		t.Fatalf("%d live keys, want %d", live, keys)
	}
}

// diffDataDirs compares two member dirs by what etcd reads from them: the files' names, the
// WAL (metadata, hard state, entries, snapshot records), the raft snapshot in member/snap, and
// every record of every bucket of the database. It returns the differences, or "".
func diffDataDirs(t *testing.T, want, got string) string {
	t.Helper()
	var d []string
	diff := func(what string, w, g any) {
		if fmt.Sprint(w) != fmt.Sprint(g) {
			d = append(d, fmt.Sprintf("%s: etcdutl %v, ours %v", what, w, g))
		}
	}
	diff("files", listFiles(t, want), listFiles(t, got))
	wm, ws, we, wsnaps := readWAL(t, want)
	gm, gs, ge, gsnaps := readWAL(t, got)
	diff("WAL metadata", wm, gm)
	diff("WAL hard state", ws, gs)
	diff("WAL entries", we, ge)
	diff("WAL snapshot records", wsnaps, gsnaps)
	diff("raft snapshot", readSnap(t, want), readSnap(t, got))
	wdb, gdb := dumpDB(t, DBPath(want)), dumpDB(t, DBPath(got))
	for _, b := range slices.Sorted(maps.Keys(mergeKeys(wdb, gdb))) {
		wb, gb := wdb[b], gdb[b]
		n := 0
		for _, k := range slices.Sorted(maps.Keys(mergeKeys(wb, gb))) {
			wv, wok := wb[k]
			gv, gok := gb[k]
			if wok != gok || !bytes.Equal(wv, gv) {
				if n++; n <= 5 {
					d = append(d, fmt.Sprintf("bucket %s key %q: etcdutl %q (%t), ours %q (%t)", b, k, wv, wok, gv, gok))
				}
			}
		}
		if n > 5 {
			d = append(d, fmt.Sprintf("bucket %s: %d more records differ", b, n-5))
		}
	}
	return strings.Join(d, "\n")
}

// listFiles lists the member dir's files but the database (whose bytes differ with its page
// layout; dumpDB compares its contents), with their sizes.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || path == DBPath(dir) {
			return err
		}
		st, err := e.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files = append(files, fmt.Sprintf("%s (%d bytes, %v)", rel, st.Size(), st.Mode()))
		return nil
	})
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	return files
}

func readWAL(t *testing.T, dir string) (metadata []byte, state string, ents []string, snaps []walpb.Snapshot) {
	t.Helper()
	walDir := filepath.Join(dir, "member", "wal")
	snaps, err := wal.ValidSnapshotEntries(zap.NewNop(), walDir)
	if err != nil {
		t.Fatalf("WAL snapshot records in %s: %v", walDir, err)
	}
	w, err := wal.OpenForRead(zap.NewNop(), walDir, walpb.Snapshot{})
	if err != nil {
		t.Fatalf("open WAL %s: %v", walDir, err)
	}
	defer w.Close()
	metadata, st, es, err := w.ReadAll()
	if err != nil {
		t.Fatalf("read WAL %s: %v", walDir, err)
	}
	for _, e := range es {
		ents = append(ents, e.String())
	}
	return metadata, st.String(), ents, snaps
}

// readSnap reads the raft snapshot of member/snap: its metadata, and the membership it carries
// in etcd's v2 store form as each node's path and value (the order of its nodes and their
// indexes follow a map's iteration, in etcdutl's restore as in ours).
func readSnap(t *testing.T, dir string) string {
	t.Helper()
	s, err := snap.New(zap.NewNop(), filepath.Join(dir, "member", "snap")).Load()
	if err != nil {
		t.Fatalf("raft snapshot in %s: %v", dir, err)
	}
	var store struct{ Root v2Node }
	if err := json.Unmarshal(s.Data, &store); err != nil {
		t.Fatalf("raft snapshot in %s: membership: %v", dir, err)
	}
	var nodes []string
	var walk func(n v2Node)
	walk = func(n v2Node) {
		nodes = append(nodes, n.Path+"="+n.Value)
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(store.Root)
	slices.Sort(nodes)
	return fmt.Sprintf("%s, membership %v", s.Metadata.String(), nodes)
}

type v2Node struct {
	Path, Value string
	Children    map[string]v2Node
}

// dumpDB reads every record of every bucket.
func dumpDB(t *testing.T, path string) map[string]map[string][]byte {
	t.Helper()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	out := map[string]map[string][]byte{}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			recs := map[string][]byte{}
			out[string(name)] = recs
			return b.ForEach(func(k, v []byte) error {
				recs[string(k)] = bytes.Clone(v)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return out
}

// countLiveKeys counts the keys whose newest record in the key bucket is not a tombstone.
func countLiveKeys(recs map[string][]byte) int {
	live := map[string]bool{}
	for _, k := range slices.Sorted(maps.Keys(recs)) {
		var kv mvccpb.KeyValue
		if len(recs[k]) == 0 || kv.Unmarshal(recs[k]) != nil {
			continue // the empty record a revision bump leaves
		}
		live[string(kv.Key)] = !mvcc.IsTombstone([]byte(k))
	}
	n := 0
	for _, l := range live {
		if l {
			n++
		}
	}
	return n
}

func mergeKeys[V any](a, b map[string]V) map[string]bool {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}
