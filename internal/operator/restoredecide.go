package operator

import (
	"fmt"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/heal"
)

// restoreWait is how long an EtcdRestore waits for its cluster (to exist, to be unpaused, to
// form, to have a serving member) before it fails. Nothing is stopped while it waits.
const restoreWait = 10 * time.Minute

// restoreStep is what the EtcdRestore reconciler does after a decision.
type restoreStep int

const (
	// The zero step: only the status changes (waiting, following the directive, or done).
	_ restoreStep = iota
	// stepSnapshot: take a full snapshot of the present through a sidecar.
	stepSnapshot
	// stepCheck: check the target against the backup store (after the snapshot, whose
	// timeline is the cluster's present history).
	stepCheck
	// stepRequest: record the request to start (status.request) for the cluster's
	// reconciler, which issues the directive.
	stepRequest
	// stepRelease: the EtcdRestore is being deleted and nothing was fenced: let it go.
	stepRelease
	// stepCancel: the EtcdRestore is being deleted while its restore runs: ask the cluster's
	// recovery to withdraw it (AnnotationCancelRestore), which it does only while it is safe.
	stepCancel
)

// restoreObservation is what decideRestore looks at, read in one reconciliation.
type restoreObservation struct {
	Now     time.Time
	Restore *v1alpha1.EtcdRestore
	// Cluster is nil when it does not exist.
	Cluster *v1alpha1.EtcdCluster
	// Recovery is the cluster's status.recovery.
	Recovery heal.Status
	// Rival is another EtcdRestore of the same cluster that goes first ("" when none).
	Rival string
	// SidecarWait says why no sidecar can take the full snapshot now ("" when one can).
	SidecarWait string
	// DeltaRevision is the newest revision the deltas hold, as the delta-snapshot Lease says
	// (-1: unknown).
	DeltaRevision int64
}

// restoreDecision is the EtcdRestore's next status and the step that goes with it.
type restoreDecision struct {
	Step  restoreStep
	Phase string
	// Message is the new status.message.
	Message string
	// Target is the point handed to the members (stepRequest).
	Target cluster.RestoreTarget
	// Epoch is the directive the cluster's reconciler issued for the request, to record
	// (0: none yet, or recorded already).
	Epoch int64
	// Ack is the seed's acknowledgement, once the restored member serves.
	Ack *cluster.DirectiveResult
	// Cancel is the epoch of the directive to withdraw (stepCancel).
	Cancel int64
}

func terminal(phase string) bool {
	return phase == v1alpha1.RestoreSucceeded || phase == v1alpha1.RestoreFailed
}

// decideRestore moves an EtcdRestore one step. It is pure.
//
// Before the restore is requested of the cluster's reconciler (uncommitted) nothing is
// stopped: every refusal fails the restore with what to do, every wait ends after
// restoreWait, and a deletion lets the object go. A request is answered, never withdrawn:
// the directive issued for it (its epoch recorded), or another epoch issued first. From the
// directive on, the restore follows the directive of that epoch (or a later one with the
// same target: a recovery that restarts keeps an unreached target) until it retires; a
// deletion waits for that (the finalizer).
func decideRestore(o restoreObservation) restoreDecision {
	er := o.Restore
	st := er.Status
	switch {
	case terminal(st.Phase):
		dec := restoreDecision{Phase: st.Phase, Message: st.Message}
		if !er.DeletionTimestamp.IsZero() {
			dec.Step = stepRelease
		}
		return dec
	case st.Epoch != 0:
		return decideCommitted(o)
	case st.Request != nil:
		return decideRequested(o)
	}
	return decideUncommitted(o)
}

