package operator

import (
	"bytes"
	"context"
	"fmt"
	"slices"
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

// TestAuthSecrets: a cluster with spec.auth gets a random root password in a Secret it owns,
// named in the status and mounted into the sidecar only. A cluster naming a Secret of the
// user's that does not exist gets an error that names it, and no StatefulSet, until the
// Secret is made; that Secret is never deleted with the cluster.
func TestAuthSecrets(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "auth", 3)
	ec.Spec.TLS, ec.Spec.Auth = &v1alpha1.TLSSpec{Enabled: true}, &v1alpha1.AuthSpec{Enabled: true}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	ec = getCluster(t, ns, "auth")
	var s corev1.Secret
	testutil.Eventually(t, 20*time.Second, "Secret auth-root-password", func() error { return get(t, ns, "auth-root-password", &s) })
	pw := strings.TrimSpace(string(s.Data[v1alpha1.RootPasswordKey]))
	if len(pw) < 40 {
		t.Fatalf("the generated root password has %d characters; want 256 random bits", len(pw))
	}
	if ref := metav1.GetControllerOf(&s); ref == nil || ref.UID != ec.UID {
		t.Fatalf("the root password Secret is not owned by the cluster: %+v", s.OwnerReferences)
	}
	testutil.Eventually(t, 20*time.Second, "status.rootPasswordSecret", func() error {
		if got := getCluster(t, ns, "auth").Status.RootPasswordSecret; got != "auth-root-password" {
			return fmt.Errorf("status.rootPasswordSecret %q", got)
		}
		return nil
	})
	// Kept, not made again, at the next passes.
	poke(t, ns, "auth", "again")
	var again corev1.Secret
	if err := get(t, ns, "auth-root-password", &again); err != nil || string(again.Data[v1alpha1.RootPasswordKey]) != string(s.Data[v1alpha1.RootPasswordKey]) {
		t.Fatalf("the root password changed: %v", err)
	}

	mine := newCluster(ns, "mine", 3)
	mine.Spec.TLS, mine.Spec.Auth = &v1alpha1.TLSSpec{Enabled: true}, &v1alpha1.AuthSpec{Enabled: true, RootPasswordSecret: "my-password"}
	if err := k8s.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the missing password Secret reported", func() error {
		for _, e := range getCluster(t, ns, "mine").Status.LastErrors {
			if e.Code == "ERR_SYNC_AUTH" && strings.Contains(e.Description, "the root password Secret "+ns+"/my-password (spec.auth.rootPasswordSecret) does not exist") {
				return nil
			}
		}
		return fmt.Errorf("lastErrors %+v", getCluster(t, ns, "mine").Status.LastErrors)
	})
	var sts appsv1.StatefulSet
	if err := get(t, ns, "mine", &sts); !apierrors.IsNotFound(err) {
		t.Fatalf("a StatefulSet without its root password Secret: %v", err)
	}
	user := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "my-password"}, Data: map[string][]byte{v1alpha1.RootPasswordKey: []byte("chosen")}}
	if err := k8s.Create(ctx, user); err != nil {
		t.Fatal(err)
	}
	poke(t, ns, "mine", "secret made")
	testutil.Eventually(t, 20*time.Second, "the StatefulSet once the Secret exists", func() error { return get(t, ns, "mine", &sts) })
	deleteCluster(t, ns, "mine", 30*time.Second)
	if err := get(t, ns, "my-password", &corev1.Secret{}); err != nil {
		t.Fatalf("the user's Secret went with the cluster: %v", err)
	}
}

