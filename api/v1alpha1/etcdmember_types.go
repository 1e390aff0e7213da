package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// EtcdMember is one member's own account of itself, written by its sidecar: one object per
// member, so that sidecars never contend with each other or with the operator for the
// EtcdCluster's status. The operator creates and deletes it; the sidecar writes its status.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=em,categories=steward
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.metadata.labels.etcd\.steward\.dev/cluster`
// +kubebuilder:printcolumn:name="ID",type=string,JSONPath=`.status.report.memberID`
// +kubebuilder:printcolumn:name="Serving",type=boolean,JSONPath=`.status.report.serving`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.report.revision`
// +kubebuilder:printcolumn:name="Case",type=string,JSONPath=`.status.report.case`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdMember struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status EtcdMemberStatus `json:"status,omitempty"`
}

// EtcdMemberStatus holds the sidecar's newest report and its acknowledgement of a recovery
// directive, in the JSON of Steward's member reports (docs/architecture.md, "Reports").
type EtcdMemberStatus struct {
	// Report is the member's live report: identity, raft log position, revision, the member
	// list it applied, whether it serves, and its start-up decision. It is written when it
	// changes; the member Lease's renewals say it is still current.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +optional
	Report *runtime.RawExtension `json:"report,omitempty"`
	// Backup is the backup leader's account of its backups: whether they are current and, if
	// not, why (the store unreachable, a failed upload, ...).
	// +optional
	Backup *MemberBackup `json:"backup,omitempty"`
	// Ack acknowledges the recovery directive this member carried out as its seed.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +optional
	Ack *runtime.RawExtension `json:"ack,omitempty"`
}

// MemberBackup is what the backup leader says about its backups.
type MemberBackup struct {
	Ready bool `json:"ready"`
	// Reason says why Ready is false.
	// +optional
	Reason string `json:"reason,omitempty"`
	// LastError is the newest failure, if any.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// LastDrill is the newest restore drill: the timeline being written restored into a
	// scratch dir and its HashKV compared with the backup leader's member.
	// +optional
	LastDrill *MemberDrill `json:"lastDrill,omitempty"`
	// Recoverable is what the store restores of the timeline the backup leader writes, its
	// cluster's own (unset while nothing of it can be restored up to its newest revision).
	// +optional
	Recoverable *Recoverability `json:"recoverable,omitempty"`
}

// MemberDrill is the outcome of a restore drill.
type MemberDrill struct {
	// Timeline is the timeline drilled.
	Timeline int64 `json:"timeline"`
	// Revision is the revision restored and compared.
	Revision int64 `json:"revision"`
	// Time is when the drill began.
	Time metav1.Time `json:"time"`
	// Duration is how long the drill took.
	Duration metav1.Duration `json:"duration"`
	// OK is true when the restored data's HashKV equalled the member's.
	OK bool `json:"ok"`
	// Result is "ok" or why the drill failed.
	Result string `json:"result"`
}

// EtcdMemberList is a list of EtcdMembers.
//
// +kubebuilder:object:root=true
type EtcdMemberList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdMember `json:"items"`
}
