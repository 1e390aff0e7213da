package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Config configures a sidecar.
type Config struct {
	// Name is this member's name in the cluster spec.
	Name string
	// DataDir is the etcd data dir shared with the etcd container/process.
	DataDir string
	// View answers questions about the cluster.
	View ClusterView
	// Etcd carries etcd settings copied into every generated configuration (tuning, log level).
	Etcd etcdproc.Config
	// Backup configures continuous backups; an empty store URL turns them off.
	Backup BackupConfig
	// ObserveTimeout bounds one observation of the cluster.
	ObserveTimeout time.Duration
	Logger         *zap.Logger
}

// Sidecar is the per-member agent. Create it with New and serve its Handler.
type Sidecar struct {
	cfg     Config
	lg      *zap.Logger
	metrics *metrics

	// backups is set once the backup store is open (nil while backups are off or the store is unreachable).
	backups atomic.Pointer[backupAgent]

	mu     sync.Mutex
	status etcdproc.InitStatus
	plan   *Plan
	config []byte
}

// New returns a sidecar for cfg.
func New(cfg Config) (*Sidecar, error) {
	if cfg.Name == "" || cfg.DataDir == "" || cfg.View == nil {
		return nil, errors.New("sidecar needs a member name, a data dir and a cluster view")
	}
	if cfg.ObserveTimeout == 0 {
		cfg.ObserveTimeout = 10 * time.Second
	}
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	return &Sidecar{cfg: cfg, lg: lg.With(zap.String("member", cfg.Name)), metrics: newMetrics(),
		status: etcdproc.InitStatus{State: etcdproc.InitNew}}, nil
}

