// Package member is the sidecar beside each etcd member: it decides how its member starts
// (Decide), generates its etcd configuration, reports its member's live state, keeps the
// membership and etcd authentication as the cluster's spec says, does the leader's
// housekeeping, runs the backup agent and serves the sidecar HTTP API. It knows nothing of
// Kubernetes or of the local supervisor: both are reached through cluster.View.
package member

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcd-steward/steward/internal/backup/agent"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/maintenance"
	"github.com/etcd-steward/steward/internal/pki"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
)

// Config configures a sidecar.
type Config struct {
	// Name is this member's name in the cluster spec.
	Name string
	// DataDir is the etcd data dir shared with the etcd container/process.
	DataDir string
	// View answers questions about the cluster.
	View cluster.View
	// Etcd carries etcd settings copied into every generated configuration (tuning, log level).
	Etcd etcdproc.Config
	// EtcdFlags are extra etcd options (etcd's flag names) set over Etcd in every generated
	// configuration; etcdproc.CheckFlags has accepted them.
	EtcdFlags map[string]string
	// Backup configures continuous backups; an empty store URL turns them off.
	Backup agent.Config
	// RemoveUndesired: the leader's sidecar removes members the spec no longer has even while
	// they answer (Kubernetes: the operator stops a leaving member's pod only once etcd no
	// longer lists it). Without it, the local supervisor removes them itself.
	RemoveUndesired bool
	// TLSDir, when set, is this member's certificate directory (tls.crt, tls.key, ca.crt):
	// etcd serves clients and peers with it and requires their certificates of the same CA,
	// and the sidecar's own clients of etcd present it. The sidecar serves its API with it too
	// (only the open endpoints also in plain text), and trusts its ca.crt when it calls other
	// members' sidecars.
	TLSDir string
	// RootPasswordFile, when set, turns etcd authentication on: the leader's sidecar makes the
	// root user with this file's password and enables authentication, every client of the
	// sidecar logs in as root, and a restore gives the restored root user this password.
	RootPasswordFile string
	// AppUser, with RootPasswordFile, is etcd's user for applications, which the leader's
	// sidecar keeps (AppUser.Name empty: none).
	AppUser AppUser
	// TokenKeyDir, when set, holds the cluster's token signing key pair (pki.TokenKeyFile,
	// pki.TokenPublicKeyFile) at a path etcd reads: etcd signs its authentication tokens with
	// it, so a token is valid on every member, not only on the one that issued it.
	TokenKeyDir string
	// ListenHost, when set, is the address etcd listens on (e.g. 0.0.0.0 in a pod), on the
	// ports of the member's URLs; the URLs (DNS names) are what etcd advertises.
	ListenHost string
	// Maintenance configures the housekeeping the leader's sidecar does (zero: DefaultMaintenance).
	Maintenance MaintenanceConfig
	// ObserveTimeout bounds one observation of the cluster.
	ObserveTimeout time.Duration
	// APITokens are the tokens the API accepts (the cluster's token file); every route but
	// /healthz, /readyz and /metrics refuses a request without one of them. The sidecar sends
	// the first when it forwards a request to another member's sidecar. Nil: every such
	// request is refused.
	APITokens sidecarapi.Tokens
	// FullSnapshotInterval is the least time between two on-demand full snapshots (POST
	// /v1/snapshots/full; each runs retention). Default DefaultFullSnapshotInterval.
	FullSnapshotInterval time.Duration
	Logger               *zap.Logger
}

// DefaultFullSnapshotInterval is the default least time between on-demand full snapshots.
const DefaultFullSnapshotInterval = 30 * time.Second

