package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ExpansionCase names the step of a growth of the members' volumes (decideVolumeExpansion).
type ExpansionCase string

const (
	// ExpansionNone: the StatefulSet's claim template has spec.storage.size (or the cluster
	// has no claims, or no StatefulSet yet): nothing to grow.
	ExpansionNone ExpansionCase = "None"
	// ExpansionRecord: the claims are to grow: the size is recorded in status.volumeExpansion
	// first, and nothing else is done in this pass.
	ExpansionRecord ExpansionCase = "Record"
	// ExpansionNotAllowed: a claim to grow has a StorageClass that does not allow volume
	// expansion (or none that can be read): nothing is changed.
	ExpansionNotAllowed ExpansionCase = "NotAllowed"
	// ExpansionClaimNotOwned: a claim under a member's claim name is not the StatefulSet's:
	// nothing is changed.
	ExpansionClaimNotOwned ExpansionCase = "ClaimNotOwned"
	// ExpansionWaitClaimBound: a claim below the size is not bound to a volume yet, and only a
	// bound claim can grow: it waits.
	ExpansionWaitClaimBound ExpansionCase = "WaitClaimBound"
	// ExpansionResizeClaims: the claims below the size are asked for it.
	ExpansionResizeClaims ExpansionCase = "ResizeClaims"
	// ExpansionRecreateStatefulSet: every claim asks for the size; the StatefulSet, whose
	// claim template cannot change, is deleted leaving its pods (orphan) and made anew.
	ExpansionRecreateStatefulSet ExpansionCase = "RecreateStatefulSet"
	// ExpansionWaitStatefulSet: the old StatefulSet is still being deleted, or not yet made
	// anew (the STATEFULSET component makes it with the new claim template).
	ExpansionWaitStatefulSet ExpansionCase = "WaitStatefulSet"
	// ExpansionDone: the StatefulSet's claim template has the recorded size: the record goes.
	ExpansionDone ExpansionCase = "Done"
)

// claimObservation is one volume claim under a member's claim name, read fresh.
type claimObservation struct {
	Name string
	// Size is the storage it requests.
	Size resource.Quantity
	// Owned: the cluster's StatefulSet owns it (its owner reference).
	Owned bool
	// Bound: it is bound to a volume.
	Bound bool
	// ClassProblem says why its StorageClass does not let it grow ("": it does).
	ClassProblem string
}

// expansionInput is what a growth of the volumes is decided from.
type expansionInput struct {
	// Want is spec.storage.size.
	Want resource.Quantity
	// Template is the size of the cluster's StatefulSet's claim template; nil without one.
	Template *resource.Quantity
	// Deleting: the StatefulSet is being deleted.
	Deleting bool
	// Busy says what holds the StatefulSet as it is ("": nothing): a rolling update or a
	// recovery, which read its revisions.
	Busy   string
	Claims []claimObservation
	// Record is status.volumeExpansion.
	Record *v1alpha1.VolumeExpansionStatus
}

// expansionDecision is the step to take, and the record to keep (nil: none).
type expansionDecision struct {
	Case   ExpansionCase
	Record *v1alpha1.VolumeExpansionStatus
	// Resize are the claims to ask for Record.Size.
	Resize []string
	// Refusal says why nothing is done, and what to do (NotAllowed, ClaimNotOwned).
	Refusal string
}

