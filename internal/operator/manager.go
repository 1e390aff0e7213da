package operator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Options configure the operator.
type Options struct {
	// Image runs the members of clusters that do not name one.
	Image string
	// AllowedImages are the patterns of the images a cluster's spec.image may name besides
	// Image (empty: any image); see decideImage.
	AllowedImages []string
	// Namespace limits the operator to one namespace ("" = all).
	Namespace string
	// OperatorNamespace is the namespace the operator's own pods run in ("": unknown): the
	// members' NetworkPolicies let the operator's pods there reach the sidecars.
	OperatorNamespace string
	// MetricsAddr and HealthAddr serve /metrics and /healthz, /readyz ("0" turns one off).
	MetricsAddr, HealthAddr string
	// MetricsPlain serves /metrics over plain HTTP to anyone who reaches it; by default it is
	// served over HTTPS to clients the API server authenticates and authorises.
	MetricsPlain bool
	// LeaderElection lets several operator replicas run, one active.
	LeaderElection          bool
	LeaderElectionNamespace string
	Graces                  Graces
	// SyncPeriod bounds how stale the cache may grow without an event.
	SyncPeriod time.Duration
}

// Scheme has the Kubernetes types and Steward's.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// newManager returns a manager running the EtcdCluster, EtcdBackup and EtcdRestore
// reconcilers. It serves no health probes: Run does, from the process's start.
func newManager(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	mo := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 MetricsOptions(o.MetricsAddr, o.MetricsPlain),
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "steward-operator.etcd.steward.dev",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
	}
	if o.SyncPeriod > 0 {
		mo.Cache.SyncPeriod = &o.SyncPeriod
	}
	mo.Cache.ByObject = stewardObjectsOnly()
	if o.Namespace != "" {
		mo.Cache.DefaultNamespaces = map[string]cache.Config{o.Namespace: {}}
	}
	clock := &apiClock{}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(clock.Wrap)
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return nil, fmt.Errorf("operator manager: %w", err)
	}
	sidecars := &Sidecars{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}
	b := &BackupReconciler{Client: mgr.GetClient(), Recorder: eventRecorder(mgr), Sidecars: sidecars}
	r := &ClusterReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: eventRecorder(mgr),
		Image: o.Image, AllowedImages: o.AllowedImages, OperatorNamespace: o.OperatorNamespace, Graces: o.Graces, Sidecars: sidecars, Now: clock.Now}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := b.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	rr := &RestoreReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: eventRecorder(mgr),
		Sidecars: sidecars, Now: clock.Now}
	if err := rr.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	return mgr, nil
}

// MetricsOptions serve /metrics at addr: over HTTPS (a certificate made at start) to clients
// whose token the API server accepts and who may get the /metrics URL (metricsAuthFilter);
// plain, to anyone, only when asked.
func MetricsOptions(addr string, plain bool) metricsserver.Options {
	if plain {
		return metricsserver.Options{BindAddress: addr}
	}
	return metricsserver.Options{BindAddress: addr, SecureServing: true, FilterProvider: metricsAuthFilter}
}

// stewardObjectsOnly limits the cache of the built-in kinds the operator watches to the
// objects of Steward's clusters (those labelled with their cluster): it holds no other Pod,
// ConfigMap, Lease or Secret of the Kubernetes cluster. An object made by someone else under a
// cluster's name is read from the API server when a create finds it (apply).
func stewardObjectsOnly() map[client.Object]cache.ByObject {
	req, err := labels.NewRequirement(LabelCluster, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key
	}
	mine := cache.ByObject{Label: labels.NewSelector().Add(*req)}
	out := map[client.Object]cache.ByObject{&corev1.Secret{}: {Label: stewardSecrets()}}
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.PersistentVolumeClaim{}, &corev1.ConfigMap{}, &corev1.Service{},
		&corev1.ServiceAccount{}, &coordinationv1.Lease{}, &appsv1.StatefulSet{}, &policyv1.PodDisruptionBudget{}, &networkingv1.NetworkPolicy{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		out[obj] = mine
	}
	return out
}

// stewardSecrets selects the Secrets Steward makes for its clusters (labelled with their
// cluster and managed by steward): the operator reads its own at every pass from the cache,
// and a Secret of its own deleted by hand wakes its cluster. The user's Secrets (the store's
// credentials, spec.tls's) are not held: those are read from the API server when needed.
func stewardSecrets() labels.Selector {
	cluster, err := labels.NewRequirement(LabelCluster, selection.Exists, nil)
	if err != nil {
		panic(err) // constant label keys
	}
	managed, err := labels.NewRequirement(LabelManagedBy, selection.Equals, []string{"steward"})
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*cluster, *managed)
}

// ownImage returns the image of the pod the operator runs in (POD_NAME and POD_NAMESPACE
// from the downward API): members run the operator's own image unless a cluster names one.
func ownImage(ctx context.Context, cfg *rest.Config) (string, error) {
	name, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if name == "" || ns == "" {
		return "", errors.New("no member image: give --member-image (or STEWARD_IMAGE), or run in a pod with POD_NAME and POD_NAMESPACE set")
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return "", err
	}
	var pod corev1.Pod
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pod); err != nil {
		return "", fmt.Errorf("reading the operator's own pod %s/%s for its image: %w (or give --member-image)", ns, name, err)
	}
	return pod.Spec.Containers[0].Image, nil
}
