package member

import (
	"fmt"
	"strings"

	"github.com/etcd-steward/steward/internal/datadir"
)

// Observation is everything the initialisation decision depends on.
type Observation struct {
	// Self is this member's name.
	Self string
	// ClusterSize is the desired number of members.
	ClusterSize int
	// Status lists the members that the cluster status knows.
	Status []StatusMember
	// Data is what is in this member's data dir.
	Data datadir.State
}

// Action is what the sidecar does before handing etcd its configuration.
type Action string

const (
	// ActionBootstrap starts a member of a new cluster (initial-cluster-state=new) on an empty data dir.
	ActionBootstrap Action = "Bootstrap"
	// ActionRestart starts the member on its existing, valid data.
	ActionRestart Action = "Restart"
	// ActionNotHandled means the situation needs a capability this sidecar does not have yet;
	// the member does not start and the reason is reported.
	ActionNotHandled Action = "NotHandled"
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
	// Reason explains the decision in words for logs and the init API.
	Reason string `json:"reason"`
}

// Decide chooses how this member starts. It is a pure function of the observation.
func Decide(o Observation) Plan {
	statusTotal, statusReady, selfInStatus := countStatus(o.Status, o.Self)
	quorate := statusReady > o.ClusterSize/2

	switch {
	case o.Data.Valid() && quorate:
		return Plan{Case: "RestartQuorate", Seed: "001 initialisation case 3", Action: ActionRestart, ClusterState: "existing",
			Reason: fmt.Sprintf("data dir holds valid data of member %x; %d of %d members ready: restart on it", o.Data.MemberID, statusReady, o.ClusterSize)}
	case o.Data.Valid():
		return Plan{Case: "RestartNonQuorate", Seed: "001 initialisation case 6", Action: ActionRestart, ClusterState: "existing",
			Reason: fmt.Sprintf("data dir holds valid data of member %x; only %d of %d members ready: restart on it so the quorum can re-form", o.Data.MemberID, statusReady, o.ClusterSize)}
	case o.Data.Empty() && statusTotal == 0:
		return Plan{Case: "BootstrapFirstMember", Seed: "001 initialisation case 1", Action: ActionBootstrap, ClusterState: "new",
			Reason: fmt.Sprintf("empty data dir and no member in the cluster status: bootstrap a new %d-member cluster", o.ClusterSize)}
	case o.Data.Empty() && !selfInStatus && statusTotal < o.ClusterSize:
		return Plan{Case: "BootstrapFollowingMember", Seed: "001 initialisation case 2", Action: ActionBootstrap, ClusterState: "new",
			Reason: fmt.Sprintf("empty data dir; %d of %d members in the cluster status, not this one: join the bootstrap of the new cluster", statusTotal, o.ClusterSize)}
	}
	return Plan{Case: "NotHandled", Action: ActionNotHandled,
		Reason: fmt.Sprintf("no automatic action for this state yet (data dir: %s; cluster status: %d members, %d ready, this member listed: %t); the data dir is left untouched",
			describeData(o.Data), statusTotal, statusReady, selfInStatus)}
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
