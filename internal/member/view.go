// Package member is the sidecar beside each etcd member: it decides how its member starts
// (Decide), generates its etcd configuration, and serves the sidecar HTTP API. It knows
// nothing of Kubernetes or of the local supervisor: both are reached through ClusterView.
package member

import "context"

// ClusterView answers what the sidecar needs to know about the cluster it belongs to. The
// local supervisor and the Kubernetes operator each provide one.
type ClusterView interface {
	// Desired returns the cluster as it should be: its name, token and members.
	Desired(ctx context.Context) (ClusterSpec, error)
	// Status returns the members the cluster's status knows about (the members that have
	// joined and been seen by the supervisor or operator).
	Status(ctx context.Context) (ClusterStatus, error)
	// Recovery returns the quorum-loss directive in force, or nil.
	Recovery(ctx context.Context) (*Recovery, error)
}

// ClusterSpec is the desired cluster.
type ClusterSpec struct {
	Name    string       `json:"name"`
	Token   string       `json:"token"`
	Members []MemberSpec `json:"members"`
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

// ClusterStatus is what the supervisor or operator last recorded about the members.
type ClusterStatus struct {
	Members []StatusMember `json:"members"`
}

// StatusMember is one member as recorded in the cluster status.
type StatusMember struct {
	Name  string `json:"name"`
	ID    string `json:"id,omitempty"`
	Ready bool   `json:"ready"`
}
