package operator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/heal"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func fakeScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

// TestSyncErrorKeepsTheDeadline: a reconciliation that fails in part (here a missing
// credentials Secret) records the error and is tried again within syncRetry: it never hands
// the cluster to the controller's exponential backoff, which would delay its deadlines.
func TestSyncErrorKeepsTheDeadline(t *testing.T) {
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "ec-uid"},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: 3, Backup: &v1alpha1.BackupSpec{Store: "s3://b/c", CredentialsSecret: &corev1.LocalObjectReference{Name: "missing"}}}}
	c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithObjects(ec).WithStatusSubresource(ec).Build()
	r := &ClusterReconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100), Image: "steward:test"}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ec)}
	for range 2 { // the first pass adds the finalizer
		res, err := r.Reconcile(context.Background(), req)
		if err != nil {
			t.Fatalf("Reconcile returned %v: the controller's backoff would replace the deadline", err)
		}
		if res.RequeueAfter <= 0 || res.RequeueAfter > syncRetry {
			t.Fatalf("requeue after %s, want within %s", res.RequeueAfter, syncRetry)
		}
	}
	var got v1alpha1.EtcdCluster
	if err := c.Get(context.Background(), req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.LastErrors) == 0 || got.Status.LastErrors[0].Code != "ERR_BACKUP_SECRET" {
		t.Errorf("lastErrors %+v, want ERR_BACKUP_SECRET recorded", got.Status.LastErrors)
	}
}

// TestFenceOnlyOncePersisted: the pods a directive fences are deleted only once the directive
// is stored (read fresh), and then only those created before it, of the cluster's own
// StatefulSet, still carrying the UID that was read: a replacement is never deleted, and a pod
// of the same name that is not the StatefulSet's is named in the error and left.
func TestFenceOnlyOncePersisted(t *testing.T) {
	issued := time.Now().Add(-time.Minute).Truncate(time.Second)
	ec := &v1alpha1.EtcdCluster{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "EtcdCluster"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "ec-uid"}}
	sts := &appsv1.StatefulSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: statefulSetName(ec), UID: "sts-uid",
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ec, ec.GroupVersionKind())}}}
	pod := func(name string, created time.Time, owned bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid"),
			CreationTimestamp: metav1.NewTime(created), Labels: selectorLabels(ec)}}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(sts, sts.GroupVersionKind())}
		}
		return p
	}
	old := pod("c-0", issued.Add(-time.Hour), true)
	replacement := pod("c-1", issued.Add(time.Second), true)
	foreign := pod("c-2", issued.Add(-time.Hour), false)
	c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithObjects(ec, sts, old, replacement, foreign).WithStatusSubresource(ec).Build()
	r := &ClusterReconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10)}

	dir := &cluster.Directive{Epoch: 3, Phase: cluster.PhaseFencing, IssuedAt: issued, PhaseSince: issued}
	rec := &recoveryOutcome{Status: heal.Status{Directive: dir, LastEpoch: 3}, FencePods: []string{"c-0", "c-1", "c-2"}}
	persisted, err := r.fence(context.Background(), ec, rec, "c-0: connection refused")
	if err != nil || persisted {
		t.Fatalf("fence before the directive is stored: persisted %t, %v", persisted, err)
	}
	for _, p := range []*corev1.Pod{old, replacement, foreign} {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), &corev1.Pod{}); err != nil {
			t.Fatalf("pod %s deleted before the directive was stored: %v", p.Name, err)
		}
	}

	raw, err := encodeRecovery(rec.Status)
	if err != nil {
		t.Fatal(err)
	}
	ec.Status.Recovery = &runtime.RawExtension{Raw: raw}
	if err := c.Status().Update(context.Background(), ec); err != nil {
		t.Fatal(err)
	}
	persisted, err = r.fence(context.Background(), ec, rec, "c-0: connection refused")
	if !persisted || err == nil || !strings.Contains(err.Error(), "pod c-2 is not of the cluster's own StatefulSet") {
		t.Fatalf("fence once stored: persisted %t, %v; want c-2, not the StatefulSet's, named and left", persisted, err)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(old), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("c-0, older than the directive: %v, want deleted", err)
	}
	for _, p := range []*corev1.Pod{replacement, foreign} {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), &corev1.Pod{}); err != nil {
			t.Errorf("pod %s deleted: %v", p.Name, err)
		}
	}
}
