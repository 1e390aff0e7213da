package cli

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/pki"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/embed"
)

func newEtcdCommand() *cobra.Command {
	var (
		sidecar, configFile, healthListen, logLevel string
		tokenFile, sidecarCA, sidecarServerName     string
		flagCfg                                     etcdproc.Config
	)
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run an etcd member in this process",
		Long: `Run an etcd member (embedded etcd server) in this process.

With --sidecar URL it asks its sidecar to initialise the member, waits until it has, fetches
the generated configuration and starts on it; --api-token-file names the file holding the
cluster's sidecar API token it authenticates with. A sidecar with TLS is called with an https
URL: --sidecar-ca names the CAs to trust (the member's ca.crt), and --sidecar-server-name the
name its certificate carries when the URL names another (a sidecar reached over loopback).
Standalone it takes an etcd configuration file
(--config-file, etcd's own format) or the flags below.

--listen-health serves /readyz (200 only when a linearizable read succeeds), /livez and
etcd's Prometheus metrics (/metrics), all in plain HTTP.
On SIGTERM or SIGINT it stops cleanly and leaves a clean-shutdown marker in the data dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lg, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			defer lg.Sync() //nolint:errcheck
			ctx := cmd.Context()
			var cfg *embed.Config
			switch {
			case sidecar != "" && configFile != "":
				return errors.New("--sidecar and --config-file exclude each other: the sidecar generates the configuration")
			case sidecar != "" && tokenFile == "":
				return errors.New("--sidecar needs --api-token-file: the sidecar API takes only requests with the cluster's token")
			case sidecar != "":
				if _, err := sidecarapi.ReadTokenFile(tokenFile); err != nil {
					return err
				}
				hc, err := sidecarHTTP(sidecar, sidecarCA, sidecarServerName)
				if err != nil {
					return err
				}
				b, err := etcdproc.ConfigFromSidecar(ctx, lg, sidecar, sidecarapi.NewClient(sidecarapi.NewFile(tokenFile), hc))
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				cfg, err = etcdproc.LoadConfigBytes(b)
				if err != nil {
					return err
				}
			case configFile != "":
				cfg, err = etcdproc.LoadConfigFile(configFile)
				if err != nil {
					return err
				}
			default:
				if flagCfg.Name == "" || flagCfg.DataDir == "" {
					return errors.New("give --sidecar URL, --config-file FILE, or at least --name and --data-dir")
				}
				b, err := flagCfg.Marshal()
				if err != nil {
					return err
				}
				cfg, err = etcdproc.LoadConfigBytes(b)
				if err != nil {
					return err
				}
			}
			cfg.Logger = "zap"
			cfg.LogOutputs = []string{"stderr"}
			return etcdproc.Run(ctx, etcdproc.Options{Config: cfg, HealthListen: healthListen, Logger: lg})
		},
	}
	f := cmd.Flags()
	f.StringVar(&sidecar, "sidecar", "", "base URL of this member's sidecar; the configuration comes from it")
	f.StringVar(&tokenFile, "api-token-file", "", "file holding the cluster's sidecar API token (with --sidecar)")
	f.StringVar(&sidecarCA, "sidecar-ca", "", "CAs to trust (PEM) when --sidecar is an https URL: the member's ca.crt")
	f.StringVar(&sidecarServerName, "sidecar-server-name", "", "name the sidecar's certificate carries, when not the --sidecar URL's host")
	f.StringVar(&configFile, "config-file", "", "etcd configuration file (etcd's YAML format)")
	f.StringVar(&healthListen, "listen-health", "", "host:port to serve /readyz, /livez and etcd's /metrics on (plain HTTP)")
	f.StringVar(&logLevel, "log-level", "info", "log level of steward's own messages")
	f.StringVar(&flagCfg.Name, "name", "", "member name (standalone)")
	f.StringVar(&flagCfg.DataDir, "data-dir", "", "data directory (standalone)")
	f.StringVar(&flagCfg.ListenClientURLs, "listen-client-urls", "http://127.0.0.1:2379", "client URLs to listen on (standalone)")
	f.StringVar(&flagCfg.AdvertiseClientURLs, "advertise-client-urls", "http://127.0.0.1:2379", "client URLs to advertise (standalone)")
	f.StringVar(&flagCfg.ListenPeerURLs, "listen-peer-urls", "http://127.0.0.1:2380", "peer URLs to listen on (standalone)")
	f.StringVar(&flagCfg.InitialAdvertisePeerURLs, "initial-advertise-peer-urls", "http://127.0.0.1:2380", "peer URLs to advertise (standalone)")
	f.StringVar(&flagCfg.InitialCluster, "initial-cluster", "", "initial cluster, name=peerURL,... (standalone; default: this member alone)")
	f.StringVar(&flagCfg.InitialClusterState, "initial-cluster-state", "new", "new or existing (standalone)")
	f.StringVar(&flagCfg.InitialClusterToken, "initial-cluster-token", "steward", "initial cluster token (standalone)")
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if flagCfg.InitialCluster == "" && flagCfg.Name != "" {
			flagCfg.InitialCluster = flagCfg.Name + "=" + flagCfg.InitialAdvertisePeerURLs
		}
		return nil
	}
	return cmd
}

// sidecarHTTP is the HTTP client of the sidecar at base: plain text for an http URL; for an
// https one, trusting the CAs in caFile, with serverName (if set) as the name to verify.
func sidecarHTTP(base, caFile, serverName string) (*http.Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--sidecar %q is not an http or https URL", base)
	}
	const timeout = 5 * time.Second
	switch {
	case u.Scheme == "http" && (caFile != "" || serverName != ""):
		return nil, fmt.Errorf("--sidecar-ca and --sidecar-server-name need an https --sidecar URL (got %s)", base)
	case u.Scheme == "http":
		return sidecarapi.HTTPClient(nil, timeout), nil
	case caFile == "":
		return nil, fmt.Errorf("--sidecar %s needs --sidecar-ca: the CAs the sidecar's certificate is verified against", base)
	}
	tc, err := pki.ServerTrust(caFile, serverName)
	if err != nil {
		return nil, fmt.Errorf("--sidecar-ca: %w", err)
	}
	return sidecarapi.HTTPClient(tc, timeout), nil
}
