package operator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/heal"
	"github.com/etcd-steward/steward/internal/kubeview"
	"github.com/etcd-steward/steward/internal/livefigures"
	"github.com/etcd-steward/steward/internal/maintenance"
	"github.com/etcd-steward/steward/internal/seal"
	"github.com/etcd-steward/steward/internal/units"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Finalizer holds an EtcdCluster until its owned objects are deleted.
const Finalizer = "etcd.steward.dev/cleanup"

// leaseDuration is a member Lease's duration; sidecars renew at a third of it.
const leaseDuration = 30 * time.Second

// maxRequeue bounds the wait between reconciliations of a cluster at rest.
const maxRequeue = 5 * time.Minute

// userSecretsPoll is how often a cluster with the user's own certificates (spec.tls.serverSecret,
// clientSecret) is looked at, at rest: its two Secrets read, nothing written unless they changed.
const userSecretsPoll = 30 * time.Second

// syncRetry bounds the wait before a reconciliation that failed in part is tried again.
const syncRetry = 15 * time.Second

// ClusterReconciler reconciles EtcdClusters.
type ClusterReconciler struct {
	Client client.Client
	// APIReader reads uncached: the user's Secrets (the cache holds only Steward's), and what
	// a destructive act or a proof must see fresh.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Image runs the members when a cluster does not name one (the operator's own image).
	Image string
	// AllowedImages are the patterns of the images the members may run besides Image
	// (--allowed-images; empty: any image). See decideImage.
	AllowedImages []string
	// OperatorNamespace is the namespace of the operator's pods ("": unknown): the members'
	// NetworkPolicy lets them reach the sidecars.
	OperatorNamespace string
	Graces            Graces
	// Sidecars calls the members' sidecars: the full snapshot before a rolling update or a
	// hibernation, and the leadership move before the leader's pod is deleted.
	Sidecars *Sidecars
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Health asks the members' etcd health ports directly before a fence (a client with
	// probeTimeout when nil).
	Health *http.Client

	leases leaseClock
	// figuresWritten is when each cluster's status was last written (a types.NamespacedName
	// to a time.Time): the moving figures are held until figuresMaxAge after it.
	figuresWritten sync.Map
}

// SetupWithManager registers the reconciler: it watches EtcdClusters, the objects they own,
// the member pods, and the EtcdRestores' requests to start. A Lease renewal wakes nothing,
// but for the first after a lapse: a member Lease wakes it when its holder changes, and the
// lease clock wakes it when a Lease lapses. Renewals are noted on the lease clock as they
// arrive.
func (r *ClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.leases.expired = make(chan event.GenericEvent, 64)
	holderChanged := predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*coordinationv1.Lease)
			n, ok2 := e.ObjectNew.(*coordinationv1.Lease)
			if !ok1 || !ok2 {
				return true
			}
			_, revived := r.leases.renewal(n, r.now())
			return revived || (n.Labels[LabelLeaseKind] == "member" && !reflect.DeepEqual(o.Spec.HolderIdentity, n.Spec.HolderIdentity))
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			r.leases.forget(e.Object.GetUID())
			return true
		},
	}
	// A report's figures (revision, indexes) are refreshed every few seconds while etcd
	// takes writes: they wake nothing, the next pass reads them.
	reportChanged := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1alpha1.EtcdMember)
		n, ok2 := e.ObjectNew.(*v1alpha1.EtcdMember)
		return !ok1 || !ok2 || kubeview.ChangedAtOnce(o, n)
	}}
	// An EtcdRestore wakes its cluster when its request to start is recorded (and when it
	// appears, as every object does when the operator starts).
	requestChanged := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1alpha1.EtcdRestore)
		n, ok2 := e.ObjectNew.(*v1alpha1.EtcdRestore)
		return !ok1 || !ok2 || !reflect.DeepEqual(o.Status.Request, n.Status.Request)
	}}
	restoreToCluster := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		er, ok := o.(*v1alpha1.EtcdRestore)
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: er.Namespace, Name: er.Spec.Cluster}}}
	})
	podToCluster := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[LabelCluster]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.EtcdCluster{}, builder.WithPredicates(clusterChanged)).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		// Its own Secrets, from the cache limited to Steward's (stewardSecrets): one deleted by
		// hand is made anew at once, and a pass at rest reads none from the API server.
		Owns(&corev1.Secret{}).
		Owns(&coordinationv1.Lease{}, builder.WithPredicates(holderChanged)).
		Owns(&v1alpha1.EtcdMember{}, builder.WithPredicates(reportChanged)).
		Watches(&corev1.Pod{}, podToCluster).
		Watches(&corev1.PersistentVolumeClaim{}, podToCluster).
		Watches(&v1alpha1.EtcdRestore{}, restoreToCluster, builder.WithPredicates(requestChanged)).
		WatchesRawSource(source.Channel(r.leases.expired, &handler.EnqueueRequestForObject{})).
		Named("etcdcluster").
		// Clusters are independent: several reconcile at once (one cluster never twice at once).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}

// clusterChanged wakes a cluster's reconciliation for any change of its EtcdCluster but one
// of its status alone: only the operator writes the status, and the pass that wrote it comes
// back at its next deadline, so its own write wakes nothing.
var clusterChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*v1alpha1.EtcdCluster)
	n, ok2 := e.ObjectNew.(*v1alpha1.EtcdCluster)
	if !ok1 || !ok2 {
		return true
	}
	om, nm := o.ObjectMeta.DeepCopy(), n.ObjectMeta.DeepCopy()
	om.ResourceVersion, nm.ResourceVersion, om.ManagedFields, nm.ManagedFields = "", "", nil, nil
	return !equality.Semantic.DeepEqual(om, nm) || !equality.Semantic.DeepEqual(o.Spec, n.Spec)
}}

