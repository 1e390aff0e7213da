package operator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestVolumeLostWithItsNode: a member NotReady past the grace whose volume is pinned to one
// node (a local volume) keeps its claim while that node may come back; once the node is marked
// out of service, and the other members answer a linearizable read, the claim is deleted (its
// UID as precondition) with an Event, so that the member comes back on a new volume.
func TestVolumeLostWithItsNode(t *testing.T) {
	t.Parallel() // its own namespace and its own node
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "vl", 3)
	createFormed(t, ec)

	// vl-2's claim, bound to a local volume on its own node.
	node, claims := localVolume(t, ec, 2, nil)
	kept := func(names ...string) error {
		for _, name := range names {
			var pvc corev1.PersistentVolumeClaim
			if err := get(t, ns, name, &pvc); err != nil || pvc.UID != claims[name].UID || !pvc.DeletionTimestamp.IsZero() {
				return fmt.Errorf("claim %s deleted (%v)", name, err)
			}
		}
		return nil
	}

	// vl-2 down, its node not known to be off: the claim stays (the pod may be restarted).
	up := func(i int) bool { return i < 2 }
	testutil.Throughout(t, 3*4*time.Second, "the claim kept while the node may come back", func() error {
		membersRenewing(t, ns, "vl", up, up)
		return kept("data-vl-2")
	})

	// The node marked out of service, while vl-0 and vl-1 answer: the claim goes.
	node.Spec.Taints = []corev1.Taint{{Key: TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	if err := k8s.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "vl-2's claim deleted once its node is out of service", func() error {
		membersRenewing(t, ns, "vl", up, up)
		if kept("data-vl-2") == nil {
			return fmt.Errorf("claim data-vl-2 still there")
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, "Event VolumeReplaced", func() error { return findEventMessage(ns, "VolumeReplaced", "marked out of service") })
}

// TestVolumeReplacementResumed: an operator that deleted a lost volume's claim stopped before
// it deleted the pod (the claim waits for the pod, held by its protection finalizer): the next
// pass deletes the pod, the second half of the replacement, with its Event.
func TestVolumeReplacementResumed(t *testing.T) {
	t.Parallel() // its own namespace and its own node
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "vr", 3)
	createFormed(t, ec)
	node, claims := localVolume(t, ec, 2, []string{"kubernetes.io/pvc-protection"})
	var pod corev1.Pod
	if err := get(t, ns, "vr-2", &pod); err != nil {
		t.Fatal(err)
	}
	// The first half, done by the operator before it stopped: the claim deleted, held.
	if err := k8s.Delete(ctx, claims["data-vr-2"]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := claims["data-vr-2"]
		if err := get(t, ns, c.Name, c); err == nil {
			c.Finalizers = nil
			_ = k8s.Update(context.Background(), c)
		}
	})
	node.Spec.Taints = []corev1.Taint{{Key: TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	if err := k8s.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	up := func(i int) bool { return i < 2 }
	testutil.Eventually(t, 30*time.Second, "vr-2's pod deleted, the replacement resumed", func() error {
		membersRenewing(t, ns, "vr", up, up)
		var now corev1.Pod
		if err := get(t, ns, "vr-2", &now); err == nil && now.UID == pod.UID && now.DeletionTimestamp.IsZero() {
			return fmt.Errorf("pod vr-2 (%s) still there", pod.UID)
		}
		return findEventMessage(ns, "VolumeReplaced", "marked out of service")
	})
}

// localVolume makes member i's data claim (with finalizers, owned by the cluster's StatefulSet),
// bound to a local volume pinned to
// a node of its own, which it also makes; it returns the node and the claims by name.
func localVolume(t *testing.T, ec *v1alpha1.EtcdCluster, i int, finalizers []string) (*corev1.Node, map[string]*corev1.PersistentVolumeClaim) {
	t.Helper()
	ctx, ns := context.Background(), ec.Namespace
	nodeName := "node-" + ns
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{corev1.LabelHostname: nodeName}}}
	if err := k8s.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), node) })
	// Owned by the cluster's StatefulSet, as the StatefulSet controller makes its claims.
	sts := &appsv1.StatefulSet{}
	if err := get(t, ns, ec.Name, sts); err != nil {
		t.Fatal(err)
	}
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("data-%s-%d", ec.Name, i), Labels: selectorLabels(ec),
		Finalizers: finalizers, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: fmt.Sprintf("pv-%s-%d", ns, i),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if err := k8s.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvc.Spec.VolumeName},
		Spec: corev1.PersistentVolumeSpec{Capacity: pvc.Spec.Resources.Requests, AccessModes: pvc.Spec.AccessModes,
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + pvc.Spec.VolumeName}},
			ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: pvc.Name, UID: pvc.UID}}}
	pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}}}}}}
	if err := k8s.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pv) })
	return node, map[string]*corev1.PersistentVolumeClaim{pvc.Name: pvc}
}
