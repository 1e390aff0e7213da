package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/etcd-steward/steward/internal/backup/agent"
	retentionpkg "github.com/etcd-steward/steward/internal/backup/retention"
	"github.com/etcd-steward/steward/internal/units"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/kubeview"
	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/member"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
)

// memoryLimit is the sidecar's default soft memory limit.
const memoryLimit = 64 << 20

func newSidecarCommand() *cobra.Command {
	var (
		cfg                                 member.Config
		listen, localDir, logLvl, retention string
		fullAfterBytes                      string
		kubeCluster, kubeNamespace          string
		defragThreshold                     float64
		defragMinReclaim                    string
		tokenFile, keysPath, keyID          string
		etcdFlags                           []string
	)
	cmd := &cobra.Command{
		Use:   "sidecar",
		Short: "Run the member agent beside an etcd member",
		Long: `Run the sidecar beside one etcd member: it inspects the member's data dir and the cluster,
decides how the member starts, generates its etcd configuration, and serves:

  POST /v1/init              start initialising the member
  GET  /v1/init              initialisation state: new | running | succeeded | failed, with a message
  GET  /v1/config            the generated etcd configuration (after a successful initialisation)
  GET  /v1/report            the member's live report
  GET  /v1/backup            backup status
  GET  /v1/snapshots/latest  the newest full and delta snapshots
  POST /v1/snapshots/full    take a full snapshot now (at most one per --full-snapshot-min-interval)
  POST /v1/restore/target    resolve a restore target in this member's backup store (a dry run)
  POST /v1/leader/move       hand leadership to another member
  GET  /healthz, /readyz     the sidecar is up (open)
  GET  /metrics              Prometheus metrics (open)

Every endpoint but the open ones needs the header "Authorization: Bearer <token>" with a
token of --api-token-file (one token per line; the first is sent to other sidecars; the
file is read again when it changes).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var kube *kubeview.View
			lg, err := newLogger(logLvl)
			if err != nil {
				return err
			}
			defer lg.Sync() //nolint:errcheck
			if os.Getenv("GOMEMLIMIT") == "" {
				// A soft limit keeps the sidecar small beside etcd: the garbage collector works
				// harder near it instead of letting the heap double (GOMEMLIMIT overrides).
				debug.SetMemoryLimit(memoryLimit)
			}
			if cfg.EtcdFlags, err = etcdproc.ParseFlags(etcdFlags); err != nil {
				return fmt.Errorf("--etcd-flag: %w", err)
			}
			if err := etcdproc.CheckFlags(cfg.EtcdFlags); err != nil {
				return fmt.Errorf("--etcd-flag: %w", err)
			}
			if err := agent.ValidateSchedules(cfg.Backup); err != nil {
				return err
			}
			if retention != "" {
				p, err := retentionpkg.ParsePolicy(retention)
				if err != nil {
					return fmt.Errorf("--retention: %w", err)
				}
				cfg.Backup.Retention = p
			}
			switch {
			case localDir != "" && kubeCluster != "":
				return errors.New("--local-dir and --kubernetes-cluster exclude each other: give the one cluster view this member belongs to")
			case localDir != "":
				cfg.View = local.View{Dir: local.Dir(localDir), Name: cfg.Name}
			case kubeCluster != "":
				if kube, err = kubernetesView(cmd.Context(), lg, kubeNamespace, kubeCluster, cfg.Name); err != nil {
					return err
				}
				cfg.View, cfg.ListenHost, cfg.RemoveUndesired = kube, "0.0.0.0", true
				if !cmd.Flags().Changed("drill-scratch-dir") {
					// A pod's /tmp is a small emptyDir: the drill's scratch goes on the data
					// volume, beside the data dir, as a recovery's does.
					cfg.Backup.DrillScratchDir = filepath.Dir(cfg.DataDir)
				}
			default:
				return errors.New("give --local-dir (a local supervisor's directory) or --kubernetes-cluster (an EtcdCluster's name): the sidecar needs a cluster view")
			}
			if cfg.Backup.FullAfterBytes, err = parseSize("--full-after-bytes", fullAfterBytes); err != nil {
				return err
			}
			if cfg.Backup.FullAfterRevisions < 0 {
				return fmt.Errorf("--full-after-revisions %d: give a number of revisions, or 0 for no limit", cfg.Backup.FullAfterRevisions)
			}
			if cfg.Maintenance.Defrag, err = defragPolicy("--defrag-threshold", defragThreshold, "--defrag-min-reclaim", defragMinReclaim); err != nil {
				return err
			}
			if cfg.Backup.Keys, err = loadKeys(keysPath, keyID); err != nil {
				return err
			}
			cfg.Backup.KeysPath, cfg.Backup.KeyID = keysPath, keyID
			if tokenFile == "" {
				return errors.New("give --api-token-file: the sidecar API takes only requests with the cluster's token (steward local and the operator make one)")
			}
			if _, err := sidecarapi.ReadTokenFile(tokenFile); err != nil {
				return err
			}
			cfg.APITokens = sidecarapi.NewFile(tokenFile)
			cfg.Logger = lg
			serve := func(ctx context.Context, cfg member.Config) error {
				sc, err := member.New(cfg)
				if err != nil {
					return err
				}
				ln, err := net.Listen("tcp", listen)
				if err != nil {
					return fmt.Errorf("sidecar API on %s: %w (is another member using this port?)", listen, err)
				}
				lg.Info("sidecar serving", zap.String("member", cfg.Name), zap.String("listen", ln.Addr().String()))
				return sc.Serve(ctx, ln)
			}
			if kube != nil {
				return serveKubernetes(cmd.Context(), lg, cfg, kube, serve)
			}
			return serve(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Name, "name", "", "this member's name in the cluster")
	f.StringVar(&cfg.DataDir, "data-dir", "", "the member's etcd data directory")
	f.StringVar(&listen, "listen", "127.0.0.1:2381", "host:port of the sidecar API")
	f.StringVar(&localDir, "local-dir", "", "directory of the local supervisor whose cluster this member belongs to")
	f.StringVar(&kubeCluster, "kubernetes-cluster", "", "name of the EtcdCluster this member belongs to (in a pod: the cluster view is the API server)")
	f.StringVar(&kubeNamespace, "kubernetes-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the EtcdCluster (default: POD_NAMESPACE)")
	f.StringVar(&cfg.TLSDir, "tls-dir", "", "this member's certificate directory (tls.crt, tls.key, ca.crt, as cert-manager writes a Secret): etcd serves clients and peers with mutual TLS of that CA, the sidecar serves its API over TLS with it (only /healthz, /readyz and /metrics also in plain text), and the sidecar's clients present it; empty: plain text")
	f.StringVar(&cfg.AppUser.Name, "app-user", "", "with --root-password-file: etcd's user for applications, kept by the leader's sidecar with a role of the same name that may read and write --app-user-prefix (never root's rights); empty: none")
	f.StringVar(&cfg.AppUser.Prefix, "app-user-prefix", "", "the keys the application user may read and write (empty: every key)")
	f.StringVar(&cfg.AppUser.PasswordFile, "app-password-file", "", "file holding the application user's password (a mounted Secret key), read again when it changes")
	f.StringVar(&cfg.RootPasswordFile, "root-password-file", "", "file holding etcd's root password (a mounted Secret key): the sidecar turns etcd authentication on with it, its clients log in as root, and a restore gives the restored root user this password; empty: no authentication")
	f.StringVar(&cfg.TokenKeyDir, "token-key-dir", "", "directory holding the cluster's token signing key pair (token.key, token.pub) where etcd reads it: etcd signs the tokens its clients log in for with it (JWT, ES256), so every member takes them; empty: etcd's simple tokens, valid only on the member that issued them")
	f.StringVar(&logLvl, "log-level", "info", "log level")
	f.StringVar(&tokenFile, "api-token-file", "", "file holding the cluster's sidecar API token(s), one per line (required)")
	f.DurationVar(&cfg.FullSnapshotInterval, "full-snapshot-min-interval", member.DefaultFullSnapshotInterval, "least time between two on-demand full snapshots (POST /v1/snapshots/full)")
	f.StringVar(&cfg.Etcd.LogLevel, "etcd-log-level", "info", "log level written into the generated etcd configuration")
	f.Uint64Var(&cfg.Etcd.SnapshotCount, "etcd-snapshot-count", 10000, "etcd snapshot-count for the generated configuration")
	f.StringArrayVar(&etcdFlags, "etcd-flag", nil, "extra etcd option for the generated configuration, as NAME=VALUE with etcd's flag name (repeatable; Steward's own options are refused)")
	f.StringVar(&cfg.Backup.StoreURL, "store", "", "backup store URL (file://, mem://, s3://, gs://, azblob://); empty: no backups")
	registerCredentialsFlag(f, &cfg.Backup.CredentialsDir, "store-credentials", "the backup store's credentials")
	registerCredentialsFlag(f, &cfg.Backup.RestoreCredentialsDir, "restore-store-credentials", "the credentials of the store a bootstrap restore reads, when it is not the backup store")
	registerKeyFlags(f, &keysPath, &keyID)
	f.DurationVar(&cfg.Backup.DeltaPeriod, "delta-period", 5*time.Second, "how often delta snapshots are written")
	f.IntVar(&cfg.Backup.DeltaMaxBytes, "delta-max-bytes", 16<<20, "write a delta early once it holds this many bytes")
	f.StringVar(&cfg.Backup.FullSchedule, "full-schedule", "@hourly", "cron schedule of full snapshots")
	f.Int64Var(&cfg.Backup.FullAfterRevisions, "full-after-revisions", 1_000_000, "take a full snapshot as soon as the deltas since the newest one span this many revisions, so a restore replays no more (0: no limit)")
	f.StringVar(&fullAfterBytes, "full-after-bytes", "1Gi", "take a full snapshot as soon as the deltas since the newest one hold this much (0: no limit)")
	f.StringVar(&cfg.Backup.DrillSchedule, "drill-schedule", "@daily", "cron schedule of restore drills of the newest timeline on the backup leader (restore into a scratch dir, compare HashKV with its member); \""+agent.DrillOff+"\" for none")
	f.StringVar(&cfg.Backup.DrillScratchDir, "drill-scratch-dir", os.TempDir(), "directory for the restore drill's scratch data dir (room for the database and 64 MiB, besides the member's database size, which a drill keeps free; with --kubernetes-cluster the default is the data volume)")
	f.StringVar(&cfg.Maintenance.DefragSchedule, "defrag-schedule", member.DefaultMaintenance.DefragSchedule, "cron schedule on which the leader's sidecar defragments the members worth it, followers first, the leader last after moving leadership; \""+member.MaintenanceOff+"\" for none")
	f.Float64Var(&defragThreshold, "defrag-threshold", 100*member.DefaultMaintenance.Defrag.Threshold, "percentage of a member's database file that must be free pages for it to be defragmented")
	f.StringVar(&defragMinReclaim, "defrag-min-reclaim", "100Mi", "the least a member must give back to be defragmented")
	f.StringVar(&retention, "retention", "exponential", "backup retention policy: exponential, limit:N (the N newest full snapshots), age:N[h|d|w] (every point in time within the age, e.g. age:30d) or keep (nothing is deleted; so does empty)")
	_ = cmd.MarkFlagRequired("name")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}

// kubernetesView is the view of a member of an EtcdCluster: the API server. It returns at
// once; the view reads the cluster in the background, for as long as the API server takes.
func kubernetesView(ctx context.Context, lg *zap.Logger, ns, clusterName, name string) (*kubeview.View, error) {
	rc, err := ctrlconfig.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes configuration: %w", err)
	}
	return kubeview.New(ctx, rc, ns, clusterName, name, lg)
}

// viewWait is how long a member pod's sidecar waits for its view to read the cluster before
// it serves without the cluster's settings.
const viewWait = 5 * time.Second

// serveKubernetes serves the sidecar of a member pod. The cluster's ConfigMap carries the etcd
// tuning and the backup and maintenance settings; etcd listens on every interface and
// advertises the member's DNS names. While the API server does not answer, a sidecar without
// those settings serves, with a view that never reads the cluster: the member restarts on its
// own valid data as it last started, and anything else waits. Once the view has read the
// cluster, that sidecar stops and one with the cluster's settings serves (steward etcd, if it
// still waits, asks it again).
func serveKubernetes(ctx context.Context, lg *zap.Logger, cfg member.Config, v *kubeview.View, serve func(context.Context, member.Config) error) error {
	select {
	case <-v.Synced():
	case <-ctx.Done():
		return nil
	case <-time.After(viewWait):
		lg.Warn("the Kubernetes API server does not answer: serving without the cluster's settings until it does; this member restarts on its own valid data, anything else waits",
			zap.Error(v.Ready()))
		waiting := cfg
		waiting.View, waiting.Backup.StoreURL = awaitingView{v}, ""
		wctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- serve(wctx, waiting) }()
		select {
		case <-v.Synced():
			stop()
			if err := <-done; err != nil {
				return err
			}
			lg.Info("the cluster view has read the cluster: serving with the cluster's settings")
		case err := <-done:
			stop()
			return err
		}
	}
	cc, _, err := v.Config(ctx)
	if err != nil {
		return err
	}
	if err := applyClusterConfig(&cfg, cc); err != nil {
		return err
	}
	return serve(ctx, cfg)
}

// awaitingView is the view of a sidecar that serves before the API server answered: it never
// reads the cluster, so that this sidecar, without the cluster's settings, never decides on
// the cluster's spec.
type awaitingView struct{ *kubeview.View }

func (a awaitingView) Snapshot(context.Context) (cluster.Snapshot, error) {
	if err := a.Ready(); err != nil {
		return cluster.Snapshot{}, err
	}
	return cluster.Snapshot{}, fmt.Errorf("%w: the sidecar is about to serve with the cluster's settings", cluster.ErrViewNotReady)
}

// applyClusterConfig copies the operator's ClusterConfig (the ConfigMap the sidecar reads)
// into the sidecar's configuration, refusing what the backup loop would only refuse later:
// a period that is not positive, a schedule or a retention policy that does not parse.
func applyClusterConfig(cfg *member.Config, cc v1alpha1.ClusterConfig) error {
	var err error
	e := cc.Etcd
	if e.SnapshotCount > 0 {
		cfg.Etcd.SnapshotCount = uint64(e.SnapshotCount)
	}
	if e.HeartbeatMillis < 0 || e.ElectionMillis < 0 || e.QuotaBackendBytes < 0 {
		return fmt.Errorf("cluster.yaml etcd: heartbeatMillis %d, electionMillis %d, quotaBackendBytes %d: none may be negative", e.HeartbeatMillis, e.ElectionMillis, e.QuotaBackendBytes)
	}
	cfg.Etcd.HeartbeatIntervalMs, cfg.Etcd.ElectionTimeoutMs = uint(e.HeartbeatMillis), uint(e.ElectionMillis)
	cfg.Etcd.QuotaBackendBytes = e.QuotaBackendBytes
	cfg.Etcd.AutoCompactionMode, cfg.Etcd.AutoCompactionRetention = e.AutoCompactionMode, e.AutoCompactionRetention
	if m := cc.Maintenance; m != nil {
		if m.DefragSchedule != "" {
			cfg.Maintenance.DefragSchedule = m.DefragSchedule
		}
		if m.DefragThreshold >= 0 {
			if m.DefragThreshold > 1 {
				return fmt.Errorf("cluster.yaml maintenance.defragThreshold %g: give a share from 0 to 1", m.DefragThreshold)
			}
			cfg.Maintenance.Defrag.Threshold = m.DefragThreshold
		}
		if m.DefragMinReclaim >= 0 {
			cfg.Maintenance.Defrag.MinReclaim = m.DefragMinReclaim
		}
		if s := cfg.Maintenance.DefragSchedule; s != "" && s != member.MaintenanceOff {
			if _, err := units.ParseSchedule(s); err != nil {
				return fmt.Errorf("cluster.yaml maintenance.defragSchedule %q: %w", s, err)
			}
		}
	}
	if b := cc.Backup; b != nil {
		cfg.Backup.StoreURL, cfg.Backup.FullSchedule = b.Store, b.FullSchedule
		if b.DrillSchedule != "" {
			cfg.Backup.DrillSchedule = b.DrillSchedule
		}
		if b.DeltaPeriod != "" {
			if cfg.Backup.DeltaPeriod, err = time.ParseDuration(b.DeltaPeriod); err != nil {
				return fmt.Errorf("cluster.yaml backup.deltaPeriod: %w", err)
			}
			if cfg.Backup.DeltaPeriod <= 0 {
				return fmt.Errorf("cluster.yaml backup.deltaPeriod %q: a period is positive", b.DeltaPeriod)
			}
		}
		for what, sched := range map[string]string{"fullSchedule": cfg.Backup.FullSchedule, "drillSchedule": cfg.Backup.DrillSchedule} {
			if sched == "" || sched == agent.DrillOff && what == "drillSchedule" {
				continue
			}
			if _, err := units.ParseSchedule(sched); err != nil {
				return fmt.Errorf("cluster.yaml backup.%s %q: %w", what, sched, err)
			}
		}
		cfg.Backup.Retention = retentionpkg.Policy{}
		if b.Retention != "" {
			if cfg.Backup.Retention, err = retentionpkg.ParsePolicy(b.Retention); err != nil {
				return fmt.Errorf("cluster.yaml backup.retention: %w", err)
			}
		}
	}
	return nil
}