func decideUncommitted(o restoreObservation) restoreDecision {
	er, ec := o.Restore, o.Cluster
	fail := func(format string, a ...any) restoreDecision {
		return restoreDecision{Phase: v1alpha1.RestoreFailed, Message: fmt.Sprintf(format, a...)}
	}
	wait := func(why string) restoreDecision {
		if waited := o.Now.Sub(er.CreationTimestamp.Time); waited > restoreWait {
			return fail("%s; gave up after %s (nothing was stopped): create another EtcdRestore once the cluster is Ready", why, restoreWait)
		}
		if er.Status.Snapshot != nil {
			return restoreDecision{Phase: v1alpha1.RestoreSnapshotting, Message: why}
		}
		return restoreDecision{Phase: v1alpha1.RestorePending, Message: why}
	}
	switch {
	case !er.DeletionTimestamp.IsZero():
		return restoreDecision{Step: stepRelease, Phase: er.Status.Phase, Message: er.Status.Message}
	case ec == nil:
		return wait(fmt.Sprintf("EtcdCluster %s/%s does not exist", er.Namespace, er.Spec.Cluster))
	case !ec.DeletionTimestamp.IsZero():
		return fail("EtcdCluster %s is being deleted: nothing to restore", ec.Name)
	case ec.Spec.Backup == nil:
		return fail("EtcdCluster %s has no spec.backup: a restore in place reads the cluster's own backups; set spec.backup, "+
			"or create a new cluster from another store with spec.bootstrap.restore", ec.Name)
	case o.Rival != "":
		return fail("EtcdRestore %s is restoring EtcdCluster %s already: one restore acts on a cluster at a time; "+
			"once it has completed, create another EtcdRestore if this target is still wanted", o.Rival, ec.Name)
	case o.Recovery.Directive != nil:
		d := o.Recovery.Directive
		return fail("EtcdCluster %s is recovering (directive %d, %s: %s): a restore starts only on a running cluster; "+
			"create another EtcdRestore once the cluster is Ready", ec.Name, d.Epoch, d.Phase, d.Reason)
	case ec.Annotations[v1alpha1.AnnotationPaused] == "true":
		return wait(fmt.Sprintf("EtcdCluster %s is paused (%s=true): the restore starts once it is resumed", ec.Name, v1alpha1.AnnotationPaused))
	case ec.Status.ClusterID == "":
		return wait(fmt.Sprintf("EtcdCluster %s has not formed yet", ec.Name))
	case er.Status.Snapshot == nil:
		if o.SidecarWait != "" {
			return wait(o.SidecarWait + ": the full snapshot of the present, taken before the restore, waits for one")
		}
		return restoreDecision{Step: stepSnapshot, Phase: v1alpha1.RestoreSnapshotting,
			Message: "taking a full snapshot of the present, so that it stays restorable"}
	case er.Status.Target == nil && o.DeltaRevision < er.Status.Snapshot.Revision:
		// The deltas lag the present by up to a delta period: a revision between the newest
		// delta and the snapshot is in no backup yet, and the backup leader stops when the
		// members are fenced. Every revision up to the present must be stored first.
		return wait(fmt.Sprintf("waiting for the deltas to reach revision %d, the full snapshot's, so that every revision up to the present is stored (they hold %d)",
			er.Status.Snapshot.Revision, o.DeltaRevision))
	case er.Status.Target == nil:
		return restoreDecision{Step: stepCheck, Phase: v1alpha1.RestoreSnapshotting, Message: "checking the target against the backup store"}
	}
	t, err := pinTarget(er.Spec, *er.Status.Target, *er.Status.Snapshot)
	if err != nil {
		return fail("%v (nothing was stopped)", err)
	}
	return restoreDecision{Step: stepRequest, Phase: v1alpha1.RestoreFencing, Target: t,
		Message: fmt.Sprintf("restoring %s: requested of EtcdCluster %s, whose reconciler issues the directive that stops every member", t.Point(), ec.Name)}
}

