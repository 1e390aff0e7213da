package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/heal"
	"github.com/etcd-steward/steward/internal/maintenance"
	"github.com/etcd-steward/steward/internal/pki"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// etcdOf reads cluster name and connects to its members (see etcdClient); the caller closes
// the client.
func (f *kubeFlags) etcdOf(ctx context.Context, name string) (*clientv3.Client, *v1alpha1.EtcdCluster, error) {
	k, ec, err := f.connectTo(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	cli, err := k.etcdClient(ctx, ec)
	if err != nil {
		return nil, nil, err
	}
	return cli, ec, nil
}

// etcdClient is a client of cluster ec's etcd members, reached through k's tunnel to each
// member pod, with the credentials the cluster publishes (status.clientCertificateSecret,
// status.rootPasswordSecret), read with the user's own rights. The members and their URLs are
// those of the cluster's ConfigMap; a connection goes only to a pod of the cluster's
// StatefulSet, and TLS verifies the member's name as inside the cluster.
func (k *kube) etcdClient(ctx context.Context, ec *v1alpha1.EtcdCluster) (*clientv3.Client, error) {
	if why := busy(ec); why != "" {
		return nil, fmt.Errorf("EtcdCluster %s/%s: %s; try again once it is over", ec.Namespace, ec.Name, why)
	}
	var cm corev1.ConfigMap
	cmName := v1alpha1.ConfigMapName(ec.Name)
	if err := k.c.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: cmName}, &cm); err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s, which lists the members of EtcdCluster %s: %w", ec.Namespace, cmName, ec.Name, err)
	}
	if !metav1.IsControlledBy(&cm, ec) {
		return nil, fmt.Errorf("ConfigMap %s/%s was not made by EtcdCluster %s: its members are not taken from it", ec.Namespace, cmName, ec.Name)
	}
	cfg, err := v1alpha1.ParseClusterConfig(cm.Data)
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", ec.Namespace, cmName, err)
	}
	memberOf := map[string]string{} // a client URL's host: its member
	var endpoints []string
	secure := false
	for _, m := range cfg.Members {
		u, err := url.Parse(m.ClientURL)
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: member %s: %w", ec.Namespace, cmName, m.Name, err)
		}
		memberOf[u.Hostname()] = m.Name
		endpoints = append(endpoints, m.ClientURL)
		secure = u.Scheme == "https"
	}
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("EtcdCluster %s/%s has no members (ConfigMap %s lists none)", ec.Namespace, ec.Name, cmName)
	}
	d := etcdutil.Dialer{}
	if secure {
		if d.TLS, err = k.clientTLS(ctx, ec); err != nil {
			return nil, err
		}
	}
	if name := ec.Status.RootPasswordSecret; name != "" {
		pw, err := k.secretValue(ctx, name, v1alpha1.RootPasswordKey)
		if err != nil {
			return nil, err
		}
		if d.Password, err = etcdutil.Password(pw, fmt.Sprintf("the root password in Secret %s/%s", ec.Namespace, name)); err != nil {
			return nil, err
		}
	}
	// The tunnel goes only to the pods of the cluster's StatefulSet; a member without a pod
	// now (down) is not reached, and a pod of another under its name is refused at once.
	reachable := map[string]bool{}
	for _, m := range cfg.Members {
		_, cluster, err := k.memberPod(ctx, m.Name)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("EtcdCluster %s/%s, member %s: %w", ec.Namespace, ec.Name, m.Name, err)
		case cluster != ec.Name:
			return nil, fmt.Errorf("pod %s/%s is a member of %s, not of %s: nothing done", k.ns, m.Name, cluster, ec.Name)
		default:
			reachable[m.Name] = true
		}
	}
	d.Through = func(ctx context.Context, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		name, ok := memberOf[host]
		if !ok || !reachable[name] {
			return nil, fmt.Errorf("%s is no member pod of EtcdCluster %s/%s now", addr, ec.Namespace, ec.Name)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, err
		}
		return k.tunnel(ctx, name, p)
	}
	cli, err := d.New(endpoints, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("connecting to the members of EtcdCluster %s/%s: %w", ec.Namespace, ec.Name, err)
	}
	return cli, nil
}

// busy says why the cluster's members are the operator's alone now ("" when they are not):
// a recovery or restore carries them through its phases, a hibernation stops them.
func busy(ec *v1alpha1.EtcdCluster) string {
	if raw := ec.Status.Recovery; raw != nil {
		var st heal.Status
		if json.Unmarshal(raw.Raw, &st) == nil && st.Directive != nil {
			return fmt.Sprintf("a recovery is under way (epoch %d, %s)", st.Directive.Epoch, st.Directive.Phase)
		}
	}
	if ec.Spec.Replicas == 0 || ec.Annotations[v1alpha1.AnnotationHibernate] == "true" || ec.Status.Hibernation != nil {
		return "it hibernates, or is stopping or resuming its members"
	}
	return ""
}

