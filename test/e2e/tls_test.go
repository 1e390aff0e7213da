package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/etcd-steward/steward/internal/testutil"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestTLS: a cluster with spec.tls and spec.auth serves clients and peers with mutual TLS of
// its own CA, and etcd authentication. The client certificate Secret named in the status,
// with the root password, works; plain text, TLS without a client certificate, the client
// certificate without a password and a wrong password are refused, and the peer port refuses
// the client certificate. Backups run over TLS and logged in, a member lost with its volume
// is replaced, the cluster scales 3→4→3 with the members' one certificate, and its CA rolls
// over under a writer. A new cluster restored from its backups has a CA and a root password
// of its own, which its sidecars log in with. No acknowledged write is lost.
func TestTLS(t *testing.T) {
	ns := namespace(t)
	storeSecret(t, ns)
	apply(t, ns, clusterYAML(ns, "sec", 3, "  tls: {enabled: true}\n  auth: {enabled: true}\n"))
	ec := waitReady(t, ns, "sec", 3, 4*time.Minute)
	if ec.Status.ClientCertificateSecret != "sec-client-tls" || !strings.HasPrefix(ec.Status.Endpoints.Client, "https://") || ec.Status.RootPasswordSecret != "sec-root-password" {
		t.Fatalf("status: client certificate Secret %q, client endpoint %q, root password Secret %q", ec.Status.ClientCertificateSecret, ec.Status.Endpoints.Client, ec.Status.RootPasswordSecret)
	}
	w := startWriter(t, ns, "sec", "tls", 100*time.Millisecond)

	// Refused: plain text, and TLS without a client certificate.
	noCert := clusterTLS(t, ns, "sec", "sec-client-tls")
	noCert.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tls.Certificate{}, nil }
	for what, tc := range map[string]*tls.Config{"plain text": nil, "TLS without a client certificate": noCert} {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{serviceEndpoint(t, ns, "sec")}, TLS: tc, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err = c.Put(ctx, "/refused", what)
		cancel()
		c.Close()
		if err == nil {
			t.Errorf("%s: a put was acknowledged", what)
		}
	}

	// With authentication on: the client certificate alone (etcd takes its name for a user
	// without a role), and another root password, are refused.
	login := func(password string) error {
		cfg := clientv3.Config{Endpoints: []string{serviceEndpoint(t, ns, "sec")}, TLS: clusterTLS(t, ns, "sec", "sec-client-tls"),
			DialTimeout: 3 * time.Second, Logger: zap.NewNop()}
		if password != "" {
			cfg.Username, cfg.Password = etcdutil.RootUser, password
		}
		c, err := clientv3.New(cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = c.Put(ctx, "/refused", "auth")
		return err
	}
	if err := login(""); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("the client certificate without a password: %v; want %v", err, rpctypes.ErrPermissionDenied)
	}
	if err := login("not-the-password"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Errorf("a wrong root password: %v; want %v", err, rpctypes.ErrAuthFailed)
	}

	// The peer port takes the members' certificate, not the client one of the same CA.
	peerGet := func(secret string) error {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: clusterTLS(t, ns, "sec", secret)}, Timeout: 5 * time.Second}
		resp, err := hc.Get(fmt.Sprintf("https://%s:%d/members", memberPods(t, ns, "sec")["sec-0"].Status.PodIP, operator.PeerPort))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	}
	if err := peerGet("sec-server-tls"); err != nil {
		t.Fatalf("the members' certificate on the peer port: %v", err)
	}
	if err := peerGet("sec-client-tls"); err == nil {
		t.Fatal("the client certificate was answered on the peer port")
	}

	// One member lost with its volume: a new member joins over TLS.
	before := memberIDs(ec)
	losePods(t, ns, "sec", "sec-1")
	waitMemberReplaced(t, ns, "sec", "sec-1", before["sec-1"])

	// Scaled up and down: the new member serves with the members' one certificate.
	for _, n := range []int32{4, 3} {
		kubectl(t, ns, "scale", "ec/sec", fmt.Sprintf("--replicas=%d", n))
		waitReady(t, ns, "sec", n, 4*time.Minute)
		testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("%d member pods", n), func() error {
			if pods := memberPods(t, ns, "sec"); int32(len(pods)) != n {
				return fmt.Errorf("%d pods", len(pods))
			}
			return nil
		})
	}

	// The CA rolled over under the writer, which reads the client Secret as a mount would.
	var oldCA corev1.Secret
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "sec-ca"}, &oldCA); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	failsBefore := w.fails
	w.mu.Unlock()
	start := time.Now()
	kubectl(t, ns, "annotate", "ec/sec", v1alpha1.AnnotationRotateCA+"=e2e")
	testutil.Eventually(t, 12*time.Minute, "CA rollover e2e done", func() error {
		ec, err := getEC(ns, "sec")
		if err != nil {
			return err
		}
		if ec.Status.CARotated != "e2e" {
			return fmt.Errorf("rollover %+v", ec.Status.CARotation)
		}
		return nil
	})
	w.Stop()
	acked := w.Acked()
	t.Logf("CA rolled over in %s; %d writes acknowledged, %d failed (%d during the rollover)", time.Since(start).Round(time.Second),
		len(acked), w.fails, w.fails-failsBefore)
	if w.fails-failsBefore > 10 {
		t.Errorf("%d writes failed during the CA rollover: more than a leader election's", w.fails-failsBefore)
	}
	var newCA corev1.Secret
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "sec-ca"}, &newCA); err != nil {
		t.Fatal(err)
	}
	if string(newCA.Data["tls.crt"]) == string(oldCA.Data["tls.crt"]) {
		t.Fatal("the CA is the same after the rollover")
	}
	if err := peerGet("sec-server-tls"); err != nil {
		t.Fatalf("the members' new certificate on the peer port: %v", err)
	}
	if err := peerGet("sec-client-tls"); err == nil {
		t.Fatal("the new client certificate was answered on the peer port")
	}

	// Backups over TLS: the revision after the last write is stored.
	c := etcdClient(t, ns, "sec")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	resp, err := c.Get(ctx, "tls/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("revision %d backed up", resp.Header.Revision), func() error {
		ec, err := getEC(ns, "sec")
		if err != nil {
			return err
		}
		if d := ec.Status.LastDeltaSnapshot; d == nil || d.Revision < resp.Header.Revision {
			return fmt.Errorf("last delta %+v", d)
		}
		return nil
	})
	assertKeysOnEveryMember(t, ns, "sec", acked)

	// Restored into a new cluster with TLS: its own CA, every acknowledged write.
	apply(t, ns, clusterYAML(ns, "sec2", 3, fmt.Sprintf("  tls: {enabled: true}\n  auth: {enabled: true}\n  bootstrap:\n    restore: {store: %q, credentialsSecret: {name: store}}\n", storeURL(ns+"/sec"))))
	waitReady(t, ns, "sec2", 3, 5*time.Minute)
	var ca2 corev1.Secret
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "sec2-ca"}, &ca2); err != nil {
		t.Fatal(err)
	}
	if string(ca2.Data["tls.crt"]) == string(newCA.Data["tls.crt"]) {
		t.Fatal("the restored cluster shares its source's CA")
	}
	// The backup holds the source's root password; the restored cluster logs in with its own.
	if rootPassword(t, ns, "sec2") == rootPassword(t, ns, "sec") {
		t.Fatal("the restored cluster was given its source's root password")
	}
	assertKeysOnEveryMember(t, ns, "sec2", acked)
}
