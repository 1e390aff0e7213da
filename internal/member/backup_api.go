package member

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/store"
	"go.uber.org/zap"
)

// runBackups opens the store (retrying while it is unreachable: etcd keeps serving and
// BackupReady stays false) and then runs the backup leader loop.
func (s *Sidecar) runBackups(ctx context.Context) {
	backoff := time.Second
	for ctx.Err() == nil {
		spec, err := s.desired(ctx)
		var self cluster.MemberSpec
		if err == nil {
			var ok bool
			if self, ok = spec.Member(s.cfg.Name); !ok {
				err = fmt.Errorf("member %q is not in the desired cluster", s.cfg.Name)
			}
		}
		var st *store.Store
		if err == nil {
			st, err = s.cfg.Backup.openStore(ctx, s.cfg.Backup.StoreURL)
		}
		if err == nil {
			agent, aerr := newBackupAgent(s.cfg.Backup, s.etcd, self.ClientURL, st, s.lg, s.metrics)
			if aerr != nil {
				s.lg.Error("backups are off: bad configuration", zap.Error(aerr))
				st.Close()
				return
			}
			s.backups.Store(agent)
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

// backupStatusResponse is the body of GET /v1/backup.
type backupStatusResponse struct {
	Enabled bool `json:"enabled"`
	cluster.BackupStatus
}

func (s *Sidecar) backupStatus() backupStatusResponse {
	if s.cfg.Backup.StoreURL == "" {
		return backupStatusResponse{}
	}
	if a := s.backups.Load(); a != nil {
		return backupStatusResponse{Enabled: true, BackupStatus: a.Status()}
	}
	return backupStatusResponse{Enabled: true, BackupStatus: cluster.BackupStatus{LastError: "backup store not reachable yet"}}
}

func (s *Sidecar) handleBackupStatus(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.backupStatus())
}

func (s *Sidecar) handleLatestSnapshots(w http.ResponseWriter, r *http.Request) {
	st := s.backupStatus()
	if !st.Enabled {
		http.Error(w, "backups are off for this member (no --store)", http.StatusNotFound)
		return
	}
	if a := s.backups.Load(); a != nil && !st.Leader {
		s.forwardToLeader(w, r, a.endpoint)
		return
	}
	type snap struct {
		Key      string    `json:"key,omitempty"`
		Revision int64     `json:"revision"`
		Time     time.Time `json:"time"`
	}
	writeJSON(w, http.StatusOK, map[string]snap{
		"full":  {st.LatestFullKey, st.LatestFullRevision, st.LatestFullTime},
		"delta": {st.LatestDeltaKey, st.LatestDeltaRevision, st.LatestDeltaTime},
	})
}

// handleFullSnapshot takes a full snapshot now: on the backup leader directly, elsewhere by
// forwarding to the leader's sidecar.
func (s *Sidecar) handleFullSnapshot(w http.ResponseWriter, r *http.Request) {
	if err := sidecarapi.DecodeBody(r, &noBody{}); err != nil {
		sidecarapi.WriteBodyError(w, err)
		return
	}
	a := s.backups.Load()
	if s.cfg.Backup.StoreURL == "" || a == nil {
		http.Error(w, "backups are off or the store is unreachable on this member", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), fullSnapshotTimeout)
	defer cancel()
	if a.Status().Leader {
		res, err := a.RequestFull(ctx)
		if err == nil {
			writeJSON(w, http.StatusOK, res)
			return
		}
		if !errors.Is(err, ErrNotBackupLeader) {
			http.Error(w, "full snapshot failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	s.forwardToLeader(w, r.WithContext(ctx), a.endpoint)
}

// fullSnapshotTimeout bounds an on-demand full snapshot.
const fullSnapshotTimeout = 30 * time.Minute

// forwardToLeader passes a request on to the backup leader's sidecar, once.
func (s *Sidecar) forwardToLeader(w http.ResponseWriter, r *http.Request, endpoint string) {
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
	req.Header.Set("X-Steward-Forwarded", s.cfg.Name)
	resp, err := s.peers.Do(req)
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
func (s *Sidecar) leaderSidecar(ctx context.Context, endpoint string) (string, error) {
	cli, err := s.etcd.New([]string{endpoint}, 2*time.Second)
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
