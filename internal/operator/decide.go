// Package operator reconciles EtcdClusters: one component per owned object, the member status
// from the sidecars' Leases and the pods, and a pure decision (Decide) over what was observed.
package operator

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/heal"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/units"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Case names a row of the operator's status table (docs/decisions.md): what the reconciliation
// observed, and so what it does. A value starts with the row's number; the rows Steward adds
// to the numbered ones (Bootstrap, StatefulSetReplicasDiffer, the hibernation's) have none.
type Case string

// The rows, numbered 1 to 13, then the unnumbered ones.
const (
	CasePinkOfHealth    Case = "1-PinkOfHealth"
	CaseLeasesOutOfSync Case = "2-MemberStatusOutOfSyncWithLeases"
	// 3: every member is Ready, but AllMembersReady is still False.
	CaseAllMembersReadyStaleFalse Case = "3-AllMembersReadyStaleFalse"
	// 4: a member is not Ready, but AllMembersReady is still True.
	CaseAllMembersReadyStaleTrue Case = "4-AllMembersReadyStaleTrue"
	// 5: a majority is Ready, but Ready is still False.
	CaseReadyConditionStaleFalse Case = "5-ReadyStaleFalse"
	// 6: a majority is not Ready, but Ready is still True.
	CaseReadyConditionStaleTrue Case = "6-ReadyStaleTrue"
	CaseUnknownTooLong          Case = "7-UnknownTooLong"
	CasePodNotReady             Case = "8-PodNotReady"
	CaseMinorityNotReady        Case = "9-QuorateMinorityNotReady"
	CaseQuorumLost              Case = "10-QuorumLost"
	CaseScaleUp                 Case = "11-ScaleUp"
	CaseScaleDown               Case = "12-ScaleDown"
	CaseSuperfluousEntries      Case = "13-SuperfluousMemberEntries"
	CaseBootstrap               Case = "Bootstrap"
	CaseStatefulSetMismatch     Case = "StatefulSetReplicasDiffer"
	// CaseQuorumAnswers: the evidence says the quorum is lost, but a member, asked directly,
	// answers a linearizable read: the recovery is withdrawn and nothing is fenced.
	CaseQuorumAnswers Case = "QuorumAnswersLinearizableRead"
	// CaseVolumeNodeLost: a member NotReady past the grace has its volume pinned to a node
	// marked out of service (or gone), and another member answers a linearizable read: its
	// claim and pod are deleted, and it joins again on a new volume, as a learner first.
	CaseVolumeNodeLost Case = "VolumeNodeLost"
	// CaseRecoveryVolumeNodeLost: a quorum-loss recovery waits for the reports from disk of
	// voters whose volumes are pinned to nodes marked out of service (or gone), no member
	// answers a linearizable read, and the policy is Automatic: those voters' logs are gone
	// with their nodes, so their claims and pods are deleted; each comes back on a new, empty
	// volume, reports it empty, and the recovery goes on from the survivors and the backup.
	CaseRecoveryVolumeNodeLost Case = "RecoveryVolumeNodeLost"
	// CaseRestartUnproven: members are NotReady past the grace and the evidence says the quorum
	// serves, but asked directly no other member answers a linearizable read: nothing is
	// restarted (Decision.RestartsHeld says why).
	CaseRestartUnproven Case = "RestartUnproven"
	// CaseRestoreRequested: an EtcdRestore requests its restore in place, and no directive
	// was issued since: the directive that carries it out is issued, and every member fenced.
	CaseRestoreRequested Case = "RestoreRequested"
	// CaseMemberFenced: a user fences members (the annotation etcd.steward.dev/fenced-members):
	// their etcd is held stopped (a pod whose etcd still serves is deleted once), and they are
	// neither restarted (case 9) nor counted as a fault (Degraded); they count as down towards
	// a lost quorum (case 10), since they cannot vote.
	CaseMemberFenced Case = "MemberFenced"
	// CaseFenceRefused: a fence asked for is not applied: the name is no member, or fencing
	// it would leave fewer than a quorum of Ready voters unfenced.
	CaseFenceRefused Case = "FenceRefused"
	// CaseFenceSuspended: a recovery directive is in force (a quorum-loss recovery or a restore
	// in place), so no fence is: the recovery needs every member's data, a fenced member's
	// too (it may hold the newest), and waits for every member to follow the directive. The
	// fences apply again once it is done, by the ordinary rule.
	CaseFenceSuspended Case = "FenceSuspended"
)

// Reasons of the cluster's conditions that more than one step sets or tests look for.
const (
	// ReasonBootstrapping: the cluster has not formed yet (Ready and Progressing).
	ReasonBootstrapping = "Bootstrapping"
	// ReasonSyncFailed: a step of the pass failed (Progressing; status.lastErrors has each).
	ReasonSyncFailed = "SyncFailed"
	// ReasonInvalidSpec: the spec asks for what the operator cannot do, so it does nothing
	// (Progressing).
	ReasonInvalidSpec = "InvalidSpec"
)

// Graces are how long the operator lets members heal by themselves before it acts.
type Graces struct {
	// Unknown: a member whose Lease expired (its pod Ready) is Unknown this long before its
	// status names its sidecar as not renewing (case 7); it never turns NotReady by itself.
	Unknown time.Duration
	// NotReady: a NotReady member's pod is deleted after this long (case 9); a majority
	// NotReady this long is a quorum lost for good (case 10).
	NotReady time.Duration
	// Volume: a member's volume claim Pending this long is reported.
	Volume time.Duration
	// Rollout: a member restarted by a rolling update that is not back healthy this long
	// stalls the rolling update (it stays stopped until the member is back).
	Rollout time.Duration
	// CAPropagation: in a CA rollover, how long the kubelets get to mount the certificates of
	// the new CA before the old CA is trusted no more.
	CAPropagation time.Duration
}

// DefaultGraces are the graces of a cluster that does not set its own.
var DefaultGraces = Graces{Unknown: 60 * time.Second, NotReady: 5 * time.Minute, Volume: 2 * time.Minute, Rollout: 10 * time.Minute,
	CAPropagation: 2 * time.Minute}

