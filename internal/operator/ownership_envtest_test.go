package operator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// foreignObjects are objects someone else made under the names a cluster x needs.
func foreignObjects(ns string) []client.Object {
	other := map[string]string{"app": "other"}
	return []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x-config"}, Data: map[string]string{"mine": "yes"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x-client"},
			Spec: corev1.ServiceSpec{Selector: other, Ports: []corev1.ServicePort{{Name: "web", Port: 80}}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x-sidecar-token"}, Data: map[string][]byte{"token": []byte("not steward's\n")}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}, Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: other}, ServiceName: "other",
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: other},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}, Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: other}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}},
	}
}

// unchanged fails unless each object is as it was made: same UID and resourceVersion (never
// written), no owner.
func unchanged(t *testing.T, made []client.Object) error {
	t.Helper()
	for _, want := range made {
		got := want.DeepCopyObject().(client.Object)
		if err := get(t, want.GetNamespace(), want.GetName(), got); err != nil {
			return fmt.Errorf("%T %s: %v", want, want.GetName(), err)
		}
		if got.GetUID() != want.GetUID() || got.GetResourceVersion() != want.GetResourceVersion() || len(got.GetOwnerReferences()) != 0 {
			return fmt.Errorf("%T %s was changed: uid %s→%s, version %s→%s, owners %v", want, want.GetName(),
				want.GetUID(), got.GetUID(), want.GetResourceVersion(), got.GetResourceVersion(), got.GetOwnerReferences())
		}
	}
	return nil
}

