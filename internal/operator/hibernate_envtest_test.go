package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestHibernateAndResume: kubectl scale --replicas=0 on a formed cluster takes a full
// snapshot, scales the StatefulSet to 0 and keeps every member's volume claim, EtcdMember,
// Lease and ConfigMap entry; the cluster stays so past every grace without a recovery.
// Scaling back resumes at the size it had, with the same cluster ID. The annotation does the
// same, and resuming at another size starts at the size the cluster had, then scales.
func TestHibernateAndResume(t *testing.T) {
	t.Parallel() // its own namespace
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "h", 3)
	ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://backups/h"}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	sidecars.set(ns, snapshotter.FullResult{Key: "v1/full/00000000000000000042-1.snap.zst", Revision: 42})
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ns, "h", &appsv1.StatefulSet{}) })
	clusterID := waitReady(t, ns, "h", 3).Status.ClusterID
	if clusterID == "" {
		t.Fatal("no cluster ID once Ready")
	}
	// The StatefulSet controller does not run here: the tests make the members' claims.
	for i := 0; i < 3; i++ {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("data-h-%d", i), Labels: selectorLabels(ec)},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if err := k8s.Create(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		pvc.Status.Phase = corev1.ClaimBound
		if err := k8s.Status().Update(ctx, pvc); err != nil {
			t.Fatal(err)
		}
	}

	if out, err := kubectl(t, "-n", ns, "scale", "ec/h", "--replicas=0"); err != nil {
		t.Fatalf("kubectl scale: %v\n%s", err, out)
	}
	hibernated := waitHibernated(t, ns, "h", 3)
	if h := hibernated.Status.Hibernation; h.SnapshotKey != "v1/full/00000000000000000042-1.snap.zst" || h.SnapshotRevision != 42 {
		t.Errorf("status.hibernation %+v: want the full snapshot taken before the members stopped", h)
	}
	if err := findEventWith(ns, "HibernationSnapshot", "EtcdCluster", "revision 42"); err != nil {
		t.Error(err)
	}
	kept(t, ns, "h", 3, clusterID)

	// Long past the NotReady grace: no quorum is lost, nothing is recovered or deleted.
	since := time.Now()
	testutil.Eventually(t, 30*time.Second, "hibernated past three NotReady graces", func() error {
		members(t, ns, "h", all)
		ec := getCluster(t, ns, "h")
		if d := directive(t, ec); d != nil {
			t.Fatalf("a hibernated cluster got recovery directive %+v", d)
		}
		if c := condition(ec, v1alpha1.ConditionQuorumLost); c != metav1.ConditionFalse {
			t.Fatalf("QuorumLost %s while hibernated", c)
		}
		if elapsed := time.Since(since); elapsed < 3*reconciler.graces().NotReady {
			return fmt.Errorf("only %s", elapsed.Round(time.Second))
		}
		return nil
	})
	kept(t, ns, "h", 3, clusterID)

	if out, err := kubectl(t, "-n", ns, "scale", "ec/h", "--replicas=3"); err != nil {
		t.Fatalf("kubectl scale: %v\n%s", err, out)
	}
	resumed := waitReady(t, ns, "h", 3)
	if resumed.Status.ClusterID != clusterID || resumed.Status.Hibernation != nil || condition(resumed, v1alpha1.ConditionHibernated) != metav1.ConditionFalse {
		t.Errorf("resumed: cluster ID %q (was %q), hibernation %+v, Hibernated %s", resumed.Status.ClusterID, clusterID, resumed.Status.Hibernation,
			condition(resumed, v1alpha1.ConditionHibernated))
	}

	// The annotation, for users who keep spec.replicas; then resuming at 5 resumes at 3 first.
	updateCluster(t, ns, "h", func(ec *v1alpha1.EtcdCluster) {
		ec.Annotations = map[string]string{v1alpha1.AnnotationHibernate: "true"}
	})
	waitHibernated(t, ns, "h", 3)
	kept(t, ns, "h", 3, clusterID)
	var sizes []int32
	updateCluster(t, ns, "h", func(ec *v1alpha1.EtcdCluster) {
		delete(ec.Annotations, v1alpha1.AnnotationHibernate)
		ec.Spec.Replicas = 5
	})
	testutil.Eventually(t, 60*time.Second, "resumed, then scaled to 5", func() error {
		n := members(t, ns, "h", all)
		if len(sizes) == 0 || sizes[len(sizes)-1] != n {
			sizes = append(sizes, n)
		}
		if ec := getCluster(t, ns, "h"); n != 5 || ec.Status.ReadyReplicas != 5 {
			return fmt.Errorf("StatefulSet %d, %d Ready", n, ec.Status.ReadyReplicas)
		}
		return nil
	})
	// Each size is seen: a member is Ready only once this test saw its StatefulSet size.
	if grown := slices.DeleteFunc(sizes, func(n int32) bool { return n == 0 }); !slices.Equal(grown, []int32{3, 4, 5}) {
		t.Errorf("StatefulSet sizes %v: want 3 (the size it hibernated at) first, then one member at a time", grown)
	}
	if ec := getCluster(t, ns, "h"); ec.Status.ClusterID != clusterID {
		t.Errorf("cluster ID %q after resume-then-scale, was %q", ec.Status.ClusterID, clusterID)
	}
}