// Observation is everything Decide looks at, read in one reconciliation.
type Observation struct {
	Now time.Time
	// Name is the EtcdCluster's name (for messages).
	Name string
	// Generation is the EtcdCluster's metadata.generation: the spec the conditions are
	// computed for.
	Generation int64
	Desired    int32
	// Formed: the cluster has formed before (its status has a cluster ID, or a member was
	// ever Ready). A cluster that never formed bootstraps all members at once.
	Formed bool
	// StatefulSetReplicas is the StatefulSet's spec.replicas (-1 while it does not exist);
	// ConfigMembers the number of members its ConfigMap lists (-1 while it does not exist).
	StatefulSetReplicas int32
	ConfigMembers       int32
	// Members holds one entry per ordinal the StatefulSet or the status knows of.
	Members []MemberObservation
	// Previous is the status as the last reconciliation wrote it.
	Previous v1alpha1.EtcdClusterStatus
	// Backup is what the snapshot Leases say (nil: backups are off).
	Backup *BackupObservation
	// Reports are the members' own reports (their EtcdMembers), by member name.
	Reports map[string]cluster.Report
	// Recovery is the quorum-loss recovery's input (nil: not evaluated).
	Recovery *Recovery
	// BootstrapRestore is spec.bootstrap.restore: a new cluster starts from this backup.
	BootstrapRestore *cluster.RestoreTarget
	// UnboundVolumes are member volume claims that stayed Pending past a grace, with why.
	UnboundVolumes []string
	// Unschedulable are member pods the scheduler could not place, with its reason.
	Unschedulable []string
	// Rollout is what a rolling update decides from (nil: no StatefulSet yet).
	Rollout *RolloutObservation
	// SnapshotBeforeStop: a full snapshot is stored before members are stopped (the first
	// pod deletion of a rolling update, a hibernation).
	SnapshotBeforeStop bool
	// Hibernate: the annotation etcd.steward.dev/hibernate asks for hibernation, whatever
	// Desired says.
	Hibernate bool
	// FenceRequest are the members the annotation etcd.steward.dev/fenced-members names.
	FenceRequest []string
	Graces       Graces
	// Answers says, of each member the operator asked directly just now, whether its etcd
	// answered a linearizable read (nil: none was asked). It is the fresh proof that an act
	// which stops a member needs (Decision.AskMembers): a member that answers proves the
	// quorum serves; a quorum that does not answer proves it is lost.
	Answers map[string]bool
	// DirectReports are the members' reports as their sidecars answered the operator
	// directly, just now, dated Now by the operator's clock (nil: none was asked, or none
	// answered). They stand in for the EtcdMembers, which may be stale (a sidecar's writes
	// refused): before a scale-down stops a member, and in the recovery, where only such
	// reports are current (its Timing.ReportCurrent is 0): they alone can prove that a voter's
	// data is gone, which starts the recovery without waiting out the grace (heal's
	// QuorumLossProven).
	DirectReports map[string]cluster.Report
}

// MemberObservation is one ordinal's pod and Lease.
type MemberObservation struct {
	Name    string
	Ordinal int
	Pod     *PodState   // nil: no pod
	Lease   *LeaseState // nil: no Lease
	// Volume is the member's data claim, read only while volumeObserved (nil otherwise, or
	// without a claim).
	Volume *VolumeState
	// NodeDown says why the pod's node is not Ready, read only while the member has been
	// NotReady past the grace ("" otherwise, or when it is Ready).
	NodeDown string
}

// volumeReplacement is a member whose data claim is deleted, and the claim.
type volumeReplacement struct {
	Member string
	VolumeState
	// Recovery: a quorum-loss recovery waits for the member's report from disk
	// (CaseRecoveryVolumeNodeLost), rather than the member being NotReady past the grace
	// (CaseVolumeNodeLost).
	Recovery bool
}

// VolumeState is what Decide needs of a member's data volume claim.
type VolumeState struct {
	Claim, UID string
	// NodeLost says why the volume is lost with its node ("" when it is not): the volume is
	// pinned to one node, which is marked out of service or no longer exists.
	NodeLost string
}

// PodState is what Decide needs of a member pod.
type PodState struct {
	Ready    bool
	Created  time.Time
	Deleting bool
	// Revision is the StatefulSet revision the pod was created from (its
	// controller-revision-hash label).
	Revision string
	// Node is the node the pod is placed on ("" until scheduled).
	Node string
}

// LeaseState is a member Lease as the sidecar last renewed it.
type LeaseState struct {
	// Holder is "<memberID>:<role>", empty until the sidecar first renews.
	Holder string
	// Renewed is when the operator saw the Lease last renewed, on its own clock (leaseClock):
	// never the sidecar's renewTime, which is another machine's clock.
	Renewed  time.Time
	Duration time.Duration
}

// BackupObservation is the newest backups, from the snapshot Leases, and the backup
// leader's account (why they are not current).
type BackupObservation struct {
	LastFull, LastDelta time.Time
	// LastFullRevision and LastDeltaRevision are the revisions the snapshot Leases hold.
	LastFullRevision, LastDeltaRevision int64
	DeltaPeriod                         time.Duration
	// Leader is the backup leader's own account, if it gave one.
	Leader *v1alpha1.MemberBackup
	// Accounts are every member's own account of its backups (its EtcdMember's), by member
	// name: the one of the member that leads now says what the store can restore.
	Accounts map[string]*v1alpha1.MemberBackup
}

// Decision is what the reconciliation writes and does.
type Decision struct {
	// Cases are the rows of the status table that matched, in table order: the numbered rows
	// by their number, then the unnumbered ones by name (sortCases).
	Cases []Case
	// Members is the new status.members (ordinals below ClusterSize).
	Members     []v1alpha1.MemberStatus
	ClusterSize int32
	Ready       int32
	// Unknown counts the members whose pods are Ready (etcd serves a linearizable read) but
	// whose Leases are not renewed: they count towards the quorum, not as Ready.
	Unknown int32
	// Conditions are the new conditions (transition times kept when the status is unchanged).
	Conditions []metav1.Condition
	// StatefulSetReplicas is the replica count to write; ConfigMembers the number of
	// members the ConfigMap lists (the desired etcd members).
	StatefulSetReplicas int32
	ConfigMembers       int32
	// DeletePods are member pods NotReady past the grace while another member answers a
	// linearizable read (case 9).
	DeletePods []string
	// ReplaceVolumes are the members NotReady past the grace whose volume is lost with its
	// node, while another member answers a linearizable read: the claim and the pod are
	// deleted, and the member comes back on a new volume as a new member (CaseVolumeNodeLost).
	ReplaceVolumes []volumeReplacement
	// WaitingForNodes says, for each member NotReady past the grace on a node that is not
	// Ready, that it waits for the node, and how to say that the node is off for good.
	WaitingForNodes []string
	// RestartsHeld says why members NotReady past the grace are not restarted ("": none is
	// held): no other member answered, so the quorum is what is lost, not the member.
	RestartsHeld string
	// AskMembers: an act that stops a member is due (a restart, a fence, the fence of a lost
	// quorum), but the members were not asked directly (Observation.Answers is nil). Nothing
	// is stopped: the operator asks them, then decides again.
	AskMembers bool
	// QuorumLost: a majority has been NotReady past the grace (case 10).
	QuorumLost bool
	// MinAvailable of the PodDisruptionBudget.
	MinAvailable int32
	// Leader is the member whose Lease says Leader.
	Leader string
	// ClusterID, Voters and Revision are what the members report: the cluster ID once a
	// serving member reports the cluster formed (never changed after), the voters as the
	// leader lists them, and the newest revision a serving member reports.
	ClusterID string
	Voters    []v1alpha1.Voter
	Revision  int64
	// Alarms are the active etcd alarms and LastDefrag the newest defragmentation round, as
	// the leader's sidecar reports them.
	Alarms     []string
	LastDefrag *v1alpha1.Defragmentation
	// Recoverability is what the backups of the cluster's own timeline can restore, as the
	// backup leader reports it (recoverability).
	Recoverability *v1alpha1.Recoverability
	// Recovery is the recovery step's outcome (nil when not evaluated).
	Recovery *recoveryOutcome
	// Rollout is the rolling update's next step.
	Rollout rolloutDecision
	// Hibernation is the hibernation's step (Status nil: the cluster does not hibernate).
	Hibernation hibernationDecision
	// Fenced are the members whose fence is in force (status.fencedMembers, and the ConfigMap
	// for their sidecars); FenceRefused says which fences asked for are not, and why.
	Fenced       []string
	FenceRefused string
	// FenceSuspended says why no fence asked for is in force while a recovery runs ("": none is
	// suspended).
	FenceSuspended string
	// StopFenced are fenced members whose pods are Ready (their etcd serves): their pods are
	// deleted, and the sidecars of the new ones hold etcd. When the leader is among them,
	// leadership moves to FenceMoveLeaderTo first.
	StopFenced        []string
	FenceMoveLeaderTo string
}

