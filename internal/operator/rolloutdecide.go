package operator

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/maintenance"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CaseRollingUpdate: member pods run an older template than the StatefulSet's.
const CaseRollingUpdate Case = "RollingUpdate"

// Progressing reasons of a rolling update.
const (
	ReasonRollingUpdate        = "RollingUpdate"
	ReasonRollingUpdateStalled = "RollingUpdateStalled"
)

// leaderMoveSettle is how long a rolling update waits, after asking for a leadership move,
// for the members to report it (a report is written at once when the leader changes).
const leaderMoveSettle = 10 * time.Second

// RolloutObservation is what a rolling update decides from, besides the members.
type RolloutObservation struct {
	// Revision is the StatefulSet's status.updateRevision: the revision a pod created now
	// gets. Empty while the StatefulSet controller has not observed the newest template.
	Revision string
	// Trust is the trust annotation of the StatefulSet's pod template (spec.tls).
	Trust  string
	Leader maintenance.LeaderUpdate
	// Template identifies the pod template the StatefulSet has; Pending, a newer one that
	// waits to be applied ("" when none waits).
	Template, Pending string
}

// rolloutDecision is one step of a rolling update.
type rolloutDecision struct {
	// Status is the new status.rollout (nil: no rolling update in progress).
	Status *v1alpha1.RolloutStatus
	// Snapshot: take a full snapshot now, before the first pod is deleted.
	Snapshot bool
	// Delete is the member whose pod is deleted now, to restart it on Status.Revision.
	Delete string
	// MoveFrom asks this leader's sidecar to hand leadership to MoveTo.
	MoveFrom, MoveTo string
	// Why is the step's reason (for the Event).
	Why string
	// Stalled: the rollout stalled in this pass; Done: it ended in this pass.
	Stalled, Done bool
	// Reason and Message are the Progressing condition's while Status is set.
	Reason, Message string
	// ApplyTemplate: the StatefulSet takes any new pod template now. ApplyPending: it takes
	// this waiting template now (its full snapshot is stored). Otherwise a new template
	// waits, and the StatefulSet keeps the last one.
	ApplyTemplate bool
	ApplyPending  string
}

// mayApply says whether the StatefulSet takes the pod template identified by hash now.
func (rd rolloutDecision) mayApply(hash string) bool {
	return rd.ApplyTemplate || rd.ApplyPending == hash
}

// decideRollout is the next step of a rolling update (pure). Nothing is deleted while the
// cluster hibernates, has not formed, a recovery or restore owns the members, the cluster scales or
// restarts members NotReady too long, or has no quorum. The first pod is deleted only when
// every member is Ready and, unless skipped, a full snapshot newer than the template change
// is stored. Then maintenance.NextRestart orders the members: followers one at a time by
// name, each restarted member Ready, healthy and caught up before the next, the leader last
// after its leadership moved.
func decideRollout(o Observation, d *Decision, quorate, all bool) rolloutDecision {
	rd := rolloutStep(o, d, quorate, all)
	rd.ApplyTemplate = rd.ApplyTemplate || templateAtOnce(o, d)
	return rd
}

// templateAtOnce: nothing serves that a new pod template could harm (the cluster has not
// formed, or its quorum is lost past the grace), and the change may be what the members need
// to start: the StatefulSet takes it at once.
func templateAtOnce(o Observation, d *Decision) bool { return !o.Formed || d.QuorumLost }

