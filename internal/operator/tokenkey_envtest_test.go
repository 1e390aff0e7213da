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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// TestTokenKeyRotation: the annotation etcd.steward.dev/rotate-token-key makes a new token
// signing key pair once (recorded first, then written to the Secret with the request), and
// the members roll onto it; on a formed cluster whose Secret is gone, it is the way to a new
// key without a backup.
func TestTokenKeyRotation(t *testing.T) {
	t.Parallel() // its own namespace
	needEnv(t)
	ctx := context.Background()
	ns, name := namespace(t), "rot"
	p := formedCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) {
		ec.Spec.TLS, ec.Spec.Auth = &v1alpha1.TLSSpec{Enabled: true}, &v1alpha1.AuthSpec{Enabled: true}
	})
	secret := name + "-token-key"
	var old corev1.Secret
	testutil.Eventually(t, 20*time.Second, "Secret "+secret, func() error { return get(t, ns, secret, &old) })
	rotate := func(v string) {
		updateCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) {
			metav1.SetMetaDataAnnotation(&ec.ObjectMeta, v1alpha1.AnnotationRotateTokenKey, v)
		})
	}
	// renewed waits for the renewal v to be done: a new pair in the Secret, marked with v, and
	// the members rolled onto it.
	renewed := func(v string, before []byte) corev1.Secret {
		t.Helper()
		var s corev1.Secret
		restarted := len(p.deletions)
		testutil.Eventually(t, 60*time.Second, "renewal "+v, func() error {
			p.step()
			ec := getCluster(t, ns, name)
			if ec.Status.TokenKeyRotated != v || ec.Status.TokenKeyRotation != nil {
				return fmt.Errorf("status: rotated %q, rotation %+v", ec.Status.TokenKeyRotated, ec.Status.TokenKeyRotation)
			}
			if err := get(t, ns, secret, &s); err != nil {
				return err
			}
			if bytes.Equal(s.Data[pki.TokenPublicKeyFile], before) || s.Annotations[annotationTokenKeyRequest] != v {
				return fmt.Errorf("the Secret holds the key of %q", s.Annotations[annotationTokenKeyRequest])
			}
			if err := pki.CheckTokenKey(s.Data[pki.TokenKeyFile], s.Data[pki.TokenPublicKeyFile]); err != nil {
				return err
			}
			if ref := metav1.GetControllerOf(&s); ref == nil || ref.UID != ec.UID || !controllerutil.ContainsFinalizer(&s, SecretFinalizer) {
				return fmt.Errorf("the Secret is not owned and held by the cluster: %+v, %v", s.OwnerReferences, s.Finalizers)
			}
			var sts appsv1.StatefulSet
			if err := get(t, ns, name, &sts); err != nil {
				return err
			}
			if a := sts.Spec.Template.Annotations[AnnotationTokenKey]; a != shortHash(s.Data[pki.TokenPublicKeyFile]) {
				return fmt.Errorf("the members' template carries key %q", a)
			}
			// Every member restarted on it, by the rolling update.
			if again := p.deletions[restarted:]; len(again) < 3 || ec.Status.Rollout != nil {
				return fmt.Errorf("members restarted: %v; rolling update %+v", again, ec.Status.Rollout)
			}
			return nil
		})
		if err := findEventMessage(ns, ReasonTokenKeyRotated, v1alpha1.AnnotationRotateTokenKey+"="+v); err != nil {
			t.Fatal(err)
		}
		return s
	}

	rotate("first")
	first := renewed("first", old.Data[pki.TokenPublicKeyFile])
	poke(t, ns, name, "after-first")
	testutil.Throughout(t, 3*time.Second, "the key made once", func() error {
		p.step()
		var s corev1.Secret
		if err := get(t, ns, secret, &s); err != nil || s.ResourceVersion != first.ResourceVersion {
			return fmt.Errorf("the Secret changed again (%v)", err)
		}
		return nil
	})

	// Gone on the formed cluster: reported, naming the way out; the annotation makes a new one.
	if err := k8s.Delete(ctx, &first); err != nil {
		t.Fatal(err)
	}
	var held corev1.Secret
	if err := get(t, ns, secret, &held); err != nil {
		t.Fatal(err)
	}
	controllerutil.RemoveFinalizer(&held, SecretFinalizer)
	if err := k8s.Update(ctx, &held); err != nil {
		t.Fatal(err)
	}
	poke(t, ns, name, "key-gone")
	testutil.Eventually(t, 20*time.Second, "the missing Secret reported with the annotation", func() error {
		if err := get(t, ns, secret, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the Secret is there (%v)", err)
		}
		for _, e := range getCluster(t, ns, name).Status.LastErrors {
			if e.Code == "ERR_SYNC_AUTH" && strings.Contains(e.Description, v1alpha1.AnnotationRotateTokenKey+"=") {
				return nil
			}
		}
		return fmt.Errorf("lastErrors %+v", getCluster(t, ns, name).Status.LastErrors)
	})
	rotate("second")
	renewed("second", first.Data[pki.TokenPublicKeyFile])
	if errs := getCluster(t, ns, name).Status.LastErrors; len(errs) > 0 {
		t.Fatalf("lastErrors %+v", errs)
	}
	deleteCluster(t, ns, name, 30*time.Second)
}
