package operator

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
)

// apiServerRetry is how often an operator waiting for the API server asks again: once it is
// back, the operator's first request follows within this.
const apiServerRetry = 2 * time.Second

// apiServerAsk bounds one question to the API server while waiting for it: an API server
// whose connections hang is asked again, not waited on forever.
const apiServerAsk = 10 * time.Second

// Run runs the operator until ctx ends or it loses its leadership (controller-runtime's
// manager cannot lead twice: the process exits and its restart campaigns again). It serves
// /healthz and /readyz from its start, and waits for the API server before anything needs
// it (the member image read from its own pod, the manager's discovery of the API): an
// operator restarted while the API server is away, as in every upgrade of the control plane,
// waits alive instead of exiting again and again into the kubelet's growing crash-loop
// back-off, and campaigns as soon as the API server answers.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	log := ctrl.Log.WithName("operator")
	if err := CheckImagePatterns(o.AllowedImages); err != nil {
		return err // before any wait: a flag it cannot apply stops it at once
	}
	stopHealth, err := serveHealth(o.HealthAddr)
	if err != nil {
		return err
	}
	defer stopHealth()
	if err := waitForAPIServer(ctx, cfg, log); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting, as the manager returns when stopped
		}
		return err
	}
	if o.Image == "" {
		if o.Image, err = ownImage(ctx, cfg); err != nil {
			return err
		}
	}
	mgr, err := newManager(cfg, o)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// serveHealth serves /healthz and /readyz at addr ("0": nowhere) for the life of the process,
// not only the manager's: the kubelet's probes pass while the operator waits for the API
// server, as they do while it waits for its leadership.
func serveHealth(addr string) (stop func(), err error) {
	if addr == "0" || addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health probes at %s: %w", addr, err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux := http.NewServeMux()
	mux.Handle("/healthz", ok)
	mux.Handle("/readyz", ok)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// waitForAPIServer returns once the API server answers discovery (the manager's first
// need), asking every apiServerRetry; it logs when the wait starts and ends. Refused
// credentials are no outage: that is an error at once.
func waitForAPIServer(ctx context.Context, cfg *rest.Config, log logr.Logger) error {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = apiServerAsk
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("a discovery client for the API server %s: %w", cfg.Host, err)
	}
	start := time.Now()
	for attempt := 0; ; attempt++ {
		_, err := dc.ServerGroups()
		if err == nil {
			if attempt > 0 {
				log.Info("the API server answers", "waited", time.Since(start).Round(time.Second).String())
			}
			return nil
		}
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			return fmt.Errorf("the API server %s refuses the operator's discovery request: %w (check the operator's credentials and RBAC)", cfg.Host, err)
		}
		if attempt == 0 {
			log.Info("waiting for the API server", "host", cfg.Host, "error", err.Error())
		} else {
			log.V(1).Info("the API server does not answer yet", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(apiServerRetry):
		}
	}
}