// decideVolumeExpansion decides the next step of growing the members' volume claims to
// spec.storage.size (pure): the size recorded first; then each claim asked for it, once every
// claim to grow may (its StorageClass allows expansion) and is the StatefulSet's; then the
// StatefulSet made anew with the new claim template, its pods kept running.
func decideVolumeExpansion(in expansionInput, now time.Time) expansionDecision {
	record := func(phase, msg string) *v1alpha1.VolumeExpansionStatus {
		r := &v1alpha1.VolumeExpansionStatus{Size: in.Want, Phase: phase, Since: metav1.NewTime(now), Message: msg}
		if in.Record != nil && in.Record.Size.Cmp(in.Want) == 0 {
			r.Since = in.Record.Since
		}
		return r
	}
	switch {
	case in.Template == nil && in.Record == nil:
		return expansionDecision{Case: ExpansionNone}
	case in.Template == nil:
		return expansionDecision{Case: ExpansionWaitStatefulSet, Record: record(v1alpha1.VolumeExpansionRecreatingStatefulSet,
			"the StatefulSet is made anew with the new claim template")}
	case in.Template.Cmp(in.Want) >= 0 && in.Record == nil:
		return expansionDecision{Case: ExpansionNone}
	case in.Template.Cmp(in.Want) >= 0:
		return expansionDecision{Case: ExpansionDone}
	case in.Deleting:
		return expansionDecision{Case: ExpansionWaitStatefulSet, Record: record(v1alpha1.VolumeExpansionRecreatingStatefulSet,
			"the old StatefulSet is being deleted, its pods kept")}
	}
	var resize, notOwned, notAllowed, unbound []string
	for _, c := range in.Claims {
		switch {
		case !c.Owned:
			notOwned = append(notOwned, c.Name)
		case c.Size.Cmp(in.Want) >= 0:
		case c.ClassProblem != "":
			notAllowed = append(notAllowed, fmt.Sprintf("%s: %s", c.Name, c.ClassProblem))
		case !c.Bound:
			unbound = append(unbound, c.Name)
		default:
			resize = append(resize, c.Name)
		}
	}
	switch {
	case len(notOwned) > 0:
		return expansionDecision{Case: ExpansionClaimNotOwned, Record: in.Record, Refusal: fmt.Sprintf(
			"the volume claims %s are not the StatefulSet's: no claim is changed; delete or rename them if they are not the members' data, "+
				"or set spec.storage.size back to %s", strings.Join(notOwned, ", "), in.Template)}
	case len(notAllowed) > 0:
		return expansionDecision{Case: ExpansionNotAllowed, Record: in.Record, Refusal: fmt.Sprintf(
			"the volumes cannot grow to %s (%s): no claim is changed; set allowVolumeExpansion: true on the StorageClass if its driver can expand volumes, "+
				"or set spec.storage.size back to %s", in.Want.String(), strings.Join(notAllowed, "; "), in.Template)}
	case in.Record == nil || in.Record.Size.Cmp(in.Want) != 0:
		return expansionDecision{Case: ExpansionRecord, Record: record(v1alpha1.VolumeExpansionResizingClaims,
			fmt.Sprintf("the volume claims grow from %s to %s", in.Template, in.Want.String()))}
	case len(unbound) > 0:
		return expansionDecision{Case: ExpansionWaitClaimBound, Record: record(v1alpha1.VolumeExpansionResizingClaims,
			fmt.Sprintf("the volume claims %s wait to be bound to a volume before they can grow", strings.Join(unbound, ", ")))}
	case len(resize) > 0:
		return expansionDecision{Case: ExpansionResizeClaims, Resize: resize, Record: record(v1alpha1.VolumeExpansionResizingClaims,
			fmt.Sprintf("asking the volume claims %s for %s", strings.Join(resize, ", "), in.Want.String()))}
	}
	if in.Busy != "" {
		return expansionDecision{Case: ExpansionWaitStatefulSet, Record: record(v1alpha1.VolumeExpansionRecreatingStatefulSet,
			fmt.Sprintf("every volume claim asks for the size; the StatefulSet is made anew once %s ends", in.Busy))}
	}
	return expansionDecision{Case: ExpansionRecreateStatefulSet, Record: record(v1alpha1.VolumeExpansionRecreatingStatefulSet,
		"every volume claim asks for the size: the StatefulSet is made anew with it, its pods kept")}
}

// claimTemplateSize is the storage the StatefulSet's data claim template requests; nil
// without one (emptyDir storage).
func claimTemplateSize(sts *appsv1.StatefulSet) *resource.Quantity {
	for _, c := range sts.Spec.VolumeClaimTemplates {
		if c.Name == "data" {
			q := c.Spec.Resources.Requests[corev1.ResourceStorage]
			return &q
		}
	}
	return nil
}

