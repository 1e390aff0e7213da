package member

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/store"
)

// Observation is everything the initialisation decision depends on.
type Observation struct {
	// Self is this member's name; SelfPeerURL its desired peer URL.
	Self        string
	SelfPeerURL string
	// ClusterSize is the desired number of members; ClusterToken the desired cluster's token.
	ClusterSize  int
	ClusterToken string
	// RelocatesData: whoever runs the cluster moves data found in the wrong member's dir back.
	RelocatesData bool
	// Status is the cluster status (cluster ID, voters, members and their last reports).
	Status cluster.Status
	// Data is what is in this member's data dir.
	Data datadir.State
	// ViewUnavailable says why the cluster view cannot be read ("" when it can): the spec,
	// the status and any directive are then unknown, and only this member's own data decides.
	ViewUnavailable string
	// LastStart: the data dir records the etcd configuration its member last started with.
	LastStart bool
	// Fenced: the cluster view fences this member (a user's fence); FencedOnDisk: its data dir
	// records the fence, which holds while the view cannot be read.
	Fenced       bool
	FencedOnDisk bool
	// Live is what the running cluster (the other members) says.
	Live cluster.LiveCluster
	// Directive is the quorum-loss directive in force, if any.
	Directive *cluster.Directive
	// AppliedEpoch is the newest directive this data dir has already carried out.
	AppliedEpoch int64
	// BackupTimeline is the newest timeline of this cluster in the backup store (see
	// ClusterIDs and backup.OwnTimeline; 0: it holds none), and ForeignTimelines counts the
	// store's timelines of other clusters (sharing the prefix). Read only while the status
	// has no cluster ID (a cluster that never formed, or a status that was lost) and by the
	// seed of a recovery from this member's backup store.
	BackupTimeline   uint32
	ForeignTimelines int
}

// Action is what the sidecar does before handing etcd its configuration.
type Action string

const (
	// ActionBootstrap starts a member of a new cluster (initial-cluster-state=new) on an empty data dir.
	ActionBootstrap Action = "Bootstrap"
	// ActionRestart starts the member on its existing, valid data.
	ActionRestart Action = "Restart"
	// ActionJoinAsLearner empties the data dir (Wipe or MoveAside), removes the member's old
	// ID from the cluster, adds it as a learner and starts it with initial-cluster-state=existing.
	ActionJoinAsLearner Action = "JoinAsLearner"
	// ActionForceNewCluster restarts the member alone on its data (quorum-loss seed).
	ActionForceNewCluster Action = "ForceNewCluster"
	// ActionRestoreFromBackup restores the backup chain into the data dir and starts alone.
	ActionRestoreFromBackup Action = "RestoreFromBackup"
	// ActionWait changes nothing and observes again shortly: the safe action needs a quorum
	// or a directive that is not there yet.
	ActionWait Action = "Wait"
)

// DataDisposal says what happens to the data dir's contents before a join.
type DataDisposal string

const (
	KeepData      DataDisposal = ""
	WipeData      DataDisposal = "wipe"       // damaged or superseded data of this member
	MoveDataAside DataDisposal = "move-aside" // data that may belong to someone else: kept beside
)

// CaseFenced is the row that holds a fenced member's etcd stopped.
const CaseFenced = "MemberFenced"

// CaseFounderRestore is the row of a founder's restore (decideFounder): its etcd starts only
// once the recovery records the restore, at a later decision.
const CaseFounderRestore = "QuorumLossFounderRestore"

// Plan is the outcome of Decide.
type Plan struct {
	// Case names the situation (stable, used in logs, metrics and the init API).
	Case string `json:"case"`
	// Action to take.
	Action Action `json:"action"`
	// ClusterState is etcd's initial-cluster-state for the generated config.
	ClusterState string `json:"clusterState,omitempty"`
	// Disposal of the data dir's contents before acting.
	Disposal DataDisposal `json:"disposal,omitempty"`
	// RemoveMemberID is this member's old ID to remove from the cluster before re-adding it.
	RemoveMemberID string `json:"removeMemberID,omitempty"`
	// CleanPartialRestore removes an unfinished restore (<data dir>.part) first.
	CleanPartialRestore bool `json:"cleanPartialRestore,omitempty"`
	// RecoveryEpoch is recorded in the data dir once this plan runs (quorum-loss directives).
	RecoveryEpoch int64 `json:"recoveryEpoch,omitempty"`
	// Founders are the members of the cluster a recovery from the backup restores, as its
	// voters (ActionRestoreFromBackup; empty: the seed alone), and FoundersToken the token
	// their member and cluster IDs derive from: the directive's own, so that they are new.
	Founders      []string `json:"founders,omitempty"`
	FoundersToken string   `json:"foundersToken,omitempty"`
	// Restore is the backup and point to restore from (ActionRestoreFromBackup; an empty
	// Store: this member's backup store).
	Restore *cluster.RestoreTarget `json:"restore,omitempty"`
	// Reason explains the decision in words for logs and the init API.
	Reason string `json:"reason"`
}

