package operator

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// backupWait is how long an EtcdBackup waits for its cluster to exist and to have a serving
// member before it fails.
const backupWait = 10 * time.Minute

// BackupReconciler carries out EtcdBackups: one full snapshot each, taken by the backup
// leader's sidecar (any member's sidecar forwards the request to it).
type BackupReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Sidecars *Sidecars
	Now      func() time.Time
}

// SetupWithManager registers the reconciler.
func (r *BackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.EtcdBackup{}).
		Named("etcdbackup").
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(r)
}

// Reconcile takes the snapshot of one EtcdBackup that has not completed or failed yet. A
// backup found Running (the operator restarted during it) is taken again: one more full
// snapshot in the store does no harm.
func (r *BackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	eb := &v1alpha1.EtcdBackup{}
	if err := r.Client.Get(ctx, req.NamespacedName, eb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if eb.Status.Phase == v1alpha1.BackupCompleted || eb.Status.Phase == v1alpha1.BackupFailed {
		return ctrl.Result{}, nil
	}
	now := r.now()
	ec, wait, fatal := r.cluster(ctx, eb)
	var step snapshotStep
	if ec != nil {
		step = r.Sidecars.fullSnapshot(ctx, ec, fmt.Sprintf("EtcdBackup %s/%s", eb.Namespace, eb.Name))
		wait = step.NotYet
	}
	switch {
	case fatal != "":
		return ctrl.Result{}, r.finish(ctx, eb, nil, fatal)
	case step.Err != nil:
		return ctrl.Result{}, r.finish(ctx, eb, nil, step.Err.Error())
	case step.Taking != "":
		return ctrl.Result{RequeueAfter: step.Retry}, r.setPhase(ctx, eb, v1alpha1.BackupRunning, "a full snapshot is "+step.Taking)
	case wait != "":
		if now.Sub(eb.CreationTimestamp.Time) > backupWait {
			return ctrl.Result{}, r.finish(ctx, eb, nil, wait+fmt.Sprintf("; gave up after %s", backupWait))
		}
		return ctrl.Result{RequeueAfter: max(step.Retry, 10*time.Second)}, r.setPhase(ctx, eb, v1alpha1.BackupPending, wait)
	}
	return ctrl.Result{}, r.finish(ctx, eb, &step.Result, "")
}

// retryLater says whether a full snapshot refused by a sidecar is worth asking again, and
// when: snapshots are spaced (429), or the token is not yet everywhere after a rotation
// (401/403).
func retryLater(err error) (time.Duration, bool) {
	switch sidecarapi.StatusCode(err) {
	case http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusForbidden:
		if d, ok := sidecarapi.RetryAfter(err); ok {
			return d, true
		}
		return 10 * time.Second, true
	}
	return 0, false
}

func (r *BackupReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// cluster is the EtcdCluster of the backup; wait says what is missing for now, fatal why the
// backup can never be taken.
func (r *BackupReconciler) cluster(ctx context.Context, eb *v1alpha1.EtcdBackup) (ec *v1alpha1.EtcdCluster, wait, fatal string) {
	ec = &v1alpha1.EtcdCluster{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: eb.Namespace, Name: eb.Spec.Cluster}, ec)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("EtcdCluster %s/%s does not exist", eb.Namespace, eb.Spec.Cluster), ""
	case err != nil:
		return nil, err.Error(), ""
	case ec.Spec.Backup == nil:
		return nil, "", fmt.Sprintf("EtcdCluster %s has no spec.backup: set a store there, then create another EtcdBackup", ec.Name)
	}
	return ec, "", ""
}

func (r *BackupReconciler) setPhase(ctx context.Context, eb *v1alpha1.EtcdBackup, phase, msg string) error {
	if eb.Status.Phase == phase && eb.Status.Message == msg {
		return nil
	}
	eb.Status.Phase, eb.Status.Message = phase, msg
	if phase == v1alpha1.BackupRunning {
		t := metav1.NewTime(r.now())
		eb.Status.StartTime = &t
	}
	return r.Client.Status().Update(ctx, eb)
}

// finish records the outcome: Completed with what was stored, or Failed with why.
func (r *BackupReconciler) finish(ctx context.Context, eb *v1alpha1.EtcdBackup, res *snapshotter.FullResult, failure string) error {
	t := metav1.NewTime(r.now())
	eb.Status.EndTime = &t
	if res == nil {
		eb.Status.Phase, eb.Status.Message = v1alpha1.BackupFailed, failure
		r.Recorder.Eventf(eb, nil, corev1.EventTypeWarning, "BackupFailed", "Backup", "%s", failure)
	} else {
		eb.Status.Phase, eb.Status.Message = v1alpha1.BackupCompleted, ""
		eb.Status.Revision, eb.Status.Size, eb.Status.Key = res.Revision, res.Size, res.Key
		r.Recorder.Eventf(eb, nil, corev1.EventTypeNormal, "BackupCompleted", "Backup", "full snapshot %s at revision %d (%d bytes)", res.Key, res.Revision, res.Size)
	}
	return r.Client.Status().Update(ctx, eb)
}