// Sidecar is the per-member agent. Create it with New and serve its Handler.
type Sidecar struct {
	cfg     Config
	lg      *zap.Logger
	metrics *metrics
	// etcd makes the sidecar's clients of the members (with TLS when the cluster has it).
	etcd etcdutil.Dialer

	// backups opens the store, runs the backup leader loop and serves the backup API.
	backups *agent.Service
	// lastData is the data dir as the last initialisation found it.
	lastData atomic.Pointer[datadir.State]
	// lastInspect is the newest inspection, reused while the data dir is unchanged.
	lastInspect atomic.Pointer[fromDataDir[datadir.State]]
	// learnerSince is when this member was added as a learner (unix ns; 0: not a learner).
	learnerSince atomic.Int64
	// fullAfterStart asks for a full snapshot once etcd serves (after a restore from backup).
	fullAfterStart atomic.Bool
	// pendingEpoch is the directive this start carries out with force-new-cluster. It is
	// recorded in the data dir only once etcd serves on the result: a seed that fails before
	// then carries the directive out again (on the same data), never a recorded one.
	pendingEpoch atomic.Int64
	// lastReport is the newest report sent; lastRaftLog the newest read of the WAL.
	lastReport atomic.Pointer[cluster.Report]
	// delivered is when the newest report the view took was made (unix ns).
	delivered atomic.Int64
	// lastUnreachable is the last reason the report came from the data dir (logUnreachable).
	lastUnreachable atomic.Pointer[unreachable]
	lastRaftLog     atomic.Pointer[fromDataDir[datadir.RaftLog]]
	reportKick      chan struct{}
	// maintenance is what the housekeeping last did (nil: never led); defragSchedule its
	// schedule (nil: off).
	maintenance         atomic.Pointer[cluster.MaintenanceReport]
	defragSchedule      cron.Schedule
	housekeepingMetrics *housekeepingMetrics
	// auth keeps etcd authentication on (nil: RootPasswordFile unset).
	auth *authKeeper
	// peers calls other members' sidecars with this cluster's token (and, with TLS, its CAs).
	peers *sidecarapi.Client

	// life ends when Serve's context does: an initialisation runs no longer than its sidecar.
	life context.Context

	mu     sync.Mutex
	status etcdproc.InitStatus
	// initError is why the newest initialisation that ended failed, until one succeeds: a
	// retry in progress does not hide it from the report.
	initError string
	plan      *Plan
	config    []byte
	// configTaken: an etcd start has fetched config; succeededAt is when it was made.
	configTaken bool
	succeededAt time.Time
}

// New returns a sidecar for cfg.
func New(cfg Config) (*Sidecar, error) {
	if cfg.Name == "" || cfg.DataDir == "" || cfg.View == nil {
		return nil, errors.New("sidecar needs a member name, a data dir and a cluster view")
	}
	if cfg.ObserveTimeout == 0 {
		cfg.ObserveTimeout = 10 * time.Second
	}
	if cfg.FullSnapshotInterval == 0 {
		cfg.FullSnapshotInterval = DefaultFullSnapshotInterval
	}
	if cfg.Maintenance.DefragSchedule == "" {
		cfg.Maintenance = DefaultMaintenance
	}
	sched, err := parseDefragSchedule(cfg.Maintenance.DefragSchedule)
	if err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	if err := cfg.AppUser.check(cfg.RootPasswordFile); err != nil {
		return nil, err
	}
	m := newMetrics()
	var auth *authKeeper
	dial := etcdutil.Dialer{TLSDir: cfg.TLSDir, PasswordFile: cfg.RootPasswordFile}
	if cfg.RootPasswordFile != "" {
		auth = &authKeeper{file: cfg.RootPasswordFile, app: cfg.AppUser}
		dial.InForceFile = InForcePasswordPath(cfg.DataDir)
	}
	peers := sidecarapi.NewClient(cfg.APITokens, nil)
	if cfg.TLSDir != "" {
		// Other members' sidecars serve the API with their certificates, of the CAs in ca.crt.
		tc, err := pki.ClientTLS(cfg.TLSDir)
		if err != nil {
			return nil, fmt.Errorf("this member's certificate directory %s: %w", cfg.TLSDir, err)
		}
		peers.HTTP = sidecarapi.HTTPClient(tc, 0)
	}
	lg = lg.With(zap.String("member", cfg.Name))
	backups := agent.NewService(cfg.Backup, agent.Member{Name: cfg.Name, View: cfg.View, Etcd: dial, Peers: peers}, lg, m.backups)
	return &Sidecar{cfg: cfg, auth: auth, peers: peers, lg: lg, metrics: m, defragSchedule: sched, etcd: dial, backups: backups,
		housekeepingMetrics: newHousekeepingMetrics(m.registry), life: context.Background(),
		status: etcdproc.InitStatus{State: etcdproc.InitNew}, reportKick: make(chan struct{}, 1)}, nil
}

