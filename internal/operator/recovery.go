package operator

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/heal"
	"k8s.io/apimachinery/pkg/types"
)

// Recovery holds what the quorum-loss recovery needs beyond the member status: the state
// heal.Decide keeps (in status.recovery), the seeds' acknowledgements, the policy and its
// confirmation, and the newest revision the backups hold.
type Recovery struct {
	// Status is the recovery state as the status records it (cluster ID and voters included).
	Status heal.Status
	// Acks are the directive acknowledgements the members wrote in their EtcdMembers.
	Acks map[string]cluster.DirectiveAck
	// Policy is Automatic or Manual; Confirmed the epoch the confirm annotation names (0: none).
	Policy    string
	Confirmed int64
	// CancelRestore is the epoch of a restore in place to withdraw (0: none): an EtcdRestore
	// deleted while its restore runs.
	CancelRestore int64
	// RestoreRequest is an EtcdRestore's request to start its restore in place (nil: none).
	RestoreRequest *RestoreRequest
	// Backup is what the store holds, as the backup leader last published it.
	Backup heal.Backup
	Timing heal.Timing
}

// RestoreRequest is an EtcdRestore's request to restore the cluster in place (its
// status.request): its reconciler has stored the full snapshot of the present and checked
// the target; the cluster's reconciler, the one writer of status.recovery, issues the
// directive that carries it out.
type RestoreRequest struct {
	// Name and UID are the EtcdRestore's.
	Name string
	UID  types.UID
	// Target is the point to restore (its status.target), from the cluster's own store.
	Target cluster.RestoreTarget
	// AfterEpoch is status.recovery's lastEpoch when the restore was requested: the directive
	// is issued only while it still is, and so once.
	AfterEpoch int64
	// Snapshot is the full snapshot of the present taken first.
	Snapshot v1alpha1.RestoreSnapshot
}

// recoveryOutcome is what the recovery step decided.
type recoveryOutcome struct {
	Status heal.Status
	Event  string
	// FencePods are member pods older than the directive: their etcd may still run, so they
	// are deleted; their replacements wait for the directive.
	FencePods []string
	// Held says why a Manual recovery waits for its confirmation ("" when it does not).
	Held string
	// Withdrawn: a quorum-loss recovery was about to fence the members, or was fencing
	// them, but a member answered a linearizable read (Observation.Answers).
	Withdrawn bool
	// Started is the restore request whose directive this outcome issues (nil: none).
	Started *RestoreRequest
	// Awaited are the voters the quorum-loss recovery waits for, fencing, before it can
	// choose a source: stopped, without a report from disk (heal.AwaitedVoters).
	Awaited []string
}

// FencesForQuorumLoss says whether the outcome stops members because the quorum is lost: a
// directive of a quorum loss (not a restore the user asked for) in its fencing phase. Only
// then does the operator ask the members, directly, whether the quorum still answers.
func (out recoveryOutcome) FencesForQuorumLoss() bool {
	return heal.FencingQuorumLoss(out.Status.Directive)
}

