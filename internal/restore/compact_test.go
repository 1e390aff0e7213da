package restore

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/backup"
)

// TestCompact: compacting the captured chain uploads one full snapshot at the newest revision
// whose restore, alone or with the rest of the chain, equals the source at that revision; the
// scratch dir is removed.
func TestCompact(t *testing.T) {
	c := getChain(t)
	s := copyStore(t, c.storeURL, nil)
	before := listChain(t, s)
	scratch := t.TempDir()
	var phases []Phase
	res, err := Compact(testCtx(t), CompactOptions{Store: s, ScratchDir: scratch, Progress: func(p Progress) {
		if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
			phases = append(phases, p.Phase)
		}
	}})
	if err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if res.Revision != c.last || res.Key == "" || res.Skipped != "" || res.Size <= 0 {
		t.Fatalf("result %+v: want a snapshot at %d", res, c.last)
	}
	if res.DBSizeAfter <= 0 || res.DBSizeAfter > res.DBSizeBefore {
		t.Fatalf("database %d bytes before compaction, %d after", res.DBSizeBefore, res.DBSizeAfter)
	}
	if entries, _ := os.ReadDir(scratch); len(entries) > 0 {
		t.Fatalf("scratch dir not cleaned: %v", entries)
	}
	if got := fmt.Sprint(phases); !strings.HasSuffix(got, "compact upload verify]") {
		t.Fatalf("phases %s", got)
	}
	after := listChain(t, s)
	if len(after.Fulls) != len(before.Fulls)+1 || len(after.Deltas) != len(before.Deltas) {
		t.Fatalf("chain went from %d fulls/%d deltas to %d/%d; compaction only adds one full snapshot",
			len(before.Fulls), len(before.Deltas), len(after.Fulls), len(after.Deltas))
	}
	newest, _ := after.Newest()
	if newest.Key != res.Key || newest.FirstRev != c.last {
		t.Fatalf("newest full snapshot is %s, want %s", newest.Key, res.Key)
	}
	hdr, or, err := backup.OpenObject(testCtx(t), s, res.Key)
	if err != nil {
		t.Fatal(err)
	}
	or.Close()
	if hdr.ClusterID != c.clusterID || hdr.FirstRev != c.last || hdr.Kind != backup.KindFull || hdr.EtcdVersion == "" {
		t.Fatalf("header %+v: want cluster %x at revision %d", hdr, c.clusterID, c.last)
	}
	// Its creation time is when the last delta was written, so --to-time stays truthful.
	lastDelta := after.Deltas[len(after.Deltas)-1]
	ldh, _ := readEvents(t, s, lastDelta.Key)
	if !hdr.Created.Equal(ldh.Created) {
		t.Fatalf("compacted snapshot dated %s, want the last delta's %s", hdr.Created, ldh.Created)
	}
	if err := backup.VerifyObject(testCtx(t), s, newest); err != nil {
		t.Fatal(err)
	}

	// The whole chain now restores from the compacted snapshot, with no deltas.
	o := restoreOptions(t, s)
	r, err := Restore(testCtx(t), o)
	if err != nil {
		t.Fatalf("Restore after compaction: %v", err)
	}
	if r.Full.Key != res.Key || len(r.Deltas) != 0 || r.Revision != c.last || r.StartRevision != c.last {
		t.Fatalf("restore after compaction: %+v", r)
	}
	checkRestored(t, c, o, c.last)

	// The compacted snapshot alone is enough.
	only := openStore(t, "mem://restore-compacted-only")
	writeObject(t, only, res.Key, readObject(t, s, res.Key))
	o = restoreOptions(t, only)
	if r, err := Restore(testCtx(t), o); err != nil || r.Revision != c.last {
		t.Fatalf("restore of the compacted snapshot alone: %+v, %v", r, err)
	}
	checkRestored(t, c, o, c.last)

	// Older revisions still restore from the older objects.
	o = restoreOptions(t, s)
	o.ToRevision = c.compactRev
	if r, err := Restore(testCtx(t), o); err != nil || r.Full.Key != c.fulls[0].Key {
		t.Fatalf("restore to %d after compaction: %+v, %v", c.compactRev, r, err)
	}

	// Nothing follows the compacted snapshot: a second compaction has nothing to do.
	res2, err := Compact(testCtx(t), CompactOptions{Store: s, ScratchDir: scratch})
	if err != nil || res2.Skipped == "" || res2.Key != "" {
		t.Fatalf("second compaction: %+v, %v", res2, err)
	}
}

// TestCompactFailureCleansUp: a hole stops compaction with the restore's error, nothing is
// uploaded and the scratch dir is removed.
func TestCompactFailureCleansUp(t *testing.T) {
	c := getChain(t)
	s := copyStore(t, c.storeURL, nil)
	chain := listChain(t, s)
	gone := deltasAfter(chain, c.fulls[1].Revision)[3]
	if err := s.Delete(testCtx(t), gone.Key); err != nil {
		t.Fatal(err)
	}
	scratch := t.TempDir()
	_, err := Compact(testCtx(t), CompactOptions{Store: s, ScratchDir: scratch})
	if !errors.Is(err, ErrMissingRevisions) {
		t.Fatalf("compact over a hole: err %v, want ErrMissingRevisions", err)
	}
	if entries, _ := os.ReadDir(scratch); len(entries) > 0 {
		t.Fatalf("scratch dir not cleaned: %v", entries)
	}
	if got := listChain(t, s); len(got.Fulls) != len(chain.Fulls) {
		t.Fatalf("a full snapshot was uploaded despite the failure")
	}
}
