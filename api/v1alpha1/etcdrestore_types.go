package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EtcdRestore phases, in the order a restore moves through them.
const (
	// RestorePending: waiting for the cluster (to exist, to be unpaused, to serve).
	RestorePending = "Pending"
	// RestoreSnapshotting: the target was checked; a full snapshot of the present is taken.
	RestoreSnapshotting = "Snapshotting"
	// RestoreFencing: the restore is requested of the cluster's reconciler, which issues the
	// recovery directive; every member is being stopped.
	RestoreFencing = "Fencing"
	// RestoreRestoring: one member restores the target and starts alone.
	RestoreRestoring = "Restoring"
	// RestoreRejoining: the restored member serves; the others rejoin it as learners.
	RestoreRejoining = "Rejoining"
	RestoreSucceeded = "Succeeded"
	RestoreFailed    = "Failed"
)

// EtcdRestore condition types.
const (
	// RestoreConditionTargetChecked: the target was checked against the backup store (or,
	// where the operator cannot read the store, against what the backups are known to hold).
	RestoreConditionTargetChecked = "TargetChecked"
	// RestoreConditionSnapshotTaken: a full snapshot of the present is stored.
	RestoreConditionSnapshotTaken = "SnapshotTaken"
	// RestoreConditionDirectiveIssued: the recovery directive that carries the restore out is
	// in the cluster's status.recovery (False, reason Requested, while the request waits for
	// the cluster's reconciler to issue it).
	RestoreConditionDirectiveIssued = "DirectiveIssued"
	// RestoreConditionComplete: the restore ended (reason Succeeded or Failed).
	RestoreConditionComplete = "Complete"
)

// RestoreFinalizer holds an EtcdRestore whose restore has fenced the cluster until the
// restore has finished: deleting it does not stop a restore half-way.
const RestoreFinalizer = "etcd.steward.dev/restore"

// EtcdRestoreSpec asks for a running cluster to be restored, in place, back to a point of its
// backups: a revision, a time, or (neither) the newest backed-up revision.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.revision) && has(self.time))",message="spec: give spec.revision or spec.time, not both (neither: the newest backed-up revision)"
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: an EtcdRestore is one restore; create another EtcdRestore"
type EtcdRestoreSpec struct {
	// Cluster is the name of the EtcdCluster, in this namespace, to restore. It must have
	// spec.backup set: the restore reads its own backup store.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.cluster is immutable: create another EtcdRestore"
	Cluster string `json:"cluster"`
	// Revision restores exactly this revision.
	// +kubebuilder:validation:Minimum=1
	// +optional
	Revision *int64 `json:"revision,omitempty"`
	// Time restores the newest revision the backups prove existed at this time.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// Timeline is the backup timeline to read (see `steward backup list`). Default: the
	// cluster's current history for a revision or the newest, the timeline holding the time
	// for a time.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	// +optional
	Timeline *int64 `json:"timeline,omitempty"`
}

// RestoreTargetStatus is the point being restored, as handed to the members.
type RestoreTargetStatus struct {
	// Revision is the revision asked for (0: the newest).
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// Timeline is the timeline read (0: the one holding Time).
	// +optional
	Timeline int64 `json:"timeline,omitempty"`
	// Checked says how the target was checked before anything was stopped, and what the
	// check found.
	// +optional
	Checked string `json:"checked,omitempty"`
}

// RestoreSnapshot is the full snapshot of the present taken before the restore: the cluster
// as it was stays restorable (its revision on its timeline).
type RestoreSnapshot struct {
	Key      string `json:"key"`
	Revision int64  `json:"revision"`
	Timeline int64  `json:"timeline"`
	// Time is when the snapshot was taken: the present, for a target time.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
}

// RestoreRequest is an EtcdRestore's request to the EtcdCluster's reconciler to start it.
type RestoreRequest struct {
	// AfterEpoch is the cluster's newest recovery epoch (status.recovery's lastEpoch) when the
	// restore was requested. The directive that carries the restore out is the next one the
	// cluster issues; once any other is issued first, none is issued for this request, so a
	// request starts at most one restore.
	// +kubebuilder:validation:Minimum=0
	AfterEpoch int64 `json:"afterEpoch"`
}

// EtcdRestoreStatus is the restore's progress and outcome.
type EtcdRestoreStatus struct {
	// ObservedGeneration is the generation this status describes; written last.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is Pending, Snapshotting, Fencing, Restoring, Rejoining, Succeeded or Failed.
	// +optional
	Phase string `json:"phase,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Target is what is restored, once checked.
	// +optional
	Target *RestoreTargetStatus `json:"target,omitempty"`
	// Snapshot is the full snapshot of the present taken first.
	// +optional
	Snapshot *RestoreSnapshot `json:"snapshot,omitempty"`
	// Request asks the EtcdCluster's reconciler, the one writer of the cluster's
	// status.recovery, to start the restore (to status.target): recorded once the target is
	// checked and the full snapshot stored, before anything is stopped.
	// +optional
	Request *RestoreRequest `json:"request,omitempty"`
	// Epoch is the recovery directive that carries the restore out (the cluster's
	// status.recovery), recorded once the cluster's reconciler has issued it.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
	// RestoredRevision is the revision the restored member started at.
	// +optional
	RestoredRevision int64 `json:"restoredRevision,omitempty"`
	// ClusterID is the restored cluster's new etcd cluster ID (its backups go to a new timeline).
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
	// Message says what the restore waits for, or why it failed and what to do.
	// +optional
	Message string `json:"message,omitempty"`
}

// EtcdRestore restores a running EtcdCluster in place back to a point of its backups. It is
// carried out as a recovery: a full snapshot of the present first, then every member fenced,
// one member restored, the others rejoining it as learners, the backups going on in a new
// timeline.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=er,categories=steward
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Target",type=integer,JSONPath=`.spec.revision`
// +kubebuilder:printcolumn:name="Restored",type=integer,JSONPath=`.status.restoredRevision`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.epoch`,priority=1
// +kubebuilder:printcolumn:name="Cluster ID",type=string,JSONPath=`.status.clusterID`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdRestore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EtcdRestoreSpec   `json:"spec,omitempty"`
	Status EtcdRestoreStatus `json:"status,omitempty"`
}

// EtcdRestoreList is a list of EtcdRestores.
//
// +kubebuilder:object:root=true
type EtcdRestoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdRestore `json:"items"`
}
