package operator

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/livefigures"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/store"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// RestoreReconciler carries out EtcdRestores: a running cluster restored in place back to a
// point of its backups (docs/restore.md, "Restoring a running cluster in place"), the way a
// recovery from backup runs. In order, one step per pass, each recorded in the EtcdRestore's status
// before the next:
//  1. refuse (Failed, saying what to do) a cluster without spec.backup, one that recovers,
//     or a second restore of a cluster; wait (Pending, then Failed) for a cluster that does
//     not exist, is paused, has not formed or has no serving member;
//  2. take a full snapshot of the present through a sidecar, as an EtcdBackup does;
//  3. check the target against the store (a dry run of the restore the seed will run) and
//     against that snapshot, so that a target the store cannot give fails before anything
//     is stopped;
//  4. request the restore (status.request) of the ClusterReconciler, the one writer of the
//     cluster's status.recovery: it issues the directive (heal.StartRestore) and carries it
//     out (fence, restore into one member, rejoin the others);
//  5. record the directive's epoch once it is issued, and follow the directive until it
//     retires: Succeeded with the restored revision and the new cluster ID.
//
// Nothing is stopped before step 4; from then on a finalizer keeps the EtcdRestore until
// the restore is over. This reconciler never writes the EtcdCluster's status.
type RestoreReconciler struct {
	Client client.Client
	// APIReader reads the EtcdRestore uncached before its full snapshot is taken.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Sidecars take the full snapshot of the present, as they do for EtcdBackups, and
	// resolve the target in the cluster's backup store.
	Sidecars *Sidecars
	Now      func() time.Time
}

// SetupWithManager registers the reconciler: it watches EtcdRestores and the EtcdClusters
// they restore (whose status.recovery carries the directive).
func (r *RestoreReconciler) SetupWithManager(mgr ctrl.Manager) error {
	clusterToRestores := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var list v1alpha1.EtcdRestoreList
		if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, er := range list.Items {
			if er.Spec.Cluster == o.GetName() && (!terminal(er.Status.Phase) || !er.DeletionTimestamp.IsZero()) {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: er.Namespace, Name: er.Name}})
			}
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.EtcdRestore{}).
		Watches(&v1alpha1.EtcdCluster{}, clusterToRestores).
		Named("etcdrestore").
		// One at a time: which restore of a cluster goes first is decided from the others' status.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

// +kubebuilder:rbac:groups=etcd.steward.dev,resources=etcdrestores,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=etcd.steward.dev,resources=etcdrestores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=etcd.steward.dev,resources=etcdrestores/finalizers,verbs=update

// errStatusMoved: the EtcdRestore changed since it was read; nothing after the failed write
// was done, and the next pass decides from the newer object.
var errStatusMoved = errors.New("EtcdRestore status changed meanwhile")

