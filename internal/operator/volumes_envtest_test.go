package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// storageClass makes a StorageClass for one test (they are cluster-wide), with or without
// allowVolumeExpansion.
func storageClass(t *testing.T, name string, expands bool) string {
	t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "example.com/none", AllowVolumeExpansion: &expands}
	if err := k8s.Create(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), sc) })
	return name
}

// claims plays the StatefulSet controller for the volume claims: one per member, of the
// claim template's class and size, owned by the StatefulSet (as with its retention policy),
// and bound.
func claims(t *testing.T, ns, name string) {
	t.Helper()
	sts := waitStatefulSet(t, ns, name)
	tpl := sts.Spec.VolumeClaimTemplates[0]
	for i := int32(0); i < *sts.Spec.Replicas; i++ {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("data-%s-%d", name, i), Labels: tpl.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID}}}, Spec: tpl.Spec}
		c.Spec.VolumeName = "pv-" + ns + "-" + c.Name
		if err := k8s.Create(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		c.Status.Phase = corev1.ClaimBound // only a bound claim may grow
		if err := k8s.Status().Update(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
}

// claimSizes are the sizes the cluster's claims ask for, by name.
func claimSizes(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	var list corev1.PersistentVolumeClaimList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{LabelCluster: name}); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range list.Items {
		out[c.Name] = c.Spec.Resources.Requests.Storage().String()
	}
	return out
}

// collectOrphans plays the garbage collector for a StatefulSet deleted with orphan
// propagation: once it is marked for deletion, its pods and claims lose their references to
// it and it goes. It returns the deleted StatefulSet's UID.
func collectOrphans(t *testing.T, ns, name string) types.UID {
	t.Helper()
	ctx := context.Background()
	var sts appsv1.StatefulSet
	testutil.Eventually(t, 30*time.Second, "the StatefulSet deleted, its pods orphaned", func() error {
		if err := get(t, ns, name, &sts); err != nil {
			return err
		}
		if sts.DeletionTimestamp.IsZero() || !slices.Contains(sts.Finalizers, metav1.FinalizerOrphanDependents) {
			return fmt.Errorf("not deleted with orphan propagation: deletion %v, finalizers %v", sts.DeletionTimestamp, sts.Finalizers)
		}
		return nil
	})
	var pods corev1.PodList
	var pvcs corev1.PersistentVolumeClaimList
	for _, list := range []client.ObjectList{&pods, &pvcs} {
		if err := k8s.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{LabelCluster: name}); err != nil {
			t.Fatal(err)
		}
	}
	var dependents []client.Object
	for i := range pods.Items {
		dependents = append(dependents, &pods.Items[i])
	}
	for i := range pvcs.Items {
		dependents = append(dependents, &pvcs.Items[i])
	}
	for _, o := range dependents {
		o.SetOwnerReferences(slices.DeleteFunc(o.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == sts.UID }))
		if err := k8s.Update(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := get(t, ns, name, &sts); err != nil {
			return err
		}
		sts.Finalizers = slices.DeleteFunc(sts.Finalizers, func(f string) bool { return f == metav1.FinalizerOrphanDependents })
		return k8s.Update(ctx, &sts)
	}); err != nil {
		t.Fatal(err)
	}
	return sts.UID
}

// podUIDs are the UIDs of the cluster's pods, by name.
func podUIDs(t *testing.T, ns, name string) map[string]types.UID {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{LabelCluster: name}); err != nil {
		t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, p := range pods.Items {
		out[p.Name] = p.UID
	}
	return out
}

// waitExpanded waits for the StatefulSet made anew (another UID than old) with a claim
// template of size, and for the expansion's record and condition to be gone.
func waitExpanded(t *testing.T, ns, name string, old types.UID, size string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "the StatefulSet made anew with claims of "+size, func() error {
		var sts appsv1.StatefulSet
		if err := get(t, ns, name, &sts); err != nil {
			return err
		}
		members(t, ns, name, all)
		if got := claimTemplateSize(&sts); sts.UID == old || got == nil || got.String() != size {
			return fmt.Errorf("StatefulSet %s, claim template %v", sts.UID, got)
		}
		ec := getCluster(t, ns, name)
		if ec.Status.VolumeExpansion != nil || condition(ec, v1alpha1.ConditionVolumeExpansion) != "" {
			return fmt.Errorf("status.volumeExpansion %+v, condition %s", ec.Status.VolumeExpansion, condition(ec, v1alpha1.ConditionVolumeExpansion))
		}
		return nil
	})
}