// Decide chooses how this member starts. It is a pure function of the observation.
func Decide(o Observation) Plan {
	p := decide(o)
	p.CleanPartialRestore = o.Data.PartialRestore
	if p.CleanPartialRestore {
		p.Reason += "; an unfinished restore beside the data dir is removed first"
	}
	return p
}

func decide(o Observation) Plan {
	selfLive, selfLiveOK := o.liveSelf()
	data := describeData(o.Data)

	// A recovery directive comes before a fence: it needs every member's data, and waits for
	// each member to do its part (the operator suspends the fences meanwhile; a fence the view
	// or the data dir still records must not hold a member the directive needs).
	directed, followsDirective := o.directivePlan(selfLive)
	switch {
	case followsDirective:
		// Carried out below, once the data dir is known not to be in use.
	case o.Fenced:
		return hold(CaseFenced, "this member is fenced (annotation etcd.steward.dev/fenced-members): its etcd is held stopped, its data kept, until it is unfenced")
	case o.ViewUnavailable != "" && o.FencedOnDisk:
		return hold(CaseFenced, fmt.Sprintf("the cluster view cannot be read (%s) and the data dir records that this member is fenced: its etcd is held stopped until the view says it is unfenced", o.ViewUnavailable))
	}
	if o.Data.InUse {
		// A held lock means an etcd runs on this data dir: nothing may be decided about data
		// that is in use, least of all that it is damaged.
		return Plan{Case: "DataInUseWait", Action: ActionWait,
			Reason: fmt.Sprintf("the database in %s is in use by a running etcd: waiting for it to stop", o.Data.Dir)}
	}
	if o.ViewUnavailable != "" {
		return decideWithoutView(o)
	}
	if followsDirective {
		return directed
	}
	if o.Data.Superseded() {
		return decideSuperseded(o, selfLive, selfLiveOK)
	}

	switch {
	case o.Data.Valid():
		return decideValidData(o, selfLive, selfLiveOK)

	case !o.Data.Empty(): // damaged or incomplete
		if o.Live.Quorate {
			return Plan{Case: "ReplaceInvalidData", Action: ActionJoinAsLearner, ClusterState: "existing",
				Disposal: WipeData, RemoveMemberID: cmp.Or(selfLive.ID, o.Data.MemberIDHex(), o.statusID()),
				Reason: fmt.Sprintf("data dir is %s; the cluster has quorum: wipe, remove the old member, rejoin as a learner", data)}
		}
		if o.neverFormed() {
			// Nothing was ever written: a cluster needs a quorum to write, and this one never
			// had one. Waiting would wait forever for a quorum that needs this member.
			return Plan{Case: "InvalidDataNeverFormedBootstrap", Action: ActionBootstrap, ClusterState: "new", Disposal: WipeData,
				Reason: fmt.Sprintf("data dir is %s, of a cluster that never formed, and %s: wipe it and bootstrap again", data, o.backupsHeld())}
		}
		return Plan{Case: "InvalidDataWaitForQuorum", Action: ActionWait,
			Reason: fmt.Sprintf("data dir is %s and the cluster has no quorum: waiting (the supervisor or operator recovers a quorum lost for good)", data)}
	}

	// Empty data dir.
	formed := o.formed()
	switch {
	case o.Live.Quorate && selfLiveOK && selfLive.Name == "" && !selfLive.IsLearner:
		// Joins with initial-cluster-state=existing: the cluster it was listed in has formed.
		return Plan{Case: "StartUnstartedMember", Action: ActionJoinAsLearner, ClusterState: "existing",
			Reason: "empty data dir; the cluster was bootstrapped with this member, which never started: start it as that member of the running cluster"}
	case o.Live.Quorate && (selfLiveOK || o.statusID() != ""):
		return Plan{Case: "ReplaceLostData", Action: ActionJoinAsLearner, ClusterState: "existing",
			RemoveMemberID: cmp.Or(selfLive.ID, o.statusID()),
			Reason:         "empty data dir of a member the cluster knows: remove the old member, rejoin as a learner"}
	case o.Live.Quorate:
		return Plan{Case: "JoinRunningCluster", Action: ActionJoinAsLearner, ClusterState: "existing",
			Reason: "new member of a running cluster (scale-up): join as a learner"}
	case formed:
		return Plan{Case: "LostDataWaitForQuorum", Action: ActionWait,
			Reason: "empty data dir; the cluster has formed and no quorum answers: waiting (never bootstraps beside it; the supervisor or operator recovers a quorum lost for good)"}
	case o.BackupTimeline != 0:
		return Plan{Case: "NoStatusBackupExistsWait", Action: ActionWait,
			Reason: fmt.Sprintf("empty data dir and no cluster in the status, but the backup store holds backups of this cluster (timeline %d): waiting for a restore directive (an empty new cluster would hide them)", o.BackupTimeline)}
	}
	return Plan{Case: "Bootstrap", Action: ActionBootstrap, ClusterState: "new",
		Reason: fmt.Sprintf("empty data dir, the cluster has never formed and %s: bootstrap a new %d-member cluster", o.backupsHeld(), o.ClusterSize)}
}