// expandVolumes takes the volume expansion's step (decideVolumeExpansion) from the StatefulSet
// and the claims read fresh, and records it in status. The size is recorded in the status
// before any claim changes: the next pass, after a restart too, takes the step after it.
func (r *ClusterReconciler) expandVolumes(ctx context.Context, ec *v1alpha1.EtcdCluster, d Decision, p *pass, status *v1alpha1.EtcdClusterStatus) {
	status.VolumeExpansion = ec.Status.VolumeExpansion
	if ec.Spec.Storage.EmptyDir != nil || ec.Spec.Storage.Size == nil {
		return // an emptyDir's size limit is in the pod template: a rolling update carries it
	}
	in, sts, err := r.observeExpansion(ctx, ec, d)
	if err != nil {
		p.fail("ERR_VOLUME_EXPANSION", err)
		return
	}
	e := decideVolumeExpansion(in, p.now)
	status.VolumeExpansion = e.Record
	prev := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionVolumeExpansion)
	switch e.Case {
	case ExpansionNone, ExpansionDone:
		apimeta.RemoveStatusCondition(&status.Conditions, v1alpha1.ConditionVolumeExpansion)
		if e.Case == ExpansionDone {
			size := ec.Status.VolumeExpansion.Size.String()
			p.stored = append(p.stored, func() {
				r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "VolumesExpanded", "ExpandVolumes",
					"the members' volume claims ask for %s, and the StatefulSet's claim template too; no member restarted", size)
			})
		}
		return
	case ExpansionNotAllowed, ExpansionClaimNotOwned:
		reason := v1alpha1.ReasonExpansionNotAllowed
		if e.Case == ExpansionClaimNotOwned {
			reason = v1alpha1.ReasonClaimNotOwned
		}
		if prev == nil || prev.Reason != reason || prev.Message != e.Refusal {
			r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, reason, "ExpandVolumes", "%s", e.Refusal)
		}
		apimeta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionVolumeExpansion, Status: metav1.ConditionFalse,
			Reason: reason, Message: e.Refusal, ObservedGeneration: ec.Generation, LastTransitionTime: metav1.NewTime(p.now)})
		// No watch on StorageClasses: look again in a minute.
		p.requeue = min(p.requeue, time.Minute)
		return
	}
	apimeta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionVolumeExpansion, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonVolumeExpanding, Message: e.Record.Message, ObservedGeneration: ec.Generation, LastTransitionTime: metav1.NewTime(p.now)})
	p.requeue = min(p.requeue, time.Second)
	var acted error
	switch e.Case {
	case ExpansionResizeClaims:
		acted = r.resizeClaims(ctx, ec, sts.UID, e.Resize, e.Record.Size)
	case ExpansionRecreateStatefulSet:
		acted = r.recreateStatefulSet(ctx, ec, sts, e.Record.Size)
	}
	if acted != nil {
		p.fail("ERR_VOLUME_EXPANSION", acted)
	}
}

// observeExpansion reads the cluster's StatefulSet and its claims fresh, with their
// StorageClasses.
func (r *ClusterReconciler) observeExpansion(ctx context.Context, ec *v1alpha1.EtcdCluster, d Decision) (expansionInput, *appsv1.StatefulSet, error) {
	in := expansionInput{Want: *ec.Spec.Storage.Size, Record: ec.Status.VolumeExpansion}
	key := types.NamespacedName{Namespace: ec.Namespace, Name: statefulSetName(ec)}
	sts := &appsv1.StatefulSet{}
	if err := r.Client.Get(ctx, key, sts); err == nil && in.Record == nil && metav1.IsControlledBy(sts, ec) {
		// At rest (the usual case) the cache says so: nothing is read from the API server.
		if t := claimTemplateSize(sts); t == nil || t.Cmp(in.Want) >= 0 {
			in.Template = t
			return in, sts, nil
		}
	}
	sts = &appsv1.StatefulSet{}
	switch err := r.APIReader.Get(ctx, key, sts); {
	case apierrors.IsNotFound(err):
		return in, nil, nil
	case err != nil:
		return in, nil, err
	case !metav1.IsControlledBy(sts, ec):
		return in, nil, nil // a conflict, reported as such
	}
	in.Template, in.Deleting = claimTemplateSize(sts), !sts.DeletionTimestamp.IsZero()
	switch rec := d.Recovery; {
	case d.Rollout.Status != nil:
		in.Busy = "the rolling update"
	case d.Hibernation.Status != nil:
		in.Busy = "the hibernation"
	case rec != nil && (rec.Status.Directive != nil || !rec.Status.QuorumLostSince.IsZero()):
		in.Busy = "the quorum-loss recovery"
	}
	if in.Template == nil || in.Template.Cmp(in.Want) >= 0 || in.Deleting {
		return in, sts, nil
	}
	var claims corev1.PersistentVolumeClaimList
	if err := r.APIReader.List(ctx, &claims, client.InNamespace(ec.Namespace), client.MatchingLabels(selectorLabels(ec))); err != nil {
		return in, nil, err
	}
	classes := map[string]string{} // StorageClass name -> why it does not let a claim grow
	for i := range claims.Items {
		c := &claims.Items[i]
		n, ok := strings.CutPrefix(c.Name, "data-")
		if _, member := ordinal(ec, n); !ok || !member {
			continue
		}
		obs := claimObservation{Name: c.Name, Size: c.Spec.Resources.Requests[corev1.ResourceStorage],
			Owned: claimOf(c, sts.UID),
			Bound: c.Status.Phase == corev1.ClaimBound}
		class := ""
		if c.Spec.StorageClassName != nil {
			class = *c.Spec.StorageClassName
		}
		problem, known := classes[class]
		if !known {
			problem = r.classProblem(ctx, class)
			classes[class] = problem
		}
		obs.ClassProblem = problem
		in.Claims = append(in.Claims, obs)
	}
	return in, sts, nil
}

