package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/etcd-steward/steward/internal/pki"
	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/etcd-steward/steward/internal/testutil/linearizable"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// etcdClient connects to cluster name, reached from this machine at the given endpoints
// (host:port: a pod IP over the bridge), or, with none, through its client Service's
// ClusterIP and kube-proxy. A cluster with TLS is dialled with its client certificate Secret.
func etcdClient(t *testing.T, ns, name string, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := newEtcdClient(t, ns, name, endpoints...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newEtcdClient is etcdClient for a caller that retries: a member that restarts or is still
// a learner refuses the connection (or the authentication) for a while.
func newEtcdClient(t *testing.T, ns, name string, endpoints ...string) (*clientv3.Client, error) {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = []string{serviceEndpoint(t, ns, name)}
	}
	// Keepalives end a connection to a member that fell silent (its node cut off or powered
	// off), as an application's client should: the next dial through the Service reaches
	// another member.
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second}
	ec, err := getEC(ns, name)
	if apierrors.IsNotFound(err) {
		// Deleted with --cascade=orphan, its members serve on: dialled without TLS or
		// authentication, as these tests' orphaned clusters run.
		ec, err = &v1alpha1.EtcdCluster{}, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if ec.Spec.TLS != nil && ec.Spec.TLS.Enabled {
		secret := ec.Status.ClientCertificateSecret
		if secret == "" {
			secret = v1alpha1.ClientCertificateSecretName(name)
		}
		cfg.TLS = clusterTLS(t, ns, name, secret)
	}
	if ec.Spec.Auth != nil && ec.Spec.Auth.Enabled {
		cfg.Username, cfg.Password = etcdutil.RootUser, rootPassword(t, ns, name)
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client of %s/%s at %v: %w", ns, name, endpoints, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, nil
}

// rootPassword is etcd's root password of cluster name, from its Secret.
func rootPassword(t *testing.T, ns, name string) string {
	t.Helper()
	var s corev1.Secret
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: v1alpha1.RootPasswordSecretName(name)}, &s); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(s.Data[v1alpha1.RootPasswordKey]))
}

// clusterTLS is a client's TLS configuration from a certificate Secret of cluster name
// (tls.crt, tls.key, ca.crt), kept up to date as a kubelet keeps a mounted Secret: a
// renewal or a CA rollover reaches the client's next connection. The members are dialled by
// IP, and their certificate names Services: the name verified is the client Service's.
func clusterTLS(t *testing.T, ns, name, secret string) *tls.Config {
	t.Helper()
	dir := t.TempDir()
	mount := func() error {
		var s corev1.Secret
		if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: secret}, &s); err != nil {
			return err
		}
		return pki.WriteDir(dir, s.Data[pki.CertFile], s.Data[pki.KeyFile], s.Data[pki.CAFile])
	}
	if err := mount(); err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop); <-done }) // before the directory is removed
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Second):
				_ = mount() // a failed read keeps the last copy, as a kubelet does
			}
		}
	}()
	tc, err := pki.ClientTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	tc.ServerName = fmt.Sprintf("%s-client.%s.svc", name, ns)
	return tc
}

// serviceEndpoint is the cluster's client Service, as applications reach it.
func serviceEndpoint(t *testing.T, ns, name string) string {
	t.Helper()
	var svc corev1.Service
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-client"}, &svc); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, operator.ClientPort)
}

// writer puts keys through the client Service until stopped and remembers the ones the
// cluster acknowledged: those must never be lost. After each acknowledged put it also writes
// a register and reads it or an earlier key back. Every call and what it returned is
// recorded, and when the test ends the history must be linearizable (no write lost, no stale
// read), whatever the test did to the cluster meanwhile.
type writer struct {
	stop    chan struct{}
	done    chan struct{}
	history *linearizable.History
	mu      sync.Mutex
	acked   map[string]string
	fails   int
	// lastErr is the newest failed write's error.
	lastErr error
	// lastAck is when the newest write was acknowledged (or the writer started).
	lastAck time.Time
}