// Decide computes the status and the actions from an observation. It is pure.
func Decide(o Observation) Decision {
	var d Decision
	prev := map[string]v1alpha1.MemberStatus{}
	for _, m := range o.Previous.Members {
		prev[m.Name] = m
	}

	hibernationReplicas, hibernating := hibernationSize(o)
	size := hibernationReplicas
	if !hibernating {
		d.StatefulSetReplicas, d.ConfigMembers = nextSizes(o, &d)
		size = d.StatefulSetReplicas
	}
	if o.StatefulSetReplicas >= 0 && o.StatefulSetReplicas > size {
		// Members above the new size still exist until their pods are gone.
		size = o.StatefulSetReplicas
	}
	d.ClusterSize = size
	// The members of a hibernated cluster are stopped on purpose.
	stopped := hibernating && o.Previous.Hibernation != nil && o.Previous.Hibernation.Phase == v1alpha1.HibernationStopped

	d.Fenced, d.FenceRefused, d.FenceSuspended, d.AskMembers = decideFence(o, size)
	if len(d.Fenced) > 0 {
		addCase(&d, CaseMemberFenced)
	}
	if d.FenceSuspended != "" {
		addCase(&d, CaseFenceSuspended)
	}

	changedByLease, changedByPod, unknownExpired := false, false, false
	learners := map[string]bool{}
	for _, m := range o.Members {
		if int32(m.Ordinal) >= size {
			if _, ok := prev[m.Name]; ok {
				addCase(&d, CaseSuperfluousEntries)
			}
			continue
		}
		p, had := prev[m.Name]
		st := memberStatus(o, m, p, had, stopped, slices.Contains(d.Fenced, m.Name))
		if st.Status != p.Status || st.Reason != p.Reason {
			switch st.Reason {
			case v1alpha1.ReasonHibernated, v1alpha1.ReasonFenced:
				// The hibernation's and the fence's rows account for it.
			case v1alpha1.ReasonPodNotReady, v1alpha1.ReasonPodMissing:
				changedByPod = true
			case v1alpha1.ReasonUnknownGracePeriodExceeded:
				unknownExpired = true
			default:
				changedByLease = true
			}
		}
		if st.Role == v1alpha1.RoleLeader {
			d.Leader = st.Name
		}
		switch {
		case st.Role == v1alpha1.RoleLearner:
			learners[st.Name] = catchingUp(o, m, st)
		case st.Status == v1alpha1.MemberReady:
			d.Ready++
		case st.Status == v1alpha1.MemberUnknown:
			d.Unknown++
		}
		d.Members = append(d.Members, st)
	}
	for name := range prev {
		if !slices.ContainsFunc(d.Members, func(m v1alpha1.MemberStatus) bool { return m.Name == name }) &&
			!slices.ContainsFunc(o.Members, func(m MemberObservation) bool { return m.Name == name }) {
			addCase(&d, CaseSuperfluousEntries)
		}
	}
	d.StopFenced, d.FenceMoveLeaderTo = stopFenced(o, &d)
	if d.FenceRefused != "" {
		addCase(&d, CaseFenceRefused)
	}
	if changedByLease {
		addCase(&d, CaseLeasesOutOfSync)
	}
	if unknownExpired {
		addCase(&d, CaseUnknownTooLong)
	}
	if changedByPod {
		addCase(&d, CasePodNotReady)
	}

	// Learners never count: not towards the quorum, not as lost.
	voters := size - int32(len(learners))
	quorate := d.Ready+d.Unknown > voters/2
	all := size > 0 && d.Ready == size
	if hibernating {
		d.Hibernation = decideHibernation(o, &d, hibernationReplicas, quorate)
		d.StatefulSetReplicas, d.ConfigMembers = d.Hibernation.StatefulSetReplicas, d.Hibernation.ConfigMembers
	}

	// Actions on NotReady members (cases 9 and 10), only once the cluster formed: a
	// cluster still bootstrapping is not yet expected to be Ready, a hibernated one not at all.
	if o.Formed && size > 0 && !d.Hibernation.MembersDown {
		var longNotReady []v1alpha1.MemberStatus
		longNotReadyVoters := int32(0)
		for _, m := range d.Members {
			if m.Status != v1alpha1.MemberNotReady || o.Now.Sub(m.LastTransitionTime.Time) < o.Graces.NotReady || learners[m.Name] {
				continue
			}
			if m.Role != v1alpha1.RoleLearner {
				longNotReadyVoters++ // a fenced voter is down too, on purpose: it counts towards a lost quorum
			}
			if m.Reason != v1alpha1.ReasonFenced { // but it is never restarted
				longNotReady = append(longNotReady, m)
			}
		}
		switch {
		case !quorate && longNotReadyVoters > (voters-1)/2:
			d.QuorumLost = true
			addCase(&d, CaseQuorumLost)
		case len(longNotReady) > 0 && quorate:
			actOnNotReady(o, &d, longNotReady)
		}
	}
	d.ClusterID, d.Voters, d.Revision = fromReports(o)
	d.Alarms, d.LastDefrag = maintenanceFromReports(o)
	if o.Recovery != nil && d.Hibernation.MembersDown {
		// Stopped on purpose: no quorum is lost, and none was lost while the members stop or
		// restart. A resumed cluster's grace starts when it has resumed.
		st := o.Recovery.Status
		st.QuorumLostSince, st.Waiting = time.Time{}, ""
		d.Recovery = &recoveryOutcome{Status: st}
	} else if o.Recovery != nil && (o.Formed || o.Recovery.Status.Directive != nil || o.BootstrapRestore != nil) {
		rec := *o.Recovery
		if t := o.BootstrapRestore; t != nil && !o.Formed && rec.Status.Directive == nil && rec.Status.LastEpoch == 0 {
			rec.Status = bootstrapDirective(o, rec.Status, *t)
		}
		rec.Status.ClusterID, rec.Status.Voters = d.ClusterID, toMemberVoters(d.Voters)
		size := max(d.ConfigMembers, d.StatefulSetReplicas)
		if dir := rec.Status.Directive; o.Formed && dir != nil {
			// A directive in force keeps the sizes as they are (below): a member a scale-up
			// would add gets no pod meanwhile, so it is none of the recovery's members, which
			// would otherwise wait for it to rejoin for ever.
			size = max(o.ConfigMembers, o.StatefulSetReplicas, 0)
			if dir.Phase == cluster.PhaseRejoining && o.ConfigMembers >= 0 {
				// Once the seed serves, only the members the ConfigMap lists rejoin: one that
				// was leaving (a scale-down under way) is removed from etcd by the leader's
				// sidecar and never rejoins. Until then it counts: its log may be the newest.
				size = o.ConfigMembers
			}
		}
		var names []string
		for i := int32(0); i < size; i++ {
			names = append(names, fmt.Sprintf("%s-%d", o.Name, i))
		}
		out := decideRecovery(o, names, d.Members, rec)
		if out.Started != nil {
			addCase(&d, CaseRestoreRequested)
		}
		if out.Withdrawn {
			addCase(&d, CaseQuorumAnswers)
			d.QuorumLost = false
		}
		d.Recovery = &out
		d.ClusterID, d.Voters = out.Status.ClusterID, fromMemberVoters(out.Status.Voters)
		if o.Formed && (out.Status.Directive != nil || out.Held != "") {
			// The members carry out the recovery: nothing is scaled or restarted meanwhile
			// (a new cluster restored from a backup starts all its members at once).
			// A member the ConfigMap lists gets its pod, though: its sidecar must report.
			d.StatefulSetReplicas, d.ConfigMembers = max(o.StatefulSetReplicas, o.ConfigMembers, 0), max(o.ConfigMembers, 0)
			d.DeletePods = nil
			d.ReplaceVolumes = volumesLostInRecovery(o, &d, out, rec.Policy)
		}
	}
	if rec := d.Recovery; rec != nil && rec.FencesForQuorumLoss() && o.Answers == nil {
		d.AskMembers = true
	}
	d.Recoverability = recoverability(o, d.ClusterID)
	d.Rollout = decideRollout(o, &d, quorate, all)
	d.Conditions = conditions(o, &d, quorate, all)
	d.MinAvailable = minAvailable(size, d.Ready+d.Unknown, all, o.Backup == nil || backupReady(o))
	if len(d.Cases) == 0 {
		addCase(&d, CasePinkOfHealth)
	}
	sortCases(d.Cases)
	return d
}