// Reconcile moves one EtcdRestore one step (see RestoreReconciler).
func (r *RestoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := r.reconcile(ctx, req)
	if errors.Is(err, errStatusMoved) {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return res, err
}

func (r *RestoreReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	er := &v1alpha1.EtcdRestore{}
	if err := r.Client.Get(ctx, req.NamespacedName, er); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	o := restoreObservation{Now: r.now(), Restore: er}
	before := er.Status.DeepCopy()
	ec := &v1alpha1.EtcdCluster{}
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: er.Namespace, Name: er.Spec.Cluster}, ec); {
	case err == nil:
		o.Cluster = ec
		if ec.Status.Recovery != nil {
			st, err := decodeRecovery(ec.Status.Recovery.Raw)
			if err != nil {
				return ctrl.Result{}, fmt.Errorf("EtcdCluster %s: status.recovery cannot be read: %w", ec.Name, err)
			}
			o.Recovery = st
		}
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}
	if er.Status.Epoch == 0 && er.Status.Request == nil && !terminal(er.Status.Phase) {
		rival, err := r.rival(ctx, er)
		if err != nil {
			return ctrl.Result{}, err
		}
		o.Rival = rival
		if o.Cluster != nil && er.Status.Snapshot == nil {
			_, wait, fatal := r.Sidecars.sidecar(ctx, ec)
			o.SidecarWait = wait + fatal
		}
		if o.Cluster != nil && er.Status.Snapshot != nil {
			o.DeltaRevision = r.deltaRevision(ctx, ec)
		}
	}
	dec := decideRestore(o)
	switch dec.Step {
	case stepRelease:
		if controllerutil.RemoveFinalizer(er, v1alpha1.RestoreFinalizer) {
			return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, er))
		}
		return ctrl.Result{}, nil
	case stepSnapshot:
		return r.snapshot(ctx, er, ec, dec, before)
	case stepCheck:
		t, err := r.checkTarget(ctx, ec, er.Spec, *er.Status.Snapshot)
		if err != nil {
			dec.Phase, dec.Message = v1alpha1.RestoreFailed, err.Error()+" (nothing was stopped)"
			r.setCondition(er, v1alpha1.RestoreConditionTargetChecked, false, "TargetUnavailable", err.Error())
		} else {
			er.Status.Target = &t
			r.setCondition(er, v1alpha1.RestoreConditionTargetChecked, true, "Checked", t.Checked)
		}
		return ctrl.Result{}, r.writeStatus(ctx, er, ec, dec, before)
	case stepRequest:
		return r.request(ctx, er, ec, o, dec, before)
	case stepCancel:
		if want := strconv.FormatInt(dec.Cancel, 10); ec.Annotations[v1alpha1.AnnotationCancelRestore] != want {
			patch := client.MergeFrom(ec.DeepCopy())
			if ec.Annotations == nil {
				ec.Annotations = map[string]string{}
			}
			ec.Annotations[v1alpha1.AnnotationCancelRestore] = want
			if err := r.Client.Patch(ctx, ec, patch); err != nil {
				return ctrl.Result{}, err
			}
		}
		if err := r.writeStatus(ctx, er, ec, dec, before); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	if err := r.writeStatus(ctx, er, ec, dec, before); err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case terminal(er.Status.Phase):
		if controllerutil.RemoveFinalizer(er, v1alpha1.RestoreFinalizer) {
			return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, er))
		}
		return ctrl.Result{}, nil
	case er.Status.Phase == v1alpha1.RestorePending:
		return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
	case er.Status.Phase == v1alpha1.RestoreSnapshotting:
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil // the deltas catch up within a delta period
	}
	// The directive is issued and moves with the EtcdCluster's status, which wakes this
	// reconciler; the requeue is a backstop.
	return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
}

