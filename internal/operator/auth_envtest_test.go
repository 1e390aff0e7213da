package operator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	ec.Spec.Auth = &v1alpha1.AuthSpec{Enabled: true}
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
	mine.Spec.Auth = &v1alpha1.AuthSpec{Enabled: true, RootPasswordSecret: "my-password"}
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
