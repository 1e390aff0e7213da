package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"
)

// redirect sends every request to srv, keeping the URL's host in X-Sidecar-Host.
type redirect struct{ srv *httptest.Server }

func (t redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	u, _ := url.Parse(t.srv.URL)
	out := req.Clone(req.Context())
	out.Header.Set("X-Sidecar-Host", req.URL.Host)
	out.URL.Scheme, out.URL.Host, out.Host = u.Scheme, u.Host, u.Host
	return http.DefaultTransport.RoundTrip(out)
}

// TestFullSnapshotBesideTheWorkers: a full snapshot that takes long is asked of the sidecar in
// the background: every call returns at once, saying it is being taken, and the outcome is
// handed out once it is stored. The sidecar asked is the member's own, at its name in the
// cluster's peer Service, whatever URL the ConfigMap (which a tenant can edit) holds.
func TestFullSnapshotBesideTheWorkers(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	var host atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		host.Store(r.Header.Get("X-Sidecar-Host"))
		<-release
		_ = json.NewEncoder(w).Encode(snapshotter.FullResult{Key: "full-1", Revision: 42})
	}))
	defer srv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "ec-uid"}, Spec: v1alpha1.EtcdClusterSpec{Replicas: 1}}
	cc, err := yaml.Marshal(v1alpha1.ClusterConfig{Name: "c", Namespace: "ns", Members: []v1alpha1.MemberConfig{{Name: "c-0", SidecarURL: "http://attacker.example:80"}}})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: configMapName(ec)}, Data: map[string]string{v1alpha1.ClusterConfigKey: string(cc)}}
	rep, err := json.Marshal(cluster.Report{Name: "c-0", Serving: true, Leader: true})
	if err != nil {
		t.Fatal(err)
	}
	em := &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-0", Labels: selectorLabels(ec)},
		Status: v1alpha1.EtcdMemberStatus{Report: &runtime.RawExtension{Raw: rep}}}
	tok := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: v1alpha1.SidecarTokenSecretName("c")},
		Data: map[string][]byte{v1alpha1.SidecarTokenKey: []byte(strings.Repeat("t", 43))}}
	c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithObjects(ec, cm, em, tok).Build()
	s := &Sidecars{Client: c, HTTP: &http.Client{Transport: redirect{srv}}}

	step := s.fullSnapshot(context.Background(), ec, "test")
	if step.Taking == "" || step.Err != nil {
		t.Fatalf("first call: %+v, want it asked in the background", step)
	}
	testutil.Eventually(t, 10*time.Second, "the sidecar asked", func() error {
		if calls.Load() == 0 {
			return fmt.Errorf("not asked")
		}
		return nil
	})
	start := time.Now()
	if step := s.fullSnapshot(context.Background(), ec, "test"); !strings.Contains(step.Taking, "being taken") || time.Since(start) > time.Second {
		t.Fatalf("while the sidecar works: %+v after %s, want at once that it is being taken", step, time.Since(start))
	}
	if h := host.Load().(string); !strings.HasPrefix(h, memberDNS(ec, 0)+":") {
		t.Errorf("asked %s, want the member's own name %s", h, memberDNS(ec, 0))
	}
	close(release)
	var got snapshotStep
	testutil.Eventually(t, 10*time.Second, "the snapshot handed out", func() error {
		got = s.fullSnapshot(context.Background(), ec, "test")
		if got.pending() {
			return context.DeadlineExceeded
		}
		return nil
	})
	if got.Err != nil || got.Result.Key != "full-1" || calls.Load() != 1 {
		t.Fatalf("outcome %+v after %d calls", got, calls.Load())
	}
}

// TestAPIClock: the operator reads the API server's clock from the Date of its answers, an
// hour ahead of this machine's here, within a second.
func TestAPIClock(t *testing.T) {
	ahead := time.Hour
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Date", time.Now().Add(ahead).UTC().Format(http.TimeFormat))
	}))
	defer srv.Close()
	var c apiClock
	resp, err := (&http.Client{Transport: c.Wrap(http.DefaultTransport)}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if off := c.Now().Sub(time.Now().Add(ahead)); off < -time.Second || off > time.Second {
		t.Errorf("the API server's clock read %s off", off)
	}
}