func (r *RestoreReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// deltaRevision is the newest revision the deltas hold, from the delta-snapshot Lease that
// the backup leader renews (-1 when it has not yet).
func (r *RestoreReconciler) deltaRevision(ctx context.Context, ec *v1alpha1.EtcdCluster) int64 {
	p, _, err := livefigures.ReadLease(ctx, r.Client, ec, deltaLeaseName(ec))
	if err != nil {
		return -1
	}
	return p.Revision
}

// rival is another EtcdRestore of the same cluster that goes first: one that has gone past
// Pending, or an older one still Pending (by creation, then name). One restore acts on a
// cluster at a time; a later one fails rather than wait, since its target was chosen in a
// history the first restore is about to replace.
func (r *RestoreReconciler) rival(ctx context.Context, er *v1alpha1.EtcdRestore) (string, error) {
	var list v1alpha1.EtcdRestoreList
	if err := r.Client.List(ctx, &list, client.InNamespace(er.Namespace)); err != nil {
		return "", err
	}
	for _, o := range list.Items {
		if o.UID == er.UID || o.Spec.Cluster != er.Spec.Cluster || terminal(o.Status.Phase) {
			continue
		}
		if o.Status.Epoch != 0 || (o.Status.Phase != "" && o.Status.Phase != v1alpha1.RestorePending) {
			return o.Name, nil
		}
		if goesBefore(&o, er) && o.DeletionTimestamp.IsZero() {
			return o.Name, nil
		}
	}
	return "", nil
}

// goesBefore: of two restores of a cluster, a goes first (the older, by creation, then name).
func goesBefore(a, b *v1alpha1.EtcdRestore) bool {
	return a.CreationTimestamp.Before(&b.CreationTimestamp) ||
		(a.CreationTimestamp.Equal(&b.CreationTimestamp) && a.Name < b.Name)
}

// restoreRequest is the request to start of the EtcdRestores of ec (nil: none), for the
// ClusterReconciler. Read from the cache: a request once recorded is never withdrawn (only
// answered, by a directive or by another epoch issued first), and the directive is issued
// only while status.recovery's lastEpoch is the request's, which the status write checks
// (its resourceVersion). One restore asks at a time (rival); were two ever to, the one that
// goes first is taken.
func restoreRequest(ec *v1alpha1.EtcdCluster, restores []v1alpha1.EtcdRestore) *RestoreRequest {
	var first *v1alpha1.EtcdRestore
	for i := range restores {
		er := &restores[i]
		if er.Spec.Cluster != ec.Name || er.Status.Request == nil || er.Status.Epoch != 0 || terminal(er.Status.Phase) {
			continue
		}
		if first == nil || goesBefore(er, first) {
			first = er
		}
	}
	if first == nil {
		return nil
	}
	req := &RestoreRequest{Name: first.Name, UID: first.UID, Target: restoreTarget(first.Status), AfterEpoch: first.Status.Request.AfterEpoch}
	if s := first.Status.Snapshot; s != nil {
		req.Snapshot = *s
	}
	return req
}

// snapshot takes the full snapshot of the present through a sidecar (step 2). Snapshotting
// is recorded first; an operator restarted during the snapshot takes another (one more full
// snapshot in the store does no harm).
func (r *RestoreReconciler) snapshot(ctx context.Context, er *v1alpha1.EtcdRestore, ec *v1alpha1.EtcdCluster, dec restoreDecision, before *v1alpha1.EtcdRestoreStatus) (ctrl.Result, error) {
	// The cache may be behind the status written last: the snapshot is taken only from the
	// newest EtcdRestore, so that it is not taken twice.
	fresh := &v1alpha1.EtcdRestore{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(er), fresh); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if fresh.ResourceVersion != er.ResourceVersion {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if err := r.writeStatus(ctx, er, ec, dec, before); err != nil {
		return ctrl.Result{}, err
	}
	before = er.Status.DeepCopy()
	step := r.Sidecars.fullSnapshot(ctx, ec, fmt.Sprintf("EtcdRestore %s/%s", er.Namespace, er.Name))
	res, err := step.Result, step.Err
	if step.NotYet != "" && r.now().Sub(er.CreationTimestamp.Time) > restoreWait {
		err = errors.New(step.NotYet)
	}
	if step.pending() && err == nil {
		dec.Message = fmt.Sprintf("the full snapshot of the present is not stored yet (%s); nothing was stopped", step.why())
		return ctrl.Result{RequeueAfter: step.Retry}, r.writeStatus(ctx, er, ec, dec, before)
	}
	if err != nil {
		dec.Phase, dec.Message = v1alpha1.RestoreFailed, fmt.Sprintf("the full snapshot of the present failed, so the restore did not start (nothing was stopped): %v", err)
		r.setCondition(er, v1alpha1.RestoreConditionSnapshotTaken, false, "SnapshotFailed", err.Error())
		return ctrl.Result{}, r.writeStatus(ctx, er, ec, dec, before)
	}
	t := metav1.NewTime(res.Created)
	er.Status.Snapshot = &v1alpha1.RestoreSnapshot{Key: res.Key, Revision: res.Revision, Timeline: int64(res.Timeline), Time: &t}
	r.setCondition(er, v1alpha1.RestoreConditionSnapshotTaken, true, "Stored",
		fmt.Sprintf("full snapshot %s at revision %d of timeline %d: the present stays restorable", res.Key, res.Revision, res.Timeline))
	dec.Message = "checking the target against the backup store"
	return ctrl.Result{}, r.writeStatus(ctx, er, ec, dec, before)
}

// checkTarget checks the target against the cluster's backup store as the seed's restore
// will read it: a serving member's sidecar resolves it (resolveTarget) in its own store, with
// its own credentials. When no sidecar can answer, only the check against the full snapshot
// taken first applies (pinTarget), the status says so, and the restoring member reads the
// store.
func (r *RestoreReconciler) checkTarget(ctx context.Context, ec *v1alpha1.EtcdCluster, spec v1alpha1.EtcdRestoreSpec, snap v1alpha1.RestoreSnapshot) (v1alpha1.RestoreTargetStatus, error) {
	t := v1alpha1.RestoreTargetStatus{Time: spec.Time}
	if spec.Revision != nil {
		t.Revision = *spec.Revision
	}
	switch {
	case spec.Timeline != nil:
		t.Timeline = *spec.Timeline
	case spec.Time == nil:
		t.Timeline = snap.Timeline // the present history
	}
	want := cluster.RestoreTarget{Revision: t.Revision, Timeline: uint32(t.Timeline)}
	if t.Time != nil {
		want.Time = t.Time.Time
	}
	res, why, err := r.Sidecars.resolveTarget(ctx, ec, want)
	return checkedTarget(t, ec.Spec.Backup.Store, res, why, err)
}

// checkedTarget is t as the store's resolution of it (res) says, or why it was not checked
// against the store, or the error that refuses it.
func checkedTarget(t v1alpha1.RestoreTargetStatus, storeURL string, res restore.Result, why string, err error) (v1alpha1.RestoreTargetStatus, error) {
	switch {
	case err != nil:
		return t, fmt.Errorf("the backup store %s cannot give the target: %w", store.Redact(storeURL), err)
	case why != "":
		t.Checked = fmt.Sprintf("not against the store (%s): only that the target is not beyond the full snapshot taken first; the restoring member reads the store", why)
		return t, nil
	}
	t.Timeline = int64(res.Timeline)
	t.Checked = fmt.Sprintf("against the store: timeline %d gives revision %d now (full snapshot %s and %d deltas)",
		res.Timeline, res.Target, res.Full.Key, len(res.Deltas))
	if res.TargetAfterEnd != "" {
		t.Checked += "; " + res.TargetAfterEnd
	}
	return t, nil
}

// request asks the ClusterReconciler to start the restore (step 4): the finalizer first (a
// restore that may fence must finish), then the target pinned (status.target) and the
// request (status.request) in one status write. The cluster's reconciler issues the
// directive from its own observation; the next passes record its epoch and follow it
// (decideRequested).
func (r *RestoreReconciler) request(ctx context.Context, er *v1alpha1.EtcdRestore, ec *v1alpha1.EtcdCluster, o restoreObservation, dec restoreDecision, before *v1alpha1.EtcdRestoreStatus) (ctrl.Result, error) {
	if controllerutil.AddFinalizer(er, v1alpha1.RestoreFinalizer) {
		if err := r.Client.Update(ctx, er); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{}, errStatusMoved
			}
			return ctrl.Result{}, err
		}
	}
	t := dec.Target
	checked := ""
	if er.Status.Target != nil {
		checked = er.Status.Target.Checked
	}
	er.Status.Target = &v1alpha1.RestoreTargetStatus{Revision: t.Revision, Timeline: int64(t.Timeline), Checked: checked}
	if !t.Time.IsZero() {
		tt := metav1.NewTime(t.Time)
		er.Status.Target.Time = &tt
	}
	er.Status.Request = &v1alpha1.RestoreRequest{AfterEpoch: o.Recovery.LastEpoch}
	r.setCondition(er, v1alpha1.RestoreConditionDirectiveIssued, false, "Requested",
		fmt.Sprintf("requested of EtcdCluster %s's reconciler, which issues the directive after epoch %d", ec.Name, o.Recovery.LastEpoch))
	return ctrl.Result{RequeueAfter: 30 * time.Second}, r.writeStatus(ctx, er, ec, dec, before)
}

