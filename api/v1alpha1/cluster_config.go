package v1alpha1

import (
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// LabelCluster, on every object of a cluster (its pods, Leases, EtcdMembers, ...), names
// the EtcdCluster; alone it selects the cluster's pods.
const LabelCluster = "etcd.steward.dev/cluster"

// The names of the objects the operator keeps for cluster X and the sidecars read and write.
func ConfigMapName(cluster string) string          { return cluster + "-config" }
func FullSnapshotLeaseName(cluster string) string  { return cluster + "-full-snapshot" }
func DeltaSnapshotLeaseName(cluster string) string { return cluster + "-delta-snapshot" }

// SnapshotLeaseRevision reads the revision a snapshot Lease's holder names (the backup leader
// writes it in decimal); ok is false when the Lease has no holder, or another.
func SnapshotLeaseRevision(holder *string) (rev int64, ok bool) {
	if holder == nil {
		return 0, false
	}
	rev, err := strconv.ParseInt(*holder, 10, 64)
	return rev, err == nil
}

// SidecarTokenSecretName is the Secret that holds cluster's sidecar API token under
// SidecarTokenKey: the operator makes it, the member pods mount it, the operator sends it.
func SidecarTokenSecretName(cluster string) string { return cluster + "-sidecar-token" }

// Secrets of a cluster with TLS (spec.tls): its CA, the members' certificate and a client
// certificate, each with cert-manager's keys (tls.crt, tls.key, ca.crt).
func CASecretName(cluster string) string { return cluster + "-ca" }

// The coming and the going CA of a rollover (annotation etcd.steward.dev/rotate-ca).
func NextCASecretName(cluster string) string { return cluster + "-ca-next" }
func OldCASecretName(cluster string) string  { return cluster + "-ca-old" }

func ServerCertificateSecretName(cluster string) string { return cluster + "-server-tls" }
func ClientCertificateSecretName(cluster string) string { return cluster + "-client-tls" }

// RootPasswordSecretName is the Secret the operator makes for etcd's root password (spec.auth)
// unless spec.auth.rootPasswordSecret names one; RootPasswordKey is the password's key.
func RootPasswordSecretName(cluster string) string { return cluster + "-root-password" }

const RootPasswordKey = "password"

// AppPasswordSecretName is the Secret the operator makes for the application user's password
// unless spec.auth.applicationUser.passwordSecret names one (key RootPasswordKey too), and
// DefaultAppUser the application user's name unless the spec gives one.
func AppPasswordSecretName(cluster string) string { return cluster + "-app-password" }

const DefaultAppUser = "app"

// TokenKeySecretName is the Secret the operator makes, for a cluster with authentication,
// with the key pair etcd signs its clients' tokens with (token.key, token.pub).
func TokenKeySecretName(cluster string) string { return cluster + "-token-key" }

// SidecarTokenKey is the key of the token in the Secret SidecarTokenSecretName: one token per
// line, the first one sent (see docs/kubernetes.md for rotation).
const SidecarTokenKey = "token"

// ClusterConfigKey is the key, in the ConfigMap <cluster>-config, of the ClusterConfig that the
// operator writes and the sidecars read.
const ClusterConfigKey = "cluster.yaml"

// ClusterConfig is what every sidecar needs to know about its cluster besides its own name.
//
// +kubebuilder:object:generate=false
type ClusterConfig struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Token is the initial cluster token: the EtcdCluster's UID, so that a new cluster of the
	// same name never mixes with the data of an old one.
	Token            string             `json:"token"`
	Members          []MemberConfig     `json:"members"`
	Etcd             EtcdConfig         `json:"etcd"`
	Backup           *BackupConfig      `json:"backup,omitempty"`
	Maintenance      *MaintenanceConfig `json:"maintenance,omitempty"`
	Restore          *RestoreConfig     `json:"restore,omitempty"`
	QuorumLossPolicy string             `json:"quorumLossPolicy"`
	// FencedMembers are the members whose etcd is held stopped: the fences in force
	// (EtcdClusterStatus.FencedMembers).
	FencedMembers []string `json:"fencedMembers,omitempty"`
}

// MemberConfig is one desired member's addresses.
//
// +kubebuilder:object:generate=false
type MemberConfig struct {
	Name       string `json:"name"`
	ClientURL  string `json:"clientURL"`
	PeerURL    string `json:"peerURL"`
	SidecarURL string `json:"sidecarURL"`
}

// EtcdConfig is etcd tuning, copied into every member's generated configuration.
//
// +kubebuilder:object:generate=false
type EtcdConfig struct {
	QuotaBackendBytes       int64  `json:"quotaBackendBytes,omitempty"`
	AutoCompactionMode      string `json:"autoCompactionMode,omitempty"`
	AutoCompactionRetention string `json:"autoCompactionRetention,omitempty"`
	SnapshotCount           int64  `json:"snapshotCount,omitempty"`
	HeartbeatMillis         int64  `json:"heartbeatMillis,omitempty"`
	ElectionMillis          int64  `json:"electionMillis,omitempty"`
}

// BackupConfig is the backup store and schedule.
//
// +kubebuilder:object:generate=false
type BackupConfig struct {
	Store        string `json:"store"`
	FullSchedule string `json:"fullSchedule"`
	DeltaPeriod  string `json:"deltaPeriod"`
	Retention    string `json:"retention"`
	// DrillSchedule is BackupSpec.DrillSchedule; empty for the sidecar's default.
	DrillSchedule string `json:"drillSchedule,omitempty"`
}

// MaintenanceConfig is MaintenanceSpec, resolved.
//
// +kubebuilder:object:generate=false
type MaintenanceConfig struct {
	DefragSchedule string `json:"defragSchedule,omitempty"`
	// DefragThreshold is a share (0.45), DefragMinReclaim bytes; negative: the sidecar's default.
	DefragThreshold  float64 `json:"defragThreshold"`
	DefragMinReclaim int64   `json:"defragMinReclaim"`
}

// RestoreConfig is where a new cluster bootstraps from.
//
// +kubebuilder:object:generate=false
type RestoreConfig struct {
	Store    string       `json:"store"`
	Revision int64        `json:"revision,omitempty"`
	Time     *metav1.Time `json:"time,omitempty"`
}

// ParseClusterConfig reads the ClusterConfig from a ConfigMap's data.
func ParseClusterConfig(data map[string]string) (ClusterConfig, error) {
	var c ClusterConfig
	s, ok := data[ClusterConfigKey]
	if !ok {
		return c, fmt.Errorf("no key %s", ClusterConfigKey)
	}
	if err := yaml.Unmarshal([]byte(s), &c); err != nil {
		return c, fmt.Errorf("key %s: %w", ClusterConfigKey, err)
	}
	return c, nil
}