// classProblem says why the StorageClass does not let a claim grow ("": it does).
func (r *ClusterReconciler) classProblem(ctx context.Context, name string) string {
	if name == "" {
		return "it names no StorageClass"
	}
	var sc storagev1.StorageClass
	switch err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, &sc); {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("its StorageClass %s does not exist", name)
	case err != nil:
		return fmt.Sprintf("its StorageClass %s cannot be read: %v", name, err)
	case sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion:
		return fmt.Sprintf("its StorageClass %s does not allow volume expansion (allowVolumeExpansion)", name)
	}
	return ""
}

// claimOf: the claim is owned by the StatefulSet of that UID.
func claimOf(c *corev1.PersistentVolumeClaim, sts types.UID) bool {
	return slices.ContainsFunc(c.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == sts })
}

// resizeClaims asks each claim, read fresh, for size: a write with its resourceVersion, only
// of a claim the StatefulSet (sts, its UID) owns that asks for less.
func (r *ClusterReconciler) resizeClaims(ctx context.Context, ec *v1alpha1.EtcdCluster, sts types.UID, names []string, size resource.Quantity) error {
	for _, name := range names {
		var c corev1.PersistentVolumeClaim
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: name}, &c); err != nil {
			return err
		}
		if !claimOf(&c, sts) || c.Labels[LabelCluster] != ec.Name || c.Spec.Resources.Requests.Storage().Cmp(size) >= 0 {
			continue // changed since: the next pass decides again
		}
		patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
		c.Spec.Resources.Requests[corev1.ResourceStorage] = size
		if err := r.Client.Patch(ctx, &c, patch); err != nil {
			return fmt.Errorf("asking the volume claim %s/%s for %s: %w", ec.Namespace, name, size.String(), err)
		}
		r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "VolumeClaimResized", "ExpandVolumes", "volume claim %s asks for %s", name, size.String())
	}
	return nil
}

// recreateStatefulSet deletes the StatefulSet (read fresh, a UID precondition) leaving its
// pods and claims, which keep running and serving, and makes it anew as it was, with the
// claim template asking for size. The new StatefulSet takes the pods over; they restart
// only as a rolling update says. Should the operator stop between the two, the STATEFULSET
// component makes it anew (with the cluster's current pod template).
func (r *ClusterReconciler) recreateStatefulSet(ctx context.Context, ec *v1alpha1.EtcdCluster, sts *appsv1.StatefulSet, size resource.Quantity) error {
	uid := sts.UID
	if err := r.Client.Delete(ctx, sts, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.Recorder.Eventf(ec, nil, corev1.EventTypeNormal, "StatefulSetRecreated", "ExpandVolumes",
		"StatefulSet %s is deleted leaving its pods running, to be made anew with volume claims of %s", sts.Name, size.String())
	fresh := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: sts.Namespace, Name: sts.Name, Labels: sts.Labels,
		Annotations: sts.Annotations, OwnerReferences: sts.OwnerReferences}, Spec: *sts.Spec.DeepCopy()}
	for i := range fresh.Spec.VolumeClaimTemplates {
		if fresh.Spec.VolumeClaimTemplates[i].Name == "data" {
			fresh.Spec.VolumeClaimTemplates[i].Spec.Resources.Requests[corev1.ResourceStorage] = size
		}
	}
	// The garbage collector lets the old one go once it has released its pods: usually at once.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := r.Client.Create(ctx, fresh)
		if err == nil || !apierrors.IsAlreadyExists(err) || time.Now().After(deadline) {
			if apierrors.IsAlreadyExists(err) {
				return nil // still going: a later pass makes it anew
			}
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