// TestTokenKeySecret: a cluster with spec.auth gets a token signing key pair in a Secret it
// owns and holds, mounted into the etcd container, which the sidecar's --token-key-dir names
// (etcd signs its tokens with it: they are valid on every member). On the formed cluster,
// the Secret deleted (its finalizer forced off) is reported (an Event, ERR_SYNC_AUTH) and not
// made again; put back from a backup, it is taken again and the members keep their key. A
// cluster whose members do not use the key yet (made by an older operator) gets a new one,
// which reaches them by the rolling update.
func TestTokenKeySecret(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns, name := namespace(t), "jwt"
	p := formedCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) {
		ec.Spec.TLS, ec.Spec.Auth = &v1alpha1.TLSSpec{Enabled: true}, &v1alpha1.AuthSpec{Enabled: true}
	})
	secret := name + "-token-key"
	var backup corev1.Secret
	testutil.Eventually(t, 20*time.Second, "Secret "+secret, func() error { return get(t, ns, secret, &backup) })
	ec := getCluster(t, ns, name)
	if ref := metav1.GetControllerOf(&backup); ref == nil || ref.UID != ec.UID || !controllerutil.ContainsFinalizer(&backup, SecretFinalizer) {
		t.Fatalf("the token key Secret is not owned and held by the cluster: %+v, %v", backup.OwnerReferences, backup.Finalizers)
	}
	if err := pki.CheckTokenKey(backup.Data[pki.TokenKeyFile], backup.Data[pki.TokenPublicKeyFile]); err != nil {
		t.Fatalf("the token key Secret: %v", err)
	}
	if err := findEvent(ns, ReasonTokenKeyCreated); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	if err := get(t, ns, name, &sts); err != nil {
		t.Fatal(err)
	}
	keyAnnotation := sts.Spec.Template.Annotations[AnnotationTokenKey]
	if keyAnnotation == "" || !membersMountTokenKey(sts, secret) {
		t.Fatalf("the members do not get the token key: annotation %q, volumes %+v", keyAnnotation, sts.Spec.Template.Spec.Volumes)
	}
	forceDelete := func() {
		t.Helper()
		if err := k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret}}); err != nil {
			t.Fatal(err)
		}
		var held corev1.Secret
		if err := get(t, ns, secret, &held); err != nil || held.DeletionTimestamp.IsZero() {
			t.Fatalf("the token key Secret is not held by its finalizer: %v", err)
		}
		controllerutil.RemoveFinalizer(&held, SecretFinalizer)
		if err := k8s.Update(ctx, &held); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 10*time.Second, "the token key Secret gone", func() error {
			if err := get(t, ns, secret, &corev1.Secret{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
			return nil
		})
	}

	forceDelete()
	poke(t, ns, name, "key-gone")
	testutil.Eventually(t, 20*time.Second, "the token key Secret reported gone", func() error {
		p.step()
		for _, e := range getCluster(t, ns, name).Status.LastErrors {
			if e.Code == "ERR_SYNC_AUTH" && strings.Contains(e.Description, ns+"/"+secret+" is gone") && strings.Contains(e.Description, "re-apply your backup") {
				return findEvent(ns, ReasonTokenKeySecretMissing)
			}
		}
		return fmt.Errorf("lastErrors %+v", getCluster(t, ns, name).Status.LastErrors)
	})
	poke(t, ns, name, "key-gone-2")
	testutil.Throughout(t, 3*time.Second, "no new token key on the formed cluster", func() error {
		if err := get(t, ns, secret, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the token key Secret was made again (%v)", err)
		}
		return nil
	})

	// Put back from the backup (as `kubectl get -o yaml` saved it): taken again, and the
	// members keep their key.
	restored := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret, Labels: backup.Labels, OwnerReferences: backup.OwnerReferences},
		Type: backup.Type, Data: backup.Data}
	if err := k8s.Create(ctx, restored); err != nil {
		t.Fatal(err)
	}
	poke(t, ns, name, "key-back")
	testutil.Eventually(t, 20*time.Second, "the token key Secret taken again", func() error {
		p.step()
		if errs := getCluster(t, ns, name).Status.LastErrors; len(errs) > 0 {
			return fmt.Errorf("lastErrors %+v", errs)
		}
		return nil
	})
	if err := get(t, ns, name, &sts); err != nil || sts.Spec.Template.Annotations[AnnotationTokenKey] != keyAnnotation {
		t.Fatalf("the members' token key changed (%v)", err)
	}

	// Members that do not use the key yet: a new one is made, and their template changes.
	if err := get(t, ns, name, &sts); err != nil {
		t.Fatal(err)
	}
	sts.Spec.Template.Spec.Volumes = slices.DeleteFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "token-key" })
	for i := range sts.Spec.Template.Spec.Containers {
		c := &sts.Spec.Template.Spec.Containers[i]
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "token-key" })
	}
	if err := k8s.Update(ctx, &sts); err != nil {
		t.Fatal(err)
	}
	forceDelete()
	poke(t, ns, name, "key-unused")
	testutil.Eventually(t, 20*time.Second, "a new token key for members that did not use one", func() error {
		p.step() // the StatefulSet controller sees the edited template
		var s corev1.Secret
		if err := get(t, ns, secret, &s); err != nil {
			return err
		}
		if bytes.Equal(s.Data[pki.TokenPublicKeyFile], backup.Data[pki.TokenPublicKeyFile]) {
			t.Fatal("the Secret put back is there again")
		}
		if err := get(t, ns, name, &sts); err != nil {
			return err
		}
		if a := sts.Spec.Template.Annotations[AnnotationTokenKey]; a == keyAnnotation || !membersMountTokenKey(sts, secret) {
			return fmt.Errorf("template annotation %q (was %q), volumes %+v", a, keyAnnotation, sts.Spec.Template.Spec.Volumes)
		}
		return nil
	})
	// Not left rolling for the tests after.
	deleteCluster(t, ns, name, 30*time.Second)
}

