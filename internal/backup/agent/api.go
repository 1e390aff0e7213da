package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/store"
	"go.uber.org/zap"
)

// Member is what the backup service needs of the sidecar it runs in.
type Member struct {
	// Name is the member's name in the cluster spec.
	Name string
	// View gives the desired cluster: this member's client URL, the members' sidecar URLs.
	View cluster.View
	// Etcd makes clients of the members.
	Etcd etcdutil.Dialer
	// Peers calls other members' sidecars (a request forwarded to the backup leader).
	Peers *sidecarapi.Client
}

// Service is one sidecar's part in continuous backups: it opens the store (retrying while it
// is unreachable), runs the backup leader loop once it is open, and serves the backup API.
type Service struct {
	cfg     Config
	member  Member
	lg      *zap.Logger
	metrics *Metrics
	// agent is set once the store is open (nil while backups are off or the store is unreachable).
	agent atomic.Pointer[Agent]
}

// NewService returns the backup service of member m; cfg.StoreURL empty turns backups off.
func NewService(cfg Config, m Member, lg *zap.Logger, metrics *Metrics) *Service {
	return &Service{cfg: cfg, member: m, lg: lg, metrics: metrics}
}

// Enabled reports whether backups are on for this member.
func (s *Service) Enabled() bool { return s.cfg.StoreURL != "" }

// Agent is the backup leader loop, nil until the store has been opened.
func (s *Service) Agent() *Agent { return s.agent.Load() }

// desired returns the desired cluster from the cluster view.
func (s *Service) desired(ctx context.Context) (cluster.Spec, error) {
	snap, err := s.member.View.Snapshot(ctx)
	return snap.Spec, err
}