func (r *ClusterReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// +kubebuilder:rbac:groups=etcd.steward.dev,resources=etcdclusters;etcdbackups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=etcd.steward.dev,resources=etcdmembers,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups=etcd.steward.dev,resources=etcdclusters/status;etcdbackups/status;etcdmembers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=etcd.steward.dev,resources=etcdclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps;services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumes;nodes,verbs=get
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile is one pass over one cluster, a short list of steps:
//  1. admit: deleted (finalize), the finalizer added, paused, the defaults recorded
//     (once), or a spec that cannot run;
//  2. observe the StatefulSet, the pods, the Leases and the reports;
//  3. decide (Decide), with fresh evidence asked directly before a destructive decision;
//  4. sync every owned object in order;
//  5. act: restarts, the fence, the rolling update's and the hibernation's steps;
//  6. write the status, observedGeneration last, and come back at the next deadline.
func (r *ClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ec, held, err := r.admit(ctx, req)
	if held != nil {
		return *held, err
	}
	p := &pass{now: r.now()}
	obs, err := r.observe(ctx, ec, p.now)
	if err != nil {
		return ctrl.Result{}, err
	}
	d := r.decide(ctx, ec, &obs, p)
	if stale, err := r.staleForStop(ctx, ec, obs, d); err != nil || stale {
		// The newer object triggers another pass.
		return ctrl.Result{RequeueAfter: time.Second}, err
	}
	run, err := r.sync(ctx, ec, d, obs, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.act(ctx, ec, obs, &d, p)
	status, err := r.newStatus(ctx, ec, obs, d, run, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	recordMetrics(ec, &ec.Status, &status, p.errs)
	return r.writeStatus(ctx, ec, status, p)
}

// pass is what one reconciliation carries from step to step: its time, the errors met (each
// with its stable code), the evidence gathered, and when to come back.
type pass struct {
	now     time.Time
	errs    []v1alpha1.LastError
	requeue time.Duration
	// noAnswer is what the members that did not answer said when asked directly.
	noAnswer string
	// stored are the Events of what this pass's status write records, emitted once it is
	// stored (a write that loses a race records nothing).
	stored []func()
}

func (p *pass) fail(code string, err error) {
	p.errs = append(p.errs, v1alpha1.LastError{Code: code, Description: err.Error(), ObservedAt: metav1.NewTime(p.now)})
}

// admit reads the cluster and stops the pass early (held non-nil) when it is being deleted
// (finalize), when its finalizer is only now added, while it is paused, when its
// defaults could not be recorded, or while its spec is one the members could not run with.
func (r *ClusterReconciler) admit(ctx context.Context, req ctrl.Request) (*v1alpha1.EtcdCluster, *ctrl.Result, error) {
	ec := &v1alpha1.EtcdCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, ec); err != nil {
		return nil, &ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ec.DeletionTimestamp.IsZero() {
		return nil, &ctrl.Result{}, r.finalize(ctx, ec)
	}
	if controllerutil.AddFinalizer(ec, Finalizer) {
		if err := r.Client.Update(ctx, ec); err != nil {
			if apierrors.IsConflict(err) {
				return nil, &ctrl.Result{RequeueAfter: time.Second}, nil
			}
			return nil, &ctrl.Result{}, err
		}
	}
	if ec.Annotations[v1alpha1.AnnotationPaused] == "true" {
		return nil, &ctrl.Result{}, r.writeHeld(ctx, ec, "Paused",
			fmt.Sprintf("reconciliation is paused by the annotation %s=true; remove it to resume", v1alpha1.AnnotationPaused))
	}
	if ec.Status.Defaults == nil {
		// Chosen and recorded before anything is made: what the cluster runs with where its
		// spec is silent is the same at every later pass.
		if err := r.recordDefaults(ctx, ec); err != nil {
			if apierrors.IsConflict(err) {
				return nil, &ctrl.Result{RequeueAfter: time.Second}, nil
			}
			return nil, &ctrl.Result{}, err
		}
	}
	err := specProblem(ec.Spec)
	if err == nil {
		err = securityProblem(ec)
	}
	if err != nil {
		// Nothing is changed on the cluster for a spec its members could not run with: the
		// members keep what they run. The next change of the spec is checked again.
		return nil, &ctrl.Result{}, r.writeHeld(ctx, ec, ReasonInvalidSpec, fmt.Sprintf(
			"generation %d is not carried out, nothing is changed: %v", ec.Generation, err))
	}
	return ec, nil, nil
}

// decide is Decide, with the operator's own fresh evidence before a destructive decision:
// while the quorum is lost, no recovery is in force and an EtcdMember says its data dir lost
// its data, the sidecars' reports asked directly (only they can prove that data is gone, see
// DirectReports); before a restart, a fence or the fence of a lost quorum (AskMembers),
// whether each member answers a linearizable read; before a scale-down stops a member, the
// sidecars' reports asked directly (the EtcdMembers may be stale).
func (r *ClusterReconciler) decide(ctx context.Context, ec *v1alpha1.EtcdCluster, obs *Observation, p *pass) Decision {
	// The sidecars' reports asked just now, dated by this clock, never by the sidecars'. When
	// none answers (a network policy in the way), the EtcdMembers stand.
	askReports := func() bool {
		direct := r.Sidecars.reports(ctx, ec, obs.Members)
		for name, rep := range direct {
			rep.At = obs.Now
			direct[name] = rep
		}
		if len(direct) == 0 {
			return false
		}
		obs.DirectReports = direct
		return true
	}
	d := Decide(*obs)
	if rec := d.Recovery; rec != nil && rec.Status.Directive == nil && !rec.Status.QuorumLostSince.IsZero() && r.Sidecars != nil && someDataLost(obs.Reports) && askReports() {
		d = Decide(*obs)
	}
	if d.AskMembers {
		obs.Answers, p.noAnswer = r.askMembers(ctx, ec, obs.Members)
		d = Decide(*obs)
	}
	// Without a direct report, the leaving member's own pod and Lease must still say it
	// stopped (stillServes).
	if slices.Contains(d.Cases, CaseScaleDown) && d.StatefulSetReplicas < obs.StatefulSetReplicas && r.Sidecars != nil && askReports() {
		d = Decide(*obs)
	}
	return d
}

// someDataLost: a member reports from its data dir that the dir lost its own data (empty,
// holding someone else's, or holding data a restore superseded).
func someDataLost(reports map[string]cluster.Report) bool {
	for _, rep := range reports {
		if rep.Source == cluster.ReportFromDisk && (rep.DataEmpty || rep.Foreign != "" || rep.DataSuperseded()) {
			return true
		}
	}
	return false
}

// sync brings every owned object to what the decision asks for, in order.
func (r *ClusterReconciler) sync(ctx context.Context, ec *v1alpha1.EtcdCluster, d Decision, obs Observation, p *pass) (*run, error) {
	run := &run{c: r.Client, reader: r.APIReader, ec: ec, image: r.Image, allowedImages: r.AllowedImages, operatorNamespace: r.OperatorNamespace, decision: d, formed: obs.Formed,
		memberLeases: int(max(d.StatefulSetReplicas, d.ClusterSize, ec.Spec.Replicas)), now: p.now, recorder: r.Recorder}
	if ec.Annotations[v1alpha1.AnnotationAdopt] != "" {
		var err error
		if run.orphanClusterIDs, err = r.orphanClusterIDs(ctx, ec); err != nil {
			return nil, err
		}
	}
	if tenantSecretsDue(ec) {
		if err := r.checkSecrets(ctx, ec); err != nil {
			p.fail("ERR_BACKUP_SECRET", err)
			r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "SecretMissing", "Sync", "%v", err)
		}
	}
	for _, c := range components {
		if err := c.sync(ctx, run); err != nil {
			p.fail(syncErrorCode(c.code, err), err)
		}
	}
	return run, nil
}

// act carries out the decision's acts: restarts (case 9), the fence, the rolling update's
// and the hibernation's steps, and the Events; it sets when to come back.
func (r *ClusterReconciler) act(ctx context.Context, ec *v1alpha1.EtcdCluster, obs Observation, d *Decision, p *pass) {
	notReadySince := p.now.Add(-r.graces().NotReady)
	for _, name := range d.DeletePods {
		still := func(pod *corev1.Pod) bool { return !podReady(pod) && pod.CreationTimestamp.Time.Before(notReadySince) }
		if err := r.deletePod(ctx, ec, name, still, corev1.EventTypeWarning, "MemberRestarted", fmt.Sprintf(
			"member %s was NotReady for more than %s: its pod was deleted to restart it", name, r.graces().NotReady)); err != nil {
			p.fail("ERR_DELETE_POD", err)
		}
	}
	for _, v := range d.ReplaceVolumes {
		if err := r.replaceVolume(ctx, ec, v); err != nil {
			p.fail("ERR_REPLACE_VOLUME", err)
		}
	}
	r.stopFenced(ctx, ec, d, p)
	p.requeue = nextDeadline(obs, *d, p.now)
	if t := ec.Spec.TLS; t != nil && (t.ServerSecret != "" || t.ClientSecret != "") {
		// The operator watches no Secret: a rotation of the user's certificates (a new ca.crt
		// rolls the members) is seen at the next pass, which comes this soon.
		p.requeue = min(p.requeue, userSecretsPoll)
	}
	if rec := d.Recovery; rec != nil {
		switch persisted, err := r.fence(ctx, ec, rec, p.noAnswer); {
		case err != nil:
			p.fail("ERR_FENCE_POD", err)
		case !persisted:
			p.requeue = time.Second // the directive is written with the status (or its second is not over): the next pass fences
		}
		switch s := rec.Started; {
		case s != nil:
			restore := &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ec.Namespace, Name: s.Name, UID: s.UID}}
			epoch := rec.Status.Directive.Epoch
			p.stored = append(p.stored, func() {
				r.Recorder.Eventf(ec, restore, corev1.EventTypeWarning, "RestoreStarted", "Restore",
					"EtcdRestore %s: directive %d restores %s: every member is stopped, one restores it and starts alone, the others rejoin it; "+
						"the full snapshot %s (revision %d) keeps the present restorable", s.Name, epoch, s.Target.Point(), s.Snapshot.Key, s.Snapshot.Revision)
			})
		case rec.Event != "":
			if dir := rec.Status.Directive; dir != nil && dir.Case == string(heal.CaseQuorumLossProven) {
				// No grace ran out before this recovery: no QuorumLost Event said so yet.
				r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "QuorumLost", "Observe",
					"%d of %d members Ready, and the data of too many of the others is gone for the quorum ever to come back", d.Ready, d.ClusterSize)
			}
			r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "Recovery", "Recover", "%s", rec.Event)
		}
	}
	if code, err := r.rollout(ctx, ec, &d.Rollout, &p.requeue); err != nil {
		p.fail(code, err)
	}
	if code, err := r.hibernate(ctx, ec, d, &p.requeue); err != nil {
		p.fail(code, err)
	}
	r.recordEvents(ec, obs, *d)
}

// newStatus is the status this pass writes: the decision's, the ownership conflicts, the CA
// and its rollover (whose step is taken here), the errors met.
func (r *ClusterReconciler) newStatus(ctx context.Context, ec *v1alpha1.EtcdCluster, obs Observation, d Decision, run *run, p *pass) (v1alpha1.EtcdClusterStatus, error) {
	status := r.status(ec, obs, d)
	if c := ownershipCondition(run.conflicts, ec.Generation, metav1.NewTime(p.now)); c != nil {
		if prev := apimeta.FindStatusCondition(ec.Status.Conditions, c.Type); prev == nil || prev.Message != c.Message {
			r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, c.Reason, "Sync", "%s", c.Message)
		}
		apimeta.SetStatusCondition(&status.Conditions, *c)
	} else {
		apimeta.RemoveStatusCondition(&status.Conditions, v1alpha1.ConditionOwnershipConflict)
	}
	if rec := d.Recovery; rec != nil {
		raw, err := encodeRecovery(rec.Status)
		if err != nil {
			return status, err
		}
		status.Recovery = &runtime.RawExtension{Raw: raw}
	}
	status.Rollout = roundRollout(d.Rollout.Status)
	status.Hibernation = roundHibernation(d.Hibernation.Status)
	r.caStatus(ctx, ec, obs, d, run, p, &status)
	r.tokenKeyStatus(ec, run, p, &status)
	r.expandVolumes(ctx, ec, d, p, &status)
	status.LastErrors = p.errs
	if len(p.errs) > 0 {
		apimeta.SetStatusCondition(&status.Conditions, syncFailedCondition(p.errs, ec.Generation, p.now))
	}
	if len(p.errs) == 0 && run.statefulSetObserved {
		// The generation is accounted for only once everything synced and the StatefulSet
		// controller has seen the template this pass wrote: until then no rolling update
		// exists to report, and a reader of observedGeneration would take the old members
		// for the new spec.
		status.ObservedGeneration = ec.Generation
	}
	return status, nil
}

