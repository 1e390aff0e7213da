package operator

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	authnv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// serviceAccountToken is a token of the ServiceAccount, bound to the pod when one is named
// (as the kubelet mounts it into the pod's containers).
func serviceAccountToken(t *testing.T, ns, sa string, pod *corev1.Pod) string {
	t.Helper()
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}
	if err := k8s.Create(context.Background(), account); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr[int64](600)}}
	if pod != nil {
		tr.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	if err := k8s.SubResource("token").Create(context.Background(), account, tr); err != nil {
		t.Fatalf("a token of ServiceAccount %s/%s: %v", ns, sa, err)
	}
	return tr.Status.Token
}

// clientWithToken is a client of the suite's API server that presents only the token.
func clientWithToken(t *testing.T, token string) client.Client {
	t.Helper()
	cfg := rest.AnonymousClientConfig(restConfig)
	cfg.BearerToken = token
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMemberWritesOnlyItsOwn: under the admission policy deploy/ installs, a member's sidecar
// (the cluster's ServiceAccount, its token bound to its pod) renews its own Lease, writes its
// own report and takes part in the backup leader's election, but is refused a neighbour's
// Lease or report, and so is a token of the ServiceAccount bound to no pod.
func TestMemberWritesOnlyItsOwn(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	if out, err := kubectl(t, "apply", "-f", filepath.Join(testutil.RepoRoot(), "deploy", "policy", "member-writes-own.yaml")); err != nil {
		t.Fatalf("applying the policy: %v\n%s", err, out)
	}
	ns := namespace(t)
	if err := k8s.Create(ctx, newCluster(ns, "w", 3)); err != nil {
		t.Fatal(err)
	}
	waitStatefulSet(t, ns, "w")
	testutil.Eventually(t, time.Minute, "the members' pods, Leases and EtcdMembers", func() error {
		members(t, ns, "w", all)
		for _, name := range []string{"w-0", "w-1", "w-2"} {
			if err := get(t, ns, name, &coordinationv1.Lease{}); err != nil {
				return err
			}
			if err := get(t, ns, name, &v1alpha1.EtcdMember{}); err != nil {
				return err
			}
		}
		return get(t, ns, v1alpha1.FullSnapshotLeaseName("w"), &coordinationv1.Lease{})
	})
	var pod corev1.Pod
	if err := get(t, ns, "w-1", &pod); err != nil {
		t.Fatal(err)
	}
	member := clientWithToken(t, serviceAccountToken(t, ns, "w", &pod))
	unbound := clientWithToken(t, serviceAccountToken(t, ns, "w", nil))

	renewLease := func(c client.Client, name string) error {
		var l coordinationv1.Lease
		if err := get(t, ns, name, &l); err != nil {
			t.Fatal(err)
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		return c.Update(ctx, &l)
	}
	writeReport := func(c client.Client, name string) error {
		var em v1alpha1.EtcdMember
		if err := get(t, ns, name, &em); err != nil {
			t.Fatal(err)
		}
		em.Status.Report = &runtime.RawExtension{Raw: []byte(fmt.Sprintf(`{"name":%q,"lastIndex":999999}`, name))}
		return c.Status().Update(ctx, &em)
	}
	refused := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want refused by the policy, saying %q", what, err, want)
		}
	}
	// The policy takes effect once the API server has compiled it.
	testutil.Eventually(t, 30*time.Second, "w-1's write to w-0's Lease refused", func() error {
		if err := renewLease(member, "w-0"); !apierrors.IsForbidden(err) {
			return fmt.Errorf("not refused: %v", err)
		}
		return nil
	})
	refused("w-1 renewing w-0's Lease", renewLease(member, "w-0"), "member w-1 may write only its own Lease and EtcdMember, not w-0")
	refused("w-1 writing w-2's report", writeReport(member, "w-2"), "member w-1 may write only its own Lease and EtcdMember, not w-2")
	refused("a token bound to no pod renewing w-1's Lease", renewLease(unbound, "w-1"), "bound to none")
	if err := renewLease(member, "w-1"); err != nil {
		t.Errorf("w-1 renewing its own Lease: %v", err)
	}
	if err := writeReport(member, "w-1"); err != nil {
		t.Errorf("w-1 writing its own report: %v", err)
	}
	for _, shared := range []string{v1alpha1.FullSnapshotLeaseName("w"), v1alpha1.DeltaSnapshotLeaseName("w")} {
		if err := renewLease(member, shared); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("w-1 renewing the shared backup Lease %s: %v", shared, err)
		}
	}
}

// TestMetricsNeedAuthorisation: the operator's /metrics (MetricsOptions as the operator runs
// them) answer 401 without a token the API server accepts, 403 to a user RBAC does not let
// get /metrics, and the metrics to one bound to deploy/'s metrics-reader ClusterRole.
func TestMetricsNeedAuthorisation(t *testing.T) {
	needEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if out, err := kubectl(t, "apply", "-f", filepath.Join(testutil.RepoRoot(), "deploy", "rbac", "metrics_reader_role.yaml")); err != nil {
		t.Fatalf("applying the metrics-reader ClusterRole: %v\n%s", err, out)
	}
	ns := namespace(t)
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scraper-" + ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "steward-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: ns}}}
	if err := k8s.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), binding) })
	scraper, stranger := serviceAccountToken(t, ns, "scraper", nil), serviceAccountToken(t, ns, "stranger", nil)

	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	httpClient, err := rest.HTTPClientFor(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := metricsserver.NewServer(MetricsOptions(addr, false), restConfig, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Start(ctx) }()
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(token string) (int, string, error) {
		req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := insecure.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	testutil.Eventually(t, 30*time.Second, "the metrics server answering over HTTPS", func() error {
		_, _, err := get("")
		return err
	})
	for _, c := range []struct {
		who, token string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token the API server never issued", "not-a-token", http.StatusUnauthorized},
		{"a ServiceAccount without the metrics-reader role", stranger, http.StatusForbidden},
		{"the ServiceAccount bound to the metrics-reader role", scraper, http.StatusOK},
	} {
		status, body, err := get(c.token)
		if err != nil || status != c.want {
			t.Errorf("%s: status %d (%v), want %d", c.who, status, err, c.want)
		}
		if exposes := strings.Contains(body, "# HELP"); exposes != (c.want == http.StatusOK) {
			t.Errorf("%s: metrics in the answer: %v, want %v", c.who, exposes, c.want == http.StatusOK)
		}
	}
}