// waitHibernated plays the StatefulSet controller until the cluster reports itself
// hibernated at n members: the StatefulSet at 0, Hibernated True, Ready False for that reason.
func waitHibernated(t *testing.T, ns, name string, n int32) *v1alpha1.EtcdCluster {
	t.Helper()
	var ec *v1alpha1.EtcdCluster
	testutil.Eventually(t, 30*time.Second, name+" hibernated", func() error {
		size := members(t, ns, name, all)
		ec = getCluster(t, ns, name)
		h := ec.Status.Hibernation
		ready := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionReady)
		switch {
		case size != 0:
			return fmt.Errorf("StatefulSet at %d", size)
		case h == nil || h.Phase != v1alpha1.HibernationStopped || h.Replicas != n:
			return fmt.Errorf("status.hibernation %+v", h)
		case condition(ec, v1alpha1.ConditionHibernated) != metav1.ConditionTrue || ready == nil || ready.Reason != ReasonHibernated:
			return fmt.Errorf("conditions %v", ec.Status.Conditions)
		}
		return nil
	})
	return ec
}

// kept checks what a hibernated cluster keeps: every member's claim, EtcdMember and Lease,
// every member in the ConfigMap, the members in the status, and the cluster ID.
func kept(t *testing.T, ns, name string, n int, clusterID string) {
	t.Helper()
	ctx := context.Background()
	var errs []error
	for i := 0; i < n; i++ {
		member := fmt.Sprintf("%s-%d", name, i)
		for _, obj := range []client.Object{&corev1.PersistentVolumeClaim{}, &v1alpha1.EtcdMember{}, &coordinationv1.Lease{}} {
			key := member
			if _, ok := obj.(*corev1.PersistentVolumeClaim); ok {
				key = "data-" + member
			}
			if err := get(t, ns, key, obj); err != nil {
				errs = append(errs, fmt.Errorf("%T %s: %w", obj, key, err))
			}
		}
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := k8s.List(ctx, &pvcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pvcs.Items {
		if !p.DeletionTimestamp.IsZero() {
			errs = append(errs, fmt.Errorf("claim %s is being deleted", p.Name))
		}
	}
	var cm corev1.ConfigMap
	if err := get(t, ns, name+"-config", &cm); err != nil {
		t.Fatal(err)
	}
	if cc, err := v1alpha1.ParseClusterConfig(cm.Data); err != nil || len(cc.Members) != n {
		errs = append(errs, fmt.Errorf("the ConfigMap lists %d members (%v), want %d", len(cc.Members), err, n))
	}
	ec := getCluster(t, ns, name)
	if ec.Status.ClusterID != clusterID || len(ec.Status.Members) != n || ec.Status.ClusterSize != int32(n) {
		errs = append(errs, fmt.Errorf("status: cluster ID %q (want %q), %d members, cluster size %d", ec.Status.ClusterID, clusterID, len(ec.Status.Members), ec.Status.ClusterSize))
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestHibernateSnapshotFails: while the full snapshot before the members stop fails, they run
// on, and the status and an Event say why and what to do; spec.updateStrategy.skipBackup
// hibernates without it.
func TestHibernateSnapshotFails(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t) // the fake sidecars hold no snapshot for it: every snapshot fails
	ec := newCluster(ns, "hf", 3)
	ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://backups/hf"}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ns, "hf", &appsv1.StatefulSet{}) })
	waitReady(t, ns, "hf", 3)

	updateCluster(t, ns, "hf", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Replicas = 0 })
	testutil.Eventually(t, 30*time.Second, "the failure reported", func() error {
		size := members(t, ns, "hf", all)
		ec := getCluster(t, ns, "hf")
		if size != 3 {
			t.Fatalf("StatefulSet at %d although the snapshot before the members stop failed", size)
		}
		c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionHibernated)
		if h := ec.Status.Hibernation; h == nil || h.Phase != v1alpha1.HibernationStopping || c == nil || c.Status != metav1.ConditionFalse ||
			!strings.Contains(c.Message, "failed") || !strings.Contains(c.Message, "skipBackup") {
			return fmt.Errorf("status.hibernation %+v, Hibernated %+v", ec.Status.Hibernation, c)
		}
		if len(ec.Status.LastErrors) == 0 || ec.Status.LastErrors[0].Code != "ERR_HIBERNATION_SNAPSHOT" {
			return fmt.Errorf("lastErrors %v", ec.Status.LastErrors)
		}
		return findEventWith(ns, "HibernationSnapshotFailed", "EtcdCluster", "no store")
	})

	updateCluster(t, ns, "hf", func(ec *v1alpha1.EtcdCluster) { ec.Spec.UpdateStrategy.SkipBackup = true })
	if h := waitHibernated(t, ns, "hf", 3).Status.Hibernation; h.SnapshotKey != "" || !strings.Contains(h.Message, "no full snapshot") {
		t.Errorf("status.hibernation %+v: want no snapshot, and said so", h)
	}
}