// directivePlan is this member's part in the recovery directive in force, if it has one
// (ok=false: the directive asks nothing of this member, and the ordinary decisions apply).
func (o Observation) directivePlan(selfLive cluster.LiveMember) (p Plan, ok bool) {
	switch d := o.Directive; {
	case d == nil:
		return Plan{}, false
	case d.Epoch > o.AppliedEpoch:
		return decideDirective(o, *d, selfLive)
	case d.Phase == cluster.PhaseSeeding && d.Seed == o.Self && o.Data.Valid() && o.foreignReason() == "" && !o.Data.Superseded():
		return Plan{Case: "QuorumLossSeedRestart", Action: ActionRestart, ClusterState: "existing",
			Reason: fmt.Sprintf("this member carried out directive %d (it served on the recovered data) and its acknowledgement is not recorded yet: restart on that data", d.Epoch)}, true
	case d.Phase == cluster.PhaseSeeding && d.Founder(o.Self) && d.Epoch == o.AppliedEpoch && o.Data.Valid() && o.foreignReason() == "" && !o.Data.Superseded():
		if !slices.Contains(d.Restored, o.Self) {
			// Recorded first: a founder that lost its data after its etcd ran must never
			// restore again under the same member ID (decideFounder).
			return Plan{Case: "QuorumLossFounderRecording", Action: ActionWait,
				Reason: fmt.Sprintf("restored for directive %d: waiting for the recovery to record it before etcd starts", d.Epoch)}, true
		}
		return Plan{Case: "QuorumLossFounderStart", Action: ActionRestart, ClusterState: "existing",
			Reason: fmt.Sprintf("restored for directive %d as one of the restored cluster's founders, and recorded: start on that data", d.Epoch)}, true
	}
	return Plan{}, false
}

// hold keeps etcd stopped (the initialisation waits, so etcd gets no configuration) for why,
// until an observation decides otherwise: a member stopped on purpose, not for want of a quorum.
func hold(c, why string) Plan {
	return Plan{Case: c, Action: ActionWait, Reason: why}
}

// backupsHeld says, for a cluster that bootstraps, what the backup store holds: nothing of
// this cluster (another cluster's backups on the same prefix are no reason to wait; the new
// cluster's backups go to a timeline of their own).
func (o Observation) backupsHeld() string {
	if o.ForeignTimelines > 0 {
		return fmt.Sprintf("the backup store holds no backups of this cluster (its %d timelines are of other clusters)", o.ForeignTimelines)
	}
	return "the backup store holds nothing"
}

