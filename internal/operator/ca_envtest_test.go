package operator

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/pki"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// TestCASecretLostOrReplaced: on a formed cluster with TLS, the CA Secret deleted (its
// finalizer forced off) or replaced by another CA is reported (CAReady False, a Warning Event
// naming the Secret and the fingerprint the members trust), and nothing is re-keyed: no new
// CA is made, no certificate Secret changes, the pod template keeps its trust. The CA put
// back from a backup is taken again, with nothing re-issued.
func TestCASecretLostOrReplaced(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns, name := namespace(t), "keep"
	p := formedCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) { ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true} })
	var backup corev1.Secret
	if err := get(t, ns, "keep-ca", &backup); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(backup.Data["tls.crt"], backup.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	fingerprint := pki.Fingerprint(ca.Cert)
	testutil.Eventually(t, 20*time.Second, "status.ca and CAReady", func() error {
		ec := getCluster(t, ns, name)
		c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionCAReady)
		if ec.Status.CA == nil || ec.Status.CA.Fingerprint != fingerprint || !ec.Status.CA.NotAfter.Equal(&metav1.Time{Time: ca.Cert.NotAfter}) ||
			c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonCAValid {
			return fmt.Errorf("status.ca %+v (want %s), CAReady %+v", ec.Status.CA, fingerprint, c)
		}
		return nil
	})
	leaves := map[string]string{}
	for _, n := range []string{"keep-server-tls", "keep-client-tls"} {
		var s corev1.Secret
		if err := get(t, ns, n, &s); err != nil {
			t.Fatal(err)
		}
		leaves[n] = s.ResourceVersion
	}
	var sts appsv1.StatefulSet
	if err := get(t, ns, name, &sts); err != nil {
		t.Fatal(err)
	}
	trust := sts.Spec.Template.Annotations[AnnotationTrust]
	nothingReKeyed := func(caWant []byte) {
		t.Helper()
		for n, rv := range leaves {
			var s corev1.Secret
			if err := get(t, ns, n, &s); err != nil || s.ResourceVersion != rv {
				t.Fatalf("certificate Secret %s changed (%v)", n, err)
			}
		}
		var s corev1.Secret
		switch err := get(t, ns, "keep-ca", &s); {
		case caWant == nil && !apierrors.IsNotFound(err):
			t.Fatalf("a CA Secret was made again (%v)", err)
		case caWant != nil && (err != nil || !bytes.Equal(s.Data["tls.crt"], caWant)):
			t.Fatalf("the CA Secret was overwritten (%v)", err)
		}
		if err := get(t, ns, name, &sts); err != nil || sts.Spec.Template.Annotations[AnnotationTrust] != trust {
			t.Fatalf("the members' trust changed (%v)", err)
		}
	}
	waitCA := func(what, reason string, says ...string) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, what, func() error {
			p.step()
			c := apimeta.FindStatusCondition(getCluster(t, ns, name).Status.Conditions, v1alpha1.ConditionCAReady)
			if c == nil || c.Reason != reason {
				return fmt.Errorf("CAReady %+v", c)
			}
			for _, s := range says {
				if !strings.Contains(c.Message, s) {
					t.Fatalf("CAReady %q does not say %q", c.Message, s)
				}
			}
			return findEvent(ns, reason)
		})
	}

	// Deleted: the finalizer holds it first; forced off, the Secret goes.
	if err := k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keep-ca"}}); err != nil {
		t.Fatal(err)
	}
	var held corev1.Secret
	if err := get(t, ns, "keep-ca", &held); err != nil || held.DeletionTimestamp.IsZero() {
		t.Fatalf("the CA Secret is not held by its finalizer: %v", err)
	}
	controllerutil.RemoveFinalizer(&held, SecretFinalizer)
	if err := k8s.Update(ctx, &held); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the CA Secret gone", func() error {
		if err := get(t, ns, "keep-ca", &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	poke(t, ns, name, "ca-gone")
	waitCA("the CA Secret reported gone", v1alpha1.ReasonCASecretMissing, ns+"/keep-ca", fingerprint, "re-apply your backup")
	if ec := getCluster(t, ns, name); ec.Status.CA == nil || ec.Status.CA.Fingerprint != fingerprint {
		t.Fatalf("status.ca while the CA Secret is gone: %+v", ec.Status.CA)
	}
	poke(t, ns, name, "ca-gone-2")
	p.step()
	nothingReKeyed(nil)

	// Put back from the backup (as `kubectl get -o yaml` saved it): taken again.
	restored := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keep-ca", Labels: backup.Labels, OwnerReferences: backup.OwnerReferences},
		Type: backup.Type, Data: backup.Data}
	if err := k8s.Create(ctx, restored); err != nil {
		t.Fatal(err)
	}
	poke(t, ns, name, "ca-back")
	waitCA("the CA Secret taken again", v1alpha1.ReasonCAValid, fingerprint)
	nothingReKeyed(backup.Data["tls.crt"])

	// Replaced by another CA: not used.
	other, err := pki.NewCA("other", time.Now(), pki.CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := other.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	var cur corev1.Secret
	if err := get(t, ns, "keep-ca", &cur); err != nil {
		t.Fatal(err)
	}
	cur.Data = map[string][]byte{"tls.crt": other.CertPEM, "tls.key": otherKey, "ca.crt": other.CertPEM}
	if err := k8s.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	poke(t, ns, name, "ca-other")
	waitCA("the replaced CA reported", v1alpha1.ReasonCASecretChanged, ns+"/keep-ca", fingerprint, pki.Fingerprint(other.Cert))
	poke(t, ns, name, "ca-other-2")
	p.step()
	nothingReKeyed(other.CertPEM)
	if ec := getCluster(t, ns, name); ec.Status.CA == nil || ec.Status.CA.Fingerprint != fingerprint {
		t.Fatalf("status.ca while the CA Secret holds another CA: %+v", ec.Status.CA)
	}
}