// TestVolumeExpansion: spec.storage.size grows the members' volume claims in place when their
// StorageClass allows it: the size recorded first, each claim asked for it, then the
// StatefulSet deleted leaving its pods (which keep their UIDs: no member restarts) and made
// anew with the new claim template. A growth interrupted midway (the operator stopped after
// recording it and asking one claim) resumes where it was. Without allowVolumeExpansion,
// nothing changes and the VolumeExpansion condition says why. The API server refuses a
// smaller size.
func TestVolumeExpansion(t *testing.T) {
	t.Parallel() // its own namespace
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	expandable := storageClass(t, ns+"-expandable", true)
	fixed := storageClass(t, ns+"-fixed", false)
	for name, class := range map[string]string{"grow": expandable, "fixed": fixed} {
		ec := newCluster(ns, name, 3)
		size := resource.MustParse("1Gi")
		ec.Spec.Storage = v1alpha1.StorageSpec{Size: &size, StorageClassName: &class}
		if err := k8s.Create(ctx, ec); err != nil {
			t.Fatal(err)
		}
		claims(t, ns, name)
		waitReady(t, ns, name, 3)
	}
	pods := podUIDs(t, ns, "grow")
	grow := func(name, size string) {
		t.Helper()
		updateCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) { q := resource.MustParse(size); ec.Spec.Storage.Size = &q })
	}

	grow("grow", "2Gi")
	grow("fixed", "2Gi")
	old := collectOrphans(t, ns, "grow")
	if got := claimSizes(t, ns, "grow"); len(got) != 3 || got["data-grow-0"] != "2Gi" || got["data-grow-1"] != "2Gi" || got["data-grow-2"] != "2Gi" {
		t.Fatalf("claims %v before the StatefulSet was deleted; want each at 2Gi", got)
	}
	waitExpanded(t, ns, "grow", old, "2Gi")
	if got := podUIDs(t, ns, "grow"); !equalUIDs(got, pods) {
		t.Errorf("pods %v after the expansion; want the same pods %v (no member restarted)", got, pods)
	}
	testutil.Eventually(t, 10*time.Second, "Event VolumesExpanded", func() error { return findEvent(ns, "VolumesExpanded") })

	// The class does not allow expansion: refused, nothing changed.
	fixedSts := waitStatefulSet(t, ns, "fixed")
	testutil.Eventually(t, 20*time.Second, "the growth refused", func() error {
		c := apimeta.FindStatusCondition(getCluster(t, ns, "fixed").Status.Conditions, v1alpha1.ConditionVolumeExpansion)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonExpansionNotAllowed || !strings.Contains(c.Message, "allowVolumeExpansion") {
			return fmt.Errorf("condition %+v", c)
		}
		return findEventMessage(ns, v1alpha1.ReasonExpansionNotAllowed, "StorageClass "+fixed+" does not allow volume expansion")
	})
	if got := claimSizes(t, ns, "fixed"); got["data-fixed-0"] != "1Gi" || got["data-fixed-1"] != "1Gi" || got["data-fixed-2"] != "1Gi" {
		t.Errorf("claims of a class without expansion %v; want them untouched", got)
	}
	if sts := waitStatefulSet(t, ns, "fixed"); sts.UID != fixedSts.UID || !sts.DeletionTimestamp.IsZero() {
		t.Errorf("the StatefulSet of a refused growth was deleted")
	}

	// The new StatefulSet's controller owns the claims again (its retention policy).
	sts := waitStatefulSet(t, ns, "grow")
	var pvcs corev1.PersistentVolumeClaimList
	if err := k8s.List(ctx, &pvcs, client.InNamespace(ns), client.MatchingLabels{LabelCluster: "grow"}); err != nil {
		t.Fatal(err)
	}
	for i := range pvcs.Items {
		c := &pvcs.Items[i]
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID}}
		if err := k8s.Update(ctx, c); err != nil {
			t.Fatal(err)
		}
	}

	// Interrupted: the operator recorded 3Gi and asked one claim for it, then stopped.
	updateCluster(t, ns, "grow", func(ec *v1alpha1.EtcdCluster) { ec.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"} })
	grow("grow", "3Gi")
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ec := getCluster(t, ns, "grow")
		ec.Status.VolumeExpansion = &v1alpha1.VolumeExpansionStatus{Size: resource.MustParse("3Gi"), Phase: v1alpha1.VolumeExpansionResizingClaims, Since: metav1.Now()}
		return k8s.Status().Update(ctx, ec)
	}); err != nil {
		t.Fatal(err)
	}
	var c corev1.PersistentVolumeClaim
	if err := get(t, ns, "data-grow-1", &c); err != nil {
		t.Fatal(err)
	}
	c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("3Gi")
	if err := k8s.Update(ctx, &c); err != nil {
		t.Fatal(err)
	}
	updateCluster(t, ns, "grow", func(ec *v1alpha1.EtcdCluster) { delete(ec.Annotations, v1alpha1.AnnotationPaused) })
	old = collectOrphans(t, ns, "grow")
	if got := claimSizes(t, ns, "grow"); got["data-grow-0"] != "3Gi" || got["data-grow-1"] != "3Gi" || got["data-grow-2"] != "3Gi" {
		t.Fatalf("claims %v before the StatefulSet was deleted; want each at 3Gi", got)
	}
	waitExpanded(t, ns, "grow", old, "3Gi")
	if got := podUIDs(t, ns, "grow"); !equalUIDs(got, pods) {
		t.Errorf("pods %v after the resumed expansion; want the same pods %v", got, pods)
	}

	// Never smaller.
	ec := getCluster(t, ns, "grow")
	q := resource.MustParse("2Gi")
	ec.Spec.Storage.Size = &q
	if err := k8s.Update(ctx, ec); err == nil || !strings.Contains(err.Error(), "spec.storage.size cannot shrink") {
		t.Errorf("a smaller size: %v; want refused", err)
	}
}

func equalUIDs(a, b map[string]types.UID) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
