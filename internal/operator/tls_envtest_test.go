package operator

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/pki"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTLSSecrets: a cluster with spec.tls gets its own CA and, from it, the members' and a
// client certificate, in cert-manager's Secret layout, owned by the EtcdCluster; its
// members' URLs are https and the status names the client Secret. A certificate near its
// end is issued again from the same CA, a ca.crt changed by hand is put back, and a CA Secret
// that no longer holds a CA is reported with an error that names it, never replaced.
func TestTLSSecrets(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "tls", 3)
	ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	ec = getCluster(t, ns, "tls")
	secret := func(name string) *corev1.Secret {
		t.Helper()
		var s corev1.Secret
		testutil.Eventually(t, 20*time.Second, "Secret "+name, func() error { return get(t, ns, name, &s) })
		return &s
	}
	caSecret := secret("tls-ca")
	ca, err := pki.ParseCA(caSecret.Data["tls.crt"], caSecret.Data["tls.key"])
	if err != nil {
		t.Fatalf("the CA Secret: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	verify := func(name, dnsName string, usage x509.ExtKeyUsage) *x509.Certificate {
		t.Helper()
		s := secret(name)
		if s.Type != corev1.SecretTypeTLS || !bytes.Equal(s.Data["ca.crt"], ca.CertPEM) {
			t.Fatalf("Secret %s: type %s, ca.crt is the CA: %t", name, s.Type, bytes.Equal(s.Data["ca.crt"], ca.CertPEM))
		}
		if ref := metav1.GetControllerOf(s); ref == nil || ref.UID != ec.UID {
			t.Fatalf("Secret %s is not owned by the cluster: %+v", name, s.OwnerReferences)
		}
		certs, err := pki.ParseCerts(s.Data["tls.crt"])
		if err != nil {
			t.Fatalf("Secret %s: %v", name, err)
		}
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Fatalf("Secret %s: %v", name, err)
		}
		return certs[0]
	}
	server := verify("tls-server-tls", "tls-2.tls-peer."+ns+".svc", x509.ExtKeyUsageServerAuth)
	if client := verify("tls-client-tls", "", x509.ExtKeyUsageClientAuth); client.Subject.CommonName != pki.ClientCN {
		t.Errorf("client certificate for %q", client.Subject.CommonName)
	}

	// The ConfigMap is synced after the Secrets, in the same pass or a later one.
	var cm corev1.ConfigMap
	testutil.Eventually(t, 20*time.Second, "ConfigMap tls-config", func() error { return get(t, ns, "tls-config", &cm) })
	if c := cm.Data[v1alpha1.ClusterConfigKey]; !strings.Contains(c, "clientURL: https://tls-0.tls-peer."+ns+".svc:2379") ||
		!strings.Contains(c, "peerURL: https://tls-0.tls-peer."+ns+".svc:2380") {
		t.Errorf("the members' URLs are not https:\n%s", c)
	}
	testutil.Eventually(t, 20*time.Second, "status names the client Secret", func() error {
		s := getCluster(t, ns, "tls").Status
		if s.ClientCertificateSecret != "tls-client-tls" || !strings.HasPrefix(s.Endpoints.Client, "https://") {
			return fmt.Errorf("clientCertificateSecret %q, client endpoint %q", s.ClientCertificateSecret, s.Endpoints.Client)
		}
		return nil
	})

	checkSidecarCallsOverTLS(t, ns)

	// Near its end: the members' certificate is issued again, from the same CA.
	poke := func(v string) { poke(t, ns, "tls", v) }
	old, oldKey, err := ca.Issue(serverLeaf(ec), time.Now().Add(-80*24*time.Hour), pki.LeafValidity)
	if err != nil {
		t.Fatal(err)
	}
	s := secret("tls-server-tls")
	s.Data["tls.crt"], s.Data["tls.key"] = old, oldKey
	if err := k8s.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	poke("renew")
	testutil.Eventually(t, 20*time.Second, "the certificate near its end issued again", func() error {
		renewed := verify("tls-server-tls", "tls-0.tls-peer."+ns+".svc", x509.ExtKeyUsageServerAuth)
		if renewed.NotAfter.Before(time.Now().Add(80 * 24 * time.Hour)) {
			return fmt.Errorf("valid until %s", renewed.NotAfter)
		}
		if renewed.SerialNumber.Cmp(server.SerialNumber) == 0 {
			return fmt.Errorf("the first certificate is back")
		}
		return findEvent(ns, "CertificateIssued")
	})
	if now := secret("tls-ca"); !bytes.Equal(now.Data["tls.key"], caSecret.Data["tls.key"]) {
		t.Fatal("the renewal replaced the CA")
	}

	// ca.crt changed by hand: put back.
	s = secret("tls-client-tls")
	s.Data["ca.crt"] = []byte("not a CA")
	if err := k8s.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	poke("trust")
	testutil.Eventually(t, 20*time.Second, "ca.crt put back", func() error {
		if got := secret("tls-client-tls").Data["ca.crt"]; !bytes.Equal(got, ca.CertPEM) {
			return fmt.Errorf("ca.crt %q", got)
		}
		return nil
	})

	// A CA Secret that holds no CA: an error naming it, and nothing issued from anything else.
	other, err := pki.NewCA("other", time.Now(), pki.CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := other.KeyPEM()
	s = secret("tls-ca")
	s.Data["tls.key"] = otherKey
	if err := k8s.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	before := secret("tls-server-tls").Data["tls.crt"]
	poke("broken")
	testutil.Eventually(t, 20*time.Second, "the broken CA Secret reported", func() error {
		for _, e := range getCluster(t, ns, "tls").Status.LastErrors {
			if e.Code == "ERR_SYNC_TLS" && strings.Contains(e.Description, "the CA Secret "+ns+"/tls-ca") &&
				strings.Contains(e.Description, "not a CA certificate of the key") {
				return nil
			}
		}
		return fmt.Errorf("lastErrors %+v", getCluster(t, ns, "tls").Status.LastErrors)
	})
	if !bytes.Equal(secret("tls-server-tls").Data["tls.crt"], before) || !bytes.Equal(secret("tls-ca").Data["tls.key"], otherKey) {
		t.Fatal("a certificate was issued, or the CA Secret replaced, with the CA Secret broken")
	}
}

