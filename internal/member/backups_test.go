package member

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/backup/agent"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/testutil"
)

// The sidecar tests that need backups in a store run the backup agent of the member at ep
// with these helpers (package agent's own tests have theirs, beside its internals).

func openTestStore(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), "file://"+t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startBackups runs the backup agent of the member at ep until stop is called (or the test ends).
func startBackups(t *testing.T, s *store.Store, ep string) (a *agent.Agent, stop func()) {
	t.Helper()
	return startBackupsDialing(t, agent.Config{}, etcdutil.Dialer{}, s, ep)
}

// startBackupsDialing is startBackups with cfg (whose store and check interval it sets) and
// clients made by d.
func startBackupsDialing(t *testing.T, cfg agent.Config, d etcdutil.Dialer, s *store.Store, ep string) (a *agent.Agent, stop func()) {
	t.Helper()
	cfg.StoreURL, cfg.CheckInterval = s.String(), 100*time.Millisecond
	if cfg.DeltaPeriod == 0 {
		cfg.DeltaPeriod = 300 * time.Millisecond
	}
	a, err := agent.New(cfg, d, ep, s, zap.NewNop(), agent.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return a, stop
}

// waitStored waits until the agent reports BackupReady on timeline tl with everything the
// member at ep has stored.
func waitStored(t *testing.T, a *agent.Agent, cli *clientv3.Client, ep string, tl uint32) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("the member's history stored on timeline %d", tl), func() error {
		st, err := cli.Status(context.Background(), ep)
		if err != nil {
			return err
		}
		b := a.Status()
		if !b.Ready || b.Timeline != tl || b.CurrentRevision < st.Header.Revision {
			return fmt.Errorf("member at revision %d; backups: ready %t (%s), timeline %d, stored up to %d", st.Header.Revision, b.Ready, b.ReadyReason, b.Timeline, b.CurrentRevision)
		}
		return nil
	})
}