// sortCases puts cases in table order: the numbered rows by their number ("2-…" before
// "10-…", which a string sort would not do), then the unnumbered rows by name.
func sortCases(cs []Case) {
	slices.SortFunc(cs, func(a, b Case) int {
		na, oka := a.Row()
		nb, okb := b.Row()
		switch {
		case oka && okb && na != nb:
			return na - nb
		case oka != okb:
			if oka {
				return -1
			}
			return 1
		}
		return strings.Compare(string(a), string(b))
	})
}

// Row is the case's row number in the status table (1 to 13); ok is false for the rows
// Steward adds, which have no number.
func (c Case) Row() (n int, ok bool) {
	num, _, found := strings.Cut(string(c), "-")
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return 0, false
	}
	return n, true
}

// bootstrapDirective starts a new cluster from a backup (spec.bootstrap.restore) the way a
// recovery from backup runs: the first member restores and starts alone (epoch 1, Seeding),
// the others wait, then join it as learners; the directive retires once all serve.
func bootstrapDirective(o Observation, st heal.Status, t cluster.RestoreTarget) heal.Status {
	seed := o.Name + "-0"
	st.LastEpoch = 1
	st.Directive = &cluster.Directive{Epoch: 1, Phase: cluster.PhaseSeeding, Mode: cluster.RecoverFromBackup, Seed: seed,
		Restore: &t, IssuedAt: o.Now, PhaseSince: o.Now,
		Reason: fmt.Sprintf("spec.bootstrap.restore: %s restores %s from %s and starts alone; the others join it", seed, t.Point(), store.Redact(t.Store))}
	st.Waiting = st.Directive.Reason
	return st
}

func toMemberVoters(vs []v1alpha1.Voter) []cluster.Voter {
	var out []cluster.Voter
	for _, v := range vs {
		out = append(out, cluster.Voter{ID: v.ID, Name: v.Name, PeerURL: v.PeerURL})
	}
	return out
}

func fromMemberVoters(vs []cluster.Voter) []v1alpha1.Voter {
	var out []v1alpha1.Voter
	for _, v := range vs {
		out = append(out, v1alpha1.Voter{ID: v.ID, Name: v.Name, PeerURL: v.PeerURL})
	}
	return out
}

// fromReports derives the cluster ID, the voters and the revision from the members' reports.
func fromReports(o Observation) (clusterID string, voters []v1alpha1.Voter, revision int64) {
	clusterID, voters, revision = o.Previous.ClusterID, o.Previous.Voters, o.Previous.Revision
	for _, name := range slices.Sorted(maps.Keys(o.Reports)) {
		r := o.Reports[name]
		if !r.Serving {
			continue
		}
		if clusterID == "" && r.Formed {
			clusterID = r.ClusterID
		}
		if r.ClusterID != clusterID {
			continue // another cluster's member (a recovery under way); not this one's figures
		}
		revision = max(revision, r.Revision)
		if r.Leader && len(r.Members) > 0 {
			voters = nil
			for _, m := range r.Members {
				if !m.IsLearner {
					voters = append(voters, v1alpha1.Voter{ID: m.ID, Name: m.Name})
				}
			}
		}
	}
	return clusterID, voters, revision
}

// maintenanceFromReports is what the housekeeping of the leader's sidecar last reported: the
// active alarms, and the newest defragmentation round of any member's sidecar (leadership
// moves during a round, and each sidecar reports the rounds it ran).
func maintenanceFromReports(o Observation) (alarms []string, last *v1alpha1.Defragmentation) {
	last = o.Previous.LastDefragmentation
	for _, name := range slices.Sorted(maps.Keys(o.Reports)) {
		r := o.Reports[name]
		m := r.Maintenance
		if m == nil {
			continue
		}
		if r.Leader && r.Serving {
			alarms = m.Alarms
		}
		// Whole seconds, as the status stores times: a round must compare equal once recorded,
		// or every reconcile would record it again.
		if d := m.LastDefrag; d != nil && (last == nil || d.End.Truncate(time.Second).After(last.Time.Time)) {
			last = &v1alpha1.Defragmentation{Time: metav1.NewTime(d.End.Truncate(time.Second)), Trigger: d.Trigger, ReclaimedBytes: d.Reclaimed, Error: d.Error}
			for _, mr := range d.Members {
				last.Members = append(last.Members, fmt.Sprintf("%s: %s -> %s in %s", mr.Name, units.Bytes(mr.Before), units.Bytes(mr.After), mr.Duration.Round(time.Millisecond)))
			}
		}
	}
	return alarms, last
}

// recoverability is status.recoverability: the window the backup leader's sidecar reports
// for the cluster's own timeline. It is taken only from the member that leads now, as its
// current Lease and its own report (serving, of the cluster's ID) both say, and only if the
// window is of the cluster's ID: never from a former leader's account, a stopped member's, or
// one of another cluster's history (a recovery's seed). Without such a window the recorded
// one stays while it is of the cluster's ID: a new leader reports none until its backups have
// read the store. Without backups there is none.
func recoverability(o Observation, clusterID string) *v1alpha1.Recoverability {
	if o.Backup == nil || clusterID == "" {
		return nil
	}
	for _, m := range o.Members {
		acc, rep := o.Backup.Accounts[m.Name], o.Reports[m.Name]
		if acc == nil || acc.Recoverable == nil || acc.Recoverable.ClusterID != clusterID {
			continue
		}
		if leaseCurrent(o, m) && strings.HasSuffix(m.Lease.Holder, ":"+v1alpha1.RoleLeader) && rep.Serving && rep.Leader && rep.ClusterID == clusterID {
			return acc.Recoverable
		}
	}
	if prev := o.Previous.Recoverability; prev != nil && prev.ClusterID == clusterID {
		return prev
	}
	return nil
}

