package local

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/heal"
	"github.com/etcd-steward/steward/internal/store"
)

// TestHealerTrustsOnlyRecordedBackup: a delta planted on the cluster's own timeline, whose
// name and header claim far more than was ever backed up, does not raise the backup revision
// the healer decides with above what the backup leader recorded: a survivor that holds more
// than the recorded backup is still the recovery's source.
func TestHealerTrustsOnlyRecordedBackup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := Dir(t.TempDir())
	if err := os.MkdirAll(d.Backups(), 0o700); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Backup: "file://" + d.Backups()}
	const id, stored, planted = 0xc1, 100, 1_000_000
	st, err := store.Open(ctx, spec.Backup, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	write := func(key string, hdr backup.Header) {
		t.Helper()
		if _, err := backup.WriteObject(ctx, st, key, hdr, func(*backup.ObjectWriter) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	write(backup.FullKey(1, stored, now), backup.Header{Kind: backup.KindFull, ClusterID: id, Timeline: 1, FirstRev: stored, LastRev: stored, Created: now})
	if err := (View{Dir: d, Name: "m0"}).PublishBackup(ctx, cluster.BackupStatus{Leader: true, Timeline: 1, CurrentRevision: stored, CurrentAt: now}); err != nil {
		t.Fatal(err)
	}
	write(backup.DeltaKey(1, stored+1, planted), backup.Header{Kind: backup.KindDelta, ClusterID: id, Timeline: 1, FirstRev: stored + 1, LastRev: planted, Created: now})

	h := &healer{}
	rev := h.backupRevision(ctx, d, spec.Backup, []uint64{id})
	if rev != stored {
		t.Fatalf("backup revision %d, want %d: the revision the backup leader recorded, not the planted delta's", rev, stored)
	}
	survivor := &cluster.Report{DataValid: true, ClusterID: "c1", MemberID: "a", LastTerm: 2, LastIndex: 600, Applied: 600, Revision: 500}
	st0 := heal.Status{ClusterID: "c1", Voters: []cluster.Voter{{Name: "m0", ID: "a"}, {Name: "m1", ID: "b"}, {Name: "m2", ID: "c"}}}
	c := heal.Choose(st0, []heal.Member{{Name: "m0", Report: survivor}, {Name: "m1"}, {Name: "m2"}}, heal.Backup{Configured: true, Revision: rev})
	if c.Mode != cluster.RecoverFromSurvivor || c.Seed != "m0" {
		t.Fatalf("recovery from %q (%s): %s; want the survivor m0", c.Mode, c.Seed, c.Reason)
	}
}
