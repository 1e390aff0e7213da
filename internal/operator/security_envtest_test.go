package operator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

// waitDefaults waits for the cluster's recorded defaults and returns them.
func waitDefaults(t *testing.T, ns, name string) v1alpha1.ClusterDefaults {
	t.Helper()
	var d *v1alpha1.ClusterDefaults
	testutil.Eventually(t, 20*time.Second, "status.defaults of "+name, func() error {
		if d = getCluster(t, ns, name).Status.Defaults; d == nil {
			return fmt.Errorf("not recorded")
		}
		return nil
	})
	return *d
}

// TestNewClusterSecureByDefault: a new cluster whose spec leaves spec.tls, spec.auth and the
// containers' resources out gets mutual TLS of its own CA, etcd authentication and resource
// requests, recorded in status.defaults; one that opts out of TLS gets neither TLS nor
// authentication (authentication without TLS is never a default).
func TestNewClusterSecureByDefault(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	if err := k8s.Create(ctx, newDefaultCluster(ns, "sec", 3)); err != nil {
		t.Fatal(err)
	}
	if d := waitDefaults(t, ns, "sec"); d != (v1alpha1.ClusterDefaults{TLS: true, Auth: true, Resources: true}) {
		t.Fatalf("status.defaults of a new cluster %+v; want TLS, authentication and resource requests", d)
	}
	sts := waitStatefulSet(t, ns, "sec")
	if a := sts.Spec.Template.Annotations; a[AnnotationTrust] == "" || a[AnnotationTokenKey] == "" {
		t.Errorf("the members do not run with TLS and authentication: pod template annotations %v", a)
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits != nil {
			t.Errorf("container %s of a new cluster: resources %v; want the default requests and no limits", c.Name, c.Resources)
		}
	}
	for _, s := range []string{"sec-ca", "sec-server-tls", "sec-client-tls", "sec-root-password", "sec-token-key"} {
		if err := get(t, ns, s, &corev1.Secret{}); err != nil {
			t.Errorf("Secret %s: %v", s, err)
		}
	}
	testutil.Eventually(t, 20*time.Second, "the status names TLS and authentication", func() error {
		st := getCluster(t, ns, "sec").Status
		if !strings.HasPrefix(st.Endpoints.Client, "https://") || st.ClientCertificateSecret != "sec-client-tls" || st.RootPasswordSecret != "sec-root-password" {
			return fmt.Errorf("endpoint %q, client certificate %q, root password %q", st.Endpoints.Client, st.ClientCertificateSecret, st.RootPasswordSecret)
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, "Event DefaultsChosen", func() error {
		return findEventMessage(ns, "DefaultsChosen", "TLS is on, authentication on and default resource requests on")
	})

	plain := newDefaultCluster(ns, "plain", 1)
	plain.Spec.TLS = &v1alpha1.TLSSpec{}
	if err := k8s.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if d := waitDefaults(t, ns, "plain"); d.Auth {
		t.Fatalf("status.defaults %+v: authentication by default on a cluster without TLS", d)
	}
	sts = waitStatefulSet(t, ns, "plain")
	if a := sts.Spec.Template.Annotations; a[AnnotationTrust] != "" || a[AnnotationTokenKey] != "" {
		t.Errorf("a cluster that opted out of TLS runs with TLS or authentication: pod template annotations %v", a)
	}
	for _, s := range []string{"plain-ca", "plain-root-password"} {
		if err := get(t, ns, s, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("Secret %s of a cluster without TLS: %v", s, err)
		}
	}
}

// TestExistingClusterKeepsWhatItRuns: a cluster that an operator without the defaults formed
// (its status written, no TLS) keeps running without TLS, authentication and resource
// requests once this operator sees it; turning authentication on for it is refused, since the root password
// would cross the pod network in clear, and nothing of the members changes.
func TestExistingClusterKeepsWhatItRuns(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newDefaultCluster(ns, "old", 3)
	ec.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	// The status as an older operator left it: the cluster formed, over plain HTTP.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getCluster(t, ns, "old")
		cur.Status.ObservedGeneration, cur.Status.ClusterID = cur.Generation, "c1"
		cur.Status.Endpoints.Client = "http://old-client." + ns + ".svc:2379"
		return k8s.Status().Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	updateCluster(t, ns, "old", func(ec *v1alpha1.EtcdCluster) { delete(ec.Annotations, v1alpha1.AnnotationPaused) })
	if d := waitDefaults(t, ns, "old"); d != (v1alpha1.ClusterDefaults{}) {
		t.Fatalf("status.defaults of a cluster formed without TLS %+v; want neither TLS nor authentication nor resource requests", d)
	}
	sts := waitStatefulSet(t, ns, "old")
	if a := sts.Spec.Template.Annotations; a[AnnotationTrust] != "" || a[AnnotationTokenKey] != "" {
		t.Errorf("the existing cluster's members were given TLS or authentication: pod template annotations %v", a)
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Resources.Requests != nil || c.Resources.Limits != nil {
			t.Errorf("the existing cluster's container %s was given resources %v: its members would restart", c.Name, c.Resources)
		}
	}
	testutil.Eventually(t, 20*time.Second, "the status of a plain cluster", func() error {
		// The selector is written by this operator's passes.
		if st := getCluster(t, ns, "old").Status; !strings.HasPrefix(st.Endpoints.Client, "http://") || st.ClientCertificateSecret != "" || st.Selector == "" {
			return fmt.Errorf("endpoint %q, client certificate %q, selector %q", st.Endpoints.Client, st.ClientCertificateSecret, st.Selector)
		}
		return nil
	})

	// spec.tls is left out, so the API server cannot tell that this cluster has no TLS.
	updateCluster(t, ns, "old", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Auth = &v1alpha1.AuthSpec{Enabled: true} })
	testutil.Eventually(t, 20*time.Second, "authentication without TLS refused", func() error {
		c := apimeta.FindStatusCondition(getCluster(t, ns, "old").Status.Conditions, v1alpha1.ConditionProgressing)
		if c == nil || c.Reason != ReasonInvalidSpec || !strings.Contains(c.Message, "the root password that Steward's clients log in with would cross the pod network in clear") {
			return fmt.Errorf("condition Progressing %+v", c)
		}
		return nil
	})
	if err := get(t, ns, "old", &sts); err != nil {
		t.Fatal(err)
	}
	if a := sts.Spec.Template.Annotations; a[AnnotationTokenKey] != "" {
		t.Errorf("authentication reached the members without TLS: pod template annotations %v", a)
	}
	if err := get(t, ns, "old-root-password", &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("a root password Secret for a cluster without TLS: %v", err)
	}
}

// TestNetworkPolicy: each cluster gets a NetworkPolicy it owns that admits the peer port from
// its members only, the sidecar API and health port from its members and the operator's pods
// (in the operator's namespace), and the client port from its namespace, or from its members
// and the peers spec.network.clientFrom lists; it goes with the cluster. (A same-named policy of someone else's: TestNameConflictLeftAlone; no write at
// rest: TestAtRestNoWrites.)
func TestNetworkPolicy(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	if err := k8s.Create(ctx, newCluster(ns, "np", 3)); err != nil {
		t.Fatal(err)
	}
	var np networkingv1.NetworkPolicy
	testutil.Eventually(t, 20*time.Second, "NetworkPolicy np", func() error { return get(t, ns, "np", &np) })
	if !metav1.IsControlledBy(&np, getCluster(t, ns, "np")) {
		t.Fatalf("NetworkPolicy np owners %v", np.OwnerReferences)
	}
	tcp := corev1.ProtocolTCP
	port := func(n int32) networkingv1.NetworkPolicyPort {
		p := intstr.FromInt32(n)
		return networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &p}
	}
	members := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"etcd.steward.dev/cluster": "np"}}}
	operator := networkingv1.NetworkPolicyPeer{
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "steward", "app.kubernetes.io/component": "operator"}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": testOperatorNamespace}}}
	want := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"etcd.steward.dev/cluster": "np"}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{
			{From: []networkingv1.NetworkPolicyPeer{members}, Ports: []networkingv1.NetworkPolicyPort{port(2380)}},
			{From: []networkingv1.NetworkPolicyPeer{members, operator}, Ports: []networkingv1.NetworkPolicyPort{port(2381), port(2382)}},
			{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}, Ports: []networkingv1.NetworkPolicyPort{port(2379)}},
		},
	}
	if !equality.Semantic.DeepEqual(np.Spec, want) {
		got, _ := yaml.Marshal(np.Spec)
		exp, _ := yaml.Marshal(want)
		t.Fatalf("NetworkPolicy np:\n%s\nwant:\n%s", got, exp)
	}

	// Narrowed: the client port admits the members and the listed peers, and no member restarts.
	template := waitStatefulSet(t, ns, "np").Annotations[annotationTemplateHash]
	apps := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "apps"}}}
	updateCluster(t, ns, "np", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Network.ClientFrom = []networkingv1.NetworkPolicyPeer{apps} })
	want.Ingress[2].From = []networkingv1.NetworkPolicyPeer{members, apps}
	testutil.Eventually(t, 20*time.Second, "the client port narrowed", func() error {
		if err := get(t, ns, "np", &np); err != nil {
			return err
		}
		if !equality.Semantic.DeepEqual(np.Spec, want) {
			got, _ := yaml.Marshal(np.Spec.Ingress[2])
			return fmt.Errorf("client rule:\n%s", got)
		}
		return nil
	})
	if got := waitStatefulSet(t, ns, "np").Annotations[annotationTemplateHash]; got != template {
		t.Errorf("narrowing the client port changed the pod template (%s→%s): the members would restart", template, got)
	}
	deleteCluster(t, ns, "np", 20*time.Second)
	if err := get(t, ns, "np", &networkingv1.NetworkPolicy{}); !apierrors.IsNotFound(err) {
		t.Errorf("the NetworkPolicy survived its cluster: %v", err)
	}
}