// nextSizes is the StatefulSet size and the number of members in the ConfigMap to write:
// all at once while bootstrapping; once formed, one member at a time, each step only while
// every current member is Ready (a new member joins as a learner, and etcd admits one
// learner at a time). Growing, the new member enters the ConfigMap and the StatefulSet
// together. Shrinking, it leaves the ConfigMap first; the leader's sidecar then removes it
// from etcd (handing leadership over first if it leads), and its pod is stopped only once
// the leader no longer lists it, so the cluster never counts a stopped voter.
func nextSizes(o Observation, d *Decision) (sts, config int32) {
	cur := o.StatefulSetReplicas
	if cur < 0 || !o.Formed {
		if cur != o.Desired {
			addCase(d, CaseBootstrap)
		}
		return o.Desired, o.Desired
	}
	if o.ConfigMembers > cur {
		// A scale-up whose StatefulSet write failed: the ConfigMap lists the new member, which
		// may have joined etcd already. The StatefulSet catches up first: shrinking the
		// ConfigMap instead would drop a voter that never left etcd.
		addCase(d, CaseScaleUp)
		return o.ConfigMembers, o.ConfigMembers
	}
	if o.ConfigMembers >= 0 && o.ConfigMembers < cur {
		addCase(d, CaseScaleDown)
		if leaving := memberAt(o, cur-1); leaderLists(o, leaving) || stillServes(o, leaving) {
			// The leader's sidecar removes it first; a removed member's etcd stops. A leader
			// report that no longer lists it may be stale (its writes refused): the member's
			// own pod and Lease must say it stopped too.
			return cur, o.ConfigMembers
		}
		return cur - 1, o.ConfigMembers
	}
	if cur == o.Desired {
		return cur, cur
	}
	if !staysReady(o, cur) {
		return cur, cur // heal first, then scale
	}
	if o.Desired > cur {
		addCase(d, CaseScaleUp)
		return cur + 1, cur + 1
	}
	addCase(d, CaseScaleDown)
	return cur, cur - 1
}

// staysReady says whether every member that stays is Ready: all cur of them, or, scaling
// down, those below the desired size. A leaving member need not be healed first: scaling down
// is how a user drops a member that cannot come back, and waiting for it would wait forever.
// etcd itself refuses a removal that would cost the quorum.
func staysReady(o Observation, cur int32) bool {
	keep := cur
	if o.Desired < cur {
		keep = max(o.Desired, 0)
	}
	ordinals := map[string]int{}
	for _, m := range o.Members {
		ordinals[m.Name] = m.Ordinal
	}
	ready := int32(0)
	for _, m := range o.Previous.Members {
		if ord, ok := ordinals[m.Name]; ok && int32(ord) < keep && m.Status == v1alpha1.MemberReady {
			ready++
		}
	}
	return ready >= keep
}

// memberAt is the name of the member with the given ordinal.
func memberAt(o Observation, ordinal int32) string {
	for _, m := range o.Members {
		if int32(m.Ordinal) == ordinal {
			return m.Name
		}
	}
	return ""
}

// stillServes: the member's pod is Ready and its sidecar renews its Lease, so its etcd still
// serves as a member of the cluster.
func stillServes(o Observation, name string) bool {
	m := findMember(o.Members, name)
	return m != nil && m.Pod != nil && m.Pod.Ready && !m.Pod.Deleting && leaseCurrent(o, *m)
}

// leaderLists reports whether the leader's member list still has name. The leader is the
// member whose report says it leads with the highest term and, for a report read from its
// EtcdMember, whose pod is Ready now (its etcd answers a linearizable read): the report of a
// former leader, or of a member that has stopped, is stale. Reports asked of the sidecars
// directly (DirectReports) are used instead when there are any. Without such a report, name
// is taken as listed (nothing is stopped on a guess).
func leaderLists(o Observation, name string) bool {
	reports, direct := o.Reports, o.DirectReports != nil
	if direct {
		reports = o.DirectReports
	}
	var leader *cluster.Report
	for _, n := range slices.Sorted(maps.Keys(reports)) {
		r := reports[n]
		mo := findMember(o.Members, n)
		if !r.Serving || !r.Leader || len(r.Members) == 0 || (!direct && (mo == nil || mo.Pod == nil || !mo.Pod.Ready || mo.Pod.Deleting)) {
			continue
		}
		if leader == nil || r.Term > leader.Term {
			leader = &r
		}
	}
	if leader == nil {
		return true
	}
	return slices.ContainsFunc(leader.Members, func(m cluster.LiveMember) bool { return m.Name == name })
}

// memberStatus is one member's status: NotReady while its pod is missing or not ready, Ready
// while the pod is ready and its Lease current, Unknown when the Lease expired (cases 2, 7 and
// 8). Unknown never turns NotReady by itself: the pod is Ready, and its readiness probe is
// etcd's own linearizable read, so etcd serves; only its sidecar cannot renew the Lease (an
// API server that refuses or throttles it, a clock, a denied write). Past the Unknown grace
// the reason says so (case 7), and nothing is deleted or fenced on it. A member stopped by a
// hibernation is NotReady with reason Hibernated, a fenced one whose etcd is down NotReady with
// reason Fenced; when either starts again its NotReady grace starts afresh, as if it had just
// stopped.
func memberStatus(o Observation, m MemberObservation, prev v1alpha1.MemberStatus, had, stopped, fenced bool) v1alpha1.MemberStatus {
	st := v1alpha1.MemberStatus{Name: m.Name, ID: prev.ID, Role: prev.Role}
	if m.Lease != nil && m.Lease.Holder != "" {
		id, role, _ := strings.Cut(m.Lease.Holder, ":")
		st.ID, st.Role = id, role
		t := metav1.NewTime(m.Lease.Renewed)
		st.LastReport = &t
	}
	switch {
	case stopped && (m.Pod == nil || m.Pod.Deleting || !m.Pod.Ready):
		st.Status, st.Reason = v1alpha1.MemberNotReady, v1alpha1.ReasonHibernated
	case fenced && (m.Pod == nil || m.Pod.Deleting || !m.Pod.Ready):
		st.Status, st.Reason = v1alpha1.MemberNotReady, v1alpha1.ReasonFenced
	case m.Pod == nil:
		st.Status, st.Reason = v1alpha1.MemberNotReady, v1alpha1.ReasonPodMissing
	case !m.Pod.Ready:
		st.Status, st.Reason = v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady
	case leaseCurrent(o, m):
		st.Status, st.Reason = v1alpha1.MemberReady, v1alpha1.ReasonLeaseSucceeded
	default:
		st.Status, st.Reason = v1alpha1.MemberUnknown, v1alpha1.ReasonLeaseExpired
		if m.Lease == nil || m.Lease.Holder == "" {
			st.Reason = v1alpha1.ReasonLeaseNotRenewed
		}
		if had && prev.Status == v1alpha1.MemberUnknown &&
			(prev.Reason == v1alpha1.ReasonUnknownGracePeriodExceeded || o.Now.Sub(prev.LastTransitionTime.Time) >= o.Graces.Unknown) {
			st.Reason = v1alpha1.ReasonUnknownGracePeriodExceeded
		}
	}
	st.LastTransitionTime = prev.LastTransitionTime
	if !had || st.Status != prev.Status || (prev.Reason == v1alpha1.ReasonHibernated) != (st.Reason == v1alpha1.ReasonHibernated) ||
		(prev.Reason == v1alpha1.ReasonFenced) != (st.Reason == v1alpha1.ReasonFenced) {
		st.LastTransitionTime = metav1.NewTime(o.Now)
	}
	if had && st.Status == prev.Status && st.Reason == prev.Reason && st.ID == prev.ID && st.Role == prev.Role {
		// A renewal alone is no change: writing it would make every cluster write its status
		// at rest. The Lease's own renewTime is the live heartbeat.
		st.LastReport = prev.LastReport
	}
	return st
}

