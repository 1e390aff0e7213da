package local

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Report is the output of `steward local status`. Other tools parse its JSON: keep names.
type Report struct {
	Cluster    ClusterReport    `json:"cluster"`
	Members    []MemberReport   `json:"members"`
	Supervisor SupervisorReport `json:"supervisor"`
	// Backup is reported by the backup leader's sidecar; nil when backups are off.
	Backup *BackupReport `json:"backup,omitempty"`
}

// BackupReport is the backup state of the cluster.
type BackupReport struct {
	Ready bool `json:"ready"`
	// ReadyReason says why Ready is false.
	ReadyReason         string    `json:"readyReason,omitempty"`
	LatestFullRevision  int64     `json:"latestFullRevision"`
	LatestFullTime      time.Time `json:"latestFullTime,omitzero"`
	LatestDeltaRevision int64     `json:"latestDeltaRevision"`
	LatestDeltaTime     time.Time `json:"latestDeltaTime,omitzero"`
	Store               string    `json:"store"`
	// EncryptionKeys is the keyring the backups are encrypted with; `steward backup` and
	// `steward restore` need it as --encryption-keys. Empty: not encrypted.
	EncryptionKeys string `json:"encryptionKeys,omitempty"`
	// Timeline is the timeline the backup leader writes the cluster's history to (0 until
	// it has chosen one).
	Timeline uint32 `json:"timeline,omitempty"`
	// Leader is the member whose sidecar writes backups.
	Leader    string `json:"leader,omitempty"`
	Failures  int64  `json:"failures"`
	LastError string `json:"lastError,omitempty"`
	// Recoverable is what a restore reaches of the cluster's own timeline, as the backup
	// leader knows it from the store's index (nil: nothing yet).
	Recoverable *cluster.Recoverable `json:"recoverable,omitempty"`
}

// ClusterReport summarises the cluster.
type ClusterReport struct {
	Name      string `json:"name"`
	ClusterID string `json:"clusterID"`
	// Size is the number of members in etcd's member list (the desired size if no member answers).
	Size   int    `json:"size"`
	Leader string `json:"leader"`
	// Generation is the spec generation the members should run (`steward local upgrade`).
	Generation int64 `json:"generation,omitempty"`
	// TLS: client and peer traffic is mutual TLS of the cluster's own CA; ClientTLSDir holds
	// the client certificate (`steward` commands take it as --tls-dir).
	TLS          bool   `json:"tls,omitempty"`
	ClientTLSDir string `json:"clientTLSDir,omitempty"`
	// RootPasswordFile holds etcd's root password when authentication is on (`steward`
	// commands take it as --password-file).
	RootPasswordFile string `json:"rootPasswordFile,omitempty"`
	// AppUser and AppPasswordFile are what applications log in as when authentication is on
	// (root is kept for Steward).
	AppUser         string `json:"appUser,omitempty"`
	AppPasswordFile string `json:"appPasswordFile,omitempty"`
	// Etcdctl is a shell command line of etcdctl that reaches the cluster (EtcdctlCommand).
	Etcdctl string `json:"etcdctl"`
	// Health sums the report up (Report.Health); `steward local status` exits with its code.
	Health Health `json:"health"`
}

// Health is how the cluster fares as a whole.
type Health string

const (
	// HealthHealthy: the supervisor runs and every member is healthy, with no recovery in
	// progress.
	HealthHealthy Health = "healthy"
	// HealthDegraded: a quorum of the voters is healthy, so the cluster serves, but a member
	// is not, or a recovery or restore is in progress, or healing is stuck.
	HealthDegraded Health = "degraded"
	// HealthDown: the supervisor is stopped, or no quorum of the voters is healthy.
	HealthDown Health = "down"
)

// Health sums the report up: down, degraded or healthy (see the constants).
func (r Report) Health() Health {
	voters, serving, unhealthy := 0, 0, 0
	for _, m := range r.Members {
		if !m.Healthy {
			unhealthy++
		}
		if m.Role == RoleLearner {
			continue
		}
		voters++
		if m.Healthy && (m.Role == RoleLeader || m.Role == RoleFollower) {
			serving++
		}
	}
	switch {
	case !r.Supervisor.Running || voters == 0 || serving <= voters/2:
		return HealthDown
	case unhealthy > 0 || r.Supervisor.Recovery != nil || r.Supervisor.Stuck != "":
		return HealthDegraded
	}
	return HealthHealthy
}