// decideRequested answers a restore requested of the cluster's reconciler: the directive it
// issued for the request (the first epoch after the request's with its target, in force or
// retired already) is recorded and followed (decideCommitted); another epoch issued first
// fails the restore, nothing having been stopped for it; otherwise the request waits, also
// when the EtcdRestore is deleted meanwhile (the cluster's reconciler may be issuing the
// directive: once issued, the deletion cancels it).
func decideRequested(o restoreObservation) restoreDecision {
	er := o.Restore
	after := er.Status.Request.AfterEpoch
	if o.Cluster == nil || !o.Cluster.DeletionTimestamp.IsZero() {
		return restoreDecision{Phase: v1alpha1.RestoreFailed,
			Message: fmt.Sprintf("EtcdCluster %s was deleted before the restore's directive was issued (nothing was stopped for it)", er.Spec.Cluster)}
	}
	t, rec := restoreTarget(er.Status), o.Recovery
	for _, d := range []*cluster.Directive{rec.Directive, rec.LastRecovery} {
		if carries(d, after+1, t) {
			issued := o
			issued.Restore = er.DeepCopy()
			issued.Restore.Status.Epoch = d.Epoch
			dec := decideCommitted(issued)
			dec.Epoch = d.Epoch
			return dec
		}
	}
	if rec.LastEpoch > after {
		msg := fmt.Sprintf("EtcdCluster %s issued directive %d before the restore's", o.Cluster.Name, rec.LastEpoch)
		if d := rec.Directive; d != nil {
			msg = fmt.Sprintf("EtcdCluster %s started recovery %d (%s) before the restore's directive was issued", o.Cluster.Name, d.Epoch, d.Reason)
		}
		return restoreDecision{Phase: v1alpha1.RestoreFailed,
			Message: msg + "; nothing was stopped for the restore: create another EtcdRestore once the cluster is Ready"}
	}
	msg := fmt.Sprintf("restoring %s: waiting for EtcdCluster %s's reconciler to issue the directive that stops every member (after epoch %d)", t.Point(), o.Cluster.Name, after)
	if o.Cluster.Annotations[v1alpha1.AnnotationPaused] == "true" {
		msg = fmt.Sprintf("EtcdCluster %s is paused (%s=true): the restore starts once it is resumed; ", o.Cluster.Name, v1alpha1.AnnotationPaused) + msg
	}
	if !er.DeletionTimestamp.IsZero() {
		msg = "deleted: the directive is cancelled once issued; " + msg
	}
	return restoreDecision{Phase: v1alpha1.RestoreFencing, Message: msg}
}

// pinTarget is the target handed to the members, checked against the full snapshot taken
// first. A revision or the newest is pinned to a timeline (the one the store check found,
// else the cluster's present one, the snapshot's): the restored cluster starts a new timeline
// in the same store, and a recovery that restarts must still read the old one. A time
// without a timeline stays unpinned: the restore finds the timeline that holds it, which the
// new timeline (begun after it) never does.
func pinTarget(spec v1alpha1.EtcdRestoreSpec, checked v1alpha1.RestoreTargetStatus, snap v1alpha1.RestoreSnapshot) (cluster.RestoreTarget, error) {
	t := RestoreTargetOf(spec.Revision, spec.Timeline, spec.Time)
	if spec.Timeline == nil {
		t.Timeline = uint32(checked.Timeline)
	}
	if t.Timeline == 0 && t.Time.IsZero() {
		t.Timeline = uint32(snap.Timeline)
	}
	if t.Timeline == uint32(snap.Timeline) && t.Revision > snap.Revision {
		return t, fmt.Errorf("revision %d is beyond the present: the full snapshot of timeline %d taken just now is at revision %d",
			t.Revision, snap.Timeline, snap.Revision)
	}
	if !t.Time.IsZero() && snap.Time != nil && t.Time.After(snap.Time.Time) {
		return t, fmt.Errorf("time %s is after the present (%s): restore a time in the past, or give neither revision nor time for the newest backed-up revision",
			t.Time.UTC().Format(time.RFC3339), snap.Time.UTC().Format(time.RFC3339))
	}
	return t, nil
}

// restoreTarget is the target recorded in the status when the epoch was (the one the
// directive carries).
func restoreTarget(st v1alpha1.EtcdRestoreStatus) cluster.RestoreTarget {
	var t cluster.RestoreTarget
	if st.Target != nil {
		t.Revision, t.Timeline = st.Target.Revision, uint32(st.Target.Timeline)
		if st.Target.Time != nil {
			t.Time = st.Target.Time.Time
		}
	}
	return t
}

// carries: directive d carries this restore out: its epoch or a later one (a restart keeps
// an unreached target) with the same target from the cluster's own store.
func carries(d *cluster.Directive, epoch int64, t cluster.RestoreTarget) bool {
	if d == nil || d.Epoch < epoch || d.Restore == nil {
		return false
	}
	r := *d.Restore
	return r.Store == "" && r.Revision == t.Revision && r.Timeline == t.Timeline && r.Time.Equal(t.Time)
}