// rolloutStep is decideRollout's step. A new pod template waits, unapplied, until the rolling
// update owns it: with pods already on an older revision (a rollout under way), at once;
// otherwise after the full snapshot that comes before any member is stopped, with a quorum and
// no recovery or restore owning the members. Until then a pod that restarts for any other
// reason (an eviction, a lost node, a restart of a member NotReady too long) runs the last
// template, which its members ran.
func rolloutStep(o Observation, d *Decision, quorate, all bool) rolloutDecision {
	ro, prev := o.Rollout, o.Previous.Rollout
	if h := d.Hibernation; h.Status != nil {
		if h.MembersDown || prev == nil {
			// Every member restarts on the StatefulSet's template when the cluster resumes:
			// a rolling update under way is over once they stop, and none starts meanwhile.
			return rolloutDecision{ApplyTemplate: h.MembersDown}
		}
		return rolloutDecision{Status: prev.DeepCopy(), Reason: ReasonRollingUpdate, Message: prev.Message}
	}
	if ro == nil {
		return rolloutDecision{ApplyTemplate: true} // no StatefulSet yet
	}
	if ro.Revision == "" {
		// The target revision is not known yet: the record stays as it is.
		if prev != nil {
			return rolloutDecision{Status: prev.DeepCopy(), Reason: ReasonRollingUpdate, Message: prev.Message}
		}
		return rolloutDecision{}
	}
	var outdated []string
	for _, m := range o.Members {
		if int32(m.Ordinal) < d.ClusterSize && m.Pod != nil && !m.Pod.Deleting && m.Pod.Revision != ro.Revision {
			outdated = append(outdated, m.Name)
		}
	}
	if len(outdated) == 0 {
		switch {
		case ro.Pending != "":
			return pendingTemplate(o, d, quorate)
		case prev != nil && prev.Revision == ro.Revision && len(prev.Updated) > 0:
			return rolloutDecision{Done: true, Why: fmt.Sprintf("every member runs revision %s (restarted: %v)", ro.Revision, prev.Updated)}
		}
		return rolloutDecision{}
	}
	addCase(d, CaseRollingUpdate)
	st := &v1alpha1.RolloutStatus{Revision: ro.Revision, StartTime: metav1.NewTime(o.Now)}
	switch {
	case prev != nil && prev.Revision == ro.Revision:
		st = prev.DeepCopy()
	case prev != nil && prev.Revision == "" && prev.Template != "" && prev.Template == ro.Template:
		// The template that waited is applied: its snapshot stands.
		st = prev.DeepCopy()
		st.Revision = ro.Revision
	}
	// The rollout owns the members: a newer template joins it at once.
	rd := rolloutDecision{Status: st, Reason: ReasonRollingUpdate, ApplyTemplate: true}
	wait := func(msg string) rolloutDecision {
		st.Message, rd.Message = msg, msg
		return rd
	}
	left := fmt.Sprintf("%d of %d left", len(outdated), d.ClusterSize)
	rec := d.Recovery
	switch {
	case !o.Formed:
		return wait(fmt.Sprintf("%s: waiting for the cluster to form before any pod is deleted", left))
	case rec != nil && (rec.Status.Directive != nil || rec.Held != "") || d.QuorumLost:
		return wait(fmt.Sprintf("%s: a recovery or restore owns the members; no pod is deleted until it is over", left))
	case o.StatefulSetReplicas != o.Desired || o.ConfigMembers != o.StatefulSetReplicas || d.StatefulSetReplicas != o.StatefulSetReplicas:
		return wait(fmt.Sprintf("%s: the cluster scales to %d members first", left, o.Desired))
	case len(d.DeletePods) > 0:
		return wait(fmt.Sprintf("%s: members NotReady for too long are restarted first (%v)", left, d.DeletePods))
	case len(d.ReplaceVolumes) > 0:
		return wait(fmt.Sprintf("%s: members whose volumes are lost with their nodes are replaced first", left))
	case !quorate:
		return wait(fmt.Sprintf("%s: no quorum (%d of %d members Ready); no pod is deleted", left, d.Ready, d.ClusterSize))
	}
	if len(st.Updated) == 0 {
		if !all {
			return wait(fmt.Sprintf("%s: waiting for every member to be Ready before the first pod is deleted (%d of %d Ready)", left, d.Ready, d.ClusterSize))
		}
		if take, _ := snapshotFirst(o, st); take {
			rd.Snapshot = true
			return wait(fmt.Sprintf("%s: taking a full snapshot before the first pod is deleted", left))
		}
	}
	members := rolloutMembers(o, d)
	if st.LeaderMovedAt != nil && o.Now.Sub(st.LeaderMovedAt.Time) < leaderMoveSettle && stillLeads(members, st.LeaderMovedFrom) {
		return wait(fmt.Sprintf("%s: waiting for the members to report the leadership move away from %s", left, st.LeaderMovedFrom))
	}
	step := maintenance.NextRestart(members, maintenance.Rollout{Outdated: outdated, Leader: ro.Leader, Moves: int(st.LeaderMoves)})
	switch step.Kind {
	case maintenance.StepRestart:
		name := step.Member.Name
		if !slices.Contains(st.Updated, name) {
			st.Updated = append(st.Updated, name)
		}
		since := metav1.NewTime(o.Now)
		st.Current, st.CurrentSince, st.Stalled = name, &since, false
		rd.Delete, rd.Why = name, step.Reason
		return wait(fmt.Sprintf("updating %s (%s): %s", name, left, step.Reason))
	case maintenance.StepMoveLeader:
		at := metav1.NewTime(o.Now)
		st.LeaderMoves++
		st.LeaderMovedFrom, st.LeaderMovedAt = step.Member.Name, &at
		rd.MoveFrom, rd.MoveTo, rd.Why = step.Member.Name, step.To.Name, step.Reason
		return wait(fmt.Sprintf("moving leadership from %s to %s (%s)", step.Member.Name, step.To.Name, left))
	}
	// A wait. The member restarted last not back within the grace stalls the rollout where
	// it is: a bad template takes down one member, never a second.
	msg := fmt.Sprintf("%s: %s", left, step.Reason)
	if st.Current != "" {
		msg = fmt.Sprintf("updating %s (%s): %s", st.Current, left, step.Reason)
	}
	if cur := st.Current; cur != "" && st.CurrentSince != nil && o.Now.Sub(st.CurrentSince.Time) >= o.Graces.Rollout &&
		!slices.ContainsFunc(members, func(m maintenance.Member) bool { return m.Name == cur && m.Answered }) {
		rd.Stalled, st.Stalled = !st.Stalled, true
		rd.Reason = ReasonRollingUpdateStalled
		msg = fmt.Sprintf("%s has not come back healthy in the %s since its pod was deleted; no other pod is deleted until it does (see its pod's Events and logs; a bad template can be reverted): %s",
			cur, o.Now.Sub(st.CurrentSince.Time).Round(time.Second), msg)
	} else {
		st.Stalled = false
	}
	return wait(msg)
}

