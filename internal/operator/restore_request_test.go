package operator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/heal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestRestoreRequestOneWriterOfRecovery: the EtcdCluster's status.recovery has one writer,
// the ClusterReconciler. The RestoreReconciler, ready to start, only records its request in
// the EtcdRestore's status (it never writes the cluster's status); the ClusterReconciler
// issues the directive from it, with the RestoreStarted Event once the directive is stored;
// the RestoreReconciler then records the directive's epoch.
func TestRestoreRequestOneWriterOfRecovery(t *testing.T) {
	ctx := context.Background()
	raw, err := encodeRecovery(heal.Status{LastEpoch: 2})
	if err != nil {
		t.Fatal(err)
	}
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "ec-uid", Finalizers: []string{Finalizer}},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: 3, Backup: &v1alpha1.BackupSpec{Store: "s3://b/c"}},
		Status: v1alpha1.EtcdClusterStatus{ClusterID: "c1", Recovery: &runtime.RawExtension{Raw: raw},
			Voters: []v1alpha1.Voter{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "66", Name: "c-2"}}}}
	rev := int64(400)
	snapTime := metav1.NewTime(time.Now().Add(-time.Minute))
	er := &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "back", UID: "er-uid", CreationTimestamp: snapTime},
		Spec: v1alpha1.EtcdRestoreSpec{Cluster: "c", Revision: &rev},
		Status: v1alpha1.EtcdRestoreStatus{Phase: v1alpha1.RestoreSnapshotting,
			Snapshot: &v1alpha1.RestoreSnapshot{Key: "v1/full/500", Revision: 500, Timeline: 2, Time: &snapTime},
			Target:   &v1alpha1.RestoreTargetStatus{Revision: 400, Timeline: 2, Checked: "against the store"}}}
	base := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithObjects(ec, er).WithStatusSubresource(ec, er).Build()
	var clusterStatusWrites []string
	countClusterStatus := func(obj client.Object, sub, how string) {
		if _, ok := obj.(*v1alpha1.EtcdCluster); ok {
			clusterStatusWrites = append(clusterStatusWrites, how+" "+sub)
		}
	}
	restoreClient := interceptor.NewClient(base, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			countClusterStatus(obj, sub, "update")
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			countClusterStatus(obj, sub, "patch")
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	restores := &RestoreReconciler{Client: restoreClient, APIReader: restoreClient, Recorder: events.NewFakeRecorder(100)}
	// The cluster reconciler's first status write loses a race: it records nothing.
	lost := false
	clusterClient := interceptor.NewClient(base, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if _, ok := obj.(*v1alpha1.EtcdCluster); ok && !lost {
				lost = true
				return apierrors.NewConflict(v1alpha1.GroupVersion.WithResource("etcdclusters").GroupResource(), obj.GetName(), errors.New("changed meanwhile"))
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	recorder := events.NewFakeRecorder(100)
	clusters := &ClusterReconciler{Client: clusterClient, APIReader: clusterClient, Recorder: recorder, Image: "steward:test"}
	restoreReq := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(er)}
	recovery := func() heal.Status {
		t.Helper()
		var got v1alpha1.EtcdCluster
		if err := base.Get(ctx, client.ObjectKeyFromObject(ec), &got); err != nil {
			t.Fatal(err)
		}
		st, err := decodeRecovery(got.Status.Recovery.Raw)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	getRestore := func() *v1alpha1.EtcdRestore {
		t.Helper()
		var got v1alpha1.EtcdRestore
		if err := base.Get(ctx, restoreReq.NamespacedName, &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}

	if _, err := restores.Reconcile(ctx, restoreReq); err != nil {
		t.Fatal(err)
	}
	if len(clusterStatusWrites) != 0 {
		t.Fatalf("the RestoreReconciler wrote the EtcdCluster's status: %v", clusterStatusWrites)
	}
	got := getRestore()
	if r := got.Status.Request; r == nil || r.AfterEpoch != 2 || got.Status.Epoch != 0 || got.Status.Phase != v1alpha1.RestoreFencing ||
		!strings.Contains(strings.Join(got.Finalizers, ","), v1alpha1.RestoreFinalizer) {
		t.Fatalf("EtcdRestore %+v, finalizers %v: want the request after epoch 2, the finalizer first", got.Status, got.Finalizers)
	}
	if st := recovery(); st.Directive != nil || st.LastEpoch != 2 {
		t.Fatalf("status.recovery %+v before the cluster's reconciler ran", st)
	}

	if _, err := clusters.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ec)}); err != nil {
		t.Fatal(err)
	}
	if st := recovery(); st.Directive != nil || drained(recorder, "RestoreStarted") {
		t.Fatalf("status.recovery %+v: a directive whose write lost its race is neither stored nor announced", st)
	}
	if _, err := clusters.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ec)}); err != nil {
		t.Fatal(err)
	}
	d := recovery().Directive
	if d == nil || d.Epoch != 3 || d.Phase != cluster.PhaseFencing || d.Restore == nil || *d.Restore != (cluster.RestoreTarget{Revision: 400, Timeline: 2}) {
		t.Fatalf("directive %+v: want epoch 3 restoring revision 400 of timeline 2 from the cluster's store", d)
	}
	if !drained(recorder, "RestoreStarted EtcdRestore back: directive 3 restores revision 400") {
		t.Error("no RestoreStarted Event naming the EtcdRestore and the directive")
	}

	// The request answered: the epoch is recorded, the directive followed; a second pass of
	// the cluster's reconciler issues nothing more.
	for range 2 {
		if _, err := restores.Reconcile(ctx, restoreReq); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := clusters.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ec)}); err != nil {
		t.Fatal(err)
	}
	got = getRestore()
	c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.RestoreConditionDirectiveIssued)
	if got.Status.Epoch != 3 || c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("EtcdRestore epoch %d, DirectiveIssued %+v: want directive 3 recorded", got.Status.Epoch, c)
	}
	if st := recovery(); st.LastEpoch != 3 || st.Directive == nil || st.Directive.Epoch != 3 {
		t.Errorf("status.recovery %+v: one directive, 3, is issued", st)
	}
	if len(clusterStatusWrites) != 0 {
		t.Fatalf("the RestoreReconciler wrote the EtcdCluster's status: %v", clusterStatusWrites)
	}
}

// drained reads the Events recorded so far and says whether one contains want.
func drained(r *events.FakeRecorder, want string) bool {
	found := false
	for {
		select {
		case e := <-r.Events:
			found = found || strings.Contains(e, want)
		default:
			return found
		}
	}
}