func (r *RestoreReconciler) setCondition(er *v1alpha1.EtcdRestore, typ string, ok bool, reason, msg string) {
	apimeta.SetStatusCondition(&er.Status.Conditions, metav1.Condition{Type: typ, Status: boolStatus(ok), Reason: reason, Message: msg,
		ObservedGeneration: er.Generation, LastTransitionTime: metav1.NewTime(r.now())})
}

// writeStatus records a decision: phase, message, the directive's epoch once issued, the
// seed's acknowledgement, times, the Complete condition, Events on a phase change, and
// observedGeneration last. A status unchanged since before (as last read or written) is not
// written.
func (r *RestoreReconciler) writeStatus(ctx context.Context, er *v1alpha1.EtcdRestore, ec *v1alpha1.EtcdCluster, dec restoreDecision, before *v1alpha1.EtcdRestoreStatus) error {
	st := &er.Status
	now := metav1.NewTime(r.now().Truncate(time.Second))
	if dec.Ack != nil {
		st.RestoredRevision, st.ClusterID = dec.Ack.Revision, dec.Ack.ClusterID
	}
	if st.StartTime == nil && dec.Phase != v1alpha1.RestorePending && dec.Phase != v1alpha1.RestoreFailed {
		st.StartTime = &now
	}
	if dec.Phase != before.Phase {
		r.phaseEvent(er, ec, dec)
	}
	st.Phase, st.Message = dec.Phase, dec.Message
	if dec.Epoch != 0 && st.Epoch == 0 {
		st.Epoch = dec.Epoch
		r.setCondition(er, v1alpha1.RestoreConditionDirectiveIssued, true, "Issued", fmt.Sprintf("directive %d in EtcdCluster %s's status.recovery", dec.Epoch, er.Spec.Cluster))
	}
	if st.Epoch != 0 && dec.Phase != v1alpha1.RestoreFencing && !terminal(dec.Phase) {
		r.setCondition(er, v1alpha1.RestoreConditionDirectiveIssued, true, "Issued", fmt.Sprintf("directive %d", st.Epoch))
	}
	if terminal(dec.Phase) {
		if st.EndTime == nil {
			st.EndTime = &now
		}
		r.setCondition(er, v1alpha1.RestoreConditionComplete, true, dec.Phase, dec.Message)
	}
	st.ObservedGeneration = er.Generation
	if reflect.DeepEqual(before, st) {
		return nil
	}
	err := r.Client.Status().Update(ctx, er)
	if apierrors.IsConflict(err) {
		return errStatusMoved
	}
	return err
}