// decideFence is the fence in force: of the members the annotation names, those fenced
// already stay fenced; another is fenced only while, with it, a quorum of the members
// (size/2+1) are voters Ready now and unfenced. A name of no member is refused. refused says
// what is not applied and why ("": all of it is). While a recovery directive is in force no
// fence is, and suspended says so: the recovery needs every member's data and waits for every
// member to follow its directive, which a fenced member's sidecar would never do. Afterwards
// the status records no fence, so each is applied again only while the quorum allows it.
func decideFence(o Observation, size int32) (fenced []string, refused, suspended string, ask bool) {
	if o.Recovery != nil && o.Recovery.Status.Directive != nil && len(o.FenceRequest) > 0 {
		return nil, "", fmt.Sprintf("the fences of %s are suspended while recovery %d runs: it needs every member's data, and each member follows its directive; "+
			"they apply again once it is done, while a quorum of Ready voters stays unfenced", strings.Join(o.FenceRequest, ", "), o.Recovery.Status.Directive.Epoch), false
	}
	var members, problems []string
	for _, m := range o.Members {
		if int32(m.Ordinal) < size {
			members = append(members, m.Name)
		}
	}
	var asked []string
	for _, name := range o.FenceRequest {
		switch {
		case !slices.Contains(members, name):
			problems = append(problems, fmt.Sprintf("%s is no member of %s (its members: %s)", name, o.Name, strings.Join(members, ", ")))
		case slices.Contains(o.Previous.FencedMembers, name):
			fenced = append(fenced, name)
		default:
			asked = append(asked, name)
		}
	}
	if len(asked) > 0 && o.Answers == nil {
		return fenced, strings.Join(problems, "; "), "", true
	}
	for _, name := range asked {
		if err := FenceShortOfQuorum(name, readyVotersBut(o, size, append(slices.Clone(fenced), name)), int(size)); err != nil {
			problems = append(problems, fmt.Sprintf("%v: it is not fenced (to stop every member, hibernate the cluster)", err))
			continue
		}
		fenced = append(fenced, name)
	}
	slices.Sort(fenced)
	return fenced, strings.Join(problems, "; "), "", false
}

// FenceShortOfQuorum says why fencing name is refused when it would leave ready Ready voters
// unfenced of size members, fewer than a quorum; nil when they are a quorum. The operator
// applies a fence by it, and the kubectl plugin refuses one by it before writing.
func FenceShortOfQuorum(name string, ready, size int) error {
	if quorum := size/2 + 1; ready < quorum {
		return fmt.Errorf("fencing %s would leave %d Ready voters unfenced, fewer than the quorum of %d of %d members", name, ready, quorum, size)
	}
	return nil
}

// readyVotersBut counts the members below size, not in but, whose pods are Ready, whose
// Leases are current and say they vote, and whose etcd, asked directly, answered a
// linearizable read (when they were asked).
func readyVotersBut(o Observation, size int32, but []string) int {
	n := 0
	for _, m := range o.Members {
		if int32(m.Ordinal) < size && !slices.Contains(but, m.Name) && m.Pod != nil && m.Pod.Ready && !m.Pod.Deleting &&
			leaseCurrent(o, m) && !strings.HasSuffix(m.Lease.Holder, ":"+v1alpha1.RoleLearner) && (o.Answers == nil || o.Answers[m.Name]) {
			n++
		}
	}
	return n
}

// stopFenced lists the fenced members whose pods are Ready, so their etcd serves yet: their
// pods are deleted, once the members, asked directly, show that a quorum of Ready voters
// answers without them (the fence was applied by the same rule, but the cluster may have
// lost members since). The leader's leadership moves first, to an unfenced voter that answers.
func stopFenced(o Observation, d *Decision) (stop []string, moveTo string) {
	for _, name := range d.Fenced {
		if m := findMember(o.Members, name); m != nil && m.Pod != nil && m.Pod.Ready && !m.Pod.Deleting {
			stop = append(stop, name)
		}
	}
	if len(stop) == 0 {
		return nil, ""
	}
	if o.Answers == nil {
		d.AskMembers = true
		return nil, ""
	}
	if err := FenceShortOfQuorum(strings.Join(stop, ", "), readyVotersBut(o, d.ClusterSize, d.Fenced), int(d.ClusterSize)); err != nil {
		d.FenceRefused = strings.TrimPrefix(d.FenceRefused+"; ", "; ") + fmt.Sprintf("%v: its etcd is not stopped yet", err)
		return nil, ""
	}
	if !slices.Contains(stop, d.Leader) {
		return stop, ""
	}
	for _, m := range d.Members {
		if m.Status == v1alpha1.MemberReady && m.Role != v1alpha1.RoleLearner && !slices.Contains(d.Fenced, m.Name) && o.Answers[m.Name] {
			return stop, m.Name
		}
	}
	return nil, "" // no one to lead: nothing is stopped (the fence needs a quorum anyway)
}

// actOnNotReady decides what is done for the members NotReady past the grace of a quorate
// cluster (case 9): a restart, a new volume when theirs is lost with its node, or a wait for
// a node that is not Ready; each only while another member answers a linearizable read.
func actOnNotReady(o Observation, d *Decision, longNotReady []v1alpha1.MemberStatus) {
	// A pod a withdrawn directive held waiting could not be Ready: its grace starts when
	// the directive is withdrawn.
	var withdrawn time.Time
	if o.Recovery != nil {
		withdrawn = o.Recovery.Status.WithdrawnAt
	}
	var due []string
	var volumesLost []volumeReplacement
	for _, m := range longNotReady {
		mo := findMember(o.Members, m.Name)
		switch {
		case mo == nil:
		case mo.Volume != nil && mo.Volume.NodeLost != "":
			// A restart would bring it back to a volume no node can mount.
			volumesLost = append(volumesLost, volumeReplacement{Member: m.Name, VolumeState: *mo.Volume})
		case mo.NodeDown != "":
			// Its pod's deletion would wait for the node anyway: the member waits for its
			// node, and the status says how to tell the cluster that the node is off.
			d.WaitingForNodes = append(d.WaitingForNodes, fmt.Sprintf("%s waits for its node: %s; nothing is deleted by force while the node may run; "+
				"if it is off for good, mark it: kubectl taint node %s %s=nodeshutdown:NoExecute", m.Name, mo.NodeDown, mo.Pod.Node, TaintOutOfService))
		case mo.Pod != nil && !mo.Pod.Deleting && o.Now.Sub(laterOf(mo.Pod.Created, withdrawn)) >= o.Graces.NotReady:
			due = append(due, m.Name)
		}
	}
	// The pods' readiness and the Leases are second-hand, and a member's etcd is NotReady
	// when the quorum is lost: only another member answering proves the fault is its own.
	// One whose etcd answers, asked directly, serves: it is not restarted.
	if o.Answers != nil {
		due = slices.DeleteFunc(due, func(name string) bool { return o.Answers[name] })
	}
	acting := slices.Clone(due)
	for _, v := range volumesLost {
		acting = append(acting, v.Member)
	}
	switch {
	case len(acting) == 0:
	case o.Answers == nil:
		d.AskMembers = true
	case answering(o, acting) == "":
		d.RestartsHeld = fmt.Sprintf("%s NotReady for more than %s, neither restarted nor replaced: asked directly, no other member answered a linearizable read, "+
			"so the quorum is what is lost, and neither would bring it back", strings.Join(acting, ", "), o.Graces.NotReady)
		addCase(d, CaseRestartUnproven)
	default:
		d.DeletePods = due
		if len(due) > 0 {
			addCase(d, CaseMinorityNotReady)
		}
		d.ReplaceVolumes = volumesLost
		if len(volumesLost) > 0 {
			addCase(d, CaseVolumeNodeLost)
		}
	}
}

