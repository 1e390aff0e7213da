package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/testutil"
)

// These tests restore what the sidecar's backup loop stored from a real member and check
// what a restore keeps besides the keys: leases and auth.

// TestLeasesSurviveCompactionAndRestore: a key whose lease was granted after the full snapshot
// is, after `backup compact` and a restore of the compacted snapshot, attached to a lease
// that exists, with the missing-lease TTL (shorter than the one granted), and expires; a
// lease of the full snapshot keeps its TTL. The compaction gives the lease its TTL; a
// snapshot compacted without (by an older Steward) is repaired by the restore.
func TestLeasesSurviveCompactionAndRestore(t *testing.T) {
	const ttl = 3
	t.Run("compacted with a missing-lease TTL", func(t *testing.T) { testLeasesAfterCompaction(t, ttl, 0) })
	t.Run("compacted without, restored with", func(t *testing.T) { testLeasesAfterCompaction(t, 0, ttl) })
}

func testLeasesAfterCompaction(t *testing.T, compactTTL, restoreTTL int64) {
	ctx := context.Background()
	s := openTestStore(t)
	_, cli, ep := testutil.EmbeddedEtcd(t)
	early, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/lease/early", "e", clientv3.WithLease(early.ID)); err != nil {
		t.Fatal(err)
	}
	a, stop := startBackups(t, s, ep)
	waitStored(t, a, cli, ep, 1)
	late, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/lease/late", "l", clientv3.WithLease(late.ID)); err != nil {
		t.Fatal(err)
	}
	testutil.Write(t, cli, "after", 20)
	waitStored(t, a, cli, ep, 1)
	stop()

	// The late lease is created once: by the compaction if it has a TTL, else by the restore.
	byCompact, byRestore := int64(1), int64(0)
	if compactTTL == 0 {
		byCompact, byRestore = 0, 1
	}
	res, err := restore.Compact(ctx, restore.CompactOptions{Store: s, ScratchDir: t.TempDir(), MissingLeaseTTL: compactTTL})
	if err != nil {
		t.Fatal(err)
	}
	if res.Key == "" || res.Restore.LeasesCreated != byCompact {
		t.Fatalf("compact: %+v (restore %+v); want a snapshot with %d lease created", res, res.Restore, byCompact)
	}
	peer := fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t))
	dir := filepath.Join(t.TempDir(), "restored")
	rres, err := restore.Restore(ctx, restore.Options{Store: s, DataDir: dir, Name: "test", InitialCluster: "test=" + peer, PeerURLs: []string{peer},
		MissingLeaseTTL: restoreTTL})
	if err != nil {
		t.Fatal(err)
	}
	if rres.Full.Key != res.Key || rres.LeasesCreated != byRestore {
		t.Fatalf("restore %+v; want it from the compacted snapshot %s, with %d lease created", rres, res.Key, byRestore)
	}
	_, rcli, _, _ := testutil.EtcdOn(t, dir)
	for _, tc := range []struct {
		key     string
		id      clientv3.LeaseID
		granted int64
	}{{"/lease/early", early.ID, 600}, {"/lease/late", late.ID, max(compactTTL, restoreTTL)}} {
		r, err := rcli.Get(ctx, tc.key)
		if err != nil || len(r.Kvs) != 1 || clientv3.LeaseID(r.Kvs[0].Lease) != tc.id {
			t.Fatalf("restored %s: %+v, %v; want it attached to lease %x", tc.key, r, err, tc.id)
		}
		ttl, err := rcli.TimeToLive(ctx, tc.id)
		if err != nil || ttl.TTL <= 0 || ttl.GrantedTTL != tc.granted {
			t.Fatalf("restored lease %x of %s: %+v, %v; want it to exist and expire, granted %d s", tc.id, tc.key, ttl, err, tc.granted)
		}
	}
	testutil.Eventually(t, 30*time.Second, "/lease/late expires with its lease", func() error {
		r, err := rcli.Get(ctx, "/lease/late")
		if err != nil {
			return err
		}
		if len(r.Kvs) != 0 {
			return errors.New("still there")
		}
		return nil
	})
}

// TestPasswordChangedAfterFullSnapshotIsRestored: a password changed after the full snapshot
// makes the backup loop take another one, so a restore has the new password, not the old.
func TestPasswordChangedAfterFullSnapshotIsRestored(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	_, cli, ep := testutil.EmbeddedEtcd(t)
	if _, err := cli.UserAdd(ctx, "alice", "old-password"); err != nil {
		t.Fatal(err)
	}
	a, _ := startBackups(t, s, ep)
	waitStored(t, a, cli, ep, 1)
	changed := time.Now()
	if _, err := cli.UserChangePassword(ctx, "alice", "new-password"); err != nil {
		t.Fatal(err)
	}
	// By time, not by key: a full snapshot of the same revision within the same second has
	// the same key (names count seconds), and replaces the first.
	testutil.Eventually(t, 30*time.Second, "a full snapshot begun after the password change", func() error {
		if st := a.Status(); !st.LatestFullTime.After(changed) {
			return fmt.Errorf("newest full snapshot %s, begun %s", st.LatestFullKey, st.LatestFullTime.Format(time.RFC3339Nano))
		}
		return nil
	})

	peer := fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t))
	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := restore.Restore(ctx, restore.Options{Store: s, DataDir: dir, Name: "test", InitialCluster: "test=" + peer, PeerURLs: []string{peer}}); err != nil {
		t.Fatal(err)
	}
	_, rcli, rep, _ := testutil.EtcdOn(t, dir)
	// Authentication needs auth enabled, which needs a root user.
	if _, err := rcli.UserAdd(ctx, "root", "root-password"); err != nil {
		t.Fatal(err)
	}
	if _, err := rcli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := rcli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	login := func(password string) error {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{rep}, Username: "alice", Password: password, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := login("new-password"); err != nil {
		t.Fatalf("the restored member refuses alice's new password: %v", err)
	}
	if err := login("old-password"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("the restored member with alice's old password: %v; want %v (the password rolled back)", err, rpctypes.ErrAuthFailed)
	}
}