func startWriter(t *testing.T, ns, name, prefix string, every time.Duration) *writer {
	t.Helper()
	c := etcdClient(t, ns, name)
	w := &writer{stop: make(chan struct{}), done: make(chan struct{}), history: linearizable.NewHistory(),
		acked: map[string]string{}, lastAck: time.Now()}
	register := prefix + "/register"
	client := 0 // a new client after an unknown outcome: its call may still be pending
	call := func(in linearizable.Input) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		out, err := w.history.Record(ctx, c, client, in)
		if out.Unknown {
			client++
		}
		if errors.Is(err, rpctypes.ErrPermissionDenied) {
			// A client made while etcd's authentication was not on yet (it is turned on
			// seconds after the cluster forms) holds no token: etcd takes the client
			// certificate's name for the user, and refuses. It logs in again. (Tokens are
			// signed and valid on every member: one that ran out is "invalid auth token",
			// on which etcd's client logs in again by itself.)
			if fresh, ferr := newEtcdClient(t, ns, name); ferr == nil {
				c = fresh
			}
		}
		return err
	}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			case <-time.After(every):
			}
			k, v := fmt.Sprintf("%s/%06d", prefix, i), fmt.Sprintf("value-%d-%d", i, time.Now().UnixNano())
			err := call(linearizable.Input{Op: "put", Key: k, Value: v})
			w.mu.Lock()
			if err == nil {
				w.acked[k], w.lastAck = v, time.Now()
			} else {
				w.fails++
				w.lastErr = err
			}
			w.mu.Unlock()
			if err != nil || call(linearizable.Input{Op: "put", Key: register, Value: v}) != nil {
				continue // the cluster does not answer now: the next round tries again
			}
			read := register
			if i%2 == 1 {
				read = fmt.Sprintf("%s/%06d", prefix, rand.IntN(i))
			}
			_ = call(linearizable.Input{Op: "get", Key: read})
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		w.checkHistory(t)
	})
	return w
}

// checkHistory checks the writer's history for linearizability; a violation's visualisation
// is kept in the machine's temporary directory.
func (w *writer) checkHistory(t *testing.T) {
	dir := filepath.Join(os.TempDir(), "steward-e2e-histories")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Error(err)
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + time.Now().Format("150405")
	verdict, err := linearizable.Check(w.history.Operations(), 2*time.Minute, dir, name)
	if err != nil {
		t.Error(err)
		return
	}
	t.Logf("the writer's history: %s", verdict)
}

// Stop stops the writer and returns the acknowledged keys.
func (w *writer) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// serving says whether a write was acknowledged within the last `within`, and otherwise how
// long the cluster has not taken one.
func (w *writer) serving(within time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if since := time.Since(w.lastAck); since > within {
		return fmt.Errorf("no write acknowledged through the client Service for %s (%d acknowledged, %d failed so far, the last with: %v)",
			since.Round(time.Second), len(w.acked), w.fails, w.lastErr)
	}
	return nil
}

func (w *writer) Acked() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]string, len(w.acked))
	for k, v := range w.acked {
		out[k] = v
	}
	return out
}

// putKeys writes n keys through the client Service and returns them.
func putKeys(t *testing.T, ns, name, prefix string, n int) map[string]string {
	t.Helper()
	c := etcdClient(t, ns, name)
	keys := map[string]string{}
	for i := 0; i < n; i++ {
		k, v := fmt.Sprintf("%s/%04d", prefix, i), fmt.Sprintf("v%d", i)
		testutil.Eventually(t, 30*time.Second, "put "+k, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := c.Put(ctx, k, v)
			return err
		})
		keys[k] = v
	}
	return keys
}

// assertKeysOnEveryMember checks that every member (each read alone, from its own data)
// holds every key with its value.
func assertKeysOnEveryMember(t *testing.T, ns, name string, want map[string]string) {
	t.Helper()
	if len(want) == 0 {
		t.Fatal("no acknowledged keys to check: the writer never succeeded")
	}
	for podName := range memberPods(t, ns, name) {
		var (
			c  *clientv3.Client
			ip string
		)
		testutil.Eventually(t, time.Minute, fmt.Sprintf("member %s holds all %d acknowledged keys", podName, len(want)), func() error {
			// The pod is read again each time: the operator may replace it meanwhile.
			var pod corev1.Pod
			if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: podName}, &pod); err != nil {
				return err
			}
			if pod.Status.PodIP == "" {
				return fmt.Errorf("pod %s has no IP yet", podName)
			}
			if c == nil || ip != pod.Status.PodIP {
				var err error
				if c, err = newEtcdClient(t, ns, name, fmt.Sprintf("%s:%d", pod.Status.PodIP, operator.ClientPort)); err != nil {
					return err
				}
				ip = pod.Status.PodIP
			}
			missing := 0
			var example string
			for k, v := range want {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				resp, err := c.Get(ctx, k, clientv3.WithSerializable())
				cancel()
				if err != nil {
					return err
				}
				if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != v {
					missing++
					example = k
				}
			}
			if missing > 0 {
				return fmt.Errorf("%d keys missing or different, e.g. %s", missing, example)
			}
			return nil
		})
	}
}

// voters lists the etcd members as the cluster itself reports them: id -> learner.
func voters(t *testing.T, ns, name string) (map[uint64]bool, error) {
	t.Helper()
	c := etcdClient(t, ns, name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	out := map[uint64]bool{}
	for _, m := range resp.Members {
		out[m.ID] = m.IsLearner
	}
	return out, nil
}