// caStatus takes the CA rollover's step and records the CA and its rollover in status.
func (r *ClusterReconciler) caStatus(ctx context.Context, ec *v1alpha1.EtcdCluster, obs Observation, d Decision, run *run, p *pass, status *v1alpha1.EtcdClusterStatus) {
	status.CARotation, status.CARotated = ec.Status.CARotation, ec.Status.CARotated
	if req := ec.Annotations[v1alpha1.AnnotationRotateCA]; ProvidedTLS(ec) && req != "" && req != ec.Status.CARotated {
		r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "CARotationRefused", "RotateCA", "CA rollover %q refused: the certificates come from Secret %s (spec.tls.serverSecret), "+
			"so their issuer rolls the CA over: put both CAs in its ca.crt, issue the certificates from the new CA, then drop the old one from ca.crt", req, ec.Spec.TLS.ServerSecret)
		status.CARotated = req
	} else if run.ca != nil && !ProvidedTLS(ec) {
		cd := decideCARotation(ec.Annotations[v1alpha1.AnnotationRotateCA], ec.Status.CARotation, ec.Status.CARotated,
			caState(*run.ca, obs, d), p.now, r.graces().CAPropagation)
		request := ""
		if cd.Status != nil {
			request = cd.Status.Request
		}
		switch taken, err := r.rotateCA(ctx, run, cd.Action, request); {
		case err != nil:
			p.fail("ERR_CA_ROTATION", err)
		case taken:
			status.CARotation, status.CARotated = cd.Status, cd.Rotated
		}
		if cd.Status != nil {
			p.requeue = min(p.requeue, 5*time.Second)
		}
	}
	if c := run.caCheck; c != nil {
		status.CA = c.CA
		r.setCACondition(ec, status, *c, p.now)
	}
	if rot := status.CARotation; rot != nil {
		// Between its rolling restarts (which report themselves), a rollover is what progresses.
		if c := apimeta.FindStatusCondition(status.Conditions, v1alpha1.ConditionProgressing); c != nil && c.Reason == "Reconciled" {
			apimeta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue,
				Reason: ReasonCARotation, Message: fmt.Sprintf("CA rollover %q, phase %s: %s", rot.Request, rot.Phase, rot.Message),
				ObservedGeneration: c.ObservedGeneration, LastTransitionTime: metav1.NewTime(p.now)})
		}
	}
}

// writeStatus writes the status, observedGeneration last, only when it changed (its moving
// figures alone are no change until figuresMaxAge, see holdFigures), with the
// Events of what it records once stored, and says when to come back: the next deadline, or
// sooner when the pass met errors.
func (r *ClusterReconciler) writeStatus(ctx context.Context, ec *v1alpha1.EtcdCluster, status v1alpha1.EtcdClusterStatus, p *pass) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(ec)
	written, _ := r.figuresWritten.Load(key)
	at, _ := written.(time.Time)
	status = holdFigures(ec.Status, status, at, p.now)
	// Semantic: times read back from the API server are in the local zone, the computed ones
	// in UTC; the same instant is no change, and an unchanged status is never written.
	if !equality.Semantic.DeepEqual(status, ec.Status) {
		ec.Status = status
		if err := r.Client.Status().Update(ctx, ec); err != nil {
			if apierrors.IsConflict(err) {
				// The cache was behind; the newer object triggers another pass.
				return ctrl.Result{RequeueAfter: time.Second}, nil
			}
			return ctrl.Result{}, err
		}
		r.figuresWritten.Store(key, p.now)
		for _, event := range p.stored {
			event()
		}
	}
	if len(p.errs) > 0 {
		// Recorded in status.lastErrors and logged, not returned: a returned error would
		// replace the deadline with the controller's exponential backoff (up to minutes),
		// and delay what the deadline is for (a grace running out, a quorum loss).
		log.FromContext(ctx).Error(fmt.Errorf("%s: %s", p.errs[0].Code, p.errs[0].Description), "reconciliation incomplete", "errors", len(p.errs))
		return ctrl.Result{RequeueAfter: min(p.requeue, syncRetry)}, nil
	}
	return ctrl.Result{RequeueAfter: p.requeue}, nil
}

// setCACondition sets the CAReady condition, with an Event when its reason changes: a
// Warning for what is wrong, and a Normal one when it is put right.
func (r *ClusterReconciler) setCACondition(ec *v1alpha1.EtcdCluster, status *v1alpha1.EtcdClusterStatus, c caCheck, now time.Time) {
	ok, reason, msg := caCondition(c, now)
	prev := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionCAReady)
	apimeta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionCAReady, Status: boolStatus(ok), Reason: reason,
		Message: msg, ObservedGeneration: ec.Generation, LastTransitionTime: metav1.NewTime(now).Rfc3339Copy()})
	switch {
	case prev != nil && prev.Reason == reason:
	case !ok:
		r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, reason, "CheckCA", "%s", msg)
	case prev != nil:
		r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, reason, "CheckCA", "%s", msg)
	}
}

// fence deletes the pods the directive in force stops, only once the directive is persisted:
// a directive decided from a cache that is behind, or whose status write then fails, would
// otherwise fence the members and be issued again, with a new epoch that fences their
// replacements. persisted is false when the directive is not stored yet (nothing is
// deleted: this pass writes it). noAnswer is what the members said when asked directly.
func (r *ClusterReconciler) fence(ctx context.Context, ec *v1alpha1.EtcdCluster, rec *recoveryOutcome, noAnswer string) (persisted bool, err error) {
	dir := rec.Status.Directive
	if len(rec.FencePods) == 0 {
		return true, nil
	}
	fresh := &v1alpha1.EtcdCluster{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ec), fresh); err != nil {
		return false, err
	}
	var stored heal.Status
	if fresh.Status.Recovery != nil {
		if stored, err = decodeRecovery(fresh.Status.Recovery.Raw); err != nil {
			return false, fmt.Errorf("status.recovery cannot be read: %w", err)
		}
	}
	if d := stored.Directive; d == nil || d.Epoch != dir.Epoch || !d.IssuedAt.Equal(dir.IssuedAt) {
		return false, nil
	}
	evidence := ""
	if rec.FencesForQuorumLoss() {
		evidence = "; asked directly, no member answered a linearizable read (" + noAnswer + ")"
	}
	if r.now().Before(fenceFrom(dir)) {
		return false, nil // a pod made now would read as older than the directive: the next pass fences
	}
	olderThanDirective := func(p *corev1.Pod) bool { return madeBefore(dir, p.CreationTimestamp.Time) }
	var errs []error
	for _, name := range rec.FencePods {
		if err := r.deletePod(ctx, ec, name, olderThanDirective, corev1.EventTypeWarning, "Fenced", fmt.Sprintf(
			"member %s is stopped for recovery %d: its pod was deleted; the new one waits for the directive%s", name, dir.Epoch, evidence)); err != nil {
			errs = append(errs, err)
		}
	}
	return true, errors.Join(errs...)
}