// TestCARotation: the annotation etcd.steward.dev/rotate-ca rolls a formed three-member
// cluster over to a new CA. The test plays the StatefulSet controller, the kubelet and the
// sidecars (as TestRollingUpdateOrdered). The members restart one at a time, the leader last,
// to trust both CAs; only then does the new CA become the cluster's and the certificates
// are issued again by it; the old CA is dropped after the propagation time, and the members
// restart again. Every certificate Secret trusts the members' leaf at every step; at the end
// only the new CA is trusted and every leaf is of it; the annotation left in place starts
// nothing more.
func TestCARotation(t *testing.T) {
	t.Parallel() // its own namespace
	needEnv(t)
	ns, name := namespace(t), "rot"
	sidecars.set(ns, snapshotter.FullResult{Key: "v1/full/00000000000000000042-1.snap.zst", Revision: 42})
	p := formedCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) {
		ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true}
		ec.Spec.UpdateStrategy.SkipBackup = true
	})
	var caBefore corev1.Secret
	if err := get(t, ns, "rot-ca", &caBefore); err != nil {
		t.Fatal(err)
	}
	updateCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) {
		metav1.SetMetaDataAnnotation(&ec.ObjectMeta, v1alpha1.AnnotationRotateCA, "2026-11")
	})
	var phases []string
	progressing := false
	testutil.Eventually(t, 2*time.Minute, "CA rollover 2026-11 done", func() error {
		p.step()
		// At every step the members' leaf is trusted by the CAs every member may trust.
		var server corev1.Secret
		if err := get(t, ns, "rot-server-tls", &server); err != nil {
			return err
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(server.Data["ca.crt"])
		leaf, err := pki.ParseCerts(server.Data["tls.crt"])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf[0].Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Fatalf("the members' leaf is not trusted by their ca.crt: %v", err)
		}
		ec := getCluster(t, ns, name)
		if r := ec.Status.CARotation; r != nil && (len(phases) == 0 || phases[len(phases)-1] != r.Phase) {
			phases = append(phases, r.Phase)
		}
		if c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionProgressing); c != nil && c.Reason == ReasonCARotation {
			if c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, `CA rollover "2026-11"`) {
				t.Fatalf("Progressing %s: %s", c.Status, c.Message)
			}
			progressing = true
		}
		if ec.Status.CARotated != "2026-11" {
			return fmt.Errorf("rollover %+v, deletions %v, errors %+v", ec.Status.CARotation, p.deletions, ec.Status.LastErrors)
		}
		return nil
	})
	if want := []string{v1alpha1.CARotationTrustBoth, v1alpha1.CARotationNewLeaves, v1alpha1.CARotationDropOld}; !slices.Equal(phases, want) {
		t.Errorf("phases %v, want %v", phases, want)
	}
	if !progressing {
		t.Error("Progressing never said CARotation while the rollover waited between its restarts")
	}
	if c := apimeta.FindStatusCondition(getCluster(t, ns, name).Status.Conditions, v1alpha1.ConditionProgressing); c == nil || c.Reason == ReasonCARotation {
		t.Errorf("Progressing after the rollover: %+v", c)
	}
	// Two rolling restarts: each member once in each, the leader of the time last (a pod
	// deleted while it leads is a problem below).
	for _, round := range [][]string{p.deletions[:min(3, len(p.deletions))], p.deletions[min(3, len(p.deletions)):]} {
		if got := slices.Sorted(slices.Values(round)); !slices.Equal(got, []string{"rot-0", "rot-1", "rot-2"}) {
			t.Errorf("pods deleted %v: want two rolling restarts of every member", p.deletions)
		}
	}
	for i, problem := range p.problems {
		if problem != "" {
			t.Errorf("pod %s deleted while %s", p.deletions[i], problem)
		}
	}
	var caAfter corev1.Secret
	if err := get(t, ns, "rot-ca", &caAfter); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(caAfter.Data["tls.crt"], caBefore.Data["tls.crt"]) {
		t.Fatal("the CA is the same after the rollover")
	}
	for _, gone := range []string{"rot-ca-next", "rot-ca-old"} {
		if err := get(t, ns, gone, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("Secret %s after the rollover: %v", gone, err)
		}
	}
	newCA, err := pki.ParseCA(caAfter.Data["tls.crt"], caAfter.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rot-server-tls", "rot-client-tls"} {
		var s corev1.Secret
		if err := get(t, ns, name, &s); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(s.Data["ca.crt"], newCA.CertPEM) {
			t.Errorf("Secret %s trusts other CAs than the new one", name)
		}
		if why := pki.Renewal(s.Data["tls.crt"], []*x509.Certificate{newCA.Cert}, leafOf(name), time.Now()); why != "" {
			t.Errorf("Secret %s: %s", name, why)
		}
	}
	for _, reason := range []string{"CARotationStarted", "CARotationPromoted", "CARotationDropOld", "CARotationDone"} {
		if err := findEvent(ns, reason); err != nil {
			t.Error(err)
		}
	}
	// The annotation stays: nothing more happens.
	for range 10 {
		p.step()
	}
	if ec := getCluster(t, ns, name); ec.Status.CARotation != nil || len(p.deletions) != 6 {
		t.Fatalf("after the rollover: %+v, deletions %v", ec.Status.CARotation, p.deletions)
	}
}

