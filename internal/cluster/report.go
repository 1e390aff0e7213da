package cluster

import (
	"github.com/etcd-steward/steward/internal/units"
	"time"
)

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

// MaintenanceReport is what the leader's housekeeping last did, in the member's report.
type MaintenanceReport struct {
	// Alarms are the cluster's active alarms ("NOSPACE on 8e9e05c52164694d").
	Alarms []string `json:"alarms,omitempty"`
	// LastDefrag is the newest defragmentation round this sidecar ran that defragmented a
	// member or stopped early; LastCheck when it last looked (a round finding nothing worth it).
	LastDefrag *DefragReport `json:"lastDefrag,omitempty"`
	LastCheck  time.Time     `json:"lastCheck,omitempty"`
	// NextDefrag is when the next round's check is due.
	NextDefrag time.Time `json:"nextDefrag,omitempty"`
	// LastCorrupt is this sidecar's newest pass at a CORRUPT alarm.
	LastCorrupt *CorruptReport `json:"lastCorrupt,omitempty"`
	// RoundSince is when the round this sidecar runs now began (zero: none). A round outlives
	// its sidecar's leadership (it moves leadership away before the leader's turn), so the
	// next leader's sidecar waits while this is set in a fresh report.
	RoundSince time.Time `json:"roundSince,omitempty"`
}

// DefragReport is one defragmentation round.
type DefragReport struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Trigger is "schedule" or "NOSPACE".
	Trigger   string         `json:"trigger"`
	Members   []MemberDefrag `json:"members,omitempty"`
	Reclaimed int64          `json:"reclaimed"`
	// Error says why the round stopped early (postponed, a member failed); "" when it completed.
	Error string `json:"error,omitempty"`
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
	// RestoredTimeline and RestoredRevision are the point of the backup the data dir was
	// restored from (0: it was not), as its identity records.
	RestoredTimeline uint32 `json:"restoredTimeline,omitempty"`
	RestoredRevision int64  `json:"restoredRevision,omitempty"`
	// SupersededBy is the epoch of the restore that the data dir records replaces its data
	// (0: none, or a record this dir's data does not carry: see DataSuperseded).
	SupersededBy int64 `json:"supersededBy,omitempty"`
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
	// Fenced: the sidecar holds its etcd stopped because the member is fenced.
	Fenced bool `json:"fenced,omitempty"`
	// InitError is why the newest initialisation failed (it is tried again when etcd next
	// starts); empty once one succeeds.
	InitError string `json:"initError,omitempty"`
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

// OwnData reports whether the member holds valid data of its own (and not superseded).
func (r *Report) OwnData() bool {
	return r != nil && (r.Serving || (r.DataValid && r.Foreign == "" && !r.DataSuperseded()))
}

// DataSuperseded reports whether the member's data dir records that a restore replaces the
// data in it, a restore this dir has not carried out: the data is never restarted, adopted
// or counted, as if the dir were empty.
func (r *Report) DataSuperseded() bool {
	return r != nil && !r.Serving && !r.DataEmpty && r.SupersededBy > r.AppliedEpoch
}

// MemberDefrag is what one member's defragmentation did.
type MemberDefrag struct {
	Name     string         `json:"name"`
	ID       string         `json:"id"`
	Before   int64          `json:"before"`
	After    int64          `json:"after"`
	InUse    int64          `json:"inUse"`
	Duration units.Duration `json:"duration"`
	// WasLeader: it led when its turn came; MovedTo names who took over ("" when defragmented in place).
	WasLeader bool   `json:"wasLeader,omitempty"`
	MovedTo   string `json:"movedTo,omitempty"`
	Reason    string `json:"reason"`
}

// CorruptReport is one pass at a CORRUPT alarm (maintenance.RecoverCorrupt).
type CorruptReport struct {
	At time.Time `json:"at"`
	CorruptResult
	// Error says why the alarm is still there (it needs a person, or a step failed).
	Error string `json:"error,omitempty"`
}

// CorruptResult is what a pass at a CORRUPT alarm did (maintenance.RecoverCorrupt).
type CorruptResult struct {
	// Replaced names the member removed to rejoin with empty data ("" if none).
	Replaced string `json:"replaced,omitempty"`
	MovedTo  string `json:"movedTo,omitempty"`
	Disarmed bool   `json:"disarmed"`
}