// FencedMembers are the members the annotation etcd.steward.dev/fenced-members names, each
// once, in its order.
func FencedMembers(ec *v1alpha1.EtcdCluster) []string {
	var names []string
	for _, n := range strings.Split(ec.Annotations[v1alpha1.AnnotationFencedMembers], ",") {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// stopFenced carries out the fence: the fences refused are errors with their stable code
// (and a Warning Event when the refusal is new); the fenced members whose etcd still serves
// get their pods deleted, read fresh and still Ready, once the ConfigMap that fences them is
// written (the new pods' sidecars hold etcd), after leadership moved away from one that leads.
// Events record the fences applied, lifted and suspended once the status that records them is
// stored.
func (r *ClusterReconciler) stopFenced(ctx context.Context, ec *v1alpha1.EtcdCluster, d *Decision, p *pass) {
	if d.FenceRefused != "" {
		err := fmt.Errorf("annotation %s: %s", v1alpha1.AnnotationFencedMembers, d.FenceRefused)
		if !slices.ContainsFunc(ec.Status.LastErrors, func(e v1alpha1.LastError) bool { return e.Description == err.Error() }) {
			r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "FenceRefused", "Fence", "%v", err)
		}
		p.fail("ERR_FENCE_REFUSED", err)
	}
	for _, name := range d.Fenced {
		if !slices.Contains(ec.Status.FencedMembers, name) {
			p.stored = append(p.stored, func() {
				r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "MemberFenced", "Fence",
					"member %s is fenced: its etcd is held stopped, its pod and data kept, until %s no longer names it", name, v1alpha1.AnnotationFencedMembers)
			})
		}
	}
	lifted := slices.DeleteFunc(slices.Clone(ec.Status.FencedMembers), func(name string) bool { return slices.Contains(d.Fenced, name) })
	if len(lifted) > 0 && d.FenceSuspended != "" {
		p.stored = append(p.stored, func() {
			r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "FenceSuspended", "Fence", "%s unfenced: %s", strings.Join(lifted, ", "), d.FenceSuspended)
		})
	} else {
		for _, name := range lifted {
			p.stored = append(p.stored, func() {
				r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "MemberUnfenced", "Fence", "member %s is unfenced: its etcd starts again on its data", name)
			})
		}
	}
	if len(d.StopFenced) == 0 || slices.ContainsFunc(p.errs, func(e v1alpha1.LastError) bool { return e.Code == errCode("SYNC", "CONFIGMAP") }) {
		return
	}
	// The fence was decided from the cache: the user may have lifted it since.
	fresh := &v1alpha1.EtcdCluster{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ec), fresh); err != nil {
		p.fail("ERR_FENCE_READ", err)
		return
	}
	stop := slices.DeleteFunc(slices.Clone(d.StopFenced), func(name string) bool { return !slices.Contains(FencedMembers(fresh), name) })
	if len(stop) == 0 {
		return
	}
	if to := d.FenceMoveLeaderTo; to != "" && slices.Contains(stop, d.Leader) {
		if r.Sidecars == nil {
			p.fail("ERR_FENCE_MOVE_LEADER", fmt.Errorf("member %s leads and is fenced, but the operator has no sidecar client to move leadership first: its pod is not deleted", d.Leader))
			return
		}
		res, err := r.Sidecars.moveLeader(ctx, ec, d.Leader, to)
		if err != nil {
			p.fail("ERR_FENCE_MOVE_LEADER", fmt.Errorf("%w; fenced member %s's pod is not deleted while it leads", err, d.Leader))
			return
		}
		r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "LeadershipMoved", "Fence", "leadership moved from %s to %s before the fenced %s stops", res.From, res.Leader, d.Leader)
	}
	for _, name := range stop {
		if err := r.deletePod(ctx, ec, name, podReady, corev1.EventTypeNormal, "FencedMemberStopped", fmt.Sprintf(
			"member %s is fenced and its etcd served: its pod was deleted; the new one's sidecar holds etcd stopped", name)); err != nil {
			p.fail("ERR_FENCE_STOP_POD", err)
		}
	}
}

// deletePod deletes a member pod of this cluster, read fresh, while still says it must go,
// with its UID and resourceVersion as preconditions: a pod already gone, being deleted, or
// replaced since the decision is left alone. Only a pod of the cluster's own StatefulSet is
// deleted (both read fresh); another's is an error that names it. It records why.
func (r *ClusterReconciler) deletePod(ctx context.Context, ec *v1alpha1.EtcdCluster, name string, still func(*corev1.Pod) bool, typ, reason, why string) error {
	var pod corev1.Pod
	switch err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: name}, &pod); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("pod %s: %w", name, err)
	}
	if !pod.DeletionTimestamp.IsZero() || !still(&pod) {
		return nil
	}
	var sts appsv1.StatefulSet
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: statefulSetName(ec)}, &sts); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("StatefulSet %s: %w", statefulSetName(ec), err)
	}
	if sts.UID == "" || !metav1.IsControlledBy(&sts, ec) || !metav1.IsControlledBy(&pod, &sts) {
		return fmt.Errorf("pod %s is not of the cluster's own StatefulSet %s: it is not deleted", name, statefulSetName(ec))
	}
	pre := client.Preconditions{UID: &pod.UID, ResourceVersion: &pod.ResourceVersion}
	if err := r.Client.Delete(ctx, &pod, pre); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("pod %s: %w", name, err)
	} else if err != nil {
		return nil // gone or changed since it was read: the next pass decides again
	}
	r.Recorder.Eventf(ec, &pod, typ, reason, "DeletePod", "%s", why)
	return nil
}

// replaceVolume deletes the data claim of a member whose volume is lost with its node, then
// its pod: the StatefulSet makes both anew, and the member's sidecar, finding its data dir
// empty, joins again as a new member (a learner first). The claim is read fresh: still the
// one decided on (its UID), of the cluster's labels, owned by the cluster's own StatefulSet
// (claimOf), its volume's node still lost, and it is deleted with its UID and resourceVersion
// as preconditions.
func (r *ClusterReconciler) replaceVolume(ctx context.Context, ec *v1alpha1.EtcdCluster, v volumeReplacement) error {
	var pvc corev1.PersistentVolumeClaim
	switch err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: v.Claim}, &pvc); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("claim %s: %w", v.Claim, err)
	}
	if string(pvc.UID) != v.UID {
		return nil // made anew since: the next pass decides again
	}
	if !labels.SelectorFromSet(selectorLabels(ec)).Matches(labels.Set(pvc.Labels)) {
		return fmt.Errorf("claim %s does not carry the labels of cluster %s's members: it is not deleted", v.Claim, ec.Name)
	}
	var sts appsv1.StatefulSet
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: statefulSetName(ec)}, &sts); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("StatefulSet %s: %w", statefulSetName(ec), err)
	}
	if sts.UID == "" || !metav1.IsControlledBy(&sts, ec) || !claimOf(&pvc, sts.UID) {
		return fmt.Errorf("claim %s is not of the cluster's own StatefulSet %s: it is not deleted", v.Claim, statefulSetName(ec))
	}
	lost, err := r.volumeNodeLost(ctx, &pvc)
	if err != nil || lost == "" {
		return err
	}
	// A claim already going was deleted by an earlier pass that stopped before the pod (an
	// operator restarted between the two): only the pod is left to delete, which the claim
	// waits for (its protection finalizer).
	deleteClaim := pvc.DeletionTimestamp.IsZero()
	if deleteClaim {
		pre := client.Preconditions{UID: &pvc.UID, ResourceVersion: &pvc.ResourceVersion}
		if err := r.Client.Delete(ctx, &pvc, pre); apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		} else if err != nil {
			return fmt.Errorf("claim %s: %w", v.Claim, err)
		}
	}
	why := fmt.Sprintf("member %s NotReady for more than %s, and %s: its claim %s and its pod are deleted; it joins again on a new volume, as a learner first",
		v.Member, r.graces().NotReady, lost, v.Claim)
	if v.Recovery {
		why = fmt.Sprintf("the quorum-loss recovery waits for the log of member %s, and %s: the log is lost with it; its claim %s and its pod are deleted, "+
			"it comes back on a new, empty volume, and the recovery goes on from the others and the backup", v.Member, lost, v.Claim)
	}
	if deleteClaim {
		r.Recorder.Eventf(ec, &pvc, corev1.EventTypeWarning, "VolumeReplaced", "DeleteClaim", "%s", why)
	}
	return r.deletePod(ctx, ec, v.Member, func(p *corev1.Pod) bool { return !podReady(p) }, corev1.EventTypeWarning, "VolumeReplaced", why)
}

// rollout carries out the rolling update's step (decideRollout): the full snapshot, the
// leadership move or the pod deletion, with an Event each; what went wrong is recorded in
// status.rollout.message and returned with its stable code. A snapshot refused for now (429)
// is asked again after the Retry-After.
func (r *ClusterReconciler) rollout(ctx context.Context, ec *v1alpha1.EtcdCluster, rd *rolloutDecision, requeue *time.Duration) (string, error) {
	st := rd.Status
	if rd.Snapshot || rd.MoveFrom != "" || rd.Delete != "" {
		// A step is decided from status.rollout as the last pass wrote it: from a cache that
		// is behind it, the same step would be taken twice. The newer object triggers another pass.
		fresh := &v1alpha1.EtcdCluster{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ec), fresh); err != nil {
			return "ERR_ROLLOUT_READ", err
		}
		if fresh.ResourceVersion != ec.ResourceVersion {
			*rd = rolloutDecision{Status: ec.Status.Rollout}
			*requeue = time.Second
			return "", nil
		}
	}
	switch {
	case rd.Done:
		r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "RollingUpdateDone", "RollingUpdate", "%s", rd.Why)
	case rd.Stalled:
		r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, ReasonRollingUpdateStalled, "RollingUpdate", "%s", st.Message)
	case rd.Snapshot:
		step := r.fullSnapshot(ctx, ec, "rolling update")
		res, err := step.Result, step.Err
		if step.pending() {
			st.Message = fmt.Sprintf("the full snapshot before the rolling update is not stored yet (%s); no member is restarted", step.why())
			*requeue = min(*requeue, step.Retry)
			return "", nil
		}
		if err != nil {
			st.Message = fmt.Sprintf("the full snapshot before the rolling update failed, so no member is restarted (the StatefulSet keeps the pod template they run): %v (set spec.updateStrategy.skipBackup to update without it)", err)
			r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "RollingUpdateSnapshotFailed", "RollingUpdate", "%s", st.Message)
			return "ERR_ROLLOUT_SNAPSHOT", err
		}
		st.SnapshotKey, st.SnapshotRevision = res.Key, res.Revision
		st.Message = fmt.Sprintf("full snapshot %s at revision %d stored; restarting the members", res.Key, res.Revision)
		*requeue = time.Second
		to := "revision " + st.Revision
		if st.Revision == "" {
			to = "the new pod template"
		}
		r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "RollingUpdateSnapshot", "RollingUpdate",
			"full snapshot %s at revision %d stored before the rolling update to %s", res.Key, res.Revision, to)
	case rd.MoveFrom != "":
		if r.Sidecars == nil {
			return "ERR_ROLLOUT_MOVE_LEADER", errors.New("the operator has no sidecar client to move leadership before restarting the leader")
		}
		res, err := r.Sidecars.moveLeader(ctx, ec, rd.MoveFrom, rd.MoveTo)
		if retry, ok := retryLater(err); ok {
			st.Message = fmt.Sprintf("%v: retrying in %s", err, retry)
			*requeue = min(*requeue, retry)
			return "", nil
		}
		if err != nil {
			st.Message = fmt.Sprintf("%v; %s's pod is not deleted while it leads (the move is retried, at most %d times)", err, rd.MoveFrom, maintenance.MaxMoves)
			return "ERR_ROLLOUT_MOVE_LEADER", err
		}
		r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "LeadershipMoved", "RollingUpdate",
			"leadership moved from %s to %s before %s's pod is deleted (%s)", res.From, res.Leader, rd.MoveFrom, rd.Why)
	case rd.Delete != "":
		outdated := func(p *corev1.Pod) bool { return p.Labels[appsv1.ControllerRevisionHashLabelKey] != st.Revision }
		if err := r.deletePod(ctx, ec, rd.Delete, outdated, corev1.EventTypeNormal, ReasonRollingUpdate, fmt.Sprintf(
			"member %s's pod was deleted to restart it on revision %s: %s", rd.Delete, st.Revision, rd.Why)); err != nil {
			return "ERR_ROLLOUT_DELETE_POD", err
		}
	}
	return "", nil
}