// pendingTemplate decides for a new pod template that waits while every member runs the
// last one: the full snapshot first (unless skipped), then the template is applied, with a
// quorum and no recovery or restore owning the members. The wait is the message of
// status.rollout, which records the waiting template and its snapshot.
func pendingTemplate(o Observation, d *Decision, quorate bool) rolloutDecision {
	if templateAtOnce(o, d) {
		return rolloutDecision{}
	}
	addCase(d, CaseRollingUpdate)
	pending, prev := o.Rollout.Pending, o.Previous.Rollout
	st := &v1alpha1.RolloutStatus{Template: pending, StartTime: metav1.NewTime(o.Now)}
	if prev != nil && prev.Revision == "" && prev.Template == pending {
		st = prev.DeepCopy()
	}
	rd := rolloutDecision{Status: st, Reason: ReasonRollingUpdate}
	wait := func(msg string) rolloutDecision {
		st.Message, rd.Message = "the pod template changed: "+msg, "the pod template changed: "+msg
		return rd
	}
	switch rec := d.Recovery; {
	case rec != nil && (rec.Status.Directive != nil || rec.Held != ""):
		return wait("a recovery or restore owns the members; the new template is applied after it")
	case !quorate:
		return wait(fmt.Sprintf("no quorum (%d of %d members Ready); the new template waits for one", d.Ready, d.ClusterSize))
	}
	take, without := snapshotFirst(o, st)
	if take {
		rd.Snapshot = true
		return wait("taking a full snapshot before the new template is applied")
	}
	rd.ApplyPending = pending
	return wait("applying it to the StatefulSet; the members restart on it one at a time" + without)
}

// snapshotFirst says whether a full snapshot is taken before the rolling update goes on: with
// SnapshotBeforeStop and none stored for it yet, when the backups are current. Backups that
// are not (just turned on, so the members have no store yet; or failing, which the change may
// fix) could not store one: the rolling update goes on without it, and without says why.
func snapshotFirst(o Observation, st *v1alpha1.RolloutStatus) (take bool, without string) {
	if !o.SnapshotBeforeStop || st.SnapshotKey != "" {
		return false, ""
	}
	if ok, why := backupCurrent(o); !ok {
		return false, "; no full snapshot first: " + why
	}
	return true, ""
}

// rolloutMembers describes the members as maintenance.NextRestart sees them, from what they
// report. A member answers when its pod is Ready, its Lease current and renewed by the
// sidecar of this very pod (renewed after the pod was created: a restarted member's old
// report does not count), and its report says it serves. Caught up compares the raft applied
// indexes the reports carry; those figures are refreshed every 10 s (kubeview), so a member
// whose report is older than the leader's may look behind until its next report, never ahead.
func rolloutMembers(o Observation, d *Decision) []maintenance.Member {
	var leaderID uint64
	for _, r := range o.Reports {
		if r.Serving && r.Leader {
			leaderID = hexID(r.MemberID)
		}
	}
	var out []maintenance.Member
	for _, mo := range o.Members {
		if int32(mo.Ordinal) >= d.ClusterSize {
			continue
		}
		m := maintenance.Member{Name: mo.Name}
		r, ok := o.Reports[mo.Name]
		st := slices.IndexFunc(d.Members, func(s v1alpha1.MemberStatus) bool { return s.Name == mo.Name })
		m.Answered = ok && r.Serving && st >= 0 && d.Members[st].Status == v1alpha1.MemberReady &&
			mo.Pod != nil && !mo.Pod.Deleting && mo.Lease != nil && mo.Lease.Renewed.After(mo.Pod.Created)
		if ok {
			m.ID, m.Learner = hexID(r.MemberID), r.Learner
		}
		if m.Answered {
			m.RaftApplied, m.Leader = r.Applied, hexID(r.LeaderID)
			if m.Leader == 0 {
				m.Leader = leaderID // a sidecar that does not report whom it follows
			}
		}
		out = append(out, m)
	}
	return out
}

// stillLeads: the members that answer do not all report a leader other than name (a move
// asked of it is not reported yet).
func stillLeads(members []maintenance.Member, name string) bool {
	var id uint64
	for _, m := range members {
		if m.Name == name {
			id = m.ID
		}
	}
	for _, m := range members {
		if m.Answered && (m.Leader == id || m.Leader == 0) {
			return true
		}
	}
	return false
}

func hexID(s string) uint64 {
	v, _ := strconv.ParseUint(s, 16, 64)
	return v
}