// membersMountTokenKey: the pod template mounts Secret secret into the etcd container only.
func membersMountTokenKey(sts appsv1.StatefulSet, secret string) bool {
	if !slices.ContainsFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "token-key" && v.Secret != nil && v.Secret.SecretName == secret
	}) {
		return false
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		mounts := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "token-key" })
		if mounts != (c.Name == "etcd") {
			return false
		}
	}
	return true
}

// TestApplicationUser: a cluster with authentication gets an application user: its password
// in a Secret the cluster owns (or the user's, which is only read and never deleted), named
// in the status with the user, and mounted into the sidecar only, whose flags name the user
// and its prefix. "root" is refused as its name.
func TestApplicationUser(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	sidecarOf := func(sts *appsv1.StatefulSet) (sidecar, etcd corev1.Container) {
		for _, c := range sts.Spec.Template.Spec.Containers {
			if c.Name == "sidecar" {
				sidecar = c
			} else {
				etcd = c
			}
		}
		return sidecar, etcd
	}
	mountsApp := func(c corev1.Container) bool {
		for _, m := range c.VolumeMounts {
			if m.Name == "app-password" {
				return true
			}
		}
		return false
	}

	ec := newCluster(ns, "a", 1)
	ec.Spec.TLS, ec.Spec.Auth = &v1alpha1.TLSSpec{Enabled: true}, &v1alpha1.AuthSpec{Enabled: true}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	ec = getCluster(t, ns, "a")
	var s corev1.Secret
	testutil.Eventually(t, 20*time.Second, "Secret a-app-password", func() error { return get(t, ns, "a-app-password", &s) })
	if pw := strings.TrimSpace(string(s.Data[v1alpha1.RootPasswordKey])); len(pw) < 40 {
		t.Errorf("the generated application password has %d characters", len(pw))
	}
	if ref := metav1.GetControllerOf(&s); ref == nil || ref.UID != ec.UID {
		t.Errorf("the application password Secret is not owned by the cluster: %+v", s.OwnerReferences)
	}
	sts := waitStatefulSet(t, ns, "a")
	sidecar, etcd := sidecarOf(&sts)
	if cmd := strings.Join(sidecar.Command, " "); !strings.Contains(cmd, "--app-user app --app-password-file "+AppPasswordFile) || strings.Contains(cmd, "--app-user-prefix") {
		t.Errorf("the sidecar's command: %s", cmd)
	}
	if !mountsApp(sidecar) || mountsApp(etcd) {
		t.Errorf("the application password mounted into the sidecar %v, into etcd %v; want the sidecar only", mountsApp(sidecar), mountsApp(etcd))
	}
	testutil.Eventually(t, 20*time.Second, "status.applicationUser", func() error {
		got := getCluster(t, ns, "a").Status.ApplicationUser
		if got == nil || got.Name != "app" || got.PasswordSecret != "a-app-password" {
			return fmt.Errorf("status.applicationUser %+v", got)
		}
		return nil
	})

	mine := newCluster(ns, "k", 1)
	mine.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true}
	mine.Spec.Auth = &v1alpha1.AuthSpec{Enabled: true, ApplicationUser: &v1alpha1.ApplicationUserSpec{Name: "kube", Prefix: "/registry/", PasswordSecret: "kube-pw"}}
	if err := k8s.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the missing password Secret reported", func() error {
		for _, e := range getCluster(t, ns, "k").Status.LastErrors {
			if e.Code == "ERR_SYNC_AUTH" && strings.Contains(e.Description, ns+"/kube-pw (spec.auth.applicationUser.passwordSecret) does not exist") {
				return nil
			}
		}
		return fmt.Errorf("lastErrors %+v", getCluster(t, ns, "k").Status.LastErrors)
	})
	if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-pw"},
		Data: map[string][]byte{v1alpha1.RootPasswordKey: []byte("chosen")}}); err != nil {
		t.Fatal(err)
	}
	poke(t, ns, "k", "secret made")
	sts = waitStatefulSet(t, ns, "k")
	sidecar, _ = sidecarOf(&sts)
	if cmd := strings.Join(sidecar.Command, " "); !strings.Contains(cmd, "--app-user kube") || !strings.Contains(cmd, "--app-user-prefix /registry/") {
		t.Errorf("the sidecar's command: %s", cmd)
	}
	deleteCluster(t, ns, "k", 30*time.Second)
	if err := get(t, ns, "kube-pw", &corev1.Secret{}); err != nil {
		t.Errorf("the user's Secret went with the cluster: %v", err)
	}

	root := newCluster(ns, "r", 1)
	root.Spec.TLS, root.Spec.Auth = &v1alpha1.TLSSpec{Enabled: true}, &v1alpha1.AuthSpec{Enabled: true, ApplicationUser: &v1alpha1.ApplicationUserSpec{Name: "root"}}
	if err := k8s.Create(ctx, root); err == nil || !strings.Contains(err.Error(), "root is Steward's own user") {
		t.Errorf("an application user named root: %v", err)
	}
}