// volumesLostInRecovery: the voters a quorum-loss recovery waits for (their reports from disk)
// whose volumes are lost with their nodes can never report: their logs went with their nodes.
// With the Automatic policy, once the members, asked directly, show that none answers, their
// claims are replaced: each comes back on a new, empty volume and reports it empty, and the
// recovery goes on from the survivors and the backup instead of waiting for ever. What only
// those voters held, none of the others nor the backup, is lost with them. With the Manual
// policy nothing is replaced: the status says what the recovery waits for, and how to go on.
func volumesLostInRecovery(o Observation, d *Decision, out recoveryOutcome, policy string) []volumeReplacement {
	var lost []volumeReplacement
	for _, name := range out.Awaited {
		if mo := findMember(o.Members, name); mo != nil && mo.Volume != nil && mo.Volume.NodeLost != "" {
			lost = append(lost, volumeReplacement{Member: name, VolumeState: *mo.Volume, Recovery: true})
		}
	}
	switch {
	case len(lost) == 0:
		return nil
	case policy != v1alpha1.QuorumLossAutomatic:
		for _, v := range lost {
			d.WaitingForNodes = append(d.WaitingForNodes, fmt.Sprintf("the recovery waits for the report from disk of %s, but %s; "+
				"with the Manual policy its volume is not replaced; to recover without its data: kubectl steward destroy %s --yes", v.Member, v.NodeLost, v.Member))
		}
		return nil
	case o.Answers == nil:
		d.AskMembers = true
		return nil
	case answering(o, nil) != "":
		return nil // the quorum serves: the recovery is withdrawn
	}
	addCase(d, CaseRecoveryVolumeNodeLost)
	return lost
}

// volumeObserved: the reconciler reads the member's claim, and its volume's node, fresh: it
// has been NotReady past the grace, or a quorum-loss recovery is fencing (it may wait for
// the member's report from disk).
func volumeObserved(o Observation, name string) bool {
	return notReadyPastGrace(o, name) || (o.Recovery != nil && heal.FencingQuorumLoss(o.Recovery.Status.Directive))
}

// notReadyPastGrace: the member's recorded status has been NotReady for the NotReady grace.
func notReadyPastGrace(o Observation, name string) bool {
	i := slices.IndexFunc(o.Previous.Members, func(m v1alpha1.MemberStatus) bool { return m.Name == name })
	return i >= 0 && o.Previous.Members[i].Status == v1alpha1.MemberNotReady && o.Previous.Members[i].Reason != v1alpha1.ReasonFenced &&
		o.Now.Sub(o.Previous.Members[i].LastTransitionTime.Time) >= o.Graces.NotReady
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// answering names a member, not in but, whose etcd answered a linearizable read when the
// operator asked it directly ("" when none did, or none was asked): the quorum serves.
func answering(o Observation, but []string) string {
	var names []string
	for name, ok := range o.Answers {
		if ok && !slices.Contains(but, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// heldFenced counts the fenced members whose etcd is down (status reason Fenced).
func heldFenced(d *Decision) int32 {
	n := int32(0)
	for _, m := range d.Members {
		if m.Reason == v1alpha1.ReasonFenced {
			n++
		}
	}
	return n
}

// leaseCurrent: the member's sidecar renewed its Lease within the Lease's duration, as the
// operator saw it (LeaseState.Renewed).
func leaseCurrent(o Observation, m MemberObservation) bool {
	return m.Lease != nil && m.Lease.Holder != "" && o.Now.Sub(m.Lease.Renewed) < m.Lease.Duration
}

// catchingUp: the member is a learner whose sidecar renews its Lease, so its etcd runs and
// replicates; its pod is not Ready (a learner serves no linearizable read) until its sidecar
// promotes it. It counts towards no quorum, and is never restarted for being NotReady.
func catchingUp(o Observation, m MemberObservation, st v1alpha1.MemberStatus) bool {
	return st.Role == v1alpha1.RoleLearner && leaseCurrent(o, m)
}

func conditions(o Observation, d *Decision, quorate, all bool) []metav1.Condition {
	conds := slices.Clone(o.Previous.Conditions)
	set := func(t string, ok bool, reason, msg string) {
		meta.SetStatusCondition(&conds, metav1.Condition{Type: t, Status: boolStatus(ok), Reason: reason,
			Message: msg, ObservedGeneration: o.Generation, LastTransitionTime: metav1.NewTime(o.Now)})
	}
	was := func(t string) metav1.ConditionStatus {
		if c := meta.FindStatusCondition(o.Previous.Conditions, t); c != nil {
			return c.Status
		}
		return metav1.ConditionUnknown
	}
	size := d.ClusterSize
	members := membersSummary(d, size)

	if all && was(v1alpha1.ConditionAllMembersReady) == metav1.ConditionFalse {
		addCase(d, CaseAllMembersReadyStaleFalse)
	}
	if !all && was(v1alpha1.ConditionAllMembersReady) == metav1.ConditionTrue {
		addCase(d, CaseAllMembersReadyStaleTrue)
	}
	if quorate && was(v1alpha1.ConditionReady) == metav1.ConditionFalse {
		addCase(d, CaseReadyConditionStaleFalse)
	}
	if !quorate && was(v1alpha1.ConditionReady) == metav1.ConditionTrue {
		addCase(d, CaseReadyConditionStaleTrue)
	}

	set(v1alpha1.ConditionAllMembersReady, all, pick(all, "AllMembersReady", "NotAllMembersReady"), members)
	set(v1alpha1.ConditionQuorate, quorate, pick(quorate, "Quorate", "NoQuorum"), members)
	// A cluster that never formed has no quorum to lose yet.
	set(v1alpha1.ConditionReady, quorate, pick(quorate, "Quorate", pick(o.Formed, "QuorumLost", ReasonBootstrapping)), members)
	// A fenced member is stopped on purpose: no fault.
	degraded := quorate && d.Ready+heldFenced(d) < size && o.Formed
	set(v1alpha1.ConditionDegraded, degraded, pick(degraded, "MembersNotReady", "AsDesired"), members)

	progressing := d.StatefulSetReplicas != o.Desired || (o.StatefulSetReplicas >= 0 && o.StatefulSetReplicas != d.StatefulSetReplicas) || !all
	reason, msg := "Reconciled", fmt.Sprintf("%d members, as desired", o.Desired)
	switch {
	case !o.Formed:
		reason, msg = ReasonBootstrapping, fmt.Sprintf("bootstrapping %d members: %s", o.Desired, members)
	case d.StatefulSetReplicas > o.StatefulSetReplicas && o.StatefulSetReplicas >= 0:
		reason, msg = "ScalingUp", fmt.Sprintf("adding member %d of %d", d.StatefulSetReplicas, o.Desired)
	case d.StatefulSetReplicas < o.StatefulSetReplicas:
		reason, msg = "ScalingDown", fmt.Sprintf("removing member %d, down to %d", o.StatefulSetReplicas, o.Desired)
	case d.StatefulSetReplicas != o.Desired:
		reason, msg = "WaitingForMembers", fmt.Sprintf("scaling to %d waits until every member is Ready: %s", o.Desired, members)
	case !all:
		reason, msg = "WaitingForMembers", members
	}
	if f := initFailures(o); f != "" && (reason == ReasonBootstrapping || reason == "WaitingForMembers") {
		msg += "; " + f
	}
	if d.Rollout.Status != nil && (reason == "Reconciled" || reason == "WaitingForMembers") {
		progressing, reason, msg = true, d.Rollout.Reason, d.Rollout.Message
	}
	if len(o.Unschedulable) > 0 {
		reason, msg = "Unschedulable", "member pods not scheduled: "+strings.Join(o.Unschedulable, "; ")+
			" (members spread one per node: with fewer nodes than members they share nodes evenly; a lost node's member waits for the node, or for it to be removed)"
	}
	if len(o.UnboundVolumes) > 0 {
		reason, msg = "VolumeNotBound", "volume claims not bound: "+strings.Join(o.UnboundVolumes, "; ")
	}
	if r := d.Recovery; r != nil && o.Formed && r.Status.Directive != nil && r.Status.Directive.Restore != nil {
		// An EtcdRestore's restore in place (a new cluster's bootstrap.restore is Bootstrapping).
		dir := r.Status.Directive
		progressing, reason = true, "Restoring"
		msg = fmt.Sprintf("restoring %s: directive %d, %s: %s", dir.Restore.Point(), dir.Epoch, dir.Phase, dir.Reason)
	}
	set(v1alpha1.ConditionProgressing, progressing, reason, msg)

	lost, lostReason := "quorate, or not NotReady long enough to count as lost", "NoQuorumLoss"
	if d.QuorumLost {
		lost, lostReason = fmt.Sprintf("%s; NotReady longer than %s", members, o.Graces.NotReady), "MajorityNotReady"
	}
	recovering := false
	if r := d.Recovery; r != nil {
		switch dir := r.Status.Directive; {
		case r.Held != "":
			recovering, lostReason, lost = true, "AwaitingConfirmation", r.Held
		case dir != nil:
			recovering, lostReason, lost = true, "Recovering"+dir.Phase, fmt.Sprintf("recovery %d, %s: %s", dir.Epoch, dir.Phase, dir.Reason)
		}
	}
	set(v1alpha1.ConditionQuorumLost, d.QuorumLost || recovering, lostReason, lost)

	if len(d.Alarms) > 0 {
		set(v1alpha1.ConditionAlarmsActive, true, "Alarms", strings.Join(d.Alarms, "; ")+": the leader's sidecar recovers NOSPACE by compacting and defragmenting")
	} else {
		set(v1alpha1.ConditionAlarmsActive, false, "NoAlarms", "no alarm reported by the leader")
	}
	if o.Backup != nil {
		ok, why := backupCurrent(o)
		set(v1alpha1.ConditionBackupReady, ok, pick(ok, "BackupCurrent", "BackupStale"), why)
	} else {
		set(v1alpha1.ConditionBackupReady, false, "BackupsDisabled", "spec.backup is not set: nothing is backed up")
	}
	hibernationConditions(d, set)
	return conds
}

// syncFailedCondition is the Progressing condition of a pass whose sync failed in part: what
// the spec asks is not all carried out, and the first failing step says why. The pass is
// tried again; status.lastErrors holds every error.
func syncFailedCondition(errs []v1alpha1.LastError, generation int64, now time.Time) metav1.Condition {
	msg := fmt.Sprintf("%s: %s", errs[0].Code, errs[0].Description)
	if len(errs) > 1 {
		msg += fmt.Sprintf(" (and %d more in status.lastErrors)", len(errs)-1)
	}
	return metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: ReasonSyncFailed,
		Message: msg + "; retried in " + syncRetry.String(), ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)}
}

// membersSummary counts the members Ready, and names those whose Leases are not renewed while
// their pods are Ready, with what keeps a sidecar from renewing.
func membersSummary(d *Decision, size int32) string {
	s := fmt.Sprintf("%d of %d members Ready", d.Ready, size)
	var silent []string
	for _, m := range d.Members {
		if m.Status == v1alpha1.MemberUnknown && m.Reason == v1alpha1.ReasonUnknownGracePeriodExceeded {
			silent = append(silent, m.Name)
		}
	}
	if d.Unknown > 0 {
		s += fmt.Sprintf(", %d Unknown (pod Ready, Lease not renewed)", d.Unknown)
	}
	if len(d.Fenced) > 0 {
		s += fmt.Sprintf(", %s fenced (etcd held stopped on purpose)", strings.Join(d.Fenced, ", "))
	}
	if d.FenceSuspended != "" {
		s += "; " + d.FenceSuspended
	}
	for _, w := range d.WaitingForNodes {
		s += "; " + w
	}
	if len(silent) > 0 {
		s += fmt.Sprintf("; the sidecars of %s have not renewed their Leases past the Unknown grace although their pods are Ready, so etcd serves: "+
			"nothing is restarted or fenced for it; check that the sidecars can write Leases (their Role, admission webhooks or policies on Leases, "+
			"API priority and fairness) and their logs", strings.Join(silent, ", "))
	}
	return s
}

// initFailures names the members whose sidecars report that their newest initialisation
// failed, and why: what a cluster that does not form, or a member that does not start, waits on.
func initFailures(o Observation) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(o.Reports)) {
		if e := o.Reports[name].InitError; e != "" {
			out = append(out, fmt.Sprintf("%s cannot start: %s", name, e))
		}
	}
	return strings.Join(out, "; ")
}