// decideValidData decides for a data dir that holds a member's valid WAL and database.
func decideValidData(o Observation, selfLive cluster.LiveMember, selfLiveOK bool) Plan {
	foreign := o.foreignReason()
	if foreign == "" {
		foreign = o.liveOwnerReason()
	}
	owner := o.dataOwner()
	ownerHolds, ownerDesired := o.Status.ReportsOwnData(owner)
	relocatable := o.RelocatesData && owner != "" && owner != o.Self && ownerDesired && !ownerHolds
	switch {
	case foreign != "" && relocatable:
		return Plan{Case: "DataOfAnotherMemberRelocate", Action: ActionWait,
			Reason: fmt.Sprintf("data dir holds the data of member %s (%s), whose own data dir does not: waiting for it to be moved back", owner, foreign)}
	case foreign != "" && o.Live.Quorate:
		return Plan{Case: "ForeignDataReplace", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside,
			RemoveMemberID: selfLive.ID,
			Reason:         fmt.Sprintf("data dir belongs to someone else (%s): it is moved aside, never started on; rejoin as a new learner", foreign)}
	case foreign != "" && o.neverFormed():
		return Plan{Case: "ForeignDataNeverFormedBootstrap", Action: ActionBootstrap, ClusterState: "new", Disposal: MoveDataAside,
			Reason: fmt.Sprintf("data dir belongs to someone else (%s), of a cluster that never formed, and %s: moved aside; bootstrap", foreign, o.backupsHeld())}
	case foreign != "":
		return Plan{Case: "ForeignDataWaitForQuorum", Action: ActionWait,
			Reason: fmt.Sprintf("data dir belongs to someone else (%s) and the cluster has no quorum to rejoin: waiting", foreign)}
	}
	clusterID := cmp.Or(o.Live.ClusterID, o.Status.ClusterID)
	if !o.Live.Quorate {
		clusterID = o.Status.ClusterID
	}
	switch {
	case clusterID != "" && o.Data.ClusterIDHex() != clusterID && o.Live.Quorate:
		return Plan{Case: "DataOfAnotherClusterReplace", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside,
			RemoveMemberID: selfLive.ID,
			Reason:         fmt.Sprintf("data dir is of cluster %s, the running cluster is %s: moved aside; rejoin as a new learner", o.Data.ClusterIDHex(), clusterID)}
	case clusterID != "" && o.Data.ClusterIDHex() != clusterID:
		return Plan{Case: "DataOfAnotherClusterWait", Action: ActionWait,
			Reason: fmt.Sprintf("data dir is of cluster %s, the cluster is %s and has no quorum: never started on; waiting", o.Data.ClusterIDHex(), clusterID)}
	case o.Live.Quorate && !o.liveHasID(o.Data.MemberIDHex()):
		return Plan{Case: "RemovedWhileDownRejoin", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: WipeData,
			RemoveMemberID: selfLive.ID,
			Reason:         fmt.Sprintf("member %s was removed from the cluster while it was down: its old data is wiped; rejoin as a new learner", o.Data.MemberIDHex())}
	case o.Live.Quorate && selfLiveOK && selfLive.IsLearner:
		return Plan{Case: "RestartLearner", Action: ActionRestart, ClusterState: "existing",
			Reason: fmt.Sprintf("data dir holds valid data of learner %s (%s): restart; it is promoted once caught up", o.Data.MemberIDHex(), validation(o.Data))}
	case o.Live.Quorate:
		return Plan{Case: "RestartQuorate", Action: ActionRestart, ClusterState: "existing",
			Reason: fmt.Sprintf("data dir holds valid data of member %s (%s); the cluster has quorum: restart on it", o.Data.MemberIDHex(), validation(o.Data))}
	}
	return Plan{Case: "RestartNonQuorate", Action: ActionRestart, ClusterState: "existing",
		Reason: fmt.Sprintf("data dir holds valid data of member %s (%s); no quorum answers: restart on it so the quorum can re-form", o.Data.MemberIDHex(), validation(o.Data))}
}

// decideWithoutView decides while the cluster view cannot be read (the Kubernetes API server
// does not answer): the spec, the status and any directive are unknown. A restart on this
// member's own valid data, as it last started, needs none of them: etcd keeps the membership
// in its data, and a member the cluster removed meanwhile learns it from its peers and stops.
// Joining, bootstrapping, replacing data or carrying out a directive needs the view: they wait.
func decideWithoutView(o Observation) Plan {
	id := o.Data.Identity
	var why string
	switch {
	case !o.Data.Valid():
		why = "data dir is " + describeData(o.Data)
	case o.Data.Superseded():
		why = fmt.Sprintf("the data dir records that the restore of directive %d supersedes its data", o.Data.SupersededBy)
	case o.Data.PartialRestore:
		why = "an unfinished restore lies beside the data dir"
	case id == nil:
		why = "the data dir records no identity"
	case o.foreignReason() != "":
		why = "the data dir is not this member's: " + o.foreignReason()
	case id.ClusterID != "" && id.ClusterID != o.Data.ClusterIDHex():
		why = fmt.Sprintf("the data dir's WAL is of cluster %s, its identity says %s", o.Data.ClusterIDHex(), id.ClusterID)
	case !o.LastStart:
		why = "the data dir records no earlier start of this member"
	default:
		return Plan{Case: "RestartWithoutView", Action: ActionRestart, ClusterState: "existing",
			Reason: fmt.Sprintf("the cluster view cannot be read (%s); data dir holds valid data of member %s (%s): restart on it as it last started",
				o.ViewUnavailable, o.Data.MemberIDHex(), validation(o.Data))}
	}
	return Plan{Case: "ViewUnavailableWait", Action: ActionWait,
		Reason: fmt.Sprintf("the cluster view cannot be read (%s) and %s: only a restart on this member's own data goes on without it; waiting for the view", o.ViewUnavailable, why)}
}