// decideRecovery moves a quorum-loss recovery one step with heal.Decide, from the members'
// reports and readiness; or starts the restore an EtcdRestore requests (heal.StartRestore),
// or withdraws the one its deletion cancels (heal.CancelRestoreOf). A member counts as
// stopped once its pod is gone or was created after the directive: its sidecar then holds
// its etcd until the directive says otherwise. A pod that cannot be deleted (its node is
// lost) never counts as stopped, and the recovery waits for it, as it must: its etcd may
// still serve.
//
// The members are the desired ones (names), with what the status says of them: a member whose
// pod does not exist yet is still a member of the recovery.
func decideRecovery(o Observation, names []string, members []v1alpha1.MemberStatus, rec Recovery) recoveryOutcome {
	st := heal.FoldAck(rec.Status, func(seed string) (cluster.DirectiveAck, bool) { a, ok := rec.Acks[seed]; return a, ok })
	reports := map[string]cluster.Report{}
	maps.Copy(reports, o.Reports)
	maps.Copy(reports, o.DirectReports)
	hm := heal.Members(statusMembers(names, members, reports), func(name string) (bool, time.Time) {
		d := st.Directive
		if d == nil {
			return false, time.Time{}
		}
		switch mo := findMember(o.Members, name); {
		case mo == nil || mo.Pod == nil:
			return true, d.IssuedAt
		case !madeBefore(d, mo.Pod.Created):
			return true, mo.Pod.Created
		}
		return false, time.Time{}
	})
	ho := heal.Observation{Now: o.Now, Status: st, Members: hm, Backup: rec.Backup, Timing: rec.Timing}
	var refused string
	if rec.CancelRestore != 0 {
		dec, err := heal.CancelRestoreOf(ho, rec.CancelRestore)
		switch {
		case err == nil:
			return withFence(o, recoveryOutcome{Status: dec.Status, Event: dec.Event})
		case !errors.Is(err, heal.ErrRestoreNotInForce):
			refused = err.Error()
		}
	}
	if req := rec.RestoreRequest; req != nil && st.LastEpoch == req.AfterEpoch {
		// The new directive moves lastEpoch past the request's, so a request starts one
		// restore. A directive in force refuses it (StartRestore): the request waits.
		if dec, err := heal.StartRestore(ho, req.Target); err == nil {
			return withFence(o, recoveryOutcome{Status: dec.Status, Event: dec.Event, Started: req})
		}
	}
	dec := heal.Decide(ho)
	out := recoveryOutcome{Status: dec.Status, Event: dec.Event}
	ho.Status = dec.Status
	out.Awaited = heal.AwaitedVoters(ho)
	if refused != "" {
		out.Status.Waiting = refused + "; " + out.Status.Waiting
	}
	if nd := dec.Status.Directive; rec.Policy == v1alpha1.QuorumLossManual && nd != nil && nd.Phase == cluster.PhaseSeeding && nd.Restore == nil &&
		(st.Directive == nil || st.Directive.Phase == cluster.PhaseFencing) && rec.Confirmed != nd.Epoch {
		// Manual: stop before anything is changed on disk, and say what would happen. A
		// restore is not held: the user's EtcdRestore (or bootstrap.restore) is the confirmation.
		out.Status, out.Event = st, ""
		out.Held = fmt.Sprintf("recovery %d would start from %s (%s): %s", nd.Epoch, nd.Seed, nd.Mode, nd.Reason)
		for _, a := range nd.Alternatives {
			out.Held += "; not chosen: " + a
		}
		out.Held += fmt.Sprintf(". To go ahead: kubectl annotate etcdcluster %s %s=%d", o.Name, v1alpha1.AnnotationConfirmRecovery, nd.Epoch)
		out.Status.Waiting = out.Held
	}
	if !out.FencesForQuorumLoss() {
		return withFence(o, out)
	}
	// A cluster that answers a linearizable read is never fenced, whatever the Leases, the
	// pods' readiness or the reports say; until the members were asked, none is.
	if name := answering(o, nil); name != "" {
		dec := heal.Withdraw(ho, out.Status, fmt.Sprintf("%s answers a linearizable read, so the quorum serves: no member is fenced", name))
		return recoveryOutcome{Status: dec.Status, Event: dec.Event, Withdrawn: true}
	}
	if o.Answers == nil {
		return out
	}
	return withFence(o, out)
}

// statusMembers are the members named, as the status records them (members) with their
// reports: what heal.Members reads. A member the status does not list yet is still a member.
func statusMembers(names []string, members []v1alpha1.MemberStatus, reports map[string]cluster.Report) []cluster.StatusMember {
	out := make([]cluster.StatusMember, 0, len(names))
	for _, name := range names {
		ms := v1alpha1.MemberStatus{Name: name}
		if i := slices.IndexFunc(members, func(m v1alpha1.MemberStatus) bool { return m.Name == name }); i >= 0 {
			ms = members[i]
		}
		// Unknown is a Ready pod whose Lease is not renewed: its readiness probe is etcd's
		// linearizable read, so it serves, and never counts towards a quorum loss.
		serves := ms.Status == v1alpha1.MemberReady || ms.Status == v1alpha1.MemberUnknown
		sm := cluster.StatusMember{Name: ms.Name, Ready: serves, ID: ms.ID, Learner: ms.Role == v1alpha1.RoleLearner}
		if r, ok := reports[ms.Name]; ok {
			sm.Report = &r
		}
		out = append(out, sm)
	}
	return out
}

// fenceFrom divides the pods of directive d's recovery: a pod's creation time has whole
// seconds, so one made after d in the second it was issued reads as made before it. A pod made
// before the end of that second is older than d, and fenced; only once the clock has left it
// are pods fenced, so that the ones made from then on are never fenced by d.
func fenceFrom(d *cluster.Directive) time.Time {
	return d.IssuedAt.Truncate(time.Second).Add(time.Second)
}

// madeBefore says whether a pod created at created (whole seconds) predates directive d.
func madeBefore(d *cluster.Directive, created time.Time) bool { return created.Before(fenceFrom(d)) }

// withFence lists the member pods the directive in force fences: those older than it.
func withFence(o Observation, out recoveryOutcome) recoveryOutcome {
	if d := out.Status.Directive; d != nil {
		for _, m := range o.Members {
			if m.Pod != nil && !m.Pod.Deleting && madeBefore(d, m.Pod.Created) {
				out.FencePods = append(out.FencePods, m.Name)
			}
		}
	}
	return out
}

// encodeRecovery keeps heal's state in status.recovery (cluster ID and voters have typed fields).
// The JSON is canonical (keys sorted, as the API server stores schemaless fields), so that
// an unchanged state compares equal to what was read back and is not written again.
func encodeRecovery(st heal.Status) ([]byte, error) {
	st.ClusterID, st.Voters = "", nil
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// decodeRecovery reads status.recovery.
func decodeRecovery(raw []byte) (heal.Status, error) {
	var st heal.Status
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &st); err != nil {
			return st, err
		}
	}
	return st, nil
}