// MemberReport is one member as etcd and the supervisor see it.
type MemberReport struct {
	Name      string `json:"name"`
	ID        string `json:"id"`
	ClientURL string `json:"clientURL"`
	PeerURL   string `json:"peerURL"`
	// SidecarURL is the member's sidecar API: https when the cluster has TLS.
	SidecarURL string `json:"sidecarURL,omitempty"`
	// Role is RoleLeader, RoleFollower or RoleLearner as the member itself says, RoleStopped
	// when its etcd does not run, RoleUnreachable when it runs but does not answer.
	Role       string `json:"role"`
	Healthy    bool   `json:"healthy"`
	Revision   int64  `json:"revision"`
	DBSize     int64  `json:"dbSize"`
	DataDir    string `json:"dataDir"`
	EtcdPID    int    `json:"etcdPid"`
	SidecarPID int    `json:"sidecarPid"`
	// Generation is the spec generation the member's processes started with.
	Generation int64 `json:"generation,omitempty"`
}

// The roles of MemberReport.
const (
	RoleLeader      = "leader"
	RoleFollower    = "follower"
	RoleLearner     = "learner"
	RoleStopped     = "stopped"
	RoleUnreachable = "unreachable"
)

// SupervisorReport says whether the supervisor runs, and what the cluster's healing waits for.
type SupervisorReport struct {
	Running bool   `json:"running"`
	PID     int    `json:"pid,omitempty"`
	Phase   string `json:"phase,omitempty"`
	Error   string `json:"error,omitempty"`
	// Waiting names what healing waits for; Stuck is set when nothing has moved for a while.
	Waiting string `json:"waiting,omitempty"`
	Stuck   string `json:"stuck,omitempty"`
	// Recovery is the quorum-loss directive in force; LastRecovery the last one retired.
	Recovery     *cluster.Directive `json:"recovery,omitempty"`
	LastRecovery *cluster.Directive `json:"lastRecovery,omitempty"`
}

