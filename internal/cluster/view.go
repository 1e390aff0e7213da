// Package cluster is the vocabulary every part of Steward shares about a cluster: its spec and
// status as whoever runs it records them (the local supervisor, the Kubernetes operator), the
// members' live reports, the quorum-recovery directives, the backup leader's status, and the
// View seam through which a sidecar reaches whoever runs its cluster. It holds data and the
// small rules over it, and imports nothing of Steward's.
package cluster

import (
	"context"
	"errors"
)

// View is the sidecar's one seam to whoever runs the cluster (the local supervisor,
// the Kubernetes operator). It reads the cluster as one consistent whole, is told of
// changes instead of polling, reports this member's live state and acknowledges directives.
type View interface {
	// Snapshot returns the spec, the status and the directive in force, read together.
	Snapshot(ctx context.Context) (Snapshot, error)
	// Watch returns a channel that receives a value whenever the snapshot may have changed
	// (coalesced: one value may stand for several changes). It is closed when ctx ends.
	Watch(ctx context.Context) (<-chan struct{}, error)
	// Report records this member's live report in the cluster status.
	Report(ctx context.Context, r Report) error
	// AckDirective records in the cluster status that this member carried out directive epoch.
	AckDirective(ctx context.Context, epoch int64, result DirectiveResult) error
}

// ErrViewNotReady is returned, wrapped with what the view waits for, by a view that has not
// read the cluster since the sidecar started (the Kubernetes API server does not answer).
// Without the cluster's spec and status, only what this member's own data decides goes on:
// a restart on its own valid data. Everything else waits for the view.
var ErrViewNotReady = errors.New("the cluster view has not read the cluster yet")

// BackupPublisher is implemented by views that publish the backup leader's progress (the
// Kubernetes view writes the snapshot Leases the operator reads).
type BackupPublisher interface {
	PublishBackup(ctx context.Context, s BackupStatus) error
}

// ClusterSnapshot is the cluster as the supervisor or operator last recorded it.
type Snapshot struct {
	// Version changes whenever anything in the snapshot changes.
	Version   string     `json:"version"`
	Spec      Spec       `json:"spec"`
	Status    Status     `json:"status"`
	Directive *Directive `json:"directive,omitempty"`
}

// ClusterSpec is the desired cluster.
type Spec struct {
	Name    string       `json:"name"`
	Token   string       `json:"token"`
	Members []MemberSpec `json:"members"`
	// RelocatesData: whoever runs the cluster moves a member's data back into its own data
	// dir when it is found in another member's (steward local can; volumes bound to pods
	// cannot be moved by the operator).
	RelocatesData bool `json:"relocatesData,omitempty"`
	// Fenced names the members whose etcd is held stopped on purpose (a user's fence): their
	// sidecars do not start it until the name is gone.
	Fenced []string `json:"fenced,omitempty"`
}

// MemberSpec is one desired member and its addresses.
type MemberSpec struct {
	Name      string `json:"name"`
	ClientURL string `json:"clientURL"`
	PeerURL   string `json:"peerURL"`
	// SidecarURL is the member's sidecar API (followers forward on-demand snapshots there).
	SidecarURL string `json:"sidecarURL,omitempty"`
}

// Member returns the spec of the named member.
func (c Spec) Member(name string) (MemberSpec, bool) {
	for _, m := range c.Members {
		if m.Name == name {
			return m, true
		}
	}
	return MemberSpec{}, false
}

// ClusterStatus is what the supervisor or operator recorded about the cluster.
type Status struct {
	// ClusterID is set once the cluster has formed (a quorum answered a member list); a
	// member bootstraps a new cluster only while it is empty.
	ClusterID string `json:"clusterID,omitempty"`
	// Voters are the voting members as a quorum last listed them. Learners are not here:
	// they never count towards a quorum.
	Voters  []Voter        `json:"voters,omitempty"`
	Members []StatusMember `json:"members"`
}

// Voter is one voting member of the formed cluster.
type Voter struct {
	ID      string `json:"id"`
	Name    string `json:"name"` // empty while the member has never started
	PeerURL string `json:"peerURL,omitempty"`
}

// VoterName returns the name of the voter with member ID id, ok=false if id is no voter.
func (s Status) VoterName(id string) (string, bool) {
	for _, v := range s.Voters {
		if v.ID == id {
			return v.Name, true
		}
	}
	return "", false
}

// StatusMember is one member as recorded in the cluster status.
type StatusMember struct {
	Name    string `json:"name"`
	ID      string `json:"id,omitempty"`
	Ready   bool   `json:"ready"`
	Learner bool   `json:"learner,omitempty"`
	// Report is the member's last live report, if any.
	Report *Report `json:"report,omitempty"`
}

// ReportsOwnData reports whether member name's last report says it holds its own data, and
// whether name is a member at all.
func (s Status) ReportsOwnData(name string) (holds, member bool) {
	for _, m := range s.Members {
		if m.Name == name {
			return m.Report.OwnData(), true
		}
	}
	return false, false
}
