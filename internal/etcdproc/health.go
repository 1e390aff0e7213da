package etcdproc

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
)

// healthHandler serves /livez (the process is up), /readyz (a linearizable read succeeds,
// i.e. the member is part of a quorate cluster and caught up enough to serve) and etcd's
// /metrics, in plain HTTP: etcd's client URLs serve /metrics only to clients of the cluster's
// CA when TLS is on, which a Prometheus is not.
type healthHandler struct {
	mu     sync.Mutex
	client *clientv3.Client
}

func (h *healthHandler) set(e *embed.Etcd) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.client != nil {
		h.client.Close()
		h.client = nil
	}
	if e != nil {
		h.client = v3client.New(e.Server)
	}
}

func (h *healthHandler) mux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	m.HandleFunc("/readyz", h.readyz)
	m.Handle("/metrics", promhttp.Handler()) // etcd registers its metrics with the default registry
	return m
}

func (h *healthHandler) readyz(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	c := h.client
	h.mu.Unlock()
	if c == nil {
		http.Error(w, "etcd is not serving yet", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	// A linearizable read needs the leader to confirm it still leads a quorum. With etcd
	// authentication on, this unauthenticated read is refused, but only after the quorum
	// confirmed it (etcd checks permissions once the read is linearized), as etcd's /health has it.
	if _, err := c.Get(ctx, "/steward/readyz", clientv3.WithCountOnly()); err != nil && !refusedByAuth(err) {
		http.Error(w, "linearizable read failed: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// refusedByAuth says whether err is etcd authentication refusing an unauthenticated request.
func refusedByAuth(err error) bool {
	err = rpctypes.Error(err)
	return errors.Is(err, rpctypes.ErrUserEmpty) || errors.Is(err, rpctypes.ErrPermissionDenied)
}
