package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EtcdBackup phases.
const (
	BackupPending   = "Pending"
	BackupRunning   = "Running"
	BackupCompleted = "Completed"
	BackupFailed    = "Failed"
)

// EtcdBackupSpec asks for one full snapshot of a cluster, stored in its backup store.
type EtcdBackupSpec struct {
	// Cluster is the name of the EtcdCluster, in this namespace, to back up. It must have
	// spec.backup set.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.cluster is immutable: create another EtcdBackup"
	Cluster string `json:"cluster"`
}

// EtcdBackupStatus is the outcome of the snapshot.
type EtcdBackupStatus struct {
	// Phase is Pending, Running, Completed or Failed.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Revision is the revision the snapshot holds.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Size is the stored object's size in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`
	// Key is the object's key in the store.
	// +optional
	Key string `json:"key,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
	// Message says why the backup failed, or what it waits for.
	// +optional
	Message string `json:"message,omitempty"`
}

// EtcdBackup is a one-shot full snapshot of an EtcdCluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=eb,categories=steward
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EtcdBackupSpec   `json:"spec,omitempty"`
	Status EtcdBackupStatus `json:"status,omitempty"`
}

// EtcdBackupList is a list of EtcdBackups.
//
// +kubebuilder:object:root=true
type EtcdBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdBackup `json:"items"`
}