// leafOf is what the operator issues in the certificate Secret secret, its names aside.
func leafOf(secret string) pki.Leaf {
	if strings.HasSuffix(secret, "-client-tls") {
		return pki.ClientLeaf()
	}
	return pki.Leaf{CommonName: pki.MemberCN}
}

// userCertificates are Secrets as cert-manager writes them for a cluster's members and a
// client, issued by an issuer of the user's: another CA than any the operator makes, a common
// name of the user's choice, and names for the members only.
type userCertificates struct {
	ca       pki.CA
	ns, name string
}

func (u userCertificates) secret(t *testing.T, secretName string, l pki.Leaf, caPEM []byte) *corev1.Secret {
	t.Helper()
	cert, key, err := u.ca.Issue(l, time.Now(), 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: u.ns, Name: secretName}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": caPEM}}
}

// members is the members' certificate naming the peer Service's wildcard (or just names).
func (u userCertificates) members(t *testing.T, secretName string, names ...string) *corev1.Secret {
	if len(names) == 0 {
		names = []string{"*." + u.name + "-peer." + u.ns + ".svc"}
	}
	return u.secret(t, secretName, pki.Leaf{CommonName: "etcd-peer", DNSNames: names}, u.ca.CertPEM)
}

// TestProvidedTLS: with spec.tls.serverSecret the certificates are the user's. The operator
// makes no CA and no certificate; it creates no member pod before the members' certificate
// serves every member (it exists, names each member, is trusted by its ca.crt), and says
// what is wrong with it; the pods mount it; a renewal of the certificate restarts nothing,
// while a change of its ca.crt restarts the members (the trust hash changes); a client
// certificate that would pose as a peer is refused; status names the client Secret; the
// rotate-ca annotation is refused with an Event; deleting the cluster leaves the Secrets.
func TestProvidedTLS(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ca, err := pki.NewCA("users-issuer", time.Now(), pki.CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	u := userCertificates{ca: ca, ns: ns, name: "own"}
	ec := newCluster(ns, "own", 3)
	ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true, ServerSecret: "own-certs", ClientSecret: "own-client-tls"}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	reported := func(what, code, text string) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, what, func() error {
			for _, e := range getCluster(t, ns, "own").Status.LastErrors {
				if e.Code == code && strings.Contains(e.Description, text) {
					return nil
				}
			}
			return fmt.Errorf("lastErrors %+v", getCluster(t, ns, "own").Status.LastErrors)
		})
	}
	noStatefulSet := func() {
		t.Helper()
		if err := get(t, ns, "own", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the StatefulSet with the members' certificate not good: %v", err)
		}
	}
	reported("the missing Secret", "ERR_SYNC_TLS", "the Secret "+ns+"/own-certs (spec.tls.serverSecret) does not exist")
	noStatefulSet()

	// Names for two of the three members only.
	if err := k8s.Create(ctx, u.members(t, "own-certs", "own-0.own-peer."+ns+".svc", "own-1.own-peer."+ns+".svc")); err != nil {
		t.Fatal(err)
	}
	poke(t, ns, "own", "names")
	reported("a member not named", "ERR_SYNC_TLS", "does not name the member own-2.own-peer."+ns+".svc")
	noStatefulSet()

	var certs corev1.Secret
	if err := get(t, ns, "own-certs", &certs); err != nil {
		t.Fatal(err)
	}
	certs.Data = u.members(t, "own-certs").Data
	if err := k8s.Update(ctx, &certs); err != nil {
		t.Fatal(err)
	}
	// A client certificate of the members' common name would be taken as a peer.
	if err := k8s.Create(ctx, u.secret(t, "own-client-tls", pki.Leaf{CommonName: "etcd-peer"}, ca.CertPEM)); err != nil {
		t.Fatal(err)
	}
	poke(t, ns, "own", "client")
	reported("the client posing as a peer", "ERR_SYNC_TLS", `the client certificate Secret `+ns+`/own-client-tls (spec.tls.clientSecret): tls.crt has the members' common name "etcd-peer"`)

	var sts appsv1.StatefulSet
	testutil.Eventually(t, 20*time.Second, "the StatefulSet mounting the user's Secret", func() error {
		if err := get(t, ns, "own", &sts); err != nil {
			return err
		}
		for _, v := range sts.Spec.Template.Spec.Volumes {
			if v.Name == "tls" && v.Secret != nil && v.Secret.SecretName == "own-certs" {
				return nil
			}
		}
		return fmt.Errorf("volumes %+v", sts.Spec.Template.Spec.Volumes)
	})
	trust := sts.Spec.Template.Annotations[AnnotationTrust]
	if trust == "" {
		t.Fatal("no trust annotation on the pod template")
	}

	var client corev1.Secret
	if err := get(t, ns, "own-client-tls", &client); err != nil {
		t.Fatal(err)
	}
	client.Data = u.secret(t, "own-client-tls", pki.Leaf{CommonName: "app"}, ca.CertPEM).Data
	if err := k8s.Update(ctx, &client); err != nil {
		t.Fatal(err)
	}
	poke(t, ns, "own", "client-fixed")
	testutil.Eventually(t, 20*time.Second, "no error, and status names the client Secret", func() error {
		s := getCluster(t, ns, "own").Status
		if len(s.LastErrors) > 0 || s.ClientCertificateSecret != "own-client-tls" || !strings.HasPrefix(s.Endpoints.Client, "https://") {
			return fmt.Errorf("lastErrors %+v, clientCertificateSecret %q, client endpoint %q", s.LastErrors, s.ClientCertificateSecret, s.Endpoints.Client)
		}
		return nil
	})
	for _, name := range []string{"own-ca", "own-server-tls", "own-ca-next"} {
		if err := get(t, ns, name, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Fatalf("Secret %s with the user's certificates: %v", name, err)
		}
	}

	templateTrust := func() string {
		t.Helper()
		if err := get(t, ns, "own", &sts); err != nil {
			t.Fatal(err)
		}
		return sts.Spec.Template.Annotations[AnnotationTrust]
	}
	// A renewal by the issuer: the same CA, nothing restarts. (A certificate of too few names
	// first, so that the error going away shows the renewal was read.)
	renew := func(s *corev1.Secret, what string) {
		t.Helper()
		if err := get(t, ns, "own-certs", &certs); err != nil {
			t.Fatal(err)
		}
		certs.Data = s.Data
		if err := k8s.Update(ctx, &certs); err != nil {
			t.Fatal(err)
		}
		poke(t, ns, "own", what)
	}
	renew(u.members(t, "own-certs", "own-0.own-peer."+ns+".svc"), "too-few-names")
	reported("a renewal of too few names", "ERR_SYNC_TLS", "does not name the member own-1.own-peer."+ns+".svc")
	renew(u.members(t, "own-certs"), "renewed")
	testutil.Eventually(t, 20*time.Second, "the renewal read", func() error {
		if s := getCluster(t, ns, "own").Status; len(s.LastErrors) > 0 {
			return fmt.Errorf("lastErrors %+v", s.LastErrors)
		}
		return nil
	})
	if got := templateTrust(); got != trust {
		t.Fatalf("a renewal by the same CA changed the trust on the pod template (%s to %s): the members would restart", trust, got)
	}
	// The first step of the issuer's CA rollover: ca.crt trusts both CAs, and the members restart.
	next, err := pki.NewCA("users-issuer-2", time.Now(), pki.CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(t, ns, "own-certs", &certs); err != nil {
		t.Fatal(err)
	}
	certs.Data["ca.crt"] = append(append([]byte{}, ca.CertPEM...), next.CertPEM...)
	if err := k8s.Update(ctx, &certs); err != nil {
		t.Fatal(err)
	}
	poke(t, ns, "own", "trust-both")
	testutil.Eventually(t, 20*time.Second, "the trust on the pod template changed", func() error {
		if got := templateTrust(); got == trust {
			return fmt.Errorf("trust still %s", got)
		}
		return nil
	})

	// Steward's own rollover does not apply to the user's certificates.
	updateCluster(t, ns, "own", func(ec *v1alpha1.EtcdCluster) {
		metav1.SetMetaDataAnnotation(&ec.ObjectMeta, v1alpha1.AnnotationRotateCA, "2026-11")
	})
	testutil.Eventually(t, 20*time.Second, "the rollover refused", func() error {
		if s := getCluster(t, ns, "own").Status; s.CARotated != "2026-11" || s.CARotation != nil {
			return fmt.Errorf("caRotated %q, caRotation %+v", s.CARotated, s.CARotation)
		}
		return findEventWith(ns, "CARotationRefused", "EtcdCluster", "spec.tls.serverSecret")
	})
	if err := get(t, ns, "own-ca-next", &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a CA made for a cluster of the user's certificates: %v", err)
	}

	deleteCluster(t, ns, "own", 20*time.Second)
	// The client Secret has the name the operator gives its own: it is still the user's.
	for _, name := range []string{"own-certs", "own-client-tls"} {
		if err := get(t, ns, name, &corev1.Secret{}); err != nil {
			t.Fatalf("the user's Secret %s after the cluster was deleted: %v", name, err)
		}
	}
}