// fullSnapshot follows the full snapshot that comes before members are stopped (a rolling
// update's first pod deletion, a hibernation; purpose says which) through the backup
// leader's sidecar, taken beside the workers (Sidecars.fullSnapshot).
func (r *ClusterReconciler) fullSnapshot(ctx context.Context, ec *v1alpha1.EtcdCluster, purpose string) snapshotStep {
	if r.Sidecars == nil {
		return snapshotStep{Err: errors.New("the operator has no sidecar client for a full snapshot")}
	}
	return r.Sidecars.fullSnapshot(ctx, ec, fmt.Sprintf("%s of EtcdCluster %s/%s", purpose, ec.Namespace, ec.Name))
}

// hibernate carries out the hibernation's step (decideHibernation): the full snapshot before
// the members stop, recorded in status.hibernation, with an Event. Its outcome is the message
// of status.hibernation and of the conditions that show it; a failure is returned with its
// stable code, and no member stops.
func (r *ClusterReconciler) hibernate(ctx context.Context, ec *v1alpha1.EtcdCluster, d *Decision, requeue *time.Duration) (string, error) {
	if !d.Hibernation.Snapshot {
		return "", nil
	}
	st := d.Hibernation.Status
	defer func() {
		for _, t := range []string{v1alpha1.ConditionHibernated, v1alpha1.ConditionProgressing} {
			if c := apimeta.FindStatusCondition(d.Conditions, t); c != nil {
				c.Message = st.Message
			}
		}
	}()
	step := r.fullSnapshot(ctx, ec, "hibernation")
	res, err := step.Result, step.Err
	if step.pending() {
		st.Message = fmt.Sprintf("the full snapshot before the members stop is not stored yet (%s); the members run", step.why())
		*requeue = min(*requeue, step.Retry)
		return "", nil
	}
	if err != nil {
		st.Message = fmt.Sprintf("the full snapshot before the members stop failed, so they run on: %v (fix the backup store, or set spec.updateStrategy.skipBackup to hibernate without it: the data stays on the volumes)", err)
		r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "HibernationSnapshotFailed", "Hibernate", "%s", st.Message)
		return "ERR_HIBERNATION_SNAPSHOT", err
	}
	st.SnapshotKey, st.SnapshotRevision = res.Key, res.Revision
	st.Message = fmt.Sprintf("full snapshot %s at revision %d stored; stopping the members", res.Key, res.Revision)
	*requeue = time.Second
	r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "HibernationSnapshot", "Hibernate",
		"full snapshot %s at revision %d stored before the %d members stop", res.Key, res.Revision, st.Replicas)
	return "", nil
}

// staleForStop says whether the decision stops the members from a cached EtcdCluster that
// is behind the stored one: the stop is decided from status.hibernation as the last pass
// recorded it, and from a spec that still asks for it.
func (r *ClusterReconciler) staleForStop(ctx context.Context, ec *v1alpha1.EtcdCluster, o Observation, d Decision) (bool, error) {
	if d.StatefulSetReplicas != 0 || o.StatefulSetReplicas <= 0 {
		return false, nil
	}
	fresh := &v1alpha1.EtcdCluster{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ec), fresh); err != nil {
		return false, err
	}
	return fresh.ResourceVersion != ec.ResourceVersion, nil
}

func (r *ClusterReconciler) graces() Graces {
	g := r.Graces
	if g.Unknown == 0 {
		g.Unknown = DefaultGraces.Unknown
	}
	if g.NotReady == 0 {
		g.NotReady = DefaultGraces.NotReady
	}
	if g.Volume == 0 {
		g.Volume = DefaultGraces.Volume
	}
	if g.Rollout == 0 {
		g.Rollout = DefaultGraces.Rollout
	}
	if g.CAPropagation == 0 {
		g.CAPropagation = DefaultGraces.CAPropagation
	}
	return g
}

// finalize deletes the owned objects in reverse order and releases the finalizer. Owner
// references would let the garbage collector do the same; deleting explicitly makes the
// order certain and works where no garbage collector runs. Deleted with orphan propagation
// (kubectl delete --cascade=orphan), it deletes nothing: the members, their volumes and the
// Secrets stay, for a later EtcdCluster of the same name to adopt.
func (r *ClusterReconciler) finalize(ctx context.Context, ec *v1alpha1.EtcdCluster) error {
	if !controllerutil.ContainsFinalizer(ec, Finalizer) {
		return nil
	}
	if controllerutil.ContainsFinalizer(ec, metav1.FinalizerOrphanDependents) {
		r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "Orphaned", "Delete",
			"deleted with orphan propagation: nothing was deleted; the members, their volumes and Secrets stay for an EtcdCluster named %s with the annotation %s=true to adopt",
			ec.Name, v1alpha1.AnnotationAdopt)
	} else {
		run := &run{c: r.Client, reader: r.APIReader, ec: ec}
		for _, c := range slices.Backward(components) {
			if err := c.delete(ctx, run); err != nil {
				return fmt.Errorf("%s: %w", errCode("DELETE", c.code), err)
			}
		}
	}
	controllerutil.RemoveFinalizer(ec, Finalizer)
	forgetMetrics(ec.Namespace, ec.Name)
	r.figuresWritten.Delete(client.ObjectKeyFromObject(ec))
	return client.IgnoreNotFound(r.Client.Update(ctx, ec))
}

// orphanClusterIDs are the etcd cluster IDs reported by the members a deleted EtcdCluster of
// this name left behind (EtcdMembers with its labels that this one does not own).
func (r *ClusterReconciler) orphanClusterIDs(ctx context.Context, ec *v1alpha1.EtcdCluster) ([]string, error) {
	var ems v1alpha1.EtcdMemberList
	if err := r.Client.List(ctx, &ems, client.InNamespace(ec.Namespace), client.MatchingLabels(selectorLabels(ec))); err != nil {
		return nil, err
	}
	var ids []string
	for i := range ems.Items {
		em := &ems.Items[i]
		if rep, ok := kubeview.MemberReport(em, time.Time{}); ok && rep.ClusterID != "" && !metav1.IsControlledBy(em, ec) && !slices.Contains(ids, rep.ClusterID) {
			ids = append(ids, rep.ClusterID)
		}
	}
	return ids, nil
}

// writeHeld records in the Progressing condition why nothing is done (a pause, a spec the
// members could not run with), with a Warning Event the first time for an invalid spec.
// status.observedGeneration stays: the generation is not carried out.
func (r *ClusterReconciler) writeHeld(ctx context.Context, ec *v1alpha1.EtcdCluster, reason, msg string) error {
	before := ec.Status.DeepCopy()
	apimeta.SetStatusCondition(&ec.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing,
		Status: metav1.ConditionFalse, Reason: reason, ObservedGeneration: ec.Generation, Message: msg})
	if equality.Semantic.DeepEqual(before, &ec.Status) {
		return nil
	}
	if err := r.Client.Status().Update(ctx, ec); err != nil {
		return err
	}
	if reason == ReasonInvalidSpec {
		r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, ReasonInvalidSpec, "Validate", "%s", msg)
	}
	return nil
}

// tenantSecretsDue says whether a pass reads the Secrets of the user's that the cluster only
// names (the store's credentials, the backup keys, a given password; see checkSecrets): when
// a generation is not carried out yet, when the last pass met errors (one may be about such
// a Secret), and while a member is not Ready or the backups are not current (a pod that
// cannot start without its Secret is not Ready, and wakes the cluster). At rest they are not
// read: the members run with them, and the operator watches no Secret of the user's.
func tenantSecretsDue(ec *v1alpha1.EtcdCluster) bool {
	st := ec.Status
	return st.ObservedGeneration != ec.Generation || len(st.LastErrors) > 0 ||
		!apimeta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionAllMembersReady) ||
		ec.Spec.Backup != nil && !apimeta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionBackupReady)
}

