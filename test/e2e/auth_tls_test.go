package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/etcd-steward/steward/internal/pki"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/testutil"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// TestTLS: a cluster with spec.tls and spec.auth serves clients and peers with mutual TLS of
// its own CA, and etcd authentication. The client certificate Secret named in the status,
// with the root password, works; plain text, TLS without a client certificate, the client
// certificate without a password and a wrong password are refused, and the peer port refuses
// the client certificate. The sidecar API answers its token over TLS only. Backups run over TLS and logged in, a member lost with its volume
// is replaced, the cluster scales 3→4→3 with the members' one certificate, and its CA rolls
// over under a writer. A new cluster restored from its backups has a CA and a root password
// of its own, which its sidecars log in with. No acknowledged write is lost.
func TestTLS(t *testing.T) {
	t.Parallel() // touches nothing outside its namespace
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

	// The plugin reaches the members through port-forwards of the API server, with the
	// cluster's client certificate and root password: leadership moves, every member is
	// defragmented, the leader last.
	var moved struct{ Before, After string }
	testutil.Eventually(t, time.Minute, "kubectl steward move-leader", func() error {
		out, err := kubectlStewardErr(ns, "move-leader", "sec", "-o", "json")
		if err != nil {
			return err
		}
		return json.Unmarshal([]byte(out), &moved)
	})
	if moved.Before == moved.After || moved.After == "" {
		t.Errorf("kubectl steward move-leader: leader %q before, %q after", moved.Before, moved.After)
	}
	var defrag struct {
		Members []struct {
			Name      string `json:"name"`
			WasLeader bool   `json:"wasLeader"`
		} `json:"members"`
	}
	// Each member is a new connection through a port-forward, which a loaded machine may time
	// out: the whole round is tried again.
	testutil.Eventually(t, 2*time.Minute, "kubectl steward defrag --all", func() error {
		out, err := kubectlStewardErr(ns, "defrag", "sec", "--all", "-o", "json")
		if err != nil {
			return err
		}
		return json.Unmarshal([]byte(out), &defrag)
	})
	if n := len(defrag.Members); n != 3 || !defrag.Members[n-1].WasLeader {
		t.Errorf("kubectl steward defrag --all: %+v, want every member, the leader last", defrag.Members)
	}

	// A certificate the plugin issues from the cluster's CA for the application user: etcd
	// takes its name for the user, who may write without a password; none is issued for root.
	certDir := filepath.Join(t.TempDir(), "app")
	var issued struct{ User, Cert, Key, CA string }
	if err := json.Unmarshal([]byte(kubectlSteward(t, ns, "certificate", "sec", "app", "--dir", certDir, "-o", "json")), &issued); err != nil {
		t.Fatal(err)
	}
	if issued.User != "app" || filepath.Dir(issued.Cert) != certDir {
		t.Fatalf("kubectl steward certificate: %+v", issued)
	}
	appTLS, err := pki.ClientTLS(certDir)
	if err != nil {
		t.Fatal(err)
	}
	appTLS.ServerName = fmt.Sprintf("sec-client.%s.svc", ns)
	testutil.Eventually(t, time.Minute, "a put as app, by the plugin's certificate alone", func() error {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{serviceEndpoint(t, ns, "sec")}, TLS: appTLS, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = c.Put(ctx, "tls/by-certificate", "app")
		return err
	})
	if out, err := kubectlStewardErr(ns, "certificate", "sec", "root", "--dir", filepath.Join(t.TempDir(), "root")); err == nil {
		t.Errorf("kubectl steward certificate sec root: issued:\n%s", out)
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

	// The sidecar API is served over TLS with the member's certificate: with the token, over
	// TLS verifying the member's name, it answers; in plain text it refuses before looking at
	// the token; only the open endpoints also answer plain text (the kubelet's probes, which
	// keep the pods alive throughout, use it).
	var tokenSecret corev1.Secret
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: v1alpha1.SidecarTokenSecretName("sec")}, &tokenSecret); err != nil {
		t.Fatal(err)
	}
	tokens, err := sidecarapi.ParseTokens(tokenSecret.Data[v1alpha1.SidecarTokenKey])
	if err != nil {
		t.Fatal(err)
	}
	sidecarTLS := clusterTLS(t, ns, "sec", "sec-client-tls")
	sidecarTLS.ServerName = fmt.Sprintf("sec-1.sec-peer.%s.svc", ns)
	sidecarAddr := fmt.Sprintf("%s:%d", memberPods(t, ns, "sec")["sec-1"].Status.PodIP, operator.SidecarPort)
	api := sidecarapi.NewClient(sidecarapi.Static{List: tokens}, sidecarapi.HTTPClient(sidecarTLS, 10*time.Second))
	if _, err := api.Call(context.Background(), http.MethodGet, "https://"+sidecarAddr+"/v1/report"); err != nil {
		t.Fatalf("the sidecar API over TLS with the token: %v", err)
	}
	plain := sidecarapi.NewClient(sidecarapi.Static{List: tokens}, sidecarapi.HTTPClient(nil, 10*time.Second))
	if _, err := plain.Call(context.Background(), http.MethodGet, "http://"+sidecarAddr+"/v1/report"); sidecarapi.StatusCode(err) != http.StatusForbidden {
		t.Fatalf("the sidecar API in plain text with the token: %v; want 403", err)
	}
	if _, err := plain.Call(context.Background(), http.MethodGet, "http://"+sidecarAddr+"/metrics"); err != nil {
		t.Fatalf("the sidecar's /metrics in plain text: %v", err)
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
		t.Errorf("%d writes failed during the CA rollover: more than a leader election's (the last with: %v)", w.fails-failsBefore, w.lastErr)
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
	waitBackedUp(t, ns, "sec", resp.Header.Revision, 2*time.Minute)
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

// TestTLSProvidedCertificates: a cluster whose certificates come from Secrets the user keeps,
// as cert-manager writes them (an issuer of the user's, a common name of the user's, names for
// the members and the client Service only), bootstraps and serves with them, makes no CA of
// its own, and publishes the user's client Secret. The user's issuer rolls its CA over under
// a writer, as one with a trust bundle does: ca.crt trusts both CAs (the members restart, one
// at a time), the certificates are issued again by the new CA (nothing restarts: the members
// serve them from the next handshake), and the old CA is dropped from ca.crt (the members
// restart again). No acknowledged write is lost, and a client holding the old CA's
// certificate is refused at the end.
func TestTLSProvidedCertificates(t *testing.T) {
	t.Parallel() // touches nothing outside its namespace
	ns := namespace(t)
	storeSecret(t, ns)
	const name = "own"
	oldCA, newCA := userCA(t, "users-issuer-1"), userCA(t, "users-issuer-2")
	members := pki.Leaf{CommonName: "etcd-peer", DNSNames: []string{"*.own-peer." + ns + ".svc", "own-client." + ns + ".svc"}}
	app := pki.Leaf{CommonName: "app"}
	userSecret(t, ns, "own-certs", oldCA, members, oldCA)
	userSecret(t, ns, "own-app", oldCA, app, oldCA)
	apply(t, ns, clusterYAML(ns, name, 3, "  tls: {enabled: true, serverSecret: own-certs, clientSecret: own-app}\n  auth: {enabled: false}\n"))
	ec := waitReady(t, ns, name, 3, 4*time.Minute)
	if ec.Status.ClientCertificateSecret != "own-app" || !strings.HasPrefix(ec.Status.Endpoints.Client, "https://") {
		t.Fatalf("status: client certificate Secret %q, client endpoint %q", ec.Status.ClientCertificateSecret, ec.Status.Endpoints.Client)
	}
	for _, s := range []string{"own-ca", "own-server-tls", "own-client-tls"} {
		if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: s}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Fatalf("Secret %s with the user's certificates: %v", s, err)
		}
	}
	// A client that copied the client Secret once, and does not follow it.
	copied := t.TempDir()
	var appSecret corev1.Secret
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "own-app"}, &appSecret); err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteDir(copied, appSecret.Data[pki.CertFile], appSecret.Data[pki.KeyFile], appSecret.Data[pki.CAFile]); err != nil {
		t.Fatal(err)
	}
	w := startWriter(t, ns, name, "own", 100*time.Millisecond)
	trust := templateTrust(t, ns, name)

	start := time.Now()
	// 1. ca.crt trusts both CAs: the members restart to read it.
	for _, s := range []string{"own-certs", "own-app"} {
		setCABundle(t, ns, s, oldCA, newCA)
	}
	trust = waitTrustApplied(t, ns, name, trust, 3)
	// 2. The certificates of the new CA: served from the next handshake, without a restart.
	pods := memberPods(t, ns, name)
	userSecret(t, ns, "own-certs", newCA, members, oldCA, newCA)
	userSecret(t, ns, "own-app", newCA, app, oldCA, newCA)
	for pod, p := range pods {
		testutil.Eventually(t, 3*time.Minute, pod+" serving the new CA's certificate", func() error {
			issuer, err := servedIssuer(fmt.Sprintf("%s:%d", p.Status.PodIP, operator.ClientPort))
			if err != nil {
				return err
			}
			if issuer != "users-issuer-2" {
				return fmt.Errorf("it serves a certificate of %s", issuer)
			}
			return nil
		})
	}
	for pod, p := range memberPods(t, ns, name) {
		if p.UID != pods[pod].UID {
			t.Fatalf("member %s restarted for certificates of a CA it already trusted", pod)
		}
	}
	if got := templateTrust(t, ns, name); got != trust {
		t.Fatalf("the trust changed with the certificates (%s to %s): the members would restart", trust, got)
	}
	// 3. The old CA dropped: the members restart to trust the new one only.
	for _, s := range []string{"own-certs", "own-app"} {
		setCABundle(t, ns, s, newCA)
	}
	waitTrustApplied(t, ns, name, trust, 3)
	w.Stop()
	acked := w.Acked()
	t.Logf("the user's CA rolled over in %s; %d writes acknowledged, %d failed", time.Since(start).Round(time.Second), len(acked), w.fails)
	if w.fails > 10 {
		t.Errorf("%d writes failed during the user's CA rollover: more than a leader election's", w.fails)
	}

	// The copy of the old CA's client certificate is refused now.
	tc, err := pki.ClientTLS(copied)
	if err != nil {
		t.Fatal(err)
	}
	tc.ServerName = fmt.Sprintf("%s-client.%s.svc", name, ns)
	old, err := clientv3.New(clientv3.Config{Endpoints: []string{serviceEndpoint(t, ns, name)}, TLS: tc, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err = old.Put(ctx, "/refused", "old CA")
	cancel()
	if err == nil {
		t.Error("a client of the old CA's certificate was acknowledged after the old CA was dropped")
	}
	assertKeysOnEveryMember(t, ns, name, acked)
}

// userCA is a CA of the user's issuer.
func userCA(t *testing.T, name string) pki.CA {
	t.Helper()
	ca, err := pki.NewCA(name, time.Now(), pki.CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// userSecret writes Secret name as cert-manager does: a certificate for l issued by ca, its
// key, and the CAs to trust as ca.crt.
func userSecret(t *testing.T, ns, name string, ca pki.CA, l pki.Leaf, trust ...pki.CA) {
	t.Helper()
	cert, key, err := ca.Issue(l, time.Now(), 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS}
	if _, err := controllerutil.CreateOrUpdate(context.Background(), kube, s, func() error {
		s.Data = map[string][]byte{pki.CertFile: cert, pki.KeyFile: key, pki.CAFile: bundle(trust)}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// setCABundle changes only the CAs Secret name trusts.
func setCABundle(t *testing.T, ns, name string, trust ...pki.CA) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if _, err := controllerutil.CreateOrUpdate(context.Background(), kube, s, func() error {
		s.Data[pki.CAFile] = bundle(trust)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func bundle(cas []pki.CA) []byte {
	var out []byte
	for _, ca := range cas {
		out = append(out, ca.CertPEM...)
	}
	return out
}

// templateTrust identifies the CAs the cluster's pod template trusts.
func templateTrust(t *testing.T, ns, name string) string {
	t.Helper()
	var sts appsv1.StatefulSet
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &sts); err != nil {
		t.Fatal(err)
	}
	return sts.Spec.Template.Annotations[operator.AnnotationTrust]
}

// waitTrustApplied waits until the pod template trusts other CAs than prev and n members
// run it, Ready, and returns the new trust.
func waitTrustApplied(t *testing.T, ns, name, prev string, n int) string {
	t.Helper()
	var trust string
	testutil.Eventually(t, 8*time.Minute, "the members restarted to trust the new ca.crt", func() error {
		if trust = templateTrust(t, ns, name); trust == prev {
			return fmt.Errorf("the pod template still trusts %s", prev)
		}
		pods := memberPods(t, ns, name)
		if len(pods) != n {
			return fmt.Errorf("%d pods", len(pods))
		}
		for pod, p := range pods {
			ready := podReady(&p)
			if p.Annotations[operator.AnnotationTrust] != trust || !ready {
				return fmt.Errorf("pod %s trusts %s, ready %t", pod, p.Annotations[operator.AnnotationTrust], ready)
			}
		}
		return nil
	})
	waitReady(t, ns, name, int32(n), 2*time.Minute)
	return trust
}

// servedIssuer is the issuer's common name of the certificate the server at addr presents.
func servedIssuer(addr string) (string, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) // #nosec G402 -- only the presented certificate is read
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Issuer.CommonName, nil
}