// Serve serves the sidecar API on ln and runs the backup loop until ctx ends. It returns
// once the backup loop has stopped: what the delta capture holds is stored first.
func (s *Sidecar) Serve(ctx context.Context, ln net.Listener) error {
	s.life = ctx
	var backups sync.WaitGroup
	defer backups.Wait()
	if s.cfg.Backup.StoreURL != "" {
		backups.Go(func() { s.backups.Run(ctx) })
	}
	go s.maintainMember(ctx)
	go s.reportLoop(ctx)
	go s.housekeeping(ctx, s.defragSchedule, housekeepingInterval)
	srv := sidecarapi.NewServer(s.Handler())
	if dir := s.cfg.TLSDir; dir != "" {
		tc, err := pki.ServingTLS(dir)
		if err != nil {
			return fmt.Errorf("serving the sidecar API over TLS: %w", err)
		}
		ln = sidecarapi.TLSListener(ln, tc)
	}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Handler is the sidecar HTTP API (see Routes).
func (s *Sidecar) Handler() http.Handler {
	return sidecarapi.NewHandler(s.Routes(), s.cfg.APITokens, s.cfg.TLSDir != "")
}

// Routes are the API's endpoints and who may call them: the server and its tests use this one
// list, so an endpoint cannot be added without an access level. Only /healthz, /readyz and
// /metrics are open; everything else needs the cluster's token.
func (s *Sidecar) Routes() []sidecarapi.Route {
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }
	noBody := func() any { return &sidecarapi.NoBody{} }
	return []sidecarapi.Route{
		// Initialisation restarts the decision; one start a second is plenty (a caller that is
		// refused retries, as steward etcd does).
		{Method: "POST", Path: "/v1/init", Access: sidecarapi.Control, MinInterval: time.Second, Body: noBody, Handler: s.handleStartInit},
		{Method: "GET", Path: "/v1/init", Access: sidecarapi.Read, Handler: s.handleInitStatus},
		{Method: "GET", Path: "/v1/config", Access: sidecarapi.Read, Handler: s.handleConfig},
		{Method: "GET", Path: "/v1/backup", Access: sidecarapi.Read, Handler: s.backups.HandleStatus},
		{Method: "GET", Path: "/v1/snapshots/latest", Access: sidecarapi.Read, Handler: s.backups.HandleLatest},
		// A full snapshot runs retention: with limit:N, N snapshots in a row would push every
		// older one (and its deltas) out. They are spaced.
		{Method: "POST", Path: "/v1/snapshots/full", Access: sidecarapi.Control, MinInterval: s.cfg.FullSnapshotInterval,
			Timeout: agent.FullSnapshotTimeout + time.Minute, Body: noBody, Handler: s.backups.HandleFull},
		// Resolving a restore target lists the store and reads its objects' headers.
		{Method: "POST", Path: agent.ResolveTargetPath, Access: sidecarapi.Control, MinInterval: time.Second,
			Timeout: 2 * time.Minute, Body: func() any { return &cluster.RestoreTarget{} }, Handler: s.backups.HandleResolveTarget},
		// ?fresh=1 waits for a report made after the request, as the cluster view took it.
		{Method: "GET", Path: "/v1/report", Access: sidecarapi.Read, Timeout: freshReportTimeout + time.Second, Handler: s.handleReport},
		// Moving leadership interrupts writes for an election's worth of time; the operator asks
		// once per step of a rolling update.
		{Method: "POST", Path: "/v1/leader/move", Access: sidecarapi.Control, MinInterval: time.Second,
			Body: func() any { return &cluster.MoveLeaderRequest{} }, Handler: s.handleMoveLeader},
		{Method: "GET", Path: "/healthz", Access: sidecarapi.Open, Handler: ok},
		{Method: "GET", Path: "/readyz", Access: sidecarapi.Open, Handler: ok},
		{Method: "GET", Path: "/metrics", Access: sidecarapi.Open, Handler: promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}).ServeHTTP},
	}
}

// initResponse is the body of GET/POST /v1/init.
type initResponse struct {
	etcdproc.InitStatus
	Plan *Plan `json:"plan,omitempty"`
}