func backupReady(o Observation) bool {
	ok, _ := backupCurrent(o)
	return ok
}

// backupCurrent: a delta or full snapshot was stored within three delta periods.
func backupCurrent(o Observation) (bool, string) {
	b := o.Backup
	if b == nil {
		return false, "backups are off"
	}
	newest := b.LastFull
	if b.LastDelta.After(newest) {
		newest = b.LastDelta
	}
	if newest.IsZero() {
		if l := b.Leader; l != nil && !l.Ready {
			return false, "no snapshot stored yet; the backup leader says: " + l.Reason
		}
		return false, "no snapshot stored yet"
	}
	// A message that changed at every pass would make every pass write the status: the
	// stale one names the snapshot's time (which no longer moves), not its age, and the
	// current one names neither (status.lastBackupTime has the time, see holdFigures).
	stamp := newest.UTC().Format(time.RFC3339)
	if o.Now.Sub(newest) > 3*b.DeltaPeriod {
		why := fmt.Sprintf("the newest snapshot, of %s, is older than three delta periods (delta period %s)", stamp, b.DeltaPeriod)
		if l := b.Leader; l != nil && !l.Ready {
			why += "; the backup leader says: " + l.Reason
			if l.LastError != "" && !strings.Contains(l.Reason, l.LastError) {
				why += "; last error: " + l.LastError
			}
		}
		return false, why
	}
	return true, fmt.Sprintf("the newest snapshot is within three delta periods (delta period %s)", b.DeltaPeriod)
}

// minAvailable toggles the PodDisruptionBudget: a majority while every member is Ready (one
// voluntary eviction at a time keeps the quorum); every member whose pod is Ready (no eviction
// at all: an Unknown member's pod is Ready too) while one is not; every member while the
// backups are not current (no eviction while the newest data may exist only on the members).
// The highest applicable value wins. A single member may be evicted once its backups are
// current: it has no quorum to keep, and otherwise no drain of its node could ever finish.
func minAvailable(size, podsReady int32, all, backupOK bool) int32 {
	if size == 1 && backupOK {
		return 0
	}
	v := size/2 + 1
	if !all {
		v = max(size/2, podsReady)
	}
	if !backupOK {
		v = max(v, size)
	}
	return v
}

func findMember(ms []MemberObservation, name string) *MemberObservation {
	for i := range ms {
		if ms[i].Name == name {
			return &ms[i]
		}
	}
	return nil
}

func addCase(d *Decision, c Case) {
	if !slices.Contains(d.Cases, c) {
		d.Cases = append(d.Cases, c)
	}
}

func boolStatus(b bool) metav1.ConditionStatus {
	if b {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

func pick(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}
