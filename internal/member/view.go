// Package member is the sidecar beside each etcd member: it decides how its member starts
// (Decide), generates its etcd configuration, reports its member's live state, and serves
// the sidecar HTTP API. It knows nothing of Kubernetes or of the local supervisor: both are
// reached through ClusterView.
package member

import (
	"context"
	"fmt"
	"time"
)

// ClusterView is the sidecar's one seam to whoever runs the cluster (the local supervisor,
// the Kubernetes operator). It reads the cluster as one consistent whole, is told of
// changes instead of polling, reports this member's live state and acknowledges directives.
type ClusterView interface {
	// Snapshot returns the spec, the status and the directive in force, read together.
	Snapshot(ctx context.Context) (ClusterSnapshot, error)
	// Watch returns a channel that receives a value whenever the snapshot may have changed
	// (coalesced: one value may stand for several changes). It is closed when ctx ends.
	Watch(ctx context.Context) (<-chan struct{}, error)
	// Report records this member's live report in the cluster status.
	Report(ctx context.Context, r Report) error
	// AckDirective records in the cluster status that this member carried out directive epoch.
	AckDirective(ctx context.Context, epoch int64, result DirectiveResult) error
}

// BackupPublisher is implemented by views that publish the backup leader's progress (the
// Kubernetes view writes the snapshot Leases the operator reads).
type BackupPublisher interface {
	PublishBackup(ctx context.Context, s BackupStatus) error
}

// ClusterSnapshot is the cluster as the supervisor or operator last recorded it.
type ClusterSnapshot struct {
	// Version changes whenever anything in the snapshot changes.
	Version   string        `json:"version"`
	Spec      ClusterSpec   `json:"spec"`
	Status    ClusterStatus `json:"status"`
	Directive *Directive    `json:"directive,omitempty"`
}