// Run opens the store (retrying while it is unreachable: etcd keeps serving and
// BackupReady stays false) and then runs the backup leader loop.
func (s *Service) Run(ctx context.Context) {
	backoff := time.Second
	for ctx.Err() == nil {
		spec, err := s.desired(ctx)
		var self cluster.MemberSpec
		if err == nil {
			var ok bool
			if self, ok = spec.Member(s.member.Name); !ok {
				err = fmt.Errorf("member %q is not in the desired cluster", s.member.Name)
			}
		}
		var st *store.Store
		if err == nil {
			// The backup store is written to: a file:// directory is made if missing.
			o := s.cfg.StoreOptions(s.cfg.StoreURL)
			o.Create = true
			st, err = store.Open(ctx, s.cfg.StoreURL, o)
		}
		if err == nil {
			agent, aerr := New(s.cfg, s.member.Etcd, self.ClientURL, st, s.lg, s.metrics)
			if aerr != nil {
				s.lg.Error("backups are off: bad configuration", zap.Error(aerr))
				st.Close()
				return
			}
			s.agent.Store(agent)
			agent.Run(ctx)
			st.Close()
			return
		}
		s.lg.Warn("backup store not available; retrying", zap.Error(err), zap.Duration("in", backoff))
		s.metrics.backupFailures.WithLabelValues("store").Inc()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// StatusResponse is the body of GET /v1/backup.
type StatusResponse struct {
	Enabled bool `json:"enabled"`
	cluster.BackupStatus
}

// Status is the backup status this member serves.
func (s *Service) Status() StatusResponse {
	if !s.Enabled() {
		return StatusResponse{}
	}
	if a := s.agent.Load(); a != nil {
		return StatusResponse{Enabled: true, BackupStatus: a.Status()}
	}
	return StatusResponse{Enabled: true, BackupStatus: cluster.BackupStatus{LastError: "backup store not reachable yet"}}
}

// HandleStatus serves GET /v1/backup.
func (s *Service) HandleStatus(w http.ResponseWriter, _ *http.Request) {
	sidecarapi.WriteJSON(w, http.StatusOK, s.Status())
}

// HandleLatest serves GET /v1/snapshots/latest, from the backup leader.
func (s *Service) HandleLatest(w http.ResponseWriter, r *http.Request) {
	st := s.Status()
	if !st.Enabled {
		http.Error(w, "backups are off for this member (no --store)", http.StatusNotFound)
		return
	}
	if a := s.agent.Load(); a != nil && !st.Leader {
		s.forwardToLeader(w, r, a.endpoint)
		return
	}
	type snap struct {
		Key      string    `json:"key,omitempty"`
		Revision int64     `json:"revision"`
		Time     time.Time `json:"time"`
	}
	sidecarapi.WriteJSON(w, http.StatusOK, map[string]snap{
		"full":  {st.LatestFullKey, st.LatestFullRevision, st.LatestFullTime},
		"delta": {st.LatestDeltaKey, st.LatestDeltaRevision, st.LatestDeltaTime},
	})
}

// HandleFull serves POST /v1/snapshots/full: it takes a full snapshot now: on the backup leader directly, elsewhere by
// forwarding to the leader's sidecar.
func (s *Service) HandleFull(w http.ResponseWriter, r *http.Request) {
	if err := sidecarapi.DecodeBody(r, &sidecarapi.NoBody{}); err != nil {
		sidecarapi.WriteBodyError(w, err)
		return
	}
	a := s.agent.Load()
	if !s.Enabled() || a == nil {
		http.Error(w, "backups are off or the store is unreachable on this member", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), FullSnapshotTimeout)
	defer cancel()
	if a.Status().Leader {
		res, err := a.RequestFull(ctx)
		if err == nil {
			sidecarapi.WriteJSON(w, http.StatusOK, res)
			return
		}
		if !errors.Is(err, ErrNotBackupLeader) {
			http.Error(w, "full snapshot failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	s.forwardToLeader(w, r.WithContext(ctx), a.endpoint)
}

// FullSnapshotTimeout bounds an on-demand full snapshot.
const FullSnapshotTimeout = 30 * time.Minute

// forwardToLeader passes a request on to the backup leader's sidecar, once.
func (s *Service) forwardToLeader(w http.ResponseWriter, r *http.Request, endpoint string) {
	if r.Header.Get("X-Steward-Forwarded") != "" {
		http.Error(w, "not the backup leader (leadership is moving); retry", http.StatusServiceUnavailable)
		return
	}
	leaderURL, err := s.leaderSidecar(r.Context(), endpoint)
	if err != nil {
		http.Error(w, "cannot find the backup leader: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, strings.TrimRight(leaderURL, "/")+r.URL.Path, nil)
	req.Header.Set("X-Steward-Forwarded", s.member.Name)
	resp, err := s.member.Peers.Do(req)
	if err != nil {
		http.Error(w, "forward to the backup leader "+leaderURL+": "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		// The caller was authenticated here: the leader refusing this sidecar's token is a
		// misconfiguration between members, not the caller's fault.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		http.Error(w, "the backup leader's sidecar "+leaderURL+" refused this member's token: "+strings.TrimSpace(string(body)), http.StatusBadGateway)
		return
	}
	for _, h := range []string{"Content-Type", "Retry-After"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// leaderSidecar finds the sidecar URL of the member etcd reports as leader.
func (s *Service) leaderSidecar(ctx context.Context, endpoint string) (string, error) {
	cli, err := s.member.Etcd.New([]string{endpoint}, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		return "", err
	}
	list, err := cli.MemberList(ctx)
	if err != nil {
		return "", err
	}
	spec, err := s.desired(ctx)
	if err != nil {
		return "", err
	}
	for _, m := range list.Members {
		if m.ID == st.Leader {
			if ms, ok := spec.Member(m.Name); ok && ms.SidecarURL != "" {
				return ms.SidecarURL, nil
			}
			return "", fmt.Errorf("leader %s has no known sidecar", m.Name)
		}
	}
	return "", errors.New("no leader")
}

// ResolveTargetPath is where the sidecar resolves a restore target in its own store.
const ResolveTargetPath = "/v1/restore/target"

// HandleResolveTarget serves POST /v1/restore/target: the body is a cluster.RestoreTarget
// (revision, time, timeline; its store, when set, must be this member's own), the answer the
// restore's dry run against this member's backup store (restore.ResolveTarget), among the
// timelines of this cluster's own IDs unless the target names one. It runs here, beside the
// cluster's data and with the cluster's own store credentials, so that whoever asks (the
// operator, for an EtcdRestore) never reads a tenant's store with its own identity. A target
// the store cannot give is 422, with why.
func (s *Service) HandleResolveTarget(w http.ResponseWriter, r *http.Request) {
	var t cluster.RestoreTarget
	if err := sidecarapi.DecodeBody(r, &t); err != nil {
		sidecarapi.WriteBodyError(w, err)
		return
	}
	if !s.Enabled() {
		http.Error(w, "backups are off for this member (no --store)", http.StatusNotFound)
		return
	}
	if t.Store != "" && t.Store != s.cfg.StoreURL {
		http.Error(w, fmt.Sprintf("this member resolves targets in its own backup store only (%s), not in %s", store.Redact(s.cfg.StoreURL), store.Redact(t.Store)), http.StatusBadRequest)
		return
	}
	snap, err := s.member.View.Snapshot(r.Context())
	if err != nil {
		http.Error(w, "cannot read the cluster's specification: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	// A store that cannot be read now cannot give the target either: a restore started on it
	// would fail after the cluster was stopped.
	st, err := s.cfg.OpenStore(r.Context(), s.cfg.StoreURL)
	if err != nil {
		http.Error(w, "cannot open the backup store: "+err.Error(), http.StatusUnprocessableEntity)
		return
	}
	defer st.Close()
	res, err := restore.ResolveTarget(r.Context(), st, cluster.IDs(snap.Spec, snap.Status.ClusterID), t)
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	sidecarapi.WriteJSON(w, http.StatusOK, res)
}