// decideSuperseded decides for a data dir that records that a restore supersedes its data
// (datadir.State.Superseded), with no directive asking anything of this member: the data is
// treated as if the dir were empty. It is never restarted: once the restored cluster serves,
// writes it acknowledges are only there (and in its backups), and restarting the old data
// beside it would undo the restore. Nor does this member bootstrap a new cluster: the record
// proves that the cluster formed. With a quorum (the restored cluster, normally) it rejoins as
// a learner, its data moved aside with the record; without one it waits: the supervisor or
// operator recovers the quorum (with its status lost, every dir then holds nothing or
// superseded data, and it restores the backup's newest timeline, which holds the restore).
func decideSuperseded(o Observation, selfLive cluster.LiveMember, selfLiveOK bool) Plan {
	if o.Live.Quorate {
		id := o.statusID()
		if selfLiveOK {
			id = cmp.Or(selfLive.ID, id)
		}
		return Plan{Case: "SupersededDataRejoin", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside,
			RemoveMemberID: id,
			Reason: fmt.Sprintf("data dir records that the restore of directive %d supersedes its data (%s); the cluster has quorum: moved aside, never started on; rejoin as a learner",
				o.Data.SupersededBy, describeData(o.Data))}
	}
	return Plan{Case: "SupersededDataWait", Action: ActionWait,
		Reason: fmt.Sprintf("data dir records that the restore of directive %d supersedes its data (%s) and no quorum answers: never started on, never bootstraps beside it; waiting (the supervisor or operator recovers the quorum, from the backup if no member holds data of the restored cluster)",
			o.Data.SupersededBy, describeData(o.Data))}
}

// SupersededRecord is the epoch of the restore that this member's data dir (data, as
// inspected) should record supersedes its data, under directive d in force (0: no record).
// The sidecar keeps the record in step with it whenever its etcd does not run on the dir.
//
//   - A restore (d.Restore) that this dir has not carried out, while it holds this member:
//     fencing, or a seed other than this member restoring it or serving it (the seed moves
//     its own data aside, and data it starts later is never marked). The data is superseded
//     by it. The supervisor or operator lets the seed act only once every member that holds
//     data records it, so that a status lost later never restarts the old data beside the
//     restored cluster (heal.RebuildStatus, heal.Decide).
//   - The cancel of a restore (d.Cancels): the restore never happened, and records of it (or
//     of an earlier epoch of it) go before the members restart on their data.
//   - A dir holding nothing needs no record, and a record the dir's data carried out since
//     (its identity's epoch is as new) marks nothing: both go.
//
// Otherwise the record stays as it is.
func SupersededRecord(d *cluster.Directive, self string, data datadir.State) int64 {
	if data.Empty() {
		return 0
	}
	var rec, applied int64
	if data.Superseded() {
		rec = data.SupersededBy
	}
	if data.Identity != nil {
		applied = data.Identity.RecoveryEpoch
	}
	switch {
	case d == nil:
	case d.Restore != nil && d.Epoch > applied && (d.Phase == cluster.PhaseFencing || d.Seed != self):
		rec = max(rec, d.Epoch)
	case d.Cancels != 0 && rec <= d.Cancels:
		rec = 0
	}
	return rec
}

