package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/heal"
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
// the processes it runs and what it last saw. With the members' reports (DIR/run/reports) it
// is the local cluster's status.
type State struct {
	SupervisorPID int       `json:"supervisorPid"`
	Phase         string    `json:"phase"`
	Error         string    `json:"error,omitempty"`
	UpdatedAt     time.Time `json:"updatedAt"`
	// Version grows with every write.
	Version int64         `json:"version"`
	Members []MemberState `json:"members"`
	// The healing status: cluster ID, voters, the recovery directive in force and the last one.
	heal.Status
	// Relocating lists the moves of misplaced data under way: recorded before the first
	// move, cleared once what they void is recorded (heal.Relocated), so that a supervisor
	// that stopped in between voids it at its next round.
	Relocating []heal.Relocation `json:"relocating,omitempty"`
	// Stuck names the step that has made no progress for a while ("" while progressing).
	Stuck string `json:"stuck,omitempty"`
	// RestoreAnswer answers the newest restore request (`steward local restore`), written
	// with the directive it issued.
	RestoreAnswer *RestoreAnswer `json:"restoreAnswer,omitempty"`
	// RestartAnswer answers the newest restart request (`steward local upgrade`), written
	// with the generation the member restarted on.
	RestartAnswer *RestartAnswer `json:"restartAnswer,omitempty"`
}

// MemberState is the supervisor's record of one member.
type MemberState struct {
	Name string `json:"name"`
	// ID is the etcd member ID (hex) once the member has been seen serving.
	ID      string `json:"id,omitempty"`
	Ready   bool   `json:"ready"`
	Learner bool   `json:"learner,omitempty"`
	// Fenced: the supervisor holds the member's etcd stopped (a recovery or a relocation).
	Fenced bool `json:"fenced,omitempty"`
	// Generation is the spec generation the member's processes were started with: older than
	// the spec's, the member is outdated (an upgrade has not restarted it yet).
	Generation      int64 `json:"generation,omitempty"`
	EtcdPID         int   `json:"etcdPid,omitempty"`
	SidecarPID      int   `json:"sidecarPid,omitempty"`
	EtcdRestarts    int   `json:"etcdRestarts"`
	SidecarRestarts int   `json:"sidecarRestarts"`
}

// ReadState loads DIR/run/state.json (zero State if there is none). A damaged file is an
// error that names it.
func ReadState(d Dir) (State, error) {
	var st State
	path := d.State()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, fmt.Errorf("%s is damaged (%v): the supervisor moves it aside and rebuilds the status from the members' reports at its next start", path, err)
	}
	return st, nil
}

func writeState(d Dir, st State) error {
	st.UpdatedAt = time.Now().UTC()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return datadir.WriteFileAtomic(d.State(), b, 0o644)
}

// readMemberFile reads a member's report or acknowledgement (Dir.Report, Dir.Ack); ok=false
// when there is none or it cannot be read (a sidecar rewrites it within a second).
func readMemberFile[T any](path string) (v T, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &v) != nil {
		return v, false
	}
	return v, true
}

func writeMemberFile(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return datadir.WriteFileAtomic(path, b, 0o600)
}

// ack is a seed's acknowledgement of a directive, as a sidecar writes it.
type ack = cluster.DirectiveAck

// View is the sidecar's cluster.View in local mode: the desired cluster is DIR/cluster.json,
// the status DIR/run/state.json with the members' reports beside it.
type View struct {
	Dir  Dir
	Name string // the member this view reports for
}

var _ cluster.View = View{}

// Snapshot implements cluster.View.
func (v View) Snapshot(context.Context) (cluster.Snapshot, error) {
	spec, ok, err := ReadSpec(v.Dir)
	if err != nil {
		return cluster.Snapshot{}, err
	}
	if !ok {
		return cluster.Snapshot{}, errors.New("no local cluster in " + v.Dir.String())
	}
	st, err := ReadState(v.Dir)
	if err != nil {
		return cluster.Snapshot{}, err
	}
	snap := cluster.Snapshot{Version: fmt.Sprintf("%d", st.Version), Spec: spec.memberView(),
		Status: cluster.Status{ClusterID: st.ClusterID, Voters: st.Voters}}
	snap.Spec.RelocatesData = true
	for _, m := range st.Members {
		sm := cluster.StatusMember{Name: m.Name, ID: m.ID, Ready: m.Ready, Learner: m.Learner}
		if r, ok := readMemberFile[cluster.Report](v.Dir.Report(m.Name)); ok {
			sm.Report = &r
		}
		snap.Status.Members = append(snap.Status.Members, sm)
	}
	if d := st.Directive; d != nil {
		dc := *d
		// The seed sees its own acknowledgement at once, before the supervisor records it.
		if a, ok := readMemberFile[ack](v.Dir.Ack(dc.Seed)); ok && dc.Ack == nil && a.Epoch == dc.Epoch {
			dc.Ack = &a.Result
		}
		snap.Directive = &dc
	}
	return snap, nil
}

// Report implements cluster.View.
func (v View) Report(_ context.Context, r cluster.Report) error {
	return writeMemberFile(v.Dir.Report(v.Name), r)
}

// AckDirective implements cluster.View.
func (v View) AckDirective(_ context.Context, epoch int64, result cluster.DirectiveResult) error {
	return writeMemberFile(v.Dir.Ack(v.Name), ack{Epoch: epoch, Result: result})
}

// BackupRecord is what the backup leader's sidecar records of the backups it stored
// (Dir.BackupRecord): the newest revision of its timeline known stored.
type BackupRecord struct {
	Timeline uint32    `json:"timeline"`
	Revision int64     `json:"revision"`
	At       time.Time `json:"at"`
}

var _ cluster.BackupPublisher = View{}

// PublishBackup implements cluster.BackupPublisher: the backup leader records the newest
// revision known stored on its timeline, when it changes.
func (v View) PublishBackup(_ context.Context, s cluster.BackupStatus) error {
	if s.CurrentAt.IsZero() || s.Timeline == 0 {
		return nil
	}
	rec := BackupRecord{Timeline: s.Timeline, Revision: s.CurrentRevision, At: s.CurrentAt}
	if prev, ok := readMemberFile[BackupRecord](v.Dir.BackupRecord()); ok && prev.Timeline == rec.Timeline && prev.Revision == rec.Revision {
		return nil
	}
	return writeMemberFile(v.Dir.BackupRecord(), rec)
}

// Watch implements cluster.View: inotify on the files the snapshot reads.
func (v View) Watch(ctx context.Context) (<-chan struct{}, error) {
	return watchFiles(ctx, v.Dir.Run(), v.Dir.String())
}