// ClusterSpec is the desired cluster.
type ClusterSpec struct {
	Name    string       `json:"name"`
	Token   string       `json:"token"`
	Members []MemberSpec `json:"members"`
	// RelocatesData: whoever runs the cluster moves a member's data back into its own data
	// dir when it is found in another member's (steward local can; volumes bound to pods
	// cannot be moved by the operator).
	RelocatesData bool `json:"relocatesData,omitempty"`
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
func (c ClusterSpec) Member(name string) (MemberSpec, bool) {
	for _, m := range c.Members {
		if m.Name == name {
			return m, true
		}
	}
	return MemberSpec{}, false
}

// ClusterStatus is what the supervisor or operator recorded about the cluster.
type ClusterStatus struct {
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
func (s ClusterStatus) VoterName(id string) (string, bool) {
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

// Report is a member's live account of itself. Its sidecar sends one every second, and at
// once when something changed. When etcd serves, the figures are etcd's own; when it does
// not, they are read from the data dir (the WAL and the database).
type Report struct {
	Name string    `json:"name"`
	At   time.Time `json:"at"`
	// Source is ReportFromEtcd or ReportFromDisk.
	Source  string `json:"source"`
	Serving bool   `json:"serving"`
	Learner bool   `json:"learner,omitempty"`
	// Leader: this member leads (etcd's status says so).
	Leader bool `json:"leader,omitempty"`
	// LeaderID is the leader this member follows (hex; empty while it knows none): members
	// agreeing on it is part of a healthy cluster (a rolling update checks it).
	LeaderID string `json:"leaderID,omitempty"`
	// MemberID and ClusterID are whose data this is (hex, as etcdctl prints them).
	MemberID  string `json:"memberID,omitempty"`
	ClusterID string `json:"clusterID,omitempty"`
	// DataValid: the data dir holds a member's usable WAL and database (or etcd serves on it).
	DataValid bool `json:"dataValid"`
	// DataEmpty: nothing of an etcd member is in the data dir.
	DataEmpty bool `json:"dataEmpty,omitempty"`
	// Owner names the member the data belongs to, when known; Foreign says why it is not
	// this member's ("" when it is).
	Owner   string `json:"owner,omitempty"`
	Foreign string `json:"foreign,omitempty"`
	// Raft log: the current term, the last entry's term and index, the commit index, and the
	// index applied to the database.
	Term      uint64 `json:"term,omitempty"`
	LastTerm  uint64 `json:"lastTerm,omitempty"`
	LastIndex uint64 `json:"lastIndex,omitempty"`
	Commit    uint64 `json:"commit,omitempty"`
	Applied   uint64 `json:"applied,omitempty"`
	// Revision is the store's revision (applied to the database).
	Revision int64 `json:"revision,omitempty"`
	// AppliedEpoch is the newest directive this data dir carried out.
	AppliedEpoch int64 `json:"appliedEpoch,omitempty"`
	// Members is the member list this member applied (etcd's, or the database's when etcd
	// is down): who the voters were as far as this member knows.
	Members []LiveMember `json:"members,omitempty"`
	// Formed: the data is of this cluster (token), and it has formed (a quorum elected a
	// leader): etcd knows a leader, or the data dir's identity records the cluster ID, which
	// is recorded only then.
	Formed bool `json:"formed,omitempty"`
	// Case and Reason are the sidecar's current initialisation decision (what it waits for).
	Case   string `json:"case,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Problem says why the figures are incomplete (e.g. the WAL could not be read).
	Problem string `json:"problem,omitempty"`
	// Maintenance is what this member's sidecar last did as the leader's housekeeper
	// (alarms seen, the newest defragmentation round); nil if it never led.
	Maintenance *MaintenanceReport `json:"maintenance,omitempty"`
}

// Report sources.
const (
	ReportFromEtcd = "etcd"
	ReportFromDisk = "disk"
)

// OwnData reports whether the member holds valid data of its own.
func (r *Report) OwnData() bool {
	return r != nil && (r.Serving || (r.DataValid && r.Foreign == ""))
}

// Directive is an instruction to recover a quorum lost for good, issued by the supervisor or
// operator and carried out by the sidecars. Epochs only grow; a directive is carried out
// once, by its seed, which acknowledges it in the cluster status.
type Directive struct {
	Epoch int64 `json:"epoch"`
	// Phase: PhaseFencing (every member stopped; reports gathered), PhaseSeeding (the seed
	// recovers alone; the others stay stopped), PhaseRejoining (the seed serves; the others
	// rejoin as learners).
	Phase string `json:"phase"`
	// Mode (RecoverFromSurvivor or RecoverFromBackup) and Seed are set from PhaseSeeding on.
	Mode string `json:"mode,omitempty"`
	Seed string `json:"seed,omitempty"`
	// Reason explains the phase: why this source was chosen, or what the phase waits for.
	Reason string `json:"reason,omitempty"`
	// Alternatives lists the sources not chosen and what choosing them would have lost.
	Alternatives []string  `json:"alternatives,omitempty"`
	IssuedAt     time.Time `json:"issuedAt"`
	PhaseSince   time.Time `json:"phaseSince"`
	// Ack is the seed's acknowledgement, once it serves.
	Ack *DirectiveResult `json:"ack,omitempty"`
	// Restore, on a RecoverFromBackup directive, names the backup and the point to restore
	// (a new cluster's bootstrap.restore); nil: the seed's own backup store, the newest
	// revision of this cluster's newest timeline there (Observation.BackupTimeline).
	Restore *RestoreTarget `json:"restore,omitempty"`
}

// RestoreTarget is a backup store and a point in its history: a revision, a time, or
// (neither) the newest.
type RestoreTarget struct {
	Store    string    `json:"store"`
	Revision int64     `json:"revision,omitempty"`
	Time     time.Time `json:"time,omitempty"`
	// Timeline is the timeline to restore (0: the newest, or the one of Time).
	Timeline uint32 `json:"timeline,omitempty"`
}

// Point says which point of the history is restored, in words.
func (t RestoreTarget) Point() string {
	switch {
	case t.Revision > 0:
		return fmt.Sprintf("revision %d", t.Revision)
	case !t.Time.IsZero():
		return "the newest revision at " + t.Time.UTC().Format(time.RFC3339)
	case t.Timeline != 0:
		return fmt.Sprintf("the newest revision of timeline %d", t.Timeline)
	}
	return "the newest revision"
}

// Directive phases.
const (
	PhaseFencing   = "Fencing"
	PhaseSeeding   = "Seeding"
	PhaseRejoining = "Rejoining"
)

// Recovery modes.
const (
	RecoverFromSurvivor = "survivor"
	RecoverFromBackup   = "backup"
)

// DirectiveAck is a seed's acknowledgement of the directive of epoch Epoch, as views record it.
type DirectiveAck struct {
	Epoch  int64           `json:"epoch"`
	Result DirectiveResult `json:"result"`
}

// DirectiveResult is what the seed reports when it serves after carrying out a directive.
type DirectiveResult struct {
	Member    string    `json:"member"`
	MemberID  string    `json:"memberID"`
	ClusterID string    `json:"clusterID"`
	Revision  int64     `json:"revision"`
	At        time.Time `json:"at"`
}

// Fenced lists the members whose etcd must be stopped and kept stopped under directive d:
// all of them while fencing, all but the seed while it recovers, none once it serves.
func (d *Directive) Fenced(members []string) []string {
	if d == nil {
		return nil
	}
	switch d.Phase {
	case PhaseFencing:
		return members
	case PhaseSeeding:
		var out []string
		for _, m := range members {
			if m != d.Seed {
				out = append(out, m)
			}
		}
		return out
	}
	return nil
}