// checkSecrets reports a credentials Secret that does not exist. Nothing is deleted: the
// pods wait for it (they cannot start without it), and the condition names it.
func (r *ClusterReconciler) checkSecrets(ctx context.Context, ec *v1alpha1.EtcdCluster) error {
	for _, name := range credentialSecrets(ec) {
		var s corev1.Secret
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: name}, &s)
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("the credentials Secret %s/%s does not exist: create it, with the store's credentials as keys (e.g. AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)", ec.Namespace, name)
		}
		if err != nil {
			return fmt.Errorf("reading the credentials Secret %s/%s: %w", ec.Namespace, name, err)
		}
	}
	if enc := backupEncryption(ec); enc != nil {
		// Checked here, so that a missing or bad Secret is one clear error, not pods that
		// never start or sidecars that refuse their flags.
		var s corev1.Secret
		name := enc.KeysSecret.Name
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: name}, &s)
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("the backup keys Secret %s/%s (spec.backup.encryption.keysSecret) does not exist: create it, each key ID a data key and each value 32 random bytes in base64 (kubectl create secret generic %s --from-literal=k1=$(head -c32 /dev/urandom | base64))", ec.Namespace, name, name)
		}
		if err != nil {
			return fmt.Errorf("reading the backup keys Secret %s/%s: %w", ec.Namespace, name, err)
		}
		if _, err := seal.KeyringFromData("in Secret "+ec.Namespace+"/"+name, enc.ActiveKeyID, s.Data); err != nil {
			return fmt.Errorf("%w (spec.backup.encryption)", err)
		}
	}
	return nil
}

// observe reads what Decide needs, by what it reads: the ConfigMap, the StatefulSet, the
// member pods and Leases, the members' reports with the recovery's record, the volumes.
func (r *ClusterReconciler) observe(ctx context.Context, ec *v1alpha1.EtcdCluster, now time.Time) (Observation, error) {
	o := Observation{Now: now, Name: ec.Name, Generation: ec.Generation, Desired: ec.Spec.Replicas, Previous: ec.Status, Graces: r.graces(), StatefulSetReplicas: -1, ConfigMembers: -1,
		Hibernate:          ec.Annotations[v1alpha1.AnnotationHibernate] == "true",
		FenceRequest:       FencedMembers(ec),
		SnapshotBeforeStop: ec.Spec.Backup != nil && !ec.Spec.UpdateStrategy.SkipBackup,
		BootstrapRestore:   bootstrapRestore(ec)}
	sel := client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(selectorLabels(ec))}
	if err := r.observeConfig(ctx, ec, &o); err != nil {
		return o, err
	}
	if err := r.observeStatefulSet(ctx, ec, &o); err != nil {
		return o, err
	}
	stored, err := r.observeMembers(ctx, ec, sel, &o)
	if err != nil {
		return o, err
	}
	if err := r.observeReports(ctx, ec, sel, stored, &o); err != nil {
		return o, err
	}
	if err := r.observeVolumes(ctx, ec, sel, &o); err != nil {
		return o, err
	}
	o.Formed = ec.Status.ClusterID != "" || slices.ContainsFunc(ec.Status.Members, func(m v1alpha1.MemberStatus) bool { return m.ID != "" }) ||
		slices.ContainsFunc(o.Members, func(m MemberObservation) bool { return m.Lease != nil && m.Lease.Holder != "" })
	return o, nil
}

// observeConfig reads how many members the cluster's own ConfigMap lists.
func (r *ClusterReconciler) observeConfig(ctx context.Context, ec *v1alpha1.EtcdCluster, o *Observation) error {
	var cm corev1.ConfigMap
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: configMapName(ec)}, &cm); {
	case err == nil:
		if cc, err := v1alpha1.ParseClusterConfig(cm.Data); err == nil && metav1.IsControlledBy(&cm, ec) { // another's ConfigMap lists no member of this cluster
			o.ConfigMembers = int32(len(cc.Members))
		}
	case !apierrors.IsNotFound(err):
		return err
	}
	return nil
}

// observeStatefulSet reads the cluster's own StatefulSet: its size, and its templates and
// revision for a rolling update.
func (r *ClusterReconciler) observeStatefulSet(ctx context.Context, ec *v1alpha1.EtcdCluster, o *Observation) error {
	var sts appsv1.StatefulSet
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: statefulSetName(ec)}, &sts)
	if apierrors.IsNotFound(err) || err == nil && !metav1.IsControlledBy(&sts, ec) {
		return nil
	}
	if err != nil {
		return err
	}
	o.StatefulSetReplicas = 1
	if sts.Spec.Replicas != nil {
		o.StatefulSetReplicas = *sts.Spec.Replicas
	}
	leader, err := maintenance.ParseLeaderUpdate(ec.Spec.UpdateStrategy.LeaderUpdateMethod)
	if err != nil {
		return fmt.Errorf("spec.updateStrategy: %w", err)
	}
	o.Rollout = &RolloutObservation{Leader: leader, Trust: sts.Spec.Template.Annotations[AnnotationTrust],
		Template: sts.Annotations[annotationTemplateHash]}
	if p := sts.Annotations[annotationTemplatePending]; p != o.Rollout.Template {
		o.Rollout.Pending = p
	}
	if sts.Status.ObservedGeneration >= sts.Generation {
		// The StatefulSet controller has seen the newest template: pods it creates
		// from now on carry this revision.
		o.Rollout.Revision = sts.Status.UpdateRevision
	}
	return nil
}

// observeMembers reads the member pods and Leases, one entry per ordinal the StatefulSet or
// the hibernation knows of, and the snapshot Leases: what the backups hold, and the newest
// revision the backup leader published as stored.
func (r *ClusterReconciler) observeMembers(ctx context.Context, ec *v1alpha1.EtcdCluster, sel client.ListOption, o *Observation) (livefigures.Publication, error) {
	stored := livefigures.None
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(ec.Namespace), sel); err != nil {
		return stored, err
	}
	var leases coordinationv1.LeaseList
	if err := r.Client.List(ctx, &leases, client.InNamespace(ec.Namespace), sel); err != nil {
		return stored, err
	}
	members := map[int]*MemberObservation{}
	at := func(i int) *MemberObservation {
		if m, ok := members[i]; ok {
			return m
		}
		m := &MemberObservation{Name: memberName(ec, i), Ordinal: i}
		members[i] = m
		return m
	}
	known := max(o.StatefulSetReplicas, 0)
	if h := ec.Status.Hibernation; h != nil {
		known = max(known, h.Replicas) // stopped members are members still
	}
	for i := 0; i < int(known); i++ {
		at(i)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if n, ok := ordinal(ec, p.Name); ok {
			at(n).Pod = &PodState{Ready: podReady(p), Created: p.CreationTimestamp.Time, Deleting: !p.DeletionTimestamp.IsZero(), Node: p.Spec.NodeName,
				Revision: p.Labels[appsv1.ControllerRevisionHashLabelKey]}
			if why := unschedulable(p); why != "" {
				o.Unschedulable = append(o.Unschedulable, fmt.Sprintf("%s: %s", p.Name, why))
			}
		}
	}
	if b := ec.Spec.Backup; b != nil {
		o.Backup = &BackupObservation{DeltaPeriod: snapshotter.DefaultDeltaPeriod}
		if b.DeltaPeriod != nil {
			o.Backup.DeltaPeriod = b.DeltaPeriod.Duration
		}
	}
	for i := range leases.Items {
		l := &leases.Items[i]
		seen := r.leases.observe(l, o.Now)
		switch kind := l.Labels[LabelLeaseKind]; kind {
		case "member":
			if n, ok := ordinal(ec, l.Name); ok {
				at(n).Lease = leaseState(l, seen)
			}
		case "full-snapshot", "delta-snapshot":
			p, ok := livefigures.FromLease(l)
			if o.Backup == nil || !ok {
				continue
			}
			stored = livefigures.Newer(stored, p)
			if p.At.IsZero() {
				continue
			}
			if kind == "full-snapshot" {
				o.Backup.LastFull, o.Backup.LastFullRevision = p.At, p.Revision
			} else {
				o.Backup.LastDelta, o.Backup.LastDeltaRevision = p.At, p.Revision
			}
		}
	}
	for _, i := range slices.Sorted(maps.Keys(members)) {
		o.Members = append(o.Members, *members[i])
	}
	return stored, nil
}