// TestNameConflictLeftAlone: objects someone else made under the cluster's names are neither
// adopted, changed nor deleted, on sync and on the cluster's deletion; a condition and an
// Event name them; the cluster's own objects are made and deleted as usual.
func TestNameConflictLeftAlone(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	made := foreignObjects(ns)
	for _, obj := range made {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8s.Create(ctx, newCluster(ns, "x", 1)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "condition OwnershipConflict naming each object", func() error {
		c := apimeta.FindStatusCondition(getCluster(t, ns, "x").Status.Conditions, v1alpha1.ConditionOwnershipConflict)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(ClaimNameConflict) {
			return fmt.Errorf("condition %+v", c)
		}
		for _, want := range []string{"ConfigMap " + ns + "/x-config", "Service " + ns + "/x-client", "Secret " + ns + "/x-sidecar-token",
			"StatefulSet " + ns + "/x", "NetworkPolicy " + ns + "/x", "rename or delete it"} {
			if !strings.Contains(c.Message, want) {
				return fmt.Errorf("message %q lacks %q", c.Message, want)
			}
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, "Event NameConflict", func() error { return findEvent(ns, string(ClaimNameConflict)) })
	// What has no namesake is made, and owned.
	var role rbacv1.Role
	testutil.Eventually(t, 10*time.Second, "Role x", func() error { return get(t, ns, "x", &role) })
	if !metav1.IsControlledBy(&role, getCluster(t, ns, "x")) {
		t.Errorf("Role x owners %v", role.GetOwnerReferences())
	}
	if err := unchanged(t, made); err != nil {
		t.Fatal(err)
	}

	deleteCluster(t, ns, "x", 20*time.Second)
	if err := unchanged(t, made); err != nil {
		t.Fatal(err)
	}
	for name, obj := range map[string]client.Object{"x": &rbacv1.Role{}, "x-0": &coordinationv1.Lease{}} {
		if err := get(t, ns, name, obj); !apierrors.IsNotFound(err) {
			t.Errorf("the cluster's own %T %s survived its deletion (%v)", obj, name, err)
		}
	}
}

// TestOrphanDeletionKeepsData: deleted with orphan propagation, the cluster deletes nothing
// (its StatefulSet, the volume claims and the Secrets stay) and releases its finalizer. A new
// EtcdCluster of the same name leaves what it left alone until the adopt annotation asks for
// it with the same cluster ID; adopted, a normal deletion deletes it.
func TestOrphanDeletionKeepsData(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "o", 1)
	ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	testutil.Eventually(t, 20*time.Second, "StatefulSet o", func() error { return get(t, ns, "o", &sts) })
	waitReady(t, ns, "o", 1)
	// The StatefulSet controller's claim for member o-0, owned by the StatefulSet.
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-o-0", Labels: selectorLabels(ec)},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if err := controllerutil.SetControllerReference(&sts, pvc, k8s.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	// The member reports its etcd cluster ID.
	writeReport(t, ns, cluster.Report{Name: "o-0", At: time.Now(), Serving: true, Formed: true, Leader: true, ClusterID: "c1", MemberID: "a0"}, nil)

	kept := map[string]client.Object{"o": &appsv1.StatefulSet{}, "data-o-0": &corev1.PersistentVolumeClaim{}, "o-ca": &corev1.Secret{},
		"o-server-tls": &corev1.Secret{}, "o-sidecar-token": &corev1.Secret{}, "o-config": &corev1.ConfigMap{}, "o-peer": &corev1.Service{},
		"o-0": &coordinationv1.Lease{}}
	uids := map[string]string{}
	for name, obj := range kept {
		if err := get(t, ns, name, obj); err != nil {
			t.Fatalf("%T %s: %v", obj, name, err)
		}
		uids[name] = string(obj.GetUID())
	}
	oldUID := getCluster(t, ns, "o").UID
	if err := k8s.Delete(ctx, getCluster(t, ns, "o"), client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
		t.Fatal(err)
	}
	// No garbage collector runs here: the API server's orphan finalizer stays, the operator's goes.
	testutil.Eventually(t, 20*time.Second, "the operator's finalizer released", func() error {
		ec := getCluster(t, ns, "o")
		if controllerutil.ContainsFinalizer(ec, Finalizer) {
			return fmt.Errorf("finalizers %v", ec.Finalizers)
		}
		return nil
	})
	for name, obj := range kept {
		if err := get(t, ns, name, obj); err != nil || string(obj.GetUID()) != uids[name] || !obj.GetDeletionTimestamp().IsZero() {
			t.Errorf("%T %s not kept by an orphan deletion: %v", obj, name, err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "Event Orphaned", func() error { return findEvent(ns, "Orphaned") })
	// Play the garbage collector: the EtcdCluster goes; its objects keep their stale owner
	// reference, as until the collector gets to them.
	updateCluster(t, ns, "o", func(ec *v1alpha1.EtcdCluster) {
		controllerutil.RemoveFinalizer(ec, metav1.FinalizerOrphanDependents)
	})
	testutil.Eventually(t, 10*time.Second, "EtcdCluster o gone", func() error {
		if err := get(t, ns, "o", &v1alpha1.EtcdCluster{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})

	// A namesake without the annotation: what is there is named, and left alone.
	ec = newCluster(ns, "o", 1)
	ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true}
	ec.Annotations = map[string]string{v1alpha1.AnnotationAdopt: "c2"}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	waitReason := func(reason ClaimCase, wants ...string) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, "OwnershipConflict "+string(reason), func() error {
			c := apimeta.FindStatusCondition(getCluster(t, ns, "o").Status.Conditions, v1alpha1.ConditionOwnershipConflict)
			if c == nil || c.Reason != string(reason) {
				return fmt.Errorf("condition %+v", c)
			}
			for _, want := range wants {
				if !strings.Contains(c.Message, want) {
					return fmt.Errorf("message %q lacks %q", c.Message, want)
				}
			}
			return nil
		})
	}
	stillOld := func() {
		t.Helper()
		for name, obj := range kept {
			if err := get(t, ns, name, obj); err != nil || string(obj.GetUID()) != uids[name] {
				t.Fatalf("%T %s: %v", obj, name, err)
			}
			if ref := metav1.GetControllerOf(obj); name != "data-o-0" && (ref == nil || ref.UID != oldUID) {
				t.Errorf("%T %s taken over without the adopt annotation: controller %v", obj, name, ref)
			}
		}
	}
	waitReason(ClaimClusterIDMismatch, "StatefulSet "+ns+"/o", "c1")
	stillOld()
	updateCluster(t, ns, "o", func(ec *v1alpha1.EtcdCluster) { delete(ec.Annotations, v1alpha1.AnnotationAdopt) })
	waitReason(ClaimOrphaned, "StatefulSet "+ns+"/o", "Secret "+ns+"/o-ca", v1alpha1.AnnotationAdopt+"=true")
	stillOld()

	// Adopted on request: the same objects, now owned by the new EtcdCluster.
	updateCluster(t, ns, "o", func(ec *v1alpha1.EtcdCluster) {
		metav1.SetMetaDataAnnotation(&ec.ObjectMeta, v1alpha1.AnnotationAdopt, "true")
	})
	newEC := getCluster(t, ns, "o")
	testutil.Eventually(t, 20*time.Second, "adopted, condition gone", func() error {
		members(t, ns, "o", all)
		if c := apimeta.FindStatusCondition(getCluster(t, ns, "o").Status.Conditions, v1alpha1.ConditionOwnershipConflict); c != nil {
			return fmt.Errorf("condition %+v", c)
		}
		for name, obj := range kept {
			if name == "data-o-0" {
				continue // the StatefulSet's
			}
			if err := get(t, ns, name, obj); err != nil || string(obj.GetUID()) != uids[name] || !metav1.IsControlledBy(obj, newEC) {
				return fmt.Errorf("%T %s not adopted: %v, owners %v", obj, name, err, obj.GetOwnerReferences())
			}
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, "Event Adopted", func() error { return findEvent(ns, "Adopted") })

	deleteCluster(t, ns, "o", 20*time.Second)
	for name, obj := range kept {
		if name == "data-o-0" {
			continue // the garbage collector's, after the StatefulSet
		}
		if err := get(t, ns, name, obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s survived a normal deletion of the cluster that adopted it (%v)", obj, name, err)
		}
	}
}

// TestPodOfAnotherNotDeleted: a pod that carries the cluster's labels but is not of its
// StatefulSet is never deleted, even NotReady past the grace (case 9 deletes its own).
func TestPodOfAnotherNotDeleted(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	if err := k8s.Create(ctx, newCluster(ns, "p", 3)); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	testutil.Eventually(t, 20*time.Second, "StatefulSet p", func() error { return get(t, ns, "p", &sts) })
	stray := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p-2", Labels: sts.Spec.Template.Labels},
		Spec: *sts.Spec.Template.Spec.DeepCopy()}
	stray.Spec.Volumes = append(stray.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	if err := k8s.Create(ctx, stray); err != nil {
		t.Fatal(err)
	}
	kept := func() {
		t.Helper()
		var got corev1.Pod
		if err := get(t, ns, "p-2", &got); err != nil || got.UID != stray.UID || !got.DeletionTimestamp.IsZero() {
			t.Fatalf("pod p-2, not the StatefulSet's, was deleted: %v", err)
		}
	}
	testutil.Eventually(t, 30*time.Second, "the deletion of p-2 refused", func() error {
		kept()
		members(t, ns, "p", func(i int) bool { return i < 2 })
		for _, e := range getCluster(t, ns, "p").Status.LastErrors {
			if e.Code == "ERR_DELETE_POD" && strings.Contains(e.Description, "pod p-2 is not of the cluster's own StatefulSet") {
				return nil
			}
		}
		return fmt.Errorf("lastErrors %v", getCluster(t, ns, "p").Status.LastErrors)
	})
	kept()
}