// clientTLS is the TLS configuration of the client certificate the cluster publishes.
func (k *kube) clientTLS(ctx context.Context, ec *v1alpha1.EtcdCluster) (*tls.Config, error) {
	name := ec.Status.ClientCertificateSecret
	if name == "" {
		return nil, fmt.Errorf("EtcdCluster %s/%s serves TLS but publishes no client certificate (status.clientCertificateSecret): with spec.tls.serverSecret, name one in spec.tls.clientSecret", ec.Namespace, ec.Name)
	}
	var s corev1.Secret
	if err := k.c.Get(ctx, types.NamespacedName{Namespace: k.ns, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("reading the client certificate Secret %s/%s: %w", k.ns, name, err)
	}
	pair, err := tls.X509KeyPair(s.Data[pki.CertFile], s.Data[pki.KeyFile])
	if err != nil {
		return nil, fmt.Errorf("the client certificate Secret %s/%s: %w", k.ns, name, err)
	}
	tc, err := pki.TrustPEM(s.Data[pki.CAFile])
	if err != nil {
		return nil, fmt.Errorf("the client certificate Secret %s/%s, key %s: %w", k.ns, name, pki.CAFile, err)
	}
	tc.Certificates = []tls.Certificate{pair}
	return tc, nil
}

// secretValue is key of Secret name, which must be there and not empty.
func (k *kube) secretValue(ctx context.Context, name, key string) ([]byte, error) {
	var s corev1.Secret
	if err := k.c.Get(ctx, types.NamespacedName{Namespace: k.ns, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", k.ns, name, err)
	}
	if len(s.Data[key]) == 0 {
		return nil, fmt.Errorf("the Secret %s/%s has no key %s", k.ns, name, key)
	}
	return s.Data[key], nil
}

// leaderMove is what `move-leader` and `kubectl steward move-leader` print.
type leaderMove struct {
	Cluster string `json:"cluster,omitempty"`
	Before  string `json:"before"`
	After   string `json:"after"`
	Moved   bool   `json:"moved"`
}

func newKubectlMoveLeaderCommand(f *kubeFlags) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:   "move-leader CLUSTER [MEMBER]",
		Short: "Hand etcd's leadership to MEMBER, or to the voter furthest along",
		Long: `Hand etcd's leadership to MEMBER (a voter of the cluster), or, without one, to the voter
furthest along. Writes pause for an election's worth of time. The plugin reaches the members
through a port-forward (it needs pods/portforward and to read the cluster's client certificate
and root password Secrets) and prints who led before and who leads after, as the members
report it afterwards. Refused while a recovery runs or the cluster hibernates.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			to := ""
			if len(args) == 2 {
				to = args[1]
			}
			ctx := cmd.Context()
			cli, ec, err := f.etcdOf(ctx, args[0])
			if err != nil {
				return err
			}
			defer cli.Close()
			from, _, err := maintenance.MoveLeader(ctx, cli, to)
			if err != nil {
				return fmt.Errorf("EtcdCluster %s/%s: %w", ec.Namespace, ec.Name, err)
			}
			after, err := leaderNow(ctx, cli)
			if err != nil {
				return fmt.Errorf("EtcdCluster %s/%s: leadership handed from %s, but who leads now is unknown: %w", ec.Namespace, ec.Name, from.Name, err)
			}
			res := leaderMove{Cluster: ec.Name, Before: from.Name, After: after, Moved: after != from.Name}
			return out.print(cmd.OutOrStdout(), res, func(t *table) {
				t.header("CLUSTER", "LEADER BEFORE", "LEADER AFTER")
				t.row(res.Cluster, res.Before, res.After)
			})
		},
	}
	out.register(cmd)
	return cmd
}

// leaderNow is the member the members agree leads, asked afresh.
func leaderNow(ctx context.Context, cli *clientv3.Client) (string, error) {
	members, err := maintenance.Observe(ctx, cli)
	if err != nil {
		return "", err
	}
	if l, ok := maintenance.Leader(members); ok {
		return l.Name, nil
	}
	return "", fmt.Errorf("no leader agreed on yet")
}

func newKubectlDefragCommand(f *kubeFlags) *cobra.Command {
	var (
		all                    bool
		memberTimeout, waitFor time.Duration
		out                    outputFlag
	)
	cmd := &cobra.Command{
		Use:   "defrag CLUSTER [MEMBER | --all]",
		Short: "Defragment one member, or every member one at a time, the leader last",
		Long: `Defragment MEMBER, or with --all every member, one at a time: followers first, the leader
last, after its leadership moved to the voter furthest along. Before each member the cluster
must be fully healthy again (every member answers, agrees on the leader and is caught up),
waiting up to --wait; otherwise it stops, having done nothing more. The members are reached
as by move-leader. Refused while a recovery runs or the cluster hibernates.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			policy := maintenance.Policy{All: all}
			switch {
			case len(args) == 2 && all:
				return fmt.Errorf("defrag %s %s --all: name a member or give --all, not both", args[0], args[1])
			case len(args) == 2:
				policy.Only = args[1]
			case !all:
				return fmt.Errorf("defrag %s: name a member, or give --all for every member", args[0])
			}
			ctx := cmd.Context()
			cli, ec, err := f.etcdOf(ctx, args[0])
			if err != nil {
				return err
			}
			defer cli.Close()
			o := maintenance.Options{Policy: policy, MemberTimeout: memberTimeout, WaitTimeout: waitFor, Progress: stepPrinter(cmd.ErrOrStderr())}
			res, err := maintenance.Defragment(ctx, cli, o)
			if perr := out.print(cmd.OutOrStdout(), res, func(t *table) { defragTable(t, res) }); perr != nil {
				return perr
			}
			if err != nil {
				return fmt.Errorf("EtcdCluster %s/%s: %w", ec.Namespace, ec.Name, err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "defragment every member")
	cmd.Flags().DurationVar(&memberTimeout, "member-timeout", 5*time.Minute, "how long one member's defragmentation may take")
	cmd.Flags().DurationVar(&waitFor, "wait", time.Minute, "how long to wait for a fully healthy cluster before each member")
	out.register(cmd)
	return cmd
}