// observeReports reads the members' own reports (their EtcdMembers), the backup leader's
// account, and the recovery's input: the members' acknowledgements, the confirmations by
// annotation, status.recovery and a restore's request.
func (r *ClusterReconciler) observeReports(ctx context.Context, ec *v1alpha1.EtcdCluster, sel client.ListOption, stored livefigures.Publication, o *Observation) error {
	var ems v1alpha1.EtcdMemberList
	if err := r.Client.List(ctx, &ems, client.InNamespace(ec.Namespace), sel); err != nil {
		return err
	}
	o.Reports = map[string]cluster.Report{}
	rec := Recovery{Acks: map[string]cluster.DirectiveAck{}, Policy: ec.Spec.QuorumLoss.Policy,
		Backup: heal.Backup{Configured: ec.Spec.Backup != nil, Revision: stored.Revision},
		// ReportCurrent 0: an EtcdMember, read from the cache and dated by its sidecar's clock,
		// never proves data gone; the reports asked directly do (Observation.DirectReports).
		Timing: heal.Timing{Grace: o.Graces.NotReady, ReportTimeout: heal.DefaultTiming.ReportTimeout, SeedTimeout: heal.DefaultTiming.SeedTimeout}}
	for i := range ems.Items {
		em := &ems.Items[i]
		rep, ok := kubeview.MemberReport(em, time.Time{})
		if ok {
			o.Reports[em.Name] = rep
		}
		if b := em.Status.Backup; b != nil && o.Backup != nil {
			if o.Backup.Leader == nil || (rep.Serving && rep.Leader) {
				o.Backup.Leader = b
			}
			if o.Backup.Accounts == nil {
				o.Backup.Accounts = map[string]*v1alpha1.MemberBackup{}
			}
			o.Backup.Accounts[em.Name] = b
		}
		if ack, ok := kubeview.MemberAck(em); ok {
			rec.Acks[em.Name] = ack
		}
	}
	if c, err := strconv.ParseInt(ec.Annotations[v1alpha1.AnnotationConfirmRecovery], 10, 64); err == nil {
		rec.Confirmed = c
	}
	if c, err := strconv.ParseInt(ec.Annotations[v1alpha1.AnnotationCancelRestore], 10, 64); err == nil {
		rec.CancelRestore = c
	}
	if ec.Status.Recovery != nil {
		st, err := decodeRecovery(ec.Status.Recovery.Raw)
		if err != nil {
			return fmt.Errorf("status.recovery cannot be read: %w", err)
		}
		rec.Status = st
	}
	var restores v1alpha1.EtcdRestoreList
	if err := r.Client.List(ctx, &restores, client.InNamespace(ec.Namespace)); err != nil {
		return err
	}
	rec.RestoreRequest = restoreRequest(ec, restores.Items)
	o.Recovery = &rec
	return nil
}

// observeVolumes reads the member volume claims Pending past the grace, with why.
func (r *ClusterReconciler) observeVolumes(ctx context.Context, ec *v1alpha1.EtcdCluster, sel client.ListOption, o *Observation) error {
	var pvcs corev1.PersistentVolumeClaimList
	if err := r.Client.List(ctx, &pvcs, client.InNamespace(ec.Namespace), sel); err != nil {
		return err
	}
	// What a member NotReady past the grace, or one a recovery may wait for, waits on: its
	// node, its volume's node. Read fresh, and only then; what cannot be read (no right to read
	// Nodes or PersistentVolumes, as with watchNamespace) is not known, and nothing is done
	// for it.
	for i, m := range o.Members {
		if m.Pod != nil && m.Pod.Node != "" && notReadyPastGrace(*o, m.Name) {
			o.Members[i].NodeDown, _ = r.nodeDown(ctx, m.Pod.Node)
		}
	}
	for _, pvc := range pvcs.Items {
		// A claim going is observed too: its deletion may be the first half of a replacement
		// whose second, the pod's deletion, is still to do.
		if i := slices.IndexFunc(o.Members, func(m MemberObservation) bool { return pvc.Name == "data-"+m.Name }); i >= 0 &&
			volumeObserved(*o, o.Members[i].Name) {
			lost, _ := r.volumeNodeLost(ctx, &pvc)
			o.Members[i].Volume = &VolumeState{Claim: pvc.Name, UID: string(pvc.UID), NodeLost: lost}
		}
		if age := o.Now.Sub(pvc.CreationTimestamp.Time); pvc.Status.Phase == corev1.ClaimPending && age > o.Graces.Volume {
			class := "the default storage class"
			if c := pvc.Spec.StorageClassName; c != nil {
				class = fmt.Sprintf("storage class %q", *c)
			}
			o.UnboundVolumes = append(o.UnboundVolumes, fmt.Sprintf("%s has been Pending for %s (%s; see its Events)", pvc.Name, age.Round(time.Second), class))
		}
	}
	return nil
}

// volumeNodeLost says, read fresh, why the claim's volume is lost with its node: the volume is
// pinned to one node (its PersistentVolume's node affinity, as local volumes are) and that
// node is marked out of service (the taint node.kubernetes.io/out-of-service: someone or
// something that knows says it is off) or no longer exists. "" when not: a volume any node
// can mount, a node that may come back.
func (r *ClusterReconciler) volumeNodeLost(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (string, error) {
	if pvc.Spec.VolumeName == "" {
		return "", nil
	}
	var pv corev1.PersistentVolume
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, &pv); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	node := pinnedNode(&pv)
	if node == "" || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		return "", nil
	}
	var n corev1.Node
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Name: node}, &n); {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("its volume %s is on node %s, which no longer exists", pv.Name, node), nil
	case err != nil:
		return "", err
	}
	for _, t := range n.Spec.Taints {
		if t.Key == TaintOutOfService {
			return fmt.Sprintf("its volume %s is on node %s, marked out of service (%s=%s:%s)", pv.Name, node, t.Key, t.Value, t.Effect), nil
		}
	}
	return "", nil
}

// nodeDown says, read fresh, why the node is not Ready ("" when it is).
func (r *ClusterReconciler) nodeDown(ctx context.Context, name string) (string, error) {
	var n corev1.Node
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, &n); {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("node %s no longer exists", name), nil
	case err != nil:
		return "", err
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("node %s is not Ready (%s: %s)", name, c.Reason, c.Message), nil
		}
	}
	return "", nil
}

// TaintOutOfService marks a node that is shut down for good (Kubernetes' non-graceful node
// shutdown): its pods are deleted by force, and its local volumes are lost with it.
const TaintOutOfService = "node.kubernetes.io/out-of-service"

// pinnedNode is the one node a volume's node affinity allows ("" when it allows any, or
// several).
func pinnedNode(pv *corev1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil || len(pv.Spec.NodeAffinity.Required.NodeSelectorTerms) != 1 {
		return ""
	}
	for _, e := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions {
		if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
			return e.Values[0]
		}
	}
	return ""
}

// bootstrapRestore is spec.bootstrap.restore as a restore target (nil: none).
func bootstrapRestore(ec *v1alpha1.EtcdCluster) *cluster.RestoreTarget {
	b := ec.Spec.Bootstrap
	if b == nil || b.Restore == nil {
		return nil
	}
	t := RestoreTargetOf(b.Restore.Revision, b.Restore.Timeline, b.Restore.Time)
	t.Store = b.Restore.Store
	return &t
}

// RestoreTargetOf is the point an object's optional revision, timeline and time ask for (all
// nil: the newest), as the members take it: EtcdRestore, spec.bootstrap.restore and the plugin.
func RestoreTargetOf(revision, timeline *int64, at *metav1.Time) cluster.RestoreTarget {
	var t cluster.RestoreTarget
	if revision != nil {
		t.Revision = *revision
	}
	if at != nil {
		t.Time = at.Time
	}
	if timeline != nil {
		t.Timeline = uint32(*timeline)
	}
	return t
}

