// Package v1alpha1 is Steward's Kubernetes API: EtcdCluster, EtcdBackup, EtcdRestore and EtcdMember, and
// the cluster.yaml that the operator writes for the sidecars (ClusterConfig).
//
// +kubebuilder:object:generate=true
// +groupName=etcd.steward.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of Steward's objects.
var GroupVersion = schema.GroupVersion{Group: "etcd.steward.dev", Version: "v1alpha1"}

// AddToScheme adds the types of this package to a scheme. The package imports only
// apimachinery, so that clients can import it cheaply.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &EtcdCluster{}, &EtcdClusterList{}, &EtcdBackup{}, &EtcdBackupList{},
		&EtcdRestore{}, &EtcdRestoreList{}, &EtcdMember{}, &EtcdMemberList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