func (s *Sidecar) handleStartInit(w http.ResponseWriter, r *http.Request) {
	if err := sidecarapi.DecodeBody(r, &sidecarapi.NoBody{}); err != nil {
		sidecarapi.WriteBodyError(w, err)
		return
	}
	if why := s.etcdRunning(r.Context()); why != "" {
		http.Error(w, why+": a member is initialised before its etcd starts, never while it runs", http.StatusConflict)
		return
	}
	s.mu.Lock()
	if s.status.State != etcdproc.InitRunning && !s.joinUntaken() {
		// Every (re)start of etcd re-initialises: the data dir or the cluster may have changed.
		s.status = etcdproc.InitStatus{State: etcdproc.InitRunning, Message: "observing the data dir and the cluster"}
		s.plan, s.config = nil, nil
		go s.initialise(s.life)
	}
	resp := initResponse{InitStatus: s.status, Plan: s.plan}
	s.mu.Unlock()
	sidecarapi.WriteJSON(w, http.StatusAccepted, resp)
}

// joinUntaken says the newest initialisation added this member as a learner moments ago
// (within joinConfigFresh) and no etcd start has fetched its configuration: the start it was
// made for stopped before asking (held, killed), and the next start takes it. Deciding again
// would find the learner it just added without data, remove it and add it again. Only a join
// is handed on: it was made for an empty data dir, where a restart's configuration was made
// for data that may have gone since. Called with mu held.
func (s *Sidecar) joinUntaken() bool {
	return s.status.State == etcdproc.InitSucceeded && !s.configTaken && s.plan != nil &&
		s.plan.Action == ActionJoinAsLearner && time.Since(s.succeededAt) < joinConfigFresh
}

// joinConfigFresh bounds how long a join's configuration waits for an etcd start to take it.
const joinConfigFresh = 10 * time.Second

