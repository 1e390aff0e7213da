package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kubeFlags are the connection flags every plugin verb takes, as kubectl's own.
type kubeFlags struct {
	kubeconfig, context, namespace string
	// tunnel, when set, replaces the port-forward to member pods (tests reach their own etcd).
	tunnel tunnel
}

// kube is a plugin verb's connection: the API, the namespace it works in, the core client
// for what the controller-runtime client cannot do (pod logs), and the tunnel to a member
// pod's ports (a port-forward; tests give their own).
type kube struct {
	c      client.Client
	core   kubernetes.Interface
	ns     string
	tunnel tunnel
}

func (f *kubeFlags) connect() (*kube, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: f.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes configuration (--kubeconfig, KUBECONFIG or ~/.kube/config): %w", err)
	}
	ns := f.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, err
		}
	}
	scheme, err := operator.Scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	t := f.tunnel
	if t == nil {
		t = portForward(cfg, core, ns)
	}
	return &kube{c: c, core: core, ns: ns, tunnel: t}, nil
}

// connectTo connects and reads the EtcdCluster name, as most verbs begin.
func (f *kubeFlags) connectTo(ctx context.Context, name string) (*kube, *v1alpha1.EtcdCluster, error) {
	k, err := f.connect()
	if err != nil {
		return nil, nil, err
	}
	ec, err := k.cluster(ctx, name)
	return k, ec, err
}

// cluster reads the EtcdCluster, with an error that says where it looked.
func (k *kube) cluster(ctx context.Context, name string) (*v1alpha1.EtcdCluster, error) {
	var ec v1alpha1.EtcdCluster
	if err := k.c.Get(ctx, types.NamespacedName{Namespace: k.ns, Name: name}, &ec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no EtcdCluster %s in namespace %s (-n names another)", name, k.ns)
		}
		return nil, fmt.Errorf("reading EtcdCluster %s/%s: %w", k.ns, name, err)
	}
	return &ec, nil
}

// newKubectlCommand is the plugin's command tree, as `kubectl-steward` and as `steward kubectl`.
func newKubectlCommand(use string) *cobra.Command { return newKubectlTree(use, &kubeFlags{}) }

func newKubectlTree(use string, f *kubeFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: "Operate Steward's etcd clusters on Kubernetes (also a kubectl plugin: kubectl steward)",
		Long: `Operate the EtcdClusters of Steward's operator: their status, backups, restores,
hibernation, members (fencing among them) and certificates, through the API server. move-leader and defrag reach
the members' etcd through a port-forward of the API server, with the cluster's own client
credentials; everything else only reads and writes Kubernetes objects.
Installed as kubectl-steward on the PATH, it is the kubectl plugin "kubectl steward".`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: KUBECONFIG, then ~/.kube/config)")
	pf.StringVar(&f.context, "context", "", "kubeconfig context (default: the current one)")
	pf.StringVarP(&f.namespace, "namespace", "n", "", "namespace of the cluster (default: the context's)")
	cmd.AddCommand(newKubectlStatusCommand(f), newKubectlBackupCommand(f), newKubectlRestoreCommand(f),
		newKubectlHibernateCommand(f), newKubectlDestroyCommand(f), newKubectlReportCommand(f), newKubectlLogsCommand(f),
		newKubectlMoveLeaderCommand(f), newKubectlDefragCommand(f), newKubectlCertificateCommand(f),
		newKubectlFenceCommand(f), newKubectlUnfenceCommand(f))
	return cmd
}

// createAndWait creates obj (kind) for cluster ec, named after it, and, unless wait is 0,
// reads it again every second until phase (which reads obj) says it is done, printing each
// new progress line to stderr (the caller prints the result to stdout).
func createAndWait(cmd *cobra.Command, k *kube, ec *v1alpha1.EtcdCluster, obj client.Object, kind string, wait time.Duration, phase func() (bool, string, error)) error {
	ctx := cmd.Context()
	obj.SetNamespace(ec.Namespace)
	obj.SetGenerateName(ec.Name + "-")
	if err := k.c.Create(ctx, obj); err != nil {
		return fmt.Errorf("creating an %s of %s/%s: %w", kind, ec.Namespace, ec.Name, err)
	}
	w := cmd.ErrOrStderr()
	fmt.Fprintf(w, "%s %s created\n", kind, obj.GetName())
	if wait == 0 {
		return nil
	}
	what := kind + " " + obj.GetName()
	return waitFor(ctx, wait, what, func(l string) { fmt.Fprintln(w, l) }, func(ctx context.Context) (bool, string, error) {
		if err := k.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, "", fmt.Errorf("reading %s: %w", what, err)
		}
		return phase()
	})
}

// waitFor polls done every second until it says finished, the deadline passes or ctx ends,
// printing each new progress line it returns.
func waitFor(ctx context.Context, timeout time.Duration, what string, progress func(string), done func(context.Context) (finished bool, line string, err error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		finished, line, err := done(ctx)
		if err != nil {
			return err
		}
		if line != last && line != "" {
			progress(line)
			last = line
		}
		if finished {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s: not done after %s (%s); it goes on: look again later", what, timeout, last)
			}
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
