package member

import (
	"fmt"
	"strings"

	"github.com/etcd-steward/steward/internal/datadir"
)

// Observation is everything the initialisation decision depends on.
type Observation struct {
	// Self is this member's name; SelfPeerURL its desired peer URL.
	Self        string
	SelfPeerURL string
	// ClusterSize is the desired number of members; ClusterToken the desired cluster's token.
	ClusterSize  int
	ClusterToken string
	// Status lists the members that the cluster status (supervisor or operator) recorded.
	Status []StatusMember
	// Data is what is in this member's data dir.
	Data datadir.State
	// Live is what the running cluster (the other members) says.
	Live LiveCluster
	// Recovery is the quorum-loss directive in force, if any.
	Recovery *Recovery
	// AppliedRecoveryEpoch is the newest directive this data dir has already carried out.
	AppliedRecoveryEpoch int64
}

// LiveCluster is the running cluster as seen from the other members.
type LiveCluster struct {
	// Reachable: some member answered. Quorate: a linearizable read of the member list succeeded.
	Reachable bool
	Quorate   bool
	ClusterID string
	Members   []LiveMember
}

// LiveMember is one entry of etcd's member list.
type LiveMember struct {
	ID        string `json:"id"`
	Name      string `json:"name"` // empty while the member has not started
	PeerURL   string `json:"peerURL"`
	IsLearner bool   `json:"isLearner"`
}

// Recovery is a directive to recover from a quorum lost for good, issued by the supervisor or
// operator. Epochs only grow; a data dir records the epoch it carried out so that a
// directive is never applied twice.
type Recovery struct {
	Epoch int64 `json:"epoch"`
	// Mode: RecoverFromSurvivor (the seed restarts alone on its data) or RecoverFromBackup.
	Mode string `json:"mode"`
	Seed string `json:"seed"`
}

// Recovery modes.
const (
	RecoverFromSurvivor = "survivor"
	RecoverFromBackup   = "backup"
)

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

// Plan is the outcome of Decide.
type Plan struct {
	// Case names the situation (stable, used in logs, metrics and the init API).
	Case string `json:"case"`
	// Seed refers to the row of the initialisation table in the design it implements.
	Seed string `json:"seed,omitempty"`
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
	statusTotal, statusReady, selfInStatus := countStatus(o.Status, o.Self)
	selfLive, selfLiveOK := o.liveSelf()
	data := describeData(o.Data)

	if r := o.Recovery; r != nil && r.Epoch > o.AppliedRecoveryEpoch {
		return decideRecovery(o, *r, selfLive)
	}

	switch {
	case o.Data.Valid():
		foreign := o.foreignReason()
		if foreign == "" {
			foreign = o.liveOwnerReason()
		}
		switch {
		case foreign != "" && o.Live.Quorate:
			return Plan{Case: "ForeignDataReplace", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside,
				RemoveMemberID: selfLive.ID,
				Reason:         fmt.Sprintf("data dir belongs to someone else (%s): it is moved aside, never started on; rejoin as a new learner", foreign)}
		case foreign != "":
			return Plan{Case: "ForeignDataWaitForQuorum", Action: ActionWait,
				Reason: fmt.Sprintf("data dir belongs to someone else (%s) and the cluster has no quorum to rejoin: waiting", foreign)}
		case o.Live.Quorate && o.Live.ClusterID != "" && o.Data.ClusterIDHex() != o.Live.ClusterID:
			return Plan{Case: "DataOfAnotherClusterReplace", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside,
				RemoveMemberID: selfLive.ID,
				Reason:         fmt.Sprintf("data dir is of cluster %s, the running cluster is %s: moved aside; rejoin as a new learner", o.Data.ClusterIDHex(), o.Live.ClusterID)}
		case o.Live.Quorate && !o.liveHasID(o.Data.MemberIDHex()):
			return Plan{Case: "RemovedWhileDownRejoin", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: WipeData,
				RemoveMemberID: selfLive.ID,
				Reason:         fmt.Sprintf("member %s was removed from the cluster while it was down: its old data is wiped; rejoin as a new learner", o.Data.MemberIDHex())}
		case o.Live.Quorate && selfLiveOK && selfLive.IsLearner:
			return Plan{Case: "RestartLearner", Action: ActionRestart, ClusterState: "existing",
				Reason: fmt.Sprintf("data dir holds valid data of learner %s (%s): restart; it is promoted once caught up", o.Data.MemberIDHex(), validation(o.Data))}
		case o.Live.Quorate || statusReady > o.ClusterSize/2:
			return Plan{Case: "RestartQuorate", Seed: "001 initialisation case 3", Action: ActionRestart, ClusterState: "existing",
				Reason: fmt.Sprintf("data dir holds valid data of member %s (%s); the cluster has quorum: restart on it", o.Data.MemberIDHex(), validation(o.Data))}
		default:
			return Plan{Case: "RestartNonQuorate", Seed: "001 initialisation case 6", Action: ActionRestart, ClusterState: "existing",
				Reason: fmt.Sprintf("data dir holds valid data of member %s (%s); no quorum (%d of %d ready): restart on it so the quorum can re-form", o.Data.MemberIDHex(), validation(o.Data), statusReady, o.ClusterSize)}
		}

	case !o.Data.Empty(): // damaged or incomplete
		if o.Live.Quorate {
			return Plan{Case: "ReplaceInvalidData", Seed: "001 initialisation case 4", Action: ActionJoinAsLearner, ClusterState: "existing",
				Disposal: WipeData, RemoveMemberID: firstNonEmpty(selfLive.ID, o.Data.MemberIDHex(), statusID(o.Status, o.Self)),
				Reason: fmt.Sprintf("data dir is %s; the cluster has quorum: wipe, remove the old member, rejoin as a learner", data)}
		}
		return Plan{Case: "InvalidDataWaitForQuorum", Action: ActionWait,
			Reason: fmt.Sprintf("data dir is %s and the cluster has no quorum: waiting (the supervisor or operator recovers a quorum lost for good)", data)}
	}

	// Empty data dir.
	switch {
	case o.Live.Quorate && selfLiveOK && selfLive.Name == "" && !selfLive.IsLearner:
		return Plan{Case: "BootstrapFollowingMember", Seed: "001 initialisation case 2", Action: ActionBootstrap, ClusterState: "new",
			Reason: "empty data dir; the cluster was bootstrapped with this member, which never started: start it as part of the bootstrap"}
	case o.Live.Quorate && (selfLiveOK || selfInStatus):
		return Plan{Case: "ReplaceLostData", Seed: "001 initialisation case 5", Action: ActionJoinAsLearner, ClusterState: "existing",
			RemoveMemberID: firstNonEmpty(selfLive.ID, statusID(o.Status, o.Self)),
			Reason:         "empty data dir of a member the cluster knows: remove the old member, rejoin as a learner"}
	case o.Live.Quorate:
		return Plan{Case: "JoinRunningCluster", Action: ActionJoinAsLearner, ClusterState: "existing",
			Reason: "new member of a running cluster (scale-up): join as a learner"}
	case statusTotal == 0:
		return Plan{Case: "BootstrapFirstMember", Seed: "001 initialisation case 1", Action: ActionBootstrap, ClusterState: "new",
			Reason: fmt.Sprintf("empty data dir and no member in the cluster status: bootstrap a new %d-member cluster", o.ClusterSize)}
	case !selfInStatus && statusTotal < o.ClusterSize:
		return Plan{Case: "BootstrapFollowingMember", Seed: "001 initialisation case 2", Action: ActionBootstrap, ClusterState: "new",
			Reason: fmt.Sprintf("empty data dir; %d of %d members in the cluster status, not this one: join the bootstrap of the new cluster", statusTotal, o.ClusterSize)}
	}
	return Plan{Case: "LostDataWaitForQuorum", Action: ActionWait,
		Reason: fmt.Sprintf("empty data dir of a member the cluster status lists, and no quorum (%d of %d ready): waiting (the supervisor or operator recovers a quorum lost for good)", statusReady, o.ClusterSize)}
}