// etcdRunning says how this member's etcd is seen running now ("" when it is not): it holds
// the database's lock, or its client URL answers etcd's status.
func (s *Sidecar) etcdRunning(ctx context.Context) string {
	if datadir.InUse(s.cfg.DataDir) {
		return fmt.Sprintf("this member's etcd runs: it holds the database in %s", s.cfg.DataDir)
	}
	spec, err := s.desired(ctx)
	if err != nil {
		return ""
	}
	self, ok := spec.Member(s.cfg.Name)
	if !ok {
		return ""
	}
	// Nothing listening is the usual case, and is told at once; only a listener is asked.
	if !etcdutil.Listening(self.ClientURL) {
		return ""
	}
	cli, err := s.etcd.New([]string{self.ClientURL}, 2*time.Second)
	if err != nil {
		return ""
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := cli.Status(sctx, self.ClientURL)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("this member's etcd serves at %s (member %x)", self.ClientURL, st.Header.MemberId)
}

func (s *Sidecar) handleInitStatus(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	resp := initResponse{InitStatus: s.status, Plan: s.plan}
	s.mu.Unlock()
	sidecarapi.WriteJSON(w, http.StatusOK, resp)
}

func (s *Sidecar) handleConfig(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	state, cfg := s.status.State, s.config
	s.configTaken = s.configTaken || state == etcdproc.InitSucceeded
	s.mu.Unlock()
	if state != etcdproc.InitSucceeded {
		http.Error(w, fmt.Sprintf("no configuration: initialisation is %s; POST /v1/init and wait for it to succeed", state), http.StatusConflict)
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(cfg)
}

// initialise observes, decides and acts, then records the outcome.
func (s *Sidecar) initialise(ctx context.Context) {
	start := time.Now()
	plan, cfg, err := s.runInit(ctx)
	if ctx.Err() != nil {
		return // the sidecar stops
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plan = plan
	caseName := "ObservationFailed"
	if plan != nil {
		caseName = plan.Case
	}
	if err != nil {
		s.status = etcdproc.InitStatus{State: etcdproc.InitFailed, Message: err.Error(), Case: caseName}
		s.initError = err.Error()
		s.kickReport()
		s.metrics.initTotal.WithLabelValues(caseName, "failed").Inc()
		s.lg.Error("initialisation failed", zap.String("case", caseName), zap.Error(err))
		return
	}
	s.config, s.initError = cfg, ""
	s.configTaken, s.succeededAt = false, time.Now()
	s.status = etcdproc.InitStatus{State: etcdproc.InitSucceeded, Message: plan.Reason, Case: caseName}
	s.kickReport()
	s.metrics.initTotal.WithLabelValues(caseName, "succeeded").Inc()
	s.metrics.initDuration.Observe(time.Since(start).Seconds())
	s.lg.Info("initialisation succeeded", zap.String("case", caseName), zap.String("reason", plan.Reason),
		zap.Duration("took", time.Since(start)))
}

func memberNames(spec cluster.Spec) string {
	var names []string
	for _, m := range spec.Members {
		names = append(names, m.Name)
	}
	return strings.Join(names, ", ")
}

type metrics struct {
	registry     *prometheus.Registry
	initTotal    *prometheus.CounterVec
	initDuration prometheus.Histogram
	dataValid    prometheus.Gauge

	validationSeconds prometheus.Histogram
	membership        *prometheus.CounterVec
	membershipSeconds *prometheus.HistogramVec
	learnerStalled    prometheus.Gauge

	backups    *agent.Metrics
	authErrors prometheus.Counter
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		initTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "steward_sidecar_initialisations_total",
			Help: "Member initialisations by decision case and result.",
		}, []string{"case", "result"}),
		initDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "steward_sidecar_initialisation_duration_seconds",
			Help:    "Time from an initialisation request to a generated configuration.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		dataValid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "steward_member_data_valid",
			Help: "1 if the member's data dir held valid WAL metadata and database at the last inspection.",
		}),
	}
	m.validationSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "steward_member_data_validation_seconds",
		Help: "Time to inspect and validate the data dir at initialisation.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
	m.membership = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_member_membership_changes_total",
		Help: "Membership changes made by this sidecar, by operation (remove, add_learner, promote, restore, remove_superfluous) and result."}, []string{"op", "result"})
	m.membershipSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "steward_member_membership_change_seconds",
		Help:    "Duration of membership changes (remove, add_learner, catch_up = added to promoted, promote, restore).",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}, []string{"op"})
	m.learnerStalled = gauge("steward_member_learner_stalled", "1 while this member is a learner that has not caught up for too long.")
	// The outcomes of each change exist at 0 from the start: an increase() sees the first failure.
	for _, op := range []string{"remove", "add_learner", "promote", "restore", "remove_superfluous"} {
		for _, result := range []string{"ok", "failed"} {
			m.membership.WithLabelValues(op, result)
		}
	}
	m.registry.MustRegister(m.validationSeconds, m.membership, m.membershipSeconds, m.learnerStalled)
	m.backups = agent.NewMetrics(m.registry)
	m.authErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_etcd_auth_errors_total",
		Help: "Times etcd authentication was found not as configured and could not be put right, or etcd refused the root password."})
	m.registry.MustRegister(m.authErrors)
	m.registry.MustRegister(m.initTotal, m.initDuration, m.dataValid,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// desired returns the desired cluster from the cluster view.
func (s *Sidecar) desired(ctx context.Context) (cluster.Spec, error) {
	snap, err := s.cfg.View.Snapshot(ctx)
	return snap.Spec, err
}

// handleMoveLeader serves POST /v1/leader/move: leadership moves to the member asked for
// (maintenance.MoveLeader, through this member's etcd), and the answer comes once it has. A
// cluster that cannot move it now (no leader, the target a learner or down) gets 409 with why.
func (s *Sidecar) handleMoveLeader(w http.ResponseWriter, r *http.Request) {
	var req cluster.MoveLeaderRequest
	if err := sidecarapi.DecodeBody(r, &req); err != nil {
		sidecarapi.WriteBodyError(w, err)
		return
	}
	spec, err := s.desired(r.Context())
	if err != nil {
		http.Error(w, "cannot read the cluster's specification: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	self, ok := spec.Member(s.cfg.Name)
	if !ok {
		http.Error(w, fmt.Sprintf("member %s is not in the cluster's specification", s.cfg.Name), http.StatusServiceUnavailable)
		return
	}
	cli, err := s.etcd.New([]string{self.ClientURL}, 2*time.Second)
	if err != nil {
		http.Error(w, "etcd client: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer cli.Close()
	from, now, err := maintenance.MoveLeader(r.Context(), cli, req.To)
	if err != nil {
		http.Error(w, "leadership not moved: "+err.Error(), http.StatusConflict)
		return
	}
	s.lg.Info("leadership moved on request", zap.String("from", from.Name), zap.String("to", now.Name))
	sidecarapi.WriteJSON(w, http.StatusOK, cluster.MoveLeaderResponse{From: from.Name, Leader: now.Name})
}
