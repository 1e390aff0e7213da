package local

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/member"
)

// Supervisor phases recorded in DIR/run/state.json.
const (
	PhaseStarting = "starting"
	PhaseReady    = "ready"
	PhaseStopping = "stopping"
	PhaseStopped  = "stopped"
	PhaseFailed   = "failed"
)

// State is what the supervisor records in DIR/run/state.json: its own phase and, per member,
// the processes it runs and what it last saw (this is the local cluster's "status").
type State struct {
	SupervisorPID int           `json:"supervisorPid"`
	Phase         string        `json:"phase"`
	Error         string        `json:"error,omitempty"`
	UpdatedAt     time.Time     `json:"updatedAt"`
	Members       []MemberState `json:"members"`
	// Recovery is the quorum-loss directive in force, if any.
	Recovery *member.Recovery `json:"recovery,omitempty"`
	// LastRecoveryEpoch is the newest directive ever issued for this cluster (epochs only grow,
	// across supervisor restarts, so a data dir never mistakes a new directive for an old one).
	LastRecoveryEpoch int64 `json:"lastRecoveryEpoch,omitempty"`
}

// MemberState is the supervisor's record of one member.
type MemberState struct {
	Name string `json:"name"`
	// ID is the etcd member ID (hex) once the member has been seen serving.
	ID              string `json:"id,omitempty"`
	Ready           bool   `json:"ready"`
	EtcdPID         int    `json:"etcdPid,omitempty"`
	SidecarPID      int    `json:"sidecarPid,omitempty"`
	EtcdRestarts    int    `json:"etcdRestarts"`
	SidecarRestarts int    `json:"sidecarRestarts"`
}

// ReadState loads DIR/run/state.json (zero State if there is none).
func ReadState(dir string) (State, error) {
	var st State
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	err = json.Unmarshal(b, &st)
	return st, err
}

func writeState(dir string, st State) error {
	st.UpdatedAt = time.Now().UTC()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return datadir.WriteFileAtomic(filepath.Join(dir, stateFile), b, 0o644)
}

// View is the sidecar's ClusterView in local mode: the desired cluster is DIR/cluster.json,
// the status is the supervisor's DIR/run/state.json. Both are re-read on every call, so a
// change of size is seen at the next start.
type View struct{ Dir string }

var _ member.ClusterView = View{}

// Desired implements member.ClusterView.
func (v View) Desired(context.Context) (member.ClusterSpec, error) {
	spec, ok, err := ReadSpec(v.Dir)
	if err != nil {
		return member.ClusterSpec{}, err
	}
	if !ok {
		return member.ClusterSpec{}, errors.New("no local cluster in " + v.Dir)
	}
	return spec.memberView(), nil
}

// Recovery implements member.ClusterView.
func (v View) Recovery(context.Context) (*member.Recovery, error) {
	st, err := ReadState(v.Dir)
	if err != nil {
		return nil, err
	}
	return st.Recovery, nil
}

// Status implements member.ClusterView: the members the supervisor has seen serving.
func (v View) Status(context.Context) (member.ClusterStatus, error) {
	st, err := ReadState(v.Dir)
	if err != nil {
		return member.ClusterStatus{}, err
	}
	var out member.ClusterStatus
	for _, m := range st.Members {
		if m.ID != "" {
			out.Members = append(out.Members, member.StatusMember{Name: m.Name, ID: m.ID, Ready: m.Ready})
		}
	}
	return out, nil
}