// checkSidecarCallsOverTLS: the operator calls the sidecars of the TLS cluster "tls" in ns at
// their https URLs, verifying the members' certificate (its Secret's) against the cluster's
// CAs; a server with a certificate of the same names from another CA is refused.
func checkSidecarCallsOverTLS(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	var members, token corev1.Secret
	testutil.Eventually(t, 20*time.Second, "the members' and the token Secrets", func() error {
		if err := get(t, ns, "tls-server-tls", &members); err != nil {
			return err
		}
		return get(t, ns, v1alpha1.SidecarTokenSecretName("tls"), &token)
	})
	serve := func(certPEM, keyPEM []byte) *httptest.Server {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) }))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv
	}
	// Every connection goes to srv, whatever the URL names: the name is verified as the URL's.
	call := func(srv *httptest.Server) error {
		dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
		}
		b := &Sidecars{Client: k8s, HTTP: &http.Client{Transport: &http.Transport{DialContext: dial}}}
		sc, err := b.sidecarClient(ctx, ns, "tls")
		if err != nil {
			t.Fatal(err)
		}
		_, err = sc.Call(ctx, http.MethodGet, fmt.Sprintf("https://%s:%d/v1/report", memberDNS(getCluster(t, ns, "tls"), 1), SidecarPort))
		return err
	}
	if err := call(serve(members.Data[pki.CertFile], members.Data[pki.KeyFile])); err != nil {
		t.Fatalf("the operator's call of a sidecar serving the members' certificate: %v", err)
	}
	other, err := pki.NewCA("another", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := other.Issue(serverLeaf(getCluster(t, ns, "tls")), time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var unknown x509.UnknownAuthorityError
	if err := call(serve(certPEM, keyPEM)); !errors.As(err, &unknown) {
		t.Fatalf("the operator's call of a sidecar serving a certificate of another CA: %v; want it refused as of an unknown authority", err)
	}
}
