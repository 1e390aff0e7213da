package etcdproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/etcd-steward/steward/internal/datadir"
	"go.etcd.io/etcd/server/v3/embed"
	etcddatadir "go.etcd.io/etcd/server/v3/storage/datadir"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.uber.org/zap"
)

// Options configure Run.
type Options struct {
	// Config is the etcd configuration to start with.
	Config *embed.Config
	// HealthListen, if set, is the host:port serving /readyz, /livez and etcd's /metrics.
	HealthListen string
	// StartTimeout bounds how long etcd may take to become ready to serve (joining a cluster
	// whose other members are still starting takes a while).
	StartTimeout time.Duration
	Logger       *zap.Logger
	// Ready, if set, is called once etcd serves.
	Ready func(e *embed.Etcd)
}

// Run starts etcd and serves until ctx ends (SIGTERM/SIGINT), then stops it cleanly and
// leaves a clean-shutdown marker in the data dir.
func Run(ctx context.Context, opts Options) error {
	lg := opts.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	cfg := opts.Config
	if err := datadir.ClearShutdown(cfg.Dir); err != nil {
		return fmt.Errorf("clear clean-shutdown marker in %s: %w", cfg.Dir, err)
	}
	var health *http.Server
	if opts.HealthListen != "" {
		ln, err := net.Listen("tcp", opts.HealthListen)
		if err != nil {
			return fmt.Errorf("health endpoint %s: %w (is another member using this port?)", opts.HealthListen, err)
		}
		h := &healthHandler{}
		health = &http.Server{Handler: h.mux(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = health.Serve(ln) }()
		defer health.Close()
		defer h.set(nil)
		opts.Ready = chainReady(opts.Ready, h.set)
	}

	e, err := startUntilReady(ctx, cfg, opts, lg)
	if e == nil || err != nil {
		return err
	}
	if opts.Ready != nil {
		opts.Ready(e)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	removed, err := watchDataRemoved(wctx, cfg.Dir)
	if err != nil {
		lg.Warn("cannot watch the data dir: its removal is noticed only when etcd fails", zap.Error(err))
	}

	select {
	case <-ctx.Done():
		lg.Info("stopping etcd")
		rev := e.Server.KV().Rev()
		id := e.Server.MemberID().String()
		e.Close()
		if err := datadir.MarkCleanShutdown(cfg.Dir, datadir.Shutdown{Time: time.Now().UTC(), MemberID: id, Revision: rev}); err != nil {
			return fmt.Errorf("etcd stopped but the clean-shutdown marker could not be written: %w", err)
		}
		lg.Info("etcd stopped cleanly", zap.Int64("revision", rev))
		return nil
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd member %s failed: %w", cfg.Name, err)
	case what := <-removed:
		// Never a clean shutdown: the data it would mark is gone.
		lg.Error("the data dir was removed under the running etcd: stopping it", zap.String("event", "data-removed"), zap.String("removed", what))
		e.Close()
		return fmt.Errorf("etcd member %s stopped: %s while it ran; the next start decides again", cfg.Name, what)
	case <-e.Server.StopNotify():
		// The server stopped on its own: it was removed from the cluster or hit a fatal error.
		e.Close()
		return errors.New("etcd server stopped on its own (removed from the cluster, or a fatal error; see its log)")
	}
}

// PublishRaceMessage is logged when a joining member is restarted to publish itself again.
const PublishRaceMessage = "this new member's publish request arrived inside the raft snapshot it joined with; restarting etcd instead of waiting for the request timeout"

// startUntilReady starts etcd and waits until it serves. It returns a nil server and a nil
// error when ctx ended first.
func startUntilReady(ctx context.Context, cfg *embed.Config, opts Options, lg *zap.Logger) (*embed.Etcd, error) {
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	deadline := time.After(timeout)
	// A member joining an existing cluster without data learns the membership from a raft
	// snapshot; in a new cluster every member's name is known from the start.
	joining := cfg.ClusterState == embed.ClusterStateFlagExisting && !wal.Exist(etcddatadir.ToWALDir(cfg.Dir))
	for {
		lg.Info("starting etcd", zap.String("event", "etcd-starting"), zap.String("name", cfg.Name), zap.String("data-dir", cfg.Dir),
			zap.String("initial-cluster-state", cfg.ClusterState))
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			return nil, fmt.Errorf("start etcd member %s in %s: %w", cfg.Name, cfg.Dir, err)
		}
		var stalled <-chan struct{}
		if joining {
			stalled = publishStall(ctx, e, cfg.Name)
		}
		select {
		case <-e.Server.ReadyNotify():
			lg.Info("etcd is serving", zap.String("event", "etcd-serving"), zap.String("member-id", e.Server.MemberID().String()))
			return e, nil
		case <-stalled:
			// The member's own publish request reached the cluster before the snapshot it
			// joins with was taken: the snapshot already holds it, so the request is never
			// applied on its own and etcd waits out its request timeout (7 s) before trying
			// again. A restart publishes at once.
			lg.Warn(PublishRaceMessage, zap.String("event", "publish-race-restart"))
			closeUnready(e)
			joining = false
			continue
		case err := <-e.Err():
			e.Close()
			return nil, fmt.Errorf("etcd member %s failed while starting: %w", cfg.Name, err)
		case <-e.Server.StopNotify():
			e.Close()
			return nil, fmt.Errorf("etcd member %s stopped while starting (see its log)", cfg.Name)
		case <-deadline:
			closeUnready(e)
			return nil, fmt.Errorf("etcd member %s did not become ready within %s", cfg.Name, timeout)
		case <-ctx.Done():
			closeUnready(e)
			return nil, nil // stopped before serving: not a clean shutdown of a running member
		}
	}
}

// closeUnready stops a server that does not serve yet. The server goes first: embed's Close
// waits for the client listeners, which wait for the server to be ready or stopping.
func closeUnready(e *embed.Etcd) {
	e.Server.Stop()
	e.Close()
}

// publishStall closes its channel when a member that joined without data is not ready
// although the cluster's membership, which it received in a raft snapshot, already carries
// its published name.
func publishStall(ctx context.Context, e *embed.Etcd, name string) <-chan struct{} {
	const grace = 500 * time.Millisecond // a publish applied normally is seen as ready within milliseconds
	stalled := make(chan struct{})
	go func() {
		var since time.Time
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-e.Server.ReadyNotify():
				return
			case <-e.Server.StopNotify():
				return
			case <-tick.C:
			}
			m := e.Server.Cluster().Member(e.Server.MemberID())
			switch {
			case m == nil || m.Name != name:
				since = time.Time{}
			case since.IsZero():
				since = time.Now()
			case time.Since(since) > grace:
				close(stalled)
				return
			}
		}
	}()
	return stalled
}

func chainReady(a, b func(*embed.Etcd)) func(*embed.Etcd) {
	if a == nil {
		return b
	}
	return func(e *embed.Etcd) { a(e); b(e) }
}
