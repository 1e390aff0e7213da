package local

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestBackupsAcrossLeaderChangeAndStoreOutage runs a 3-member cluster backing up to a real
// S3 wire protocol while a client writes: the backup leader's etcd is killed mid-stream, and
// later the store goes down and comes back. The chain must stay gapless and verifiable,
// BackupReady must follow the outage, and etcd must keep serving throughout.
func TestBackupsAcrossLeaderChangeAndStoreOutage(t *testing.T) {
	s3 := testutil.FakeS3(t, "backups")
	storeURL := s3.StoreURL("backups", "leader-change")
	dir := t.TempDir()
	r := startClusterWith(t, UpOptions{Dir: dir, Members: 3, BasePort: 21600, Backup: storeURL,
		SidecarArgs: []string{"--delta-period=500ms"}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	cli, err := clientv3.New(clientv3.Config{Endpoints: r.spec.ClientURLs(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	// A writer that records the newest acknowledged revision.
	var lastAcked atomic.Int64
	writeCtx, stopWriting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; writeCtx.Err() == nil; i++ {
			pctx, pcancel := context.WithTimeout(writeCtx, 2*time.Second)
			resp, err := cli.Put(pctx, fmt.Sprintf("/load/%d", i%50), fmt.Sprintf("value-%d", i))
			pcancel()
			if err == nil {
				lastAcked.Store(max(lastAcked.Load(), resp.Header.Revision))
			}
		}
	}()

	backupCovers := func(rev int64, wantReady bool) func() error {
		return func() error {
			rep, err := Status(ctx, Dir(dir))
			if err != nil {
				return err
			}
			b := rep.Backup
			if b == nil || b.LatestDeltaRevision < rev || b.Ready != wantReady {
				return fmt.Errorf("backup %+v; want delta revision >= %d, ready %t", b, rev, wantReady)
			}
			// What a restore reaches: from a full snapshot of the timeline written up to rev.
			if w := b.Recoverable; wantReady && (w == nil || w.Timeline != b.Timeline || w.FirstRevision < 1 || w.LastRevision < rev || w.ClusterID != rep.Cluster.ClusterID) {
				return fmt.Errorf("recoverable %+v; want timeline %d of cluster %s up to at least revision %d", w, b.Timeline, rep.Cluster.ClusterID, rev)
			}
			return nil
		}
	}
	testutil.Eventually(t, 60*time.Second, "first deltas stored", backupCovers(20, true))

	// Hand-over: move etcd leadership; backup leadership must follow to the new leader's sidecar.
	rep, err := Status(ctx, Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	var leader, target MemberReport
	for _, m := range rep.Members {
		if m.Role == "leader" {
			leader = m
		} else if target.Name == "" {
			target = m
		}
	}
	if rep.Backup.Leader != leader.Name {
		t.Fatalf("backup leader %q is not etcd's leader %q", rep.Backup.Leader, leader.Name)
	}
	lc, err := clientv3.New(clientv3.Config{Endpoints: []string{leader.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	var targetID uint64
	if _, err := fmt.Sscanf(target.ID, "%x", &targetID); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.MoveLeader(ctx, targetID); err != nil {
		t.Fatal(err)
	}
	mark := lastAcked.Load()
	testutil.Eventually(t, 60*time.Second, "backup leadership follows etcd leadership", func() error {
		rep, err := Status(ctx, Dir(dir))
		if err != nil {
			return err
		}
		if b := rep.Backup; b == nil || b.Leader != target.Name || b.LatestDeltaRevision <= mark {
			return fmt.Errorf("backup %+v; want leader %s past revision %d", b, target.Name, mark)
		}
		return nil
	})

	// Crash: kill -9 the leader's etcd mid-stream; writes and backups go on.
	if err := syscall.Kill(target.EtcdPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	mark = lastAcked.Load()
	testutil.Eventually(t, 60*time.Second, "writes and backups continue after the leader crashed", func() error {
		if err := backupCovers(mark+10, true)(); err != nil {
			return err
		}
		if lastAcked.Load() <= mark+10 {
			return fmt.Errorf("no write acknowledged since %d", mark)
		}
		return nil
	})

	// Store outage: backups fail, BackupReady goes false, etcd keeps serving.
	s3.SetDown(true)
	testutil.Eventually(t, 30*time.Second, "BackupReady false during the outage", func() error {
		rep, err := Status(ctx, Dir(dir))
		if err != nil {
			return err
		}
		if rep.Backup == nil || rep.Backup.Ready || rep.Backup.LastError == "" {
			return fmt.Errorf("backup %+v", rep.Backup)
		}
		return nil
	})
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := cli.Put(pctx, "/during-outage", "x"); err != nil {
		t.Fatalf("etcd stopped serving during a store outage: %v", err)
	}
	pcancel()
	s3.SetDown(false)

	stopWriting()
	wg.Wait()
	final := lastAcked.Load()
	testutil.Eventually(t, 60*time.Second, "backups recover and cover every acknowledged write", backupCovers(final, true))

	// The chain is sound: every object verifies and nothing is missing up to the last write.
	s, err := store.Open(ctx, storeURL, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	vr, err := backup.Verify(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !vr.OK() {
		t.Fatalf("verify: bad %v, issues %v", vr.Bad, vr.Issues)
	}
	if len(vr.Timelines) != 1 {
		t.Fatalf("timelines %+v; want one history", vr.Timelines)
	}
	cov := vr.Timelines[0].Coverage
	if len(cov) != 1 || cov[0].To < final {
		t.Fatalf("coverage %v; want one range reaching revision %d", cov, final)
	}
	t.Logf("chain: %d objects, %d events, coverage %v, last acknowledged revision %d", vr.Objects, vr.Events, cov, final)
}
