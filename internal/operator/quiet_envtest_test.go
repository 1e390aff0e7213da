package operator

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// countingReader counts the reads that reach the API server, by kind.
type countingReader struct {
	client.Reader
	n     atomic.Int64
	kinds atomic.Value // the last kind read, for the failure message
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.n.Add(1)
	c.kinds.Store(fmt.Sprintf("%T %s", obj, key))
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.n.Add(1)
	c.kinds.Store(fmt.Sprintf("%T", list))
	return c.Reader.List(ctx, list, opts...)
}

// restingCluster makes a cluster with the defaults (TLS and authentication, so the operator
// keeps its token, CA, certificate, password and token-key Secrets) and backups whose store
// credentials are a Secret of the user's, and drives it until it is at rest: every member
// Ready, backups current, the generation carried out, and the status unchanged for a while.
func restingCluster(t *testing.T, ns, name string) *v1alpha1.EtcdCluster {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-creds"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}}); err != nil {
		t.Fatal(err)
	}
	ec := newDefaultCluster(ns, name, 3)
	ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://backups/" + name, CredentialsSecret: &corev1.LocalObjectReference{Name: name + "-creds"},
		DeltaPeriod: &metav1.Duration{Duration: time.Minute}}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ns, name, &appsv1.StatefulSet{}) })
	waitReady(t, ns, name, 3)
	// A revision reported wakes nothing: the annotation brings the pass that records it.
	writeReport(t, ns, cluster.Report{Name: name + "-1", At: time.Now(), Serving: true, Formed: true, ClusterID: "c1", MemberID: "a1", Revision: 100}, nil)
	poke(t, ns, name, "revision")
	var rv string
	var since time.Time
	testutil.Eventually(t, 60*time.Second, "the cluster at rest", func() error {
		members(t, ns, name, all)
		renew(t, ns, v1alpha1.DeltaSnapshotLeaseName(name), "99")
		ec = getCluster(t, ns, name)
		if age := time.Since(ec.CreationTimestamp.Time); age < 3*reconciler.Graces.NotReady {
			return fmt.Errorf("the cluster is %s old: a young pod's grace still ends", age)
		}
		if ec.Status.Revision == 0 {
			return fmt.Errorf("no revision in the status yet")
		}
		if tenantSecretsDue(ec) {
			return fmt.Errorf("not at rest: generation %d observed %d, errors %v, conditions %v", ec.Generation, ec.Status.ObservedGeneration, ec.Status.LastErrors, ec.Status.Conditions)
		}
		if ec.ResourceVersion != rv {
			rv, since = ec.ResourceVersion, time.Now()
			return fmt.Errorf("resourceVersion moved to %s", rv)
		}
		if time.Since(since) < 3*time.Second {
			return fmt.Errorf("unchanged for %s only", time.Since(since).Round(time.Millisecond))
		}
		return nil
	})
	return ec
}

// TestPassAtRestWritesAndReadsNothing: a pass over a cluster at rest whose figures moved
// (a newer revision, a newer backup) writes nothing and reads nothing from the API server:
// the operator's own Secrets come from its cache, the user's credentials Secret is not read,
// and the figures wait (holdFigures) while the metrics carry them.
func TestPassAtRestWritesAndReadsNothing(t *testing.T) {
	t.Parallel() // its own namespace
	needEnv(t)
	ns := namespace(t)
	ec := restingCluster(t, ns, "calm")
	reads := &countingReader{Reader: reconciler.APIReader}
	r := &ClusterReconciler{Client: reconciler.Client, APIReader: reads, Recorder: reconciler.Recorder, Image: reconciler.Image,
		AllowedImages: reconciler.AllowedImages, OperatorNamespace: reconciler.OperatorNamespace, Graces: reconciler.Graces,
		Sidecars: &Sidecars{Client: reconciler.Client, APIReader: reads, HTTP: sidecars.Client()}, Health: reconciler.Health}
	key := types.NamespacedName{Namespace: ns, Name: "calm"}
	r.figuresWritten.Store(key, time.Now()) // as if this reconciler had written the status just now
	// The figures move: a member reports a newer revision, the backup leader a newer delta.
	writeReport(t, ns, cluster.Report{Name: "calm-1", At: time.Now(), Serving: true, Formed: true, ClusterID: "c1", MemberID: "a1", Revision: 500}, nil)
	renew(t, ns, v1alpha1.DeltaSnapshotLeaseName("calm"), "480")
	testutil.Eventually(t, 10*time.Second, "the cache sees the newer delta", func() error {
		var l coordinationv1.Lease
		if err := reconciler.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: v1alpha1.DeltaSnapshotLeaseName("calm")}, &l); err != nil {
			return err
		}
		if h := l.Spec.HolderIdentity; h == nil || *h != "480" {
			return fmt.Errorf("holder %v", h)
		}
		return nil
	})
	members(t, ns, "calm", all)
	reads.n.Store(0)
	for range 3 {
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
	}
	if n := reads.n.Load(); n != 0 {
		t.Errorf("passes at rest read %d times from the API server (the last: %v)", n, reads.kinds.Load())
	}
	if after := getCluster(t, ns, "calm"); after.ResourceVersion != ec.ResourceVersion {
		t.Errorf("passes at rest wrote the status: resourceVersion %s, was %s\nnow %+v\nwas %+v", after.ResourceVersion, ec.ResourceVersion, after.Status, ec.Status)
	}
	if got := clusterSeries(t, ns, "calm")["steward_cluster_revision"]; got != 500 {
		t.Errorf("steward_cluster_revision %v, want the pass's own figure 500", got)
	}
}

// TestOwnSecretDeletedByHandMadeAnew: the operator's sidecar API token Secret, deleted by hand
// (its finalizer removed) while the cluster is at rest, is made anew at once: the watch on
// the operator's own Secrets wakes the cluster; no periodic pass is waited for.
func TestOwnSecretDeletedByHandMadeAnew(t *testing.T) {
	t.Parallel() // its own namespace
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	restingCluster(t, ns, "kept")
	name := v1alpha1.SidecarTokenSecretName("kept")
	var s corev1.Secret
	if err := get(t, ns, name, &s); err != nil {
		t.Fatal(err)
	}
	// As by hand: kubectl delete leaves it Terminating (the operator's finalizer), then the
	// finalizer is removed.
	if err := k8s.Delete(ctx, &s); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the finalizer removed", func() error {
		if err := get(t, ns, name, &s); err != nil {
			return err
		}
		s.Finalizers = nil
		return k8s.Update(ctx, &s)
	})
	// Well within maxRequeue, and with the Leases renewed: only the Secret's deletion wakes
	// the cluster.
	testutil.Eventually(t, 15*time.Second, "the token Secret made anew", func() error {
		members(t, ns, "kept", all)
		var again corev1.Secret
		switch err := get(t, ns, name, &again); {
		case apierrors.IsNotFound(err):
			return err
		case err != nil:
			t.Fatal(err)
		case again.UID == s.UID:
			return fmt.Errorf("still the deleted one")
		case !metav1.IsControlledBy(&again, getCluster(t, ns, "kept")):
			return fmt.Errorf("not owned by the cluster")
		}
		return nil
	})
}