func decideCommitted(o restoreObservation) restoreDecision {
	er := o.Restore
	st := er.Status
	t := restoreTarget(st)
	rec := o.Recovery
	fail := func(format string, a ...any) restoreDecision {
		return restoreDecision{Phase: v1alpha1.RestoreFailed, Message: fmt.Sprintf(format, a...)}
	}
	if o.Cluster == nil || !o.Cluster.DeletionTimestamp.IsZero() {
		return fail("EtcdCluster %s was deleted during the restore (directive %d)", er.Spec.Cluster, st.Epoch)
	}
	d := rec.Directive
	switch {
	case carries(d, st.Epoch, t):
		dec := restoreDecision{Ack: d.Ack}
		switch d.Phase {
		case cluster.PhaseFencing:
			dec.Phase = v1alpha1.RestoreFencing
		case cluster.PhaseSeeding:
			dec.Phase = v1alpha1.RestoreRestoring
		default:
			dec.Phase = v1alpha1.RestoreRejoining
		}
		dec.Message = fmt.Sprintf("directive %d, %s: %s", d.Epoch, d.Phase, d.Reason)
		if rec.Waiting != "" {
			dec.Message = rec.Waiting
		}
		if d.Epoch != st.Epoch {
			dec.Message += fmt.Sprintf(" (the restore restarted: directive %d was abandoned)", st.Epoch)
		}
		if !er.DeletionTimestamp.IsZero() && d.Ack == nil {
			dec.Step, dec.Cancel = stepCancel, d.Epoch
			dec.Message = fmt.Sprintf("deleted: cancelling directive %d (%s=%d on EtcdCluster %s); ", d.Epoch, v1alpha1.AnnotationCancelRestore, d.Epoch, o.Cluster.Name) + dec.Message
		}
		if o.Cluster.Annotations[v1alpha1.AnnotationPaused] == "true" {
			dec.Message = fmt.Sprintf("EtcdCluster %s is paused (%s=true): the restore goes on once it is resumed; ", o.Cluster.Name, v1alpha1.AnnotationPaused) + dec.Message
		}
		return dec
	case carries(rec.LastRecovery, st.Epoch, t) && rec.LastRecovery.Ack != nil:
		a := rec.LastRecovery.Ack
		return restoreDecision{Phase: v1alpha1.RestoreSucceeded, Ack: a,
			Message: fmt.Sprintf("restored %s: revision %d, new cluster %s; every member is a voter again; the backups go on in a new timeline",
				t.Point(), a.Revision, a.ClusterID)}
	case st.RestoredRevision != 0:
		// The restored member served (its acknowledgement is recorded); a later recovery
		// took over before the others had all rejoined.
		msg := fmt.Sprintf("restored %s: revision %d, new cluster %s", t.Point(), st.RestoredRevision, st.ClusterID)
		if d != nil {
			msg += fmt.Sprintf("; the cluster has been recovering since (directive %d, %s)", d.Epoch, d.Phase)
		}
		return restoreDecision{Phase: v1alpha1.RestoreSucceeded, Message: msg}
	case rec.LastEpoch < st.Epoch:
		// The epoch is recorded from the directive in status.recovery, which never goes back:
		// this status.recovery was lost or replaced since.
		return fail("EtcdCluster %s's status.recovery is at epoch %d, below the restore's directive %d: it no longer holds the restore; "+
			"see the cluster's Events, and create another EtcdRestore once the cluster is Ready", o.Cluster.Name, rec.LastEpoch, st.Epoch)
	}
	if !er.DeletionTimestamp.IsZero() && rec.LastEpoch > st.Epoch {
		return fail("cancelled: the EtcdRestore was deleted before the restored member served; directive %d withdrew the restore "+
			"and the members restart on their own data", rec.LastEpoch)
	}
	return fail("the restore's directive %d is neither in force nor the last recovery (the newest epoch is %d): it was superseded "+
		"before its seed served; see the EtcdCluster's status.recovery and Events", st.Epoch, rec.LastEpoch)
}
