package snapshotter

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/testutil"
)

// TestIdleDeltasStayCurrent: with no writes, progress notifications keep reporting that
// everything up to the current revision is stored (so BackupReady holds on an idle cluster).
func TestIdleDeltasStayCurrent(t *testing.T) {
	_, cli, ep := testutil.EmbeddedEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := cli.Put(ctx, "/k", "v")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	var last atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- RunDeltas(ctx, Member{Client: cli, Endpoint: ep}, openStore(t, "mem://"+t.Name()), r.Header.Revision+1, DeltaOptions{
			Period:    100 * time.Millisecond,
			Timeline:  timelineOf(t, cli, ep),
			OnCurrent: func(rev int64, _ time.Time) { calls.Add(1); last.Store(rev) },
		})
	}()
	testutil.Eventually(t, 10*time.Second, "idle capture reports it is current", func() error {
		if calls.Load() < 3 || last.Load() != r.Header.Revision {
			return fmt.Errorf("calls %d, last %d, want >= 3 calls at revision %d", calls.Load(), last.Load(), r.Header.Revision)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
