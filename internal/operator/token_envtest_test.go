package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// tokenSidecars maps a namespace to the test server that plays its members' sidecars: the
// operator's HTTP client (sidecarTransport) sends a request for any member's sidecar URL
// (<member>.<cluster>-peer.<namespace>.svc:2381) there.
var tokenSidecars sync.Map

type sidecarTransport struct{}

func (sidecarTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	parts := strings.Split(req.URL.Hostname(), ".")
	if len(parts) < 4 || parts[len(parts)-1] != "svc" {
		return nil, fmt.Errorf("no fake sidecar for %s", req.URL.Host)
	}
	base, ok := tokenSidecars.Load(parts[len(parts)-2])
	if !ok {
		return nil, fmt.Errorf("no fake sidecar in namespace %s", parts[len(parts)-2])
	}
	u, _ := url.Parse(base.(string))
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host, out.Host = u.Scheme, u.Host, u.Host
	return http.DefaultTransport.RoundTrip(out)
}

// TestSidecarTokenSecret: the operator makes the cluster's sidecar API token Secret (owned by
// the EtcdCluster, a valid 256-bit token, never in the status or an Event), mounts it into
// both containers of every member pod and passes the file to both; the sidecars' RBAC does
// not grow (the token comes from the mount). An EtcdBackup goes through a sidecar that
// authenticates with the mounted token, and one whose sidecar holds another cluster's token
// waits with a 401 that names the Secret.
func TestSidecarTokenSecret(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "tk", 1)
	ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://backups/tk"}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	ec = getCluster(t, ns, "tk")
	var secret corev1.Secret
	testutil.Eventually(t, 20*time.Second, "Secret tk-sidecar-token", func() error { return get(t, ns, "tk-sidecar-token", &secret) })
	if ref := metav1.GetControllerOf(&secret); ref == nil || ref.UID != ec.UID || ref.Kind != "EtcdCluster" {
		t.Fatalf("owner of the token Secret: %+v", secret.OwnerReferences)
	}
	toks, err := sidecarapi.ParseTokens(secret.Data[v1alpha1.SidecarTokenKey])
	if err != nil || len(toks) != 1 || len(toks[0]) < 43 {
		t.Fatalf("token Secret: %d tokens, %v", len(toks), err)
	}
	token := toks[0]

	var sts appsv1.StatefulSet
	testutil.Eventually(t, 20*time.Second, "StatefulSet tk", func() error { return get(t, ns, "tk", &sts) })
	pod := sts.Spec.Template.Spec
	vi := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "tk-sidecar-token" })
	if vi < 0 || *pod.Volumes[vi].Secret.DefaultMode&0o007 != 0 {
		t.Fatalf("no token volume readable by the pod only: %+v", pod.Volumes)
	}
	for _, c := range pod.Containers {
		mi := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == pod.Volumes[vi].Name })
		if mi < 0 || !c.VolumeMounts[mi].ReadOnly || c.VolumeMounts[mi].SubPath != "" || filepath.Join(c.VolumeMounts[mi].MountPath, "token") != TokenFile {
			t.Errorf("container %s mounts %+v; want the token volume read-only at %s, without subPath (a rotation reaches it)", c.Name, c.VolumeMounts, TokenMount)
		}
		if i := slices.Index(c.Command, "--api-token-file"); i < 0 || c.Command[i+1] != TokenFile {
			t.Errorf("container %s command %v: no --api-token-file %s", c.Name, c.Command, TokenFile)
		}
		for _, e := range c.Env {
			if strings.Contains(e.Value, token) {
				t.Errorf("container %s has the token in env %s", c.Name, e.Name)
			}
		}
	}
	var role rbacv1.Role
	if err := get(t, ns, "tk", &role); err != nil {
		t.Fatal(err)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "secrets") {
			t.Errorf("the sidecars may read Secrets: %+v", r)
		}
	}

	// The members' sidecar, authenticating with the token as mounted in the pod.
	mounted := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(mounted, secret.Data[v1alpha1.SidecarTokenKey], 0o440); err != nil {
		t.Fatal(err)
	}
	routes := []sidecarapi.Route{{Method: "POST", Path: "/v1/snapshots/full", Access: sidecarapi.Control, Handler: func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(snapshotter.FullResult{Key: "v1/full/00000000000000000042-1.snap.zst", Revision: 42, Size: 4242})
	}}}
	srv := httptest.NewServer(sidecarapi.NewHandler(routes, sidecarapi.NewFile(mounted), false))
	defer srv.Close()
	tokenSidecars.Store(ns, srv.URL)
	defer tokenSidecars.Delete(ns)
	testutil.Eventually(t, 20*time.Second, "member tk-0 serves", func() error {
		members(t, ns, "tk", all)
		var em v1alpha1.EtcdMember
		if err := get(t, ns, "tk-0", &em); err != nil || em.Status.Report == nil {
			return fmt.Errorf("no report yet (%v)", err)
		}
		return nil
	})
	if err := k8s.Create(ctx, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ok"}, Spec: v1alpha1.EtcdBackupSpec{Cluster: "tk"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "EtcdBackup ok completes", func() error {
		var b v1alpha1.EtcdBackup
		if err := get(t, ns, "ok", &b); err != nil {
			return err
		}
		if b.Status.Phase != v1alpha1.BackupCompleted || b.Status.Revision != 42 || b.Status.Size != 4242 {
			return fmt.Errorf("status %+v", b.Status)
		}
		return nil
	})

	// The sidecar now holds another cluster's token: the backup waits and says why.
	other, _ := sidecarapi.GenerateToken()
	if err := os.WriteFile(mounted, []byte(other+"\n# another cluster's\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the sidecar reads its new token file", func() error {
		_, err := sidecarapi.NewClient(sidecarapi.Static{List: []string{token}}, nil).Call(ctx, "POST", srv.URL+"/v1/snapshots/full")
		if sidecarapi.StatusCode(err) != http.StatusUnauthorized {
			return fmt.Errorf("the cluster's token: %v", err)
		}
		return nil
	})
	if err := k8s.Create(ctx, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "refused"}, Spec: v1alpha1.EtcdBackupSpec{Cluster: "tk"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "EtcdBackup refused waits with a 401", func() error {
		var b v1alpha1.EtcdBackup
		if err := get(t, ns, "refused", &b); err != nil {
			return err
		}
		if b.Status.Phase != v1alpha1.BackupPending || !strings.Contains(b.Status.Message, "401") ||
			!strings.Contains(b.Status.Message, "Secret "+ns+"/tk-sidecar-token") {
			return fmt.Errorf("status %+v", b.Status)
		}
		return nil
	})

	// The token is nowhere but in its Secret: not in the cluster's or the backups' status, and
	// not in an Event.
	var texts []string
	for _, name := range []string{"ok", "refused"} {
		var b v1alpha1.EtcdBackup
		if err := get(t, ns, name, &b); err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(b)
		texts = append(texts, string(raw))
	}
	raw, _ := json.Marshal(getCluster(t, ns, "tk"))
	texts = append(texts, string(raw))
	var evs corev1.EventList
	if err := k8s.List(ctx, &evs); err == nil {
		raw, _ := json.Marshal(evs)
		texts = append(texts, string(raw))
	}
	for _, s := range texts {
		if strings.Contains(s, token) || strings.Contains(s, other) {
			t.Fatal("a sidecar API token is in a status or an Event")
		}
	}
}