// TestSecretsHeldUntilClusterDeleted: every Secret the cluster depends on that the operator
// made carries the finalizer etcd.steward.dev/in-use (one made before gets it), so a
// deletion (a GitOps prune) leaves it in place; deleting the EtcdCluster still completes and
// takes them all.
func TestSecretsHeldUntilClusterDeleted(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns, name := namespace(t), "held"
	ec := newCluster(ns, name, 3)
	ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true}
	ec.Spec.Auth = &v1alpha1.AuthSpec{Enabled: true}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	secrets := []string{"held-ca", "held-server-tls", "held-client-tls", "held-sidecar-token", "held-root-password", "held-token-key"}
	allHeld := func() error {
		for _, n := range secrets {
			var s corev1.Secret
			if err := get(t, ns, n, &s); err != nil {
				return err
			}
			if !controllerutil.ContainsFinalizer(&s, SecretFinalizer) {
				return fmt.Errorf("Secret %s has finalizers %v", n, s.Finalizers)
			}
		}
		return nil
	}
	testutil.Eventually(t, 20*time.Second, "the Secrets held", allHeld)

	// A Secret made before the operator held them gets the finalizer.
	var s corev1.Secret
	if err := get(t, ns, "held-server-tls", &s); err != nil {
		t.Fatal(err)
	}
	controllerutil.RemoveFinalizer(&s, SecretFinalizer)
	if err := k8s.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	poke(t, ns, name, "hold")
	testutil.Eventually(t, 20*time.Second, "the Secret held again", allHeld)

	// A prune leaves it in place.
	if err := k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held-client-tls"}}); err != nil {
		t.Fatal(err)
	}
	poke(t, ns, name, "pruned")
	if err := get(t, ns, "held-client-tls", &s); err != nil || s.DeletionTimestamp.IsZero() {
		t.Fatalf("the pruned Secret: %v, %+v", err, s.ObjectMeta)
	}

	deleteCluster(t, ns, name, 20*time.Second)
	testutil.Eventually(t, 20*time.Second, "the Secrets deleted", func() error {
		for _, n := range secrets {
			if err := get(t, ns, n, &corev1.Secret{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("Secret %s still there (%v)", n, err)
			}
		}
		return nil
	})
}
