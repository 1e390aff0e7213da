package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/etcd-steward/steward/internal/operator"
	"github.com/go-logr/zapr"
	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
)

func newOperatorCommand() *cobra.Command {
	var (
		o      operator.Options
		logLvl string
	)
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the Kubernetes operator that reconciles EtcdClusters",
		Long: `Run the operator: for every EtcdCluster (etcd.steward.dev/v1alpha1) it keeps the member
StatefulSet, its ConfigMap, Services, Leases, PodDisruptionBudget and the sidecars' RBAC, and
writes the cluster's status from the members' Leases and pods.

It uses the in-cluster configuration, or KUBECONFIG outside a cluster. The leader-election
Lease goes in --leader-election-namespace; by default the operator's own namespace in a pod
(POD_NAMESPACE, or its service account's), and outside a cluster the kubeconfig context's
namespace ("default" when it names none).

It serves /healthz and /readyz from its start and waits for the API server before its first
request: restarted while the API server is away, it waits instead of exiting.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lg, err := newLogger(logLvl)
			if err != nil {
				return err
			}
			defer lg.Sync() //nolint:errcheck
			ctrl.SetLogger(zapr.NewLogger(lg))
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return err
			}
			if o.LeaderElection && o.LeaderElectionNamespace == "" {
				if o.LeaderElectionNamespace, err = leaderElectionNamespace(); err != nil {
					return err
				}
			}
			return operator.Run(cmd.Context(), cfg, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Image, "member-image", os.Getenv("STEWARD_IMAGE"), "image of the member pods of clusters that do not set spec.image (default: the operator's own)")
	f.StringSliceVar(&o.AllowedImages, "allowed-images", nil, "comma-separated patterns of the images a cluster's spec.image may name, "+
		"each matched against the whole reference with path.Match (* does not cross /: registry.example.com/steward:*, registry.example.com/steward@sha256:*); "+
		"the default member image is always allowed (default: any image)")
	f.StringVar(&o.Namespace, "namespace", "", "watch only this namespace (default: all)")
	f.StringVar(&o.OperatorNamespace, "operator-namespace", os.Getenv("POD_NAMESPACE"),
		"namespace of the operator's pods, which the members' NetworkPolicies let reach the sidecars (default: POD_NAMESPACE; empty: any namespace)")
	f.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8443", "address of /metrics (0 turns it off)")
	f.BoolVar(&o.MetricsPlain, "metrics-plain", false, "serve /metrics over plain HTTP to anyone who reaches it (default: HTTPS, to clients the API server authenticates and authorises to get /metrics)")
	f.StringVar(&o.HealthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	f.BoolVar(&o.LeaderElection, "leader-elect", true, "elect one active operator among replicas")
	f.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader-election Lease (default: the operator's own; outside a cluster the kubeconfig context's, else default)")
	f.DurationVar(&o.Graces.Unknown, "unknown-grace", operator.DefaultGraces.Unknown, "how long a member whose Lease expired (its pod Ready) stays Unknown before its status names its sidecar as not renewing")
	f.DurationVar(&o.Graces.NotReady, "notready-grace", operator.DefaultGraces.NotReady, "how long a member may be NotReady before its pod is deleted (a majority: quorum lost)")
	f.DurationVar(&o.Graces.CAPropagation, "ca-propagation", operator.DefaultGraces.CAPropagation, "in a CA rollover, how long the kubelets get to mount the new CA's certificates before the old CA is trusted no more")
	f.DurationVar(&o.Graces.Rollout, "rollout-grace", operator.DefaultGraces.Rollout, "how long a member restarted by a rolling update may take to come back healthy before the update stops (RollingUpdateStalled)")
	f.StringVar(&logLvl, "log-level", "info", "log level")
	return cmd
}

// serviceAccountNamespace is the file a pod's service account names its namespace in.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// leaderElectionNamespace is the namespace of the leader-election Lease when
// --leader-election-namespace is not given: the operator's own (POD_NAMESPACE, or its service
// account's in a pod), else the kubeconfig context's ("default" when it names none).
func leaderElectionNamespace() (string, error) {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns, nil
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{})
	ns, _, err := cc.Namespace()
	if err != nil {
		return "", fmt.Errorf("the namespace of the leader-election Lease: not in a pod, and the kubeconfig names none (%v); give --leader-election-namespace", err)
	}
	return ns, nil
}
