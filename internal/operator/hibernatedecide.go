package operator

import (
	"fmt"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The rows of a hibernation: spec.replicas: 0, or the annotation etcd.steward.dev/hibernate,
// on a formed cluster. A hibernation is no scale-down: no member leaves the ConfigMap or
// etcd's member list, and every member's volume, Lease and EtcdMember stay.
const (
	// CaseHibernate: hibernation is asked for and the members still run. The size to resume
	// at is recorded first; then, with spec.backup, a full snapshot is stored; then the
	// StatefulSet is scaled to 0.
	CaseHibernate Case = "Hibernate"
	// CaseHibernated: every member is stopped. Members being down is what was asked for: no
	// pod is restarted (case 9), no quorum is called lost (case 10), no recovery runs.
	CaseHibernated Case = "Hibernated"
	// CaseResume: hibernation is asked for no more: the StatefulSet goes back to the size the
	// cluster hibernated at, and the members restart on their data. Scaling to another size
	// waits, as it always does, until every member is Ready again.
	CaseResume Case = "Resume"
)

// Reasons of the Hibernated condition (Hibernated is also the reason of the conditions a
// hibernated cluster cannot meet: Ready, Quorate, AllMembersReady, BackupReady).
const (
	ReasonNotHibernated = "NotHibernated"
	ReasonHibernating   = "Hibernating"
	ReasonHibernated    = "Hibernated"
	ReasonResuming      = "Resuming"
)

// hibernationDecision is the hibernation's step.
type hibernationDecision struct {
	// Status is the new status.hibernation (nil: the cluster does not hibernate).
	Status *v1alpha1.HibernationStatus
	// Snapshot: take the full snapshot now, before the members stop.
	Snapshot bool
	// MembersDown: the members are stopped or restarting (phases Stopped and Resuming):
	// what acts on members being down (cases 9 and 10, the quorum-loss recovery) does not run.
	MembersDown bool
	// StatefulSetReplicas and ConfigMembers are the sizes to write.
	StatefulSetReplicas, ConfigMembers int32
}

// hibernationWanted: spec.replicas is 0 or the annotation asks for hibernation, and the
// cluster formed (one that never formed has nothing to keep: 0 members is all it is).
func hibernationWanted(o Observation) bool {
	return o.Formed && (o.Desired == 0 || o.Hibernate)
}

// hibernationSize is the size a hibernation keeps, or ok=false when the cluster does not
// hibernate (in this pass): not asked for, withdrawn before any member stopped, or resumed
// (the StatefulSet is back at the size it had: from here on the ordinary decisions scale it).
func hibernationSize(o Observation) (replicas int32, ok bool) {
	want, prev := hibernationWanted(o), o.Previous.Hibernation
	switch {
	case prev == nil && !want:
		return 0, false
	case prev == nil:
		// While a member leaves, the StatefulSet still runs it: the larger size is the one
		// to resume at, and the ordinary scale-down goes on afterwards.
		n := max(o.StatefulSetReplicas, o.ConfigMembers, o.Previous.ClusterSize)
		return n, n > 0
	case !want && prev.Phase == v1alpha1.HibernationStopping && o.StatefulSetReplicas != 0:
		// No member stopped. A StatefulSet at 0 says the stop was written although the status
		// that records it was not: the members stopped, and resume at the recorded size.
		return 0, false
	case !want && prev.Phase == v1alpha1.HibernationResuming && o.StatefulSetReplicas == prev.Replicas:
		return 0, false
	}
	return prev.Replicas, true
}

// decideHibernation is the hibernation's next step (pure), for a cluster that hibernates
// (hibernationSize), from the members as Decide found them (quorate). The record is stored
// before any member stops, so the size to resume at is never lost: the StatefulSet is scaled
// to 0 only in a later pass, from the record as stored. Nothing stops while a recovery or
// restore directive is in force (its members must carry it out). With spec.backup (and
// without spec.updateStrategy.skipBackup) the members stop only once a full snapshot is
// stored; a cluster without quorum cannot take one and writes nothing the backups lack, so
// it stops without it, and the record says so.
func decideHibernation(o Observation, d *Decision, replicas int32, quorate bool) hibernationDecision {
	prev := o.Previous.Hibernation
	keep := func(n int32) int32 {
		if n < 0 {
			return replicas
		}
		return n
	}
	config := keep(o.ConfigMembers)
	if !hibernationWanted(o) {
		st := prev.DeepCopy()
		st.Phase = v1alpha1.HibernationResuming
		st.Message = fmt.Sprintf("resuming: the StatefulSet is back at %d members, which restart on their data", replicas)
		if o.Desired != replicas {
			st.Message += fmt.Sprintf("; scaling to %d follows once every member is Ready", o.Desired)
		}
		addCase(d, CaseResume)
		return hibernationDecision{Status: st, MembersDown: true, StatefulSetReplicas: replicas, ConfigMembers: config}
	}
	if prev != nil && prev.Phase == v1alpha1.HibernationStopped {
		addCase(d, CaseHibernated)
		return hibernationDecision{Status: prev.DeepCopy(), MembersDown: true, ConfigMembers: config}
	}
	addCase(d, CaseHibernate)
	recorded := prev != nil && prev.Phase == v1alpha1.HibernationStopping
	st := &v1alpha1.HibernationStatus{Phase: v1alpha1.HibernationStopping, Replicas: replicas, Since: metav1.NewTime(o.Now)}
	if recorded {
		st = prev.DeepCopy()
	}
	running := hibernationDecision{Status: st, StatefulSetReplicas: keep(o.StatefulSetReplicas), ConfigMembers: config}
	if rec := o.Recovery; rec != nil && rec.Status.Directive != nil {
		st.Message = fmt.Sprintf("the members stop once recovery %d is over (%s)", rec.Status.Directive.Epoch, rec.Status.Directive.Phase)
		return running
	}
	if o.SnapshotBeforeStop && st.SnapshotKey == "" && quorate {
		st.Message = fmt.Sprintf("taking a full snapshot before the %d members stop", replicas)
		running.Snapshot = true
		return running
	}
	if !recorded {
		st.Message = fmt.Sprintf("hibernating at %d members: they stop once this is recorded", replicas)
		return running
	}
	st.Phase = v1alpha1.HibernationStopped
	switch {
	case st.SnapshotKey != "":
		st.Message = fmt.Sprintf("full snapshot %s at revision %d stored", st.SnapshotKey, st.SnapshotRevision)
	case o.SnapshotBeforeStop:
		st.Message = "no full snapshot: without a quorum none can be taken"
	default:
		st.Message = "no full snapshot (spec.backup is not set, or spec.updateStrategy.skipBackup is)"
	}
	st.Message += "; every member is stopped, its data kept on its volume"
	return hibernationDecision{Status: st, MembersDown: true, ConfigMembers: config}
}

// hibernationConditions sets what a hibernation changes in the conditions: Hibernated itself,
// Progressing while it stops or resumes and, while the members are stopped or restarting,
// the reason of every condition they cannot meet then (a quorum is not lost, the backups
// are not stale: the cluster was stopped).
func hibernationConditions(d *Decision, set func(t string, ok bool, reason, msg string)) {
	h := d.Hibernation.Status
	if h == nil {
		set(v1alpha1.ConditionHibernated, false, ReasonNotHibernated, fmt.Sprintf(
			"the members run; spec.replicas: 0 or the annotation %s=true stops them, keeping their data", v1alpha1.AnnotationHibernate))
		return
	}
	reason, msg := ReasonHibernating, h.Message
	switch h.Phase {
	case v1alpha1.HibernationStopped:
		reason = ReasonHibernated
		msg = fmt.Sprintf("hibernated at %d members since %s: %s; to resume, set spec.replicas to %d (or remove the annotation %s)",
			h.Replicas, h.Since.UTC().Format(time.RFC3339), h.Message, h.Replicas, v1alpha1.AnnotationHibernate)
	case v1alpha1.HibernationResuming:
		reason = ReasonResuming
	}
	set(v1alpha1.ConditionHibernated, h.Phase == v1alpha1.HibernationStopped, reason, msg)
	set(v1alpha1.ConditionProgressing, h.Phase != v1alpha1.HibernationStopped, reason, msg)
	if d.Hibernation.MembersDown {
		for _, t := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionQuorate, v1alpha1.ConditionAllMembersReady,
			v1alpha1.ConditionBackupReady, v1alpha1.ConditionDegraded, v1alpha1.ConditionQuorumLost} {
			set(t, false, reason, msg)
		}
	}
}
