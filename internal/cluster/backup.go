package cluster

import "time"

// BackupStatus is what the sidecar reports about backups (GET /v1/backup).
type BackupStatus struct {
	// Leader is true if this sidecar is the backup leader (its etcd leads).
	Leader bool `json:"leader"`
	// Ready: backups are current: on the member's own timeline, the newest stored revision was
	// the member's own revision less than two delta periods ago (false after three).
	Ready bool `json:"ready"`
	// ReadyReason says which condition keeps Ready false ("" when it is true).
	ReadyReason string `json:"readyReason,omitempty"`
	Store       string `json:"store"`
	// Timeline is the timeline of the store this member's history goes to (0 until the
	// backup session has chosen it, or after the member's history restarted); TimelineReason
	// says why that one (or why none).
	Timeline       uint32 `json:"timeline"`
	TimelineReason string `json:"timelineReason,omitempty"`
	// DeltaPeriod is how often deltas are written (Ready turns false after 3 periods).
	DeltaPeriod         time.Duration `json:"deltaPeriod"`
	LatestFullKey       string        `json:"latestFullKey,omitempty"`
	LatestFullRevision  int64         `json:"latestFullRevision"`
	LatestFullTime      time.Time     `json:"latestFullTime"`
	LatestDeltaKey      string        `json:"latestDeltaKey,omitempty"`
	LatestDeltaRevision int64         `json:"latestDeltaRevision"`
	LatestDeltaTime     time.Time     `json:"latestDeltaTime"`
	// CurrentRevision is the newest revision known to be stored on Timeline, CurrentAt when the
	// member's own revision was no higher.
	CurrentRevision int64     `json:"currentRevision"`
	CurrentAt       time.Time `json:"currentAt"`
	Failures        int64     `json:"failures"`
	LastError       string    `json:"lastError,omitempty"`
	LastErrorTime   time.Time `json:"lastErrorTime"`
	// LastDrill is the newest restore drill this sidecar ran (zero before the first).
	LastDrill DrillStatus `json:"lastDrill,omitzero"`
	// Recoverable is what the store can restore of Timeline, the cluster's own timeline
	// this member writes (nil before the session placed its backups, and while nothing of
	// the timeline can be restored up to its newest revision).
	Recoverable *Recoverable `json:"recoverable,omitempty"`
}

// Recoverable is what one timeline's backups restore without a break: every revision from
// FirstRevision to LastRevision, and every point in time from FirstTime on (a restore to a
// time after LastTime restores LastRevision). It starts at the oldest full snapshot from which
// the deltas continue without a hole to the timeline's newest revision.
type Recoverable struct {
	Timeline uint32 `json:"timeline"`
	// ClusterID is the etcd cluster (hex) whose history the timeline holds.
	ClusterID     string    `json:"clusterID"`
	FirstRevision int64     `json:"firstRevision"`
	FirstTime     time.Time `json:"firstTime"`
	LastRevision  int64     `json:"lastRevision"`
	LastTime      time.Time `json:"lastTime"`
}

// DrillStatus is the outcome of a restore drill (restore.Drill) of the timeline being written,
// compared with this member's HashKV.
type DrillStatus struct {
	Timeline uint32        `json:"timeline"`
	Revision int64         `json:"revision"`
	Time     time.Time     `json:"time"`
	Duration time.Duration `json:"duration"`
	OK       bool          `json:"ok"`
	// Result is "ok" or why the drill failed.
	Result string `json:"result"`
}
