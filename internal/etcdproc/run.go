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
	"go.uber.org/zap"
)

// Options configure Run.
type Options struct {
	// Config is the etcd configuration to start with.
	Config *embed.Config
	// HealthListen, if set, is the host:port serving /readyz and /livez.
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

	lg.Info("starting etcd", zap.String("name", cfg.Name), zap.String("data-dir", cfg.Dir),
		zap.String("initial-cluster-state", cfg.ClusterState))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd member %s in %s: %w", cfg.Name, cfg.Dir, err)
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	select {
	case <-e.Server.ReadyNotify():
		lg.Info("etcd is serving", zap.String("member-id", e.Server.MemberID().String()))
		if opts.Ready != nil {
			opts.Ready(e)
		}
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd member %s failed while starting: %w", cfg.Name, err)
	case <-e.Server.StopNotify():
		e.Close()
		return fmt.Errorf("etcd member %s stopped while starting (see its log)", cfg.Name)
	case <-time.After(timeout):
		e.Close()
		return fmt.Errorf("etcd member %s did not become ready within %s", cfg.Name, timeout)
	case <-ctx.Done():
		e.Close()
		return nil // stopped before serving: not a clean shutdown of a running member
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
	case <-e.Server.StopNotify():
		// The server stopped on its own: it was removed from the cluster or hit a fatal error.
		e.Close()
		return errors.New("etcd server stopped on its own (removed from the cluster, or a fatal error; see its log)")
	}
}

func chainReady(a, b func(*embed.Etcd)) func(*embed.Etcd) {
	if a == nil {
		return b
	}
	return func(e *embed.Etcd) { a(e); b(e) }
}