// Status reports the cluster in dir as etcd itself reports it (member list and each
// member's status), together with the supervisor's processes.
func Status(ctx context.Context, dir Dir) (Report, error) {
	spec, ok, err := ReadSpec(dir)
	if err != nil {
		return Report{}, err
	}
	if !ok {
		return Report{}, fmt.Errorf("no local cluster in %s: start one with `steward local up --dir %s`", dir, dir)
	}
	st, err := ReadState(dir)
	if err != nil {
		return Report{}, fmt.Errorf("read %s: %w", dir.State(), err)
	}
	pid, running := dir.SupervisorRunning()
	rep := Report{
		Cluster: ClusterReport{Name: spec.Name, Size: len(spec.Members), Generation: spec.Generation, TLS: spec.TLS, ClientTLSDir: ClientTLSDir(dir, spec), RootPasswordFile: RootPasswordPath(dir, spec),
			AppPasswordFile: AppPasswordPath(dir, spec), Etcdctl: EtcdctlCommand(dir, spec)},
		Supervisor: SupervisorReport{Running: running, PID: pid, Phase: st.Phase, Error: st.Error,
			Waiting: st.Waiting, Stuck: st.Stuck, Recovery: st.Directive, LastRecovery: st.LastRecovery},
	}
	if spec.Auth {
		rep.Cluster.AppUser = AppUser
	}
	if !running {
		rep.Supervisor.Phase = PhaseStopped
	}

	// With etcd authentication, making a client logs in, which fails while no member serves:
	// the report then comes from the supervisor's state alone.
	cli, err := Dialer(dir, spec).New(spec.ClientURLs(), 2*time.Second)
	if err != nil && !spec.Auth {
		return Report{}, err
	}
	if cli != nil {
		defer cli.Close()
	}

	var list []*etcdserverpb.Member
	if running && cli != nil {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := cli.MemberList(lctx)
		cancel()
		if err == nil {
			list = resp.Members
			rep.Cluster.Size = len(list)
			rep.Cluster.ClusterID = fmt.Sprintf("%x", resp.Header.ClusterId)
		}
	}

	byName := map[string]*etcdserverpb.Member{}
	for _, m := range list {
		byName[m.Name] = m
	}
	states := map[string]MemberState{}
	for _, m := range st.Members {
		states[m.Name] = m
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	reports := make([]MemberReport, len(spec.Members))
	var wg sync.WaitGroup
	for i, ms := range spec.Members {
		r := &reports[i]
		*r = MemberReport{Name: ms.Name, ClientURL: spec.ClientURL(ms), PeerURL: spec.PeerURL(ms), SidecarURL: spec.SidecarURL(ms),
			DataDir: dir.MemberData(ms.Name), Role: RoleStopped}
		if running {
			r.EtcdPID, r.SidecarPID, r.Generation = states[ms.Name].EtcdPID, states[ms.Name].SidecarPID, states[ms.Name].Generation
		}
		if em, ok := byName[ms.Name]; ok {
			r.ID = fmt.Sprintf("%x", em.ID)
		}
		if !running {
			continue
		}
		// Asked even without a pid on record: a member the supervisor is restarting serves
		// before its new pid is recorded.
		if r.EtcdPID != 0 {
			r.Role = RoleUnreachable // until the member answers
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Healthy = httpOK(ctx, hc, spec.HealthURL(ms)+"/readyz")
			if cli == nil {
				return
			}
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			s, err := cli.Status(sctx, r.ClientURL)
			if err != nil {
				return
			}
			r.ID = fmt.Sprintf("%x", s.Header.MemberId)
			r.Revision, r.DBSize = s.Header.Revision, s.DbSize
			switch {
			case s.IsLearner:
				r.Role = RoleLearner
			case s.Leader == s.Header.MemberId:
				r.Role = RoleLeader
			default:
				r.Role = RoleFollower
			}
		}()
	}
	wg.Wait()
	for _, r := range reports {
		if r.Role == RoleLeader {
			rep.Cluster.Leader = r.Name
		}
	}
	// Members etcd knows that are not in the desired cluster (e.g. left over from a scale-in).
	for _, m := range list {
		if _, ok := spec.memberView().Member(m.Name); !ok {
			name := m.Name
			if name == "" {
				name = "(unstarted)"
			}
			reports = append(reports, MemberReport{Name: name, ID: fmt.Sprintf("%x", m.ID), Role: roleOf(m), PeerURL: first(m.PeerURLs), ClientURL: first(m.ClientURLs)})
		}
	}
	sort.SliceStable(reports, func(i, j int) bool { return reports[i].Name < reports[j].Name })
	rep.Members = reports
	if spec.Backup != "" {
		rep.Backup = &BackupReport{Store: spec.Backup, EncryptionKeys: BackupKeysPath(dir, spec)}
		if running {
			if sc, err := SidecarClient(dir, spec, hc.Timeout); err != nil {
				rep.Backup.LastError = err.Error()
			} else {
				backupStatus(ctx, sc, spec, rep.Backup)
			}
		}
	}
	rep.Cluster.Health = rep.Health()
	return rep, nil
}

// backupStatus asks the sidecars for their backup status and keeps the backup leader's. If
// no sidecar answers as the leader, the first refusal of the token (401/403) is reported in
// LastError: it names the token file sent.
func backupStatus(ctx context.Context, sc *sidecarapi.Client, spec Spec, out *BackupReport) {
	var refused error
	for _, m := range spec.Members {
		var st cluster.BackupStatus
		if err := sc.GetJSON(ctx, spec.SidecarURL(m)+"/v1/backup", &st); err != nil || !st.Leader {
			if code := sidecarapi.StatusCode(err); refused == nil && (code == http.StatusUnauthorized || code == http.StatusForbidden) {
				refused = err
			}
			continue
		}
		*out = BackupReport{Ready: st.Ready, ReadyReason: st.ReadyReason, LatestFullRevision: st.LatestFullRevision, LatestFullTime: st.LatestFullTime,
			LatestDeltaRevision: st.LatestDeltaRevision, LatestDeltaTime: st.LatestDeltaTime, Store: st.Store, Timeline: st.Timeline,
			Leader: m.Name, Failures: st.Failures, LastError: st.LastError, EncryptionKeys: out.EncryptionKeys, Recoverable: st.Recoverable}
		return
	}
	if refused != nil {
		out.LastError = refused.Error()
	}
}

func roleOf(m *etcdserverpb.Member) string {
	if m.IsLearner {
		return RoleLearner
	}
	return RoleFollower
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
