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

	retentionpkg "github.com/etcd-steward/steward/internal/backup/retention"

	"github.com/etcd-steward/steward/internal/kubeview"
	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/member"
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
		kubeCluster, kubeNamespace          string
	)
	cmd := &cobra.Command{
		Use:   "sidecar",
		Short: "Run the member agent beside an etcd member",
		Long: `Run the sidecar beside one etcd member: it inspects the member's data dir and the cluster,
decides how the member starts, generates its etcd configuration, and serves:

  POST /v1/init     start initialising the member
  GET  /v1/init     initialisation state: new | running | succeeded | failed, with a message
  GET  /v1/config   the generated etcd configuration (after a successful initialisation)
  GET  /healthz     the sidecar is up
  GET  /metrics     Prometheus metrics`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
				cfg.View = local.View{Dir: localDir, Name: cfg.Name}
			case kubeCluster != "":
				if err := kubernetesView(cmd.Context(), &cfg, kubeNamespace, kubeCluster); err != nil {
					return err
				}
				if !cmd.Flags().Changed("drill-scratch-dir") {
					// A pod's /tmp is a small emptyDir: the drill's scratch goes on the data
					// volume, beside the data dir, as a recovery's does.
					cfg.Backup.DrillScratchDir = filepath.Dir(cfg.DataDir)
				}
			default:
				return errors.New("give --local-dir (a local supervisor's directory) or --kubernetes-cluster (an EtcdCluster's name): the sidecar needs a cluster view")
			}
			cfg.Logger = lg
			sc, err := member.New(cfg)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("sidecar API on %s: %w (is another member using this port?)", listen, err)
			}
			lg.Info("sidecar serving", zap.String("member", cfg.Name), zap.String("listen", ln.Addr().String()))
			return sc.Serve(cmd.Context(), ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Name, "name", "", "this member's name in the cluster")
	f.StringVar(&cfg.DataDir, "data-dir", "", "the member's etcd data directory")
	f.StringVar(&listen, "listen", "127.0.0.1:2381", "host:port of the sidecar API")
	f.StringVar(&localDir, "local-dir", "", "directory of the local supervisor whose cluster this member belongs to")
	f.StringVar(&kubeCluster, "kubernetes-cluster", "", "name of the EtcdCluster this member belongs to (in a pod: the cluster view is the API server)")
	f.StringVar(&kubeNamespace, "kubernetes-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the EtcdCluster (default: POD_NAMESPACE)")
	f.StringVar(&logLvl, "log-level", "info", "log level")
	f.StringVar(&cfg.Etcd.LogLevel, "etcd-log-level", "info", "log level written into the generated etcd configuration")
	f.Uint64Var(&cfg.Etcd.SnapshotCount, "etcd-snapshot-count", 10000, "etcd snapshot-count for the generated configuration")
	f.StringVar(&cfg.Backup.StoreURL, "store", "", "backup store URL (file://, mem://, s3://, gs://, azblob://); empty: no backups")
	f.DurationVar(&cfg.Backup.DeltaPeriod, "delta-period", 5*time.Second, "how often delta snapshots are written")
	f.IntVar(&cfg.Backup.DeltaMaxBytes, "delta-max-bytes", 16<<20, "write a delta early once it holds this many bytes")
	f.StringVar(&cfg.Backup.FullSchedule, "full-schedule", "@hourly", "cron schedule of full snapshots")
	f.StringVar(&cfg.Backup.DrillSchedule, "drill-schedule", "@daily", "cron schedule of restore drills of the newest timeline on the backup leader (restore into a scratch dir, compare HashKV with its member); \""+member.DrillOff+"\" for none")
	f.StringVar(&cfg.Backup.DrillScratchDir, "drill-scratch-dir", os.TempDir(), "directory for the restore drill's scratch data dir (room for twice the database; with --kubernetes-cluster the default is the data volume)")
	f.StringVar(&retention, "retention", "exponential", "backup retention policy: exponential or limit:N (empty: keep everything)")
	_ = cmd.MarkFlagRequired("name")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}

// kubernetesView sets the sidecar up as a member of an EtcdCluster: its view is the API
// server, and the cluster's ConfigMap (written by the operator) carries the etcd tuning and
// the backup settings. etcd listens on every interface and advertises the member's DNS names.
func kubernetesView(ctx context.Context, cfg *member.Config, ns, cluster string) error {
	rc, err := ctrlconfig.GetConfig()
	if err != nil {
		return fmt.Errorf("kubernetes configuration: %w", err)
	}
	v, err := kubeview.New(ctx, rc, ns, cluster, cfg.Name)
	if err != nil {
		return err
	}
	cc, _, err := v.Config(ctx)
	if err != nil {
		return err
	}
	cfg.View, cfg.ListenHost, cfg.RemoveUndesired = v, "0.0.0.0", true
	e := cc.Etcd
	if e.SnapshotCount > 0 {
		cfg.Etcd.SnapshotCount = uint64(e.SnapshotCount)
	}
	cfg.Etcd.HeartbeatIntervalMs, cfg.Etcd.ElectionTimeoutMs = uint(e.HeartbeatMillis), uint(e.ElectionMillis)
	cfg.Etcd.QuotaBackendBytes = e.QuotaBackendBytes
	cfg.Etcd.AutoCompactionMode, cfg.Etcd.AutoCompactionRetention = e.AutoCompactionMode, e.AutoCompactionRetention
	if b := cc.Backup; b != nil {
		cfg.Backup.StoreURL, cfg.Backup.FullSchedule = b.Store, b.FullSchedule
		if b.DrillSchedule != "" {
			cfg.Backup.DrillSchedule = b.DrillSchedule
		}
		if b.DeltaPeriod != "" {
			if cfg.Backup.DeltaPeriod, err = time.ParseDuration(b.DeltaPeriod); err != nil {
				return fmt.Errorf("cluster.yaml backup.deltaPeriod: %w", err)
			}
		}
		cfg.Backup.Retention = retentionpkg.Policy{}
		if b.Retention != "" && b.Retention != "keep" {
			if cfg.Backup.Retention, err = retentionpkg.ParsePolicy(b.Retention); err != nil {
				return fmt.Errorf("cluster.yaml backup.retention: %w", err)
			}
		}
	}
	return nil
}