// unschedulable is the scheduler's reason for not placing the pod ("" once placed).
func unschedulable(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message
		}
	}
	return ""
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func leaseState(l *coordinationv1.Lease, renewed time.Time) *LeaseState {
	s := &LeaseState{Duration: leaseDuration, Renewed: renewed}
	if l.Spec.HolderIdentity != nil {
		s.Holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseDurationSeconds != nil {
		s.Duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return s
}

// status is the new status from the decision (observedGeneration and lastErrors are set by
// the caller).
func (r *ClusterReconciler) status(ec *v1alpha1.EtcdCluster, o Observation, d Decision) v1alpha1.EtcdClusterStatus {
	s := v1alpha1.EtcdClusterStatus{
		ObservedGeneration:  ec.Status.ObservedGeneration,
		Conditions:          d.Conditions,
		Members:             d.Members,
		ClusterSize:         d.ClusterSize,
		Replicas:            max(o.StatefulSetReplicas, 0),
		ReadyReplicas:       d.Ready,
		ReadyMembers:        fmt.Sprintf("%d/%d", d.Ready, ec.Spec.Replicas),
		FencedMembers:       d.Fenced,
		Selector:            labels.SelectorFromSet(selectorLabels(ec)).String(),
		ClusterID:           d.ClusterID,
		Voters:              d.Voters,
		Leader:              d.Leader,
		Revision:            d.Revision,
		LastDefragmentation: d.LastDefrag,
		Recoverability:      d.Recoverability,
		Recovery:            ec.Status.Recovery,
		Defaults:            ec.Status.Defaults,
		Endpoints: v1alpha1.Endpoints{
			Client: fmt.Sprintf("%s://%s.%s.svc:%d", scheme(ec), clientServiceName(ec), ec.Namespace, ClientPort),
		},
	}
	if TLSEnabled(ec) {
		s.ClientCertificateSecret = clientSecretName(ec)
	}
	if authEnabled(ec) {
		s.RootPasswordSecret = rootPasswordSecretName(ec)
		app := appUser(ec)
		s.ApplicationUser = &v1alpha1.ApplicationUserStatus{Name: app.Name, PasswordSecret: app.PasswordSecret}
	}
	for _, m := range clusterConfig(ec, int(d.ClusterSize)).Members {
		s.Endpoints.Peers = append(s.Endpoints.Peers, m.PeerURL)
	}
	if b := o.Backup; b != nil {
		if !b.LastFull.IsZero() {
			s.LastFullSnapshot = &v1alpha1.SnapshotRef{Time: metav1.NewTime(b.LastFull), Revision: b.LastFullRevision}
		}
		if !b.LastDelta.IsZero() {
			s.LastDeltaSnapshot = &v1alpha1.SnapshotRef{Time: metav1.NewTime(b.LastDelta), Revision: b.LastDeltaRevision}
		}
		newest := b.LastFull
		if b.LastDelta.After(newest) {
			newest = b.LastDelta
		}
		if !newest.IsZero() {
			t := metav1.NewTime(newest)
			s.LastBackupTime = &t
		}
	}
	// Timestamps in the status are stored at second precision; compare them as stored so
	// that an unchanged status is never written again.
	return roundTimes(s)
}

// roundRollout is status.rollout with its times as stored (see roundTimes).
func roundRollout(st *v1alpha1.RolloutStatus) *v1alpha1.RolloutStatus {
	if st == nil {
		return nil
	}
	st = st.DeepCopy()
	st.StartTime = metav1.NewTime(st.StartTime.Rfc3339Copy().Time)
	for _, p := range []**metav1.Time{&st.CurrentSince, &st.LeaderMovedAt} {
		if *p != nil {
			t := metav1.NewTime((*p).Rfc3339Copy().Time)
			*p = &t
		}
	}
	return st
}

// roundHibernation is status.hibernation with its time as stored (see roundTimes).
func roundHibernation(h *v1alpha1.HibernationStatus) *v1alpha1.HibernationStatus {
	if h == nil {
		return nil
	}
	h = h.DeepCopy()
	h.Since = metav1.NewTime(h.Since.Rfc3339Copy().Time)
	return h
}

func roundTimes(s v1alpha1.EtcdClusterStatus) v1alpha1.EtcdClusterStatus {
	rt := func(t metav1.Time) metav1.Time { return metav1.NewTime(t.Rfc3339Copy().Time) }
	for i := range s.Conditions {
		s.Conditions[i].LastTransitionTime = rt(s.Conditions[i].LastTransitionTime)
	}
	for i := range s.Members {
		s.Members[i].LastTransitionTime = rt(s.Members[i].LastTransitionTime)
		if t := s.Members[i].LastReport; t != nil {
			v := rt(*t)
			s.Members[i].LastReport = &v
		}
	}
	for _, p := range []**v1alpha1.SnapshotRef{&s.LastFullSnapshot, &s.LastDeltaSnapshot} {
		if *p != nil {
			(*p).Time = rt((*p).Time)
		}
	}
	if s.LastBackupTime != nil {
		v := rt(*s.LastBackupTime)
		s.LastBackupTime = &v
	}
	return s
}

// recordEvents records what changed: members changing status, scaling, quorum loss.
func (r *ClusterReconciler) recordEvents(ec *v1alpha1.EtcdCluster, o Observation, d Decision) {
	prev := map[string]v1alpha1.MemberStatus{}
	for _, m := range o.Previous.Members {
		prev[m.Name] = m
	}
	for _, m := range d.Members {
		p, had := prev[m.Name]
		if had && p.Status == m.Status {
			continue
		}
		typ := corev1.EventTypeNormal
		if m.Status != v1alpha1.MemberReady && m.Reason != v1alpha1.ReasonHibernated {
			typ = corev1.EventTypeWarning
		}
		if !had && m.Status != v1alpha1.MemberReady && !o.Formed {
			continue // members of a cluster being created are not Ready yet: no news
		}
		r.Recorder.Eventf(ec, nil, typ, "Member"+m.Status, "Observe", "member %s is %s (%s)", m.Name, m.Status, m.Reason)
	}
	if len(o.UnboundVolumes) > 0 {
		if c := apimeta.FindStatusCondition(o.Previous.Conditions, v1alpha1.ConditionProgressing); c == nil || c.Reason != "VolumeNotBound" {
			r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "VolumeNotBound", "Observe", "%s", strings.Join(o.UnboundVolumes, "; "))
		}
	}
	if c := apimeta.FindStatusCondition(d.Conditions, v1alpha1.ConditionBackupReady); c != nil && c.Status == metav1.ConditionFalse && c.Reason == "BackupStale" {
		if p := apimeta.FindStatusCondition(o.Previous.Conditions, v1alpha1.ConditionBackupReady); p != nil && p.Status == metav1.ConditionTrue {
			r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "BackupStale", "Observe", "%s", c.Message)
		}
	}
	if c := apimeta.FindStatusCondition(d.Conditions, v1alpha1.ConditionAlarmsActive); c != nil && c.Status == metav1.ConditionTrue {
		if p := apimeta.FindStatusCondition(o.Previous.Conditions, v1alpha1.ConditionAlarmsActive); p == nil || p.Status != metav1.ConditionTrue {
			r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "AlarmsActive", "Observe", "%s", c.Message)
		}
	}
	if l, p := d.LastDefrag, o.Previous.LastDefragmentation; l != nil && (p == nil || !l.Time.Equal(&p.Time)) {
		typ, reason, msg := corev1.EventTypeNormal, "Defragmented", fmt.Sprintf("%s round: %s reclaimed (%s)", l.Trigger, units.Bytes(l.ReclaimedBytes), strings.Join(l.Members, "; "))
		if l.Error != "" {
			typ, reason, msg = corev1.EventTypeWarning, "DefragmentationStopped", msg+"; stopped: "+l.Error
		}
		r.Recorder.Eventf(ec, nil, typ, reason, "Maintain", "%s", msg)
	}
	for _, c := range d.Cases {
		switch c {
		case CaseRestartUnproven:
			r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "RestartHeld", "Restart", "%s", d.RestartsHeld)
		case CaseScaleUp:
			r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "ScalingUp", "Scale", "adding member %s (%d of %d)",
				memberName(ec, int(d.StatefulSetReplicas)-1), d.StatefulSetReplicas, ec.Spec.Replicas)
		case CaseScaleDown:
			// The leaving member is the first the config no longer has, while it leaves etcd and
			// while its pod stops.
			r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "ScalingDown", "Scale", "removing member %s (down to %d)",
				memberName(ec, int(d.ConfigMembers)), ec.Spec.Replicas)
		case CaseHibernate:
			if h := d.Hibernation.Status; h.Phase == v1alpha1.HibernationStopped {
				r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, ReasonHibernated, "Hibernate", "%d members stopped, their data kept: %s", h.Replicas, h.Message)
			}
		case CaseResume:
			if p := o.Previous.Hibernation; p != nil && p.Phase == v1alpha1.HibernationStopped {
				r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, ReasonResuming, "Resume", "%s", d.Hibernation.Status.Message)
			}
		case CaseQuorumLost:
			if c := apimeta.FindStatusCondition(o.Previous.Conditions, v1alpha1.ConditionQuorumLost); c == nil || c.Status != metav1.ConditionTrue {
				r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "QuorumLost", "Observe",
					"a majority of members has been NotReady for more than %s: %d of %d Ready", r.graces().NotReady, d.Ready, d.ClusterSize)
			}
		}
	}
}

// nextDeadline is when time alone changes the decision: a Lease expires, a grace ends, the
// backups turn stale.
func nextDeadline(o Observation, d Decision, now time.Time) time.Duration {
	next := now.Add(maxRequeue)
	consider := func(t time.Time) {
		if t.After(now) && t.Before(next) {
			next = t
		}
	}
	// A Lease that lapses wakes the reconciliation by itself (leaseClock): its renewals move
	// no deadline here, so that a cluster at rest is not reconciled at every renewal.
	for _, m := range o.Members {
		if m.Pod != nil {
			consider(m.Pod.Created.Add(o.Graces.NotReady))
		}
	}
	for _, m := range d.Members {
		switch m.Status {
		case v1alpha1.MemberUnknown:
			consider(m.LastTransitionTime.Add(o.Graces.Unknown))
		case v1alpha1.MemberNotReady:
			consider(m.LastTransitionTime.Add(o.Graces.NotReady))
		}
	}
	if r := d.Recovery; d.QuorumLost || (r != nil && (r.Status.Directive != nil || !r.Status.QuorumLostSince.IsZero())) {
		consider(now.Add(2 * time.Second)) // a recovery's waits end by time
	}
	if d.FenceSuspended != "" && (d.Recovery == nil || d.Recovery.Status.Directive == nil) {
		// The fences were decided with the directive this pass retired: the next pass applies
		// them again (nothing else may wake it on a cluster at rest).
		consider(now.Add(time.Second))
	}
	if h := d.Hibernation.Status; h != nil && h.Phase != v1alpha1.HibernationStopped {
		consider(now.Add(2 * time.Second)) // the next step of a hibernation, or of its end
	}
	if d.Rollout.Status != nil {
		// A rolling update waits for members' Lease renewals (which do not wake the
		// operator), for reports, for the leadership move to be reported, for the stall grace.
		consider(now.Add(2 * time.Second))
	}
	// A second more, so that the deadline has passed when the reconciliation runs (status
	// times are kept at second precision).
	return next.Sub(now) + time.Second
}