// decideDirective carries out a quorum-loss directive this data dir has not carried out
// (the operator's quorum-lost row). ok=false: the directive
// asks nothing of this member and the ordinary decisions apply.
func decideDirective(o Observation, d cluster.Directive, selfLive cluster.LiveMember) (Plan, bool) {
	switch {
	case d.Phase == cluster.PhaseFencing:
		return hold("QuorumLossFenced", fmt.Sprintf("quorum lost for good: every member is stopped while directive %d chooses the recovery source", d.Epoch)), true
	case d.Ack != nil && d.Seed == o.Self:
		// Carried out and acknowledged: a seed that since lost its data is replaced like any
		// member, never seeded again.
		return Plan{}, false
	case d.Phase == cluster.PhaseSeeding && d.Seed == o.Self:
		return decideSeed(o, d), true
	case d.Phase == cluster.PhaseSeeding && d.Founder(o.Self):
		return decideFounder(o, d), true
	case d.Phase == cluster.PhaseSeeding:
		return Plan{Case: "QuorumLossFollowerWait", Action: ActionWait,
			Reason: fmt.Sprintf("waiting for %s to recover the quorum (directive %d, %s)", d.Seed, d.Epoch, d.Mode)}, true
	case d.Phase == cluster.PhaseRejoining && d.Seed == o.Self:
		return Plan{}, false
	case d.Phase == cluster.PhaseRejoining && o.Live.Quorate && o.liveHasName(d.Seed):
		disposal := MoveDataAside // what recovery replaces is kept, never wiped
		if o.Data.Empty() {
			disposal = KeepData
		}
		return Plan{Case: "QuorumLossFollowerRejoin", Action: ActionJoinAsLearner, ClusterState: "existing",
			Disposal: disposal, RemoveMemberID: selfLive.ID, RecoveryEpoch: d.Epoch,
			Reason: fmt.Sprintf("quorum was recovered around %s (directive %d): this member's old data is superseded (moved aside); rejoin as a learner", d.Seed, d.Epoch)}, true
	case d.Phase == cluster.PhaseRejoining:
		return Plan{Case: "QuorumLossFollowerWait", Action: ActionWait,
			Reason: fmt.Sprintf("directive %d: %s recovered the quorum but no quorum answers now: waiting", d.Epoch, d.Seed)}, true
	}
	return Plan{Case: "UnknownDirective", Action: ActionWait, Reason: fmt.Sprintf("directive %d has unknown phase %q: waiting", d.Epoch, d.Phase)}, true
}

// decideFounder is the part of a founder of the cluster the seed restores, other than the
// seed: once the seed has restored, restore the same point of the same backup, into the
// member the restore made of it, and start once the recovery records that it restored. The
// founders start together, each on its copy of the data, with no membership change and no
// data to take from the seed. A founder recorded before never restores again: its etcd may
// have voted or acknowledged writes under its member ID, and with its data lost it rejoins
// as a learner, its old member removed, as after any recovery. One never recorded never ran
// its etcd, and may restore again.
func decideFounder(o Observation, d cluster.Directive) Plan {
	seed := restoredPoint(o.Status, d, o.Self)
	switch {
	case slices.Contains(d.Restored, o.Self):
		return Plan{Case: "QuorumLossFounderLost", Action: ActionWait,
			Reason: fmt.Sprintf("this member restored for directive %d before and lost that data since (its etcd may have voted under its member ID): it rejoins the restored cluster as a learner once the recovery moves on", d.Epoch)}
	case seed == nil:
		return Plan{Case: "QuorumLossFounderWait", Action: ActionWait,
			Reason: fmt.Sprintf("waiting for %s to restore the backup (directive %d); this member then restores the same revision and starts with it", d.Seed, d.Epoch)}
	}
	return Plan{Case: CaseFounderRestore, Action: ActionRestoreFromBackup, ClusterState: "new", Disposal: MoveDataAside,
		RecoveryEpoch: d.Epoch, Founders: d.Founders, FoundersToken: foundersToken(o, d),
		Restore: &cluster.RestoreTarget{Timeline: seed.RestoredTimeline, Revision: seed.RestoredRevision},
		Reason: fmt.Sprintf("%s restored revision %d of timeline %d with every member as a voter (directive %d): this member's data is moved aside (kept); restore the same revision as its member of that cluster and start with it",
			seed.Name, seed.RestoredRevision, seed.RestoredTimeline, d.Epoch)}
}

// restoredPoint is the report of the member whose data dir records the point of the backup
// that directive d's founders restore (nil: none yet): its seed's, or, only while the seed's
// report shows none (it lost its data since), the first other founder's; never self's own.
// The seed's comes first: another founder's report cannot steer the others away from it.
func restoredPoint(st cluster.Status, d cluster.Directive, self string) *cluster.Report {
	var founder *cluster.Report
	for _, m := range st.Members {
		r := m.Report
		if r == nil || m.Name == self || r.AppliedEpoch < d.Epoch || r.RestoredRevision <= 0 {
			continue
		}
		switch {
		case m.Name == d.Seed:
			return r
		case d.Founder(m.Name) && founder == nil:
			founder = r
		}
	}
	return founder
}

// foundersToken is the token the seed and the founders of directive d restore under: the
// cluster's, with the directive's epoch and issue time. Every member derives the same one,
// and a restore of the same peer URLs never takes the member and cluster IDs of an earlier
// cluster (whose data may still lie in a dir, or in the backup store's timelines), not even
// after a status lost with every data dir, which numbers epochs from 1 again.
func foundersToken(o Observation, d cluster.Directive) string {
	return fmt.Sprintf("%s-recovery-%d-%x", o.ClusterToken, d.Epoch, d.IssuedAt.UnixNano())
}

