// Package v1alpha1 is Steward's Kubernetes API: EtcdCluster and EtcdBackup.
//
// +kubebuilder:object:generate=true
// +groupName=etcd.steward.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of Steward's objects.
	GroupVersion = schema.GroupVersion{Group: "etcd.steward.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	SchemeBuilder.Register(&EtcdCluster{}, &EtcdClusterList{}, &EtcdBackup{}, &EtcdBackupList{})
}
