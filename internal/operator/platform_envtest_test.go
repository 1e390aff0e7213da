package operator

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	corev1 "k8s.io/api/core/v1"
)

// TestPlatformSpec: spec.imagePullSecrets reach the member pods, and
// spec.serviceAccount.annotations the members' ServiceAccount. The operator keeps its
// annotations as the spec says (changed, removed) and leaves those others put there alone.
func TestPlatformSpec(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	const role, gsa = "eks.amazonaws.com/role-arn", "iam.gke.io/gcp-service-account"
	ec := newCluster(ns, "plat", 3)
	ec.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
	ec.Spec.ServiceAccount.Annotations = map[string]string{role: "arn:aws:iam::1:role/etcd", gsa: "etcd@p.iam.gserviceaccount.com"}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	sts := waitStatefulSet(t, ns, "plat")
	if got := sts.Spec.Template.Spec.ImagePullSecrets; !reflect.DeepEqual(got, ec.Spec.ImagePullSecrets) {
		t.Errorf("member pods' pull Secrets %v; want %v", got, ec.Spec.ImagePullSecrets)
	}
	annotations := func(want map[string]string) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, "the ServiceAccount's annotations", func() error {
			var sa corev1.ServiceAccount
			if err := get(t, ns, "plat", &sa); err != nil {
				return err
			}
			for k, v := range want {
				if got, ok := sa.Annotations[k]; v == "" && ok || v != "" && got != v {
					return fmt.Errorf("annotation %s is %q (present %v); want %q (\"\": absent)", k, got, ok, v)
				}
			}
			return nil
		})
	}
	annotations(map[string]string{role: "arn:aws:iam::1:role/etcd", gsa: "etcd@p.iam.gserviceaccount.com"})

	// Someone else annotates the ServiceAccount; the spec then changes one annotation and drops
	// the other.
	var sa corev1.ServiceAccount
	if err := get(t, ns, "plat", &sa); err != nil {
		t.Fatal(err)
	}
	sa.Annotations["team.example.com/owner"] = "db"
	if err := k8s.Update(ctx, &sa); err != nil {
		t.Fatal(err)
	}
	updateCluster(t, ns, "plat", func(ec *v1alpha1.EtcdCluster) {
		ec.Spec.ServiceAccount.Annotations = map[string]string{role: "arn:aws:iam::1:role/etcd-2"}
	})
	annotations(map[string]string{role: "arn:aws:iam::1:role/etcd-2", gsa: "", "team.example.com/owner": "db"})

	// Every annotation of the spec's gone: only the others' stay.
	updateCluster(t, ns, "plat", func(ec *v1alpha1.EtcdCluster) { ec.Spec.ServiceAccount.Annotations = nil })
	annotations(map[string]string{role: "", annotationManagedAnnotations: "", "team.example.com/owner": "db"})
}