// decideSeed is the seed's part of a directive.
func decideSeed(o Observation, d cluster.Directive) Plan {
	for _, m := range o.Status.Members {
		if r := m.Report; m.Name != o.Self && r != nil && r.DataValid && r.Owner == o.Self && r.AppliedEpoch >= d.Epoch {
			// It carried the directive out, and its data is now in another member's dir:
			// never a second time beside it.
			return Plan{Case: "QuorumLossSeedDataElsewhere", Action: ActionWait,
				Reason: fmt.Sprintf("this member carried out directive %d, and its data is in %s's data dir: waiting for it to be moved back", d.Epoch, m.Name)}
		}
	}
	for _, m := range o.Status.Members {
		if r := m.Report; d.Founder(m.Name) && (slices.Contains(d.Restored, m.Name) || (r != nil && r.AppliedEpoch >= d.Epoch)) {
			// The cluster this member restored lives on in the founders that started: a
			// second restore beside it would make another one under the same member IDs.
			return Plan{Case: "QuorumLossSeedFoundersStarted", Action: ActionWait,
				Reason: fmt.Sprintf("founders of directive %d restored what this member restored (%s first), and this member holds it no more: it never restores again beside them, and rejoins as a learner once they serve", d.Epoch, m.Name)}
		}
	}
	switch d.Mode {
	case cluster.RecoverFromSurvivor:
		if o.Data.Valid() && o.foreignReason() == "" && !o.Data.Superseded() {
			return Plan{Case: "QuorumLossSeedFromSurvivor", Action: ActionForceNewCluster, ClusterState: "existing", RecoveryEpoch: d.Epoch,
				Reason: fmt.Sprintf("quorum lost for good; this member's log would win an election (revision %d): keep every entry it logged, restart alone on it (force-new-cluster); the others rejoin as learners", o.Data.Revision)}
		}
		return Plan{Case: "QuorumLossSeedWithoutData", Action: ActionWait,
			Reason: fmt.Sprintf("directive %d names this member as survivor seed, but its data dir is %s: waiting for a new directive", d.Epoch, describeData(o.Data))}
	case cluster.RecoverFromBackup:
		if d.Restore != nil && d.Restore.Store == "" {
			// A running cluster restored back in time (steward local restore, the operator's
			// restore): its own store, a timeline and revision checked when it was asked for.
			return Plan{Case: "RestoreInPlace", Action: ActionRestoreFromBackup, ClusterState: "new",
				Disposal: MoveDataAside, RecoveryEpoch: d.Epoch, Restore: d.Restore,
				Reason: fmt.Sprintf("directive %d restores the cluster back to %s from its own backup store: this member's data is moved aside (kept), the target restored, start alone, take a full snapshot (a new timeline); the others rejoin as learners", d.Epoch, d.Restore.Point())}
		}
		if d.Restore != nil {
			return Plan{Case: "BootstrapRestore", Action: ActionRestoreFromBackup, ClusterState: "new",
				Disposal: MoveDataAside, RecoveryEpoch: d.Epoch, Restore: d.Restore,
				Reason: fmt.Sprintf("a new cluster restored from %s (%s): restore it, start alone, take a full snapshot; the others join as learners", store.Redact(d.Restore.Store), d.Restore.Point())}
		}
		if o.BackupTimeline == 0 {
			return Plan{Case: "QuorumLossSeedNoOwnBackup", Action: ActionWait,
				Reason: fmt.Sprintf("directive %d restores this cluster from backup, but the backup store holds no timeline of it (%d of other clusters): waiting for a new directive", d.Epoch, o.ForeignTimelines)}
		}
		p := Plan{Case: "QuorumLossRestoreFromBackup", Action: ActionRestoreFromBackup, ClusterState: "new",
			Disposal: MoveDataAside, RecoveryEpoch: d.Epoch, Restore: &cluster.RestoreTarget{Timeline: o.BackupTimeline},
			Reason: fmt.Sprintf("quorum lost for good and the backup holds the most: restore the newest revision of timeline %d, this cluster's newest (full + deltas), start alone, take a full snapshot; the others rejoin as learners", o.BackupTimeline)}
		if len(d.Founders) > 0 {
			p.Founders, p.FoundersToken = d.Founders, foundersToken(o, d)
			p.Reason = fmt.Sprintf("quorum lost for good and the backup holds the most: restore the newest revision of timeline %d, this cluster's newest (full + deltas), with %s as its voters, start, take a full snapshot once they serve; the others restore the same revision and start with it", o.BackupTimeline, strings.Join(d.Founders, ", "))
		}
		return p
	}
	return Plan{Case: "UnknownRecoveryMode", Action: ActionWait, Reason: fmt.Sprintf("directive %d has unknown mode %q: waiting", d.Epoch, d.Mode)}
}