// decideRecovery carries out a quorum-loss directive (seed 001 cases 7 and 8; decision-table case 10).
func decideRecovery(o Observation, r Recovery, selfLive LiveMember) Plan {
	if r.Seed == o.Self {
		switch r.Mode {
		case RecoverFromSurvivor:
			if o.Data.Valid() && o.foreignReason() == "" {
				return Plan{Case: "QuorumLossSeedFromSurvivor", Action: ActionForceNewCluster, ClusterState: "existing", RecoveryEpoch: r.Epoch,
					Reason: fmt.Sprintf("quorum lost for good; this member holds the newest valid data (revision %d): restart alone on it (force-new-cluster), the others rejoin as learners", o.Data.Revision)}
			}
			return Plan{Case: "QuorumLossSeedWithoutData", Action: ActionWait,
				Reason: fmt.Sprintf("directive %d names this member as survivor seed, but its data dir is %s: waiting for a new directive", r.Epoch, describeData(o.Data))}
		case RecoverFromBackup:
			return Plan{Case: "QuorumLossRestoreFromBackup", Seed: "001 initialisation case 7", Action: ActionRestoreFromBackup, ClusterState: "new",
				Disposal: MoveDataAside, RecoveryEpoch: r.Epoch,
				Reason: "quorum lost for good and no member has valid data: restore the backup chain (full + deltas), start alone, take a full snapshot; the others rejoin as learners"}
		}
		return Plan{Case: "UnknownRecoveryMode", Action: ActionWait, Reason: fmt.Sprintf("directive %d has unknown mode %q: waiting", r.Epoch, r.Mode)}
	}
	if o.Live.Quorate && o.liveHasName(r.Seed) {
		disposal := WipeData
		switch {
		case o.Data.Empty():
			disposal = KeepData
		case o.foreignReason() != "":
			disposal = MoveDataAside // someone else's data: kept, never wiped
		}
		return Plan{Case: "QuorumLossFollowerRejoin", Seed: "001 initialisation case 8", Action: ActionJoinAsLearner, ClusterState: "existing",
			Disposal: disposal, RemoveMemberID: selfLive.ID, RecoveryEpoch: r.Epoch,
			Reason: fmt.Sprintf("quorum was recovered around %s (directive %d): this member's old data is superseded; rejoin as a learner", r.Seed, r.Epoch)}
	}
	return Plan{Case: "QuorumLossFollowerWait", Action: ActionWait,
		Reason: fmt.Sprintf("waiting for %s to recover the quorum (directive %d, %s)", r.Seed, r.Epoch, r.Mode)}
}

func (o Observation) liveSelf() (LiveMember, bool) {
	for _, m := range o.Live.Members {
		if m.Name == o.Self || (o.SelfPeerURL != "" && m.PeerURL == o.SelfPeerURL) {
			return m, true
		}
	}
	return LiveMember{}, false
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

func countStatus(members []StatusMember, self string) (total, ready int, selfIn bool) {
	for _, m := range members {
		total++
		if m.Ready {
			ready++
		}
		if m.Name == self {
			selfIn = true
		}
	}
	return total, ready, selfIn
}

func statusID(members []StatusMember, self string) string {
	for _, m := range members {
		if m.Name == self {
			return m.ID
		}
	}
	return ""
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
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