// phaseEvent records a phase change on the EtcdRestore, and its outcome on the cluster too.
func (r *RestoreReconciler) phaseEvent(er *v1alpha1.EtcdRestore, ec *v1alpha1.EtcdCluster, dec restoreDecision) {
	switch dec.Phase {
	case v1alpha1.RestorePending:
		r.Recorder.Eventf(er, nil, corev1.EventTypeNormal, "Waiting", "Restore", "%s", dec.Message)
	case v1alpha1.RestoreFailed:
		r.Recorder.Eventf(er, nil, corev1.EventTypeWarning, "RestoreFailed", "Restore", "%s", dec.Message)
		if ec != nil && er.Status.Epoch != 0 {
			r.Recorder.Eventf(ec, er, corev1.EventTypeWarning, "RestoreFailed", "Restore", "EtcdRestore %s: %s", er.Name, dec.Message)
		}
	case v1alpha1.RestoreSucceeded:
		r.Recorder.Eventf(er, nil, corev1.EventTypeNormal, "Restored", "Restore", "%s", dec.Message)
		if ec != nil {
			r.Recorder.Eventf(ec, er, corev1.EventTypeNormal, "Restored", "Restore", "EtcdRestore %s: %s", er.Name, dec.Message)
		}
	default:
		r.Recorder.Eventf(er, nil, corev1.EventTypeNormal, dec.Phase, "Restore", "%s", dec.Message)
	}
}