func (o Observation) liveSelf() (cluster.LiveMember, bool) {
	for _, m := range o.Live.Members {
		if m.Name == o.Self || (o.SelfPeerURL != "" && m.PeerURL == o.SelfPeerURL) {
			return m, true
		}
	}
	return cluster.LiveMember{}, false
}

func (o Observation) liveHasID(id string) bool {
	for _, m := range o.Live.Members {
		if m.ID == id {
			return true
		}
	}
	return false
}

func (o Observation) liveHasName(name string) bool {
	for _, m := range o.Live.Members {
		if m.Name == name {
			return true
		}
	}
	return false
}

// foreignReason says why the data dir's recorded identity is not this member's, or "".
func (o Observation) foreignReason() string {
	id := o.Data.Identity
	switch {
	case id == nil:
		return ""
	case id.MemberName != o.Self:
		return fmt.Sprintf("it records member %q of cluster %q", id.MemberName, id.ClusterName)
	case o.ClusterToken != "" && id.ClusterToken != o.ClusterToken:
		return fmt.Sprintf("it records cluster token %q, this cluster's is %q", id.ClusterToken, o.ClusterToken)
	case id.MemberID != "" && o.Data.MemberIDHex() != "" && id.MemberID != o.Data.MemberIDHex():
		return fmt.Sprintf("its WAL is of member %s, its identity says %s", o.Data.MemberIDHex(), id.MemberID)
	}
	return ""
}

// liveOwnerReason says whether the data's member ID belongs to another member of the running
// cluster (e.g. two volumes swapped), or "".
func (o Observation) liveOwnerReason() string {
	id := o.Data.MemberIDHex()
	for _, m := range o.Live.Members {
		if m.ID == id && m.Name != "" && m.Name != o.Self {
			return fmt.Sprintf("its WAL is of member %s, which the cluster knows as %q", id, m.Name)
		}
	}
	return ""
}

// neverFormed: no quorum answers, nothing says the cluster formed (the status, the other
// members' reports, this data dir's identity) and the backup store holds nothing of it: whatever
// the data dir holds was never written to by a quorum.
func (o Observation) neverFormed() bool {
	return !o.Live.Quorate && !o.formed() && (o.Data.Identity == nil || o.Data.Identity.ClusterID == "") && o.BackupTimeline == 0
}

// formed: the status records a cluster that formed, or another member reports data of one
// (the status may not record it yet, or may have been lost).
func (o Observation) formed() bool {
	if o.Status.ClusterID != "" || len(o.Status.Voters) > 0 {
		return true
	}
	for _, m := range o.Status.Members {
		if r := m.Report; m.Name != o.Self && r != nil && r.Formed {
			return true
		}
	}
	return false
}

// statusID is this member's ID as the cluster status records it.
func (o Observation) statusID() string {
	for _, m := range o.Status.Members {
		if m.Name == o.Self {
			return m.ID
		}
	}
	return ""
}

// dataOwner names the member of this cluster the data dir's data belongs to: the identity
// file's member when it is of this cluster, else the voter with the WAL's member ID.
func (o Observation) dataOwner() string {
	if id := o.Data.Identity; id != nil && id.MemberName != "" && (o.ClusterToken == "" || id.ClusterToken == o.ClusterToken) {
		return id.MemberName
	}
	if name, ok := o.Status.VoterName(o.Data.MemberIDHex()); ok {
		return name
	}
	for _, m := range o.Live.Members {
		if m.ID == o.Data.MemberIDHex() {
			return m.Name
		}
	}
	return ""
}

func validation(s datadir.State) string {
	if s.CleanShutdown {
		return "clean shutdown, quick check passed"
	}
	return "unclean shutdown, full integrity check passed"
}

func describeData(s datadir.State) string {
	switch {
	case s.Empty():
		return "empty"
	case s.Valid():
		return fmt.Sprintf("valid, member %x, revision %d", s.MemberID, s.Revision)
	case len(s.Problems) > 0:
		return "invalid: " + strings.Join(s.Problems, "; ")
	default:
		return "incomplete"
	}
}