// Serve serves the sidecar API on ln and runs the backup loop until ctx ends.
func (s *Sidecar) Serve(ctx context.Context, ln net.Listener) error {
	if s.cfg.Backup.StoreURL != "" {
		go s.runBackups(ctx)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
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

// Handler is the sidecar HTTP API.
func (s *Sidecar) Handler() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/init", s.handleStartInit)
	m.HandleFunc("GET /v1/init", s.handleInitStatus)
	m.HandleFunc("GET /v1/config", s.handleConfig)
	m.HandleFunc("GET /v1/backup", s.handleBackupStatus)
	m.HandleFunc("GET /v1/snapshots/latest", s.handleLatestSnapshots)
	m.HandleFunc("POST /v1/snapshots/full", s.handleFullSnapshot)
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	m.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	return m
}

// initResponse is the body of GET/POST /v1/init.
type initResponse struct {
	etcdproc.InitStatus
	Plan *Plan `json:"plan,omitempty"`
}

func (s *Sidecar) handleStartInit(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	if s.status.State != etcdproc.InitRunning {
		// Every (re)start of etcd re-initialises: the data dir or the cluster may have changed.
		s.status = etcdproc.InitStatus{State: etcdproc.InitRunning, Message: "observing the data dir and the cluster"}
		s.plan, s.config = nil, nil
		go s.initialise(context.Background())
	}
	resp := initResponse{InitStatus: s.status, Plan: s.plan}
	s.mu.Unlock()
	writeJSON(w, http.StatusAccepted, resp)
}

func (s *Sidecar) handleInitStatus(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	resp := initResponse{InitStatus: s.status, Plan: s.plan}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

func (s *Sidecar) handleConfig(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	state, cfg := s.status.State, s.config
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
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plan = plan
	caseName := "ObservationFailed"
	if plan != nil {
		caseName = plan.Case
	}
	if err != nil {
		s.status = etcdproc.InitStatus{State: etcdproc.InitFailed, Message: err.Error(), Case: caseName}
		s.metrics.initTotal.WithLabelValues(caseName, "failed").Inc()
		s.lg.Error("initialisation failed", zap.String("case", caseName), zap.Error(err))
		return
	}
	s.config = cfg
	s.status = etcdproc.InitStatus{State: etcdproc.InitSucceeded, Message: plan.Reason, Case: caseName}
	s.metrics.initTotal.WithLabelValues(caseName, "succeeded").Inc()
	s.metrics.initDuration.Observe(time.Since(start).Seconds())
	s.lg.Info("initialisation succeeded", zap.String("case", caseName), zap.String("reason", plan.Reason),
		zap.Duration("took", time.Since(start)))
}

func (s *Sidecar) runInit(ctx context.Context) (*Plan, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ObserveTimeout)
	defer cancel()
	spec, obs, err := s.observe(ctx)
	if err != nil {
		return nil, nil, err
	}
	plan := Decide(obs)
	s.lg.Info("initialisation decision", zap.String("case", plan.Case), zap.String("seed", plan.Seed),
		zap.String("action", string(plan.Action)), zap.String("reason", plan.Reason))
	switch plan.Action {
	case ActionBootstrap, ActionRestart:
		cfg, err := s.etcdConfig(spec, plan)
		return &plan, cfg, err
	default:
		return &plan, nil, errors.New(plan.Reason)
	}
}

func (s *Sidecar) observe(ctx context.Context) (ClusterSpec, Observation, error) {
	spec, err := s.cfg.View.Desired(ctx)
	if err != nil {
		return spec, Observation{}, fmt.Errorf("read the desired cluster: %w", err)
	}
	if _, ok := spec.Member(s.cfg.Name); !ok {
		return spec, Observation{}, fmt.Errorf("member %q is not in the desired cluster %q (members: %s)", s.cfg.Name, spec.Name, memberNames(spec))
	}
	status, err := s.cfg.View.Status(ctx)
	if err != nil {
		return spec, Observation{}, fmt.Errorf("read the cluster status: %w", err)
	}
	data, err := datadir.Inspect(s.cfg.DataDir)
	if err != nil {
		return spec, Observation{}, err
	}
	if data.Valid() {
		s.metrics.dataValid.Set(1)
	} else {
		s.metrics.dataValid.Set(0)
	}
	return spec, Observation{Self: s.cfg.Name, ClusterSize: len(spec.Members), Status: status.Members, Data: data}, nil
}

// etcdConfig generates the configuration for this start from the current desired cluster:
// generated at every start, never frozen.
func (s *Sidecar) etcdConfig(spec ClusterSpec, plan Plan) ([]byte, error) {
	self, _ := spec.Member(s.cfg.Name)
	var peers []string
	for _, m := range spec.Members {
		peers = append(peers, m.Name+"="+m.PeerURL)
	}
	c := s.cfg.Etcd
	c.Name = self.Name
	c.DataDir = s.cfg.DataDir
	c.ListenClientURLs = self.ClientURL
	c.AdvertiseClientURLs = self.ClientURL
	c.ListenPeerURLs = self.PeerURL
	c.InitialAdvertisePeerURLs = self.PeerURL
	c.InitialCluster = strings.Join(peers, ",")
	c.InitialClusterState = plan.ClusterState
	c.InitialClusterToken = spec.Token
	return c.Marshal()
}

func memberNames(spec ClusterSpec) string {
	var names []string
	for _, m := range spec.Members {
		names = append(names, m.Name)
	}
	return strings.Join(names, ", ")
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

type metrics struct {
	registry     *prometheus.Registry
	initTotal    *prometheus.CounterVec
	initDuration prometheus.Histogram
	dataValid    prometheus.Gauge

	backupReady         prometheus.Gauge
	backupFailures      *prometheus.CounterVec
	deltaEvents         prometheus.Counter
	latestDeltaRevision prometheus.Gauge
	latestDeltaTime     prometheus.Gauge
	latestFullRevision  prometheus.Gauge
	latestFullTime      prometheus.Gauge
	fullDuration        prometheus.Histogram
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
	m.backupReady = gauge("steward_backup_ready", "1 while backups are current (BackupReady), on the backup leader.")
	m.backupFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steward_backup_failures_total",
		Help: "Backup failures by step (full, delta, session, retention)."}, []string{"step"})
	m.deltaEvents = prometheus.NewCounter(prometheus.CounterOpts{Name: "steward_backup_delta_events_total", Help: "Events stored in delta snapshots."})
	m.latestDeltaRevision = gauge("steward_backup_latest_delta_revision", "Last revision of the newest stored delta.")
	m.latestDeltaTime = gauge("steward_backup_latest_delta_timestamp_seconds", "Unix time the newest delta was stored.")
	m.latestFullRevision = gauge("steward_backup_latest_full_revision", "Revision of the newest full snapshot.")
	m.latestFullTime = gauge("steward_backup_latest_full_timestamp_seconds", "Unix time of the newest full snapshot.")
	m.fullDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "steward_backup_full_duration_seconds",
		Help: "Time to stream one full snapshot into the store.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)})
	m.registry.MustRegister(m.backupReady, m.backupFailures, m.deltaEvents, m.latestDeltaRevision, m.latestDeltaTime,
		m.latestFullRevision, m.latestFullTime, m.fullDuration)
	m.registry.MustRegister(m.initTotal, m.initDuration, m.dataValid,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
