package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Annotations a user sets on an EtcdCluster.
const (
	// AnnotationPaused stops reconciliation while it is "true": nothing is created, changed
	// or deleted, and the Progressing condition says so.
	AnnotationPaused = "etcd.steward.dev/paused"
	// AnnotationConfirmRecovery confirms a quorum-loss recovery held by the Manual policy.
	// Its value must be the epoch that the QuorumLost condition names.
	AnnotationConfirmRecovery = "etcd.steward.dev/confirm-recovery"
	// AnnotationRotateCA rolls a cluster with TLS over to a new CA, without downtime, when
	// its value is one no rollover has completed for (status.caRotated): any new value, e.g.
	// the date, starts the next one.
	AnnotationRotateCA = "etcd.steward.dev/rotate-ca"
	// AnnotationRotateTokenKey renews the key pair etcd signs its authentication tokens with
	// (Secret <name>-token-key), when its value is one no renewal has completed for
	// (status.tokenKeyRotated): a new pair is made and the members roll onto it; the tokens
	// signed with the old key become invalid, and clients log in again.
	AnnotationRotateTokenKey = "etcd.steward.dev/rotate-token-key"
	// AnnotationCancelRestore asks to withdraw the restore in place whose directive epoch is
	// its value (the EtcdRestore's status.epoch); the operator sets it when an EtcdRestore is
	// deleted while its restore runs. It is done only while that is safe (heal.CancelRestore).
	AnnotationCancelRestore = "etcd.steward.dev/cancel-restore"
	// AnnotationHibernate hibernates the cluster while it is "true", as spec.replicas: 0 does,
	// for users who keep spec.replicas as it is: every member stops, its volume, identity and
	// the cluster ID are kept, and removing the annotation resumes the cluster on its data.
	AnnotationHibernate = "etcd.steward.dev/hibernate"
	// AnnotationAdopt lets a new EtcdCluster take over the objects a deleted EtcdCluster of
	// the same name left behind (deleted with orphan propagation: they carry its labels and
	// no live owner). "true" adopts them when their members' cluster ID matches the status's
	// or is unknown; any other value is the etcd cluster ID they must report (hex).
	AnnotationAdopt = "etcd.steward.dev/adopt"
	// AnnotationFencedMembers fences members: a comma-separated list of member (pod) names
	// whose etcd is held stopped, their pods and volumes kept, so that a user can inspect a
	// member's volume or take it out of the cluster without the operator healing it. A fence
	// that would leave fewer than a quorum of Ready voters unfenced is not applied (to stop
	// every member, hibernate). Removing a name unfences the member: it restarts on its data.
	AnnotationFencedMembers = "etcd.steward.dev/fenced-members"
)

// Quorum-loss policies.
const (
	QuorumLossAutomatic = "Automatic"
	QuorumLossManual    = "Manual"
)

// EtcdClusterSpec is the desired etcd cluster.
//
// +kubebuilder:validation:XValidation:rule="!has(self.storage) || !has(oldSelf.storage) || (has(self.storage.storageClassName) == has(oldSelf.storage.storageClassName) && (!has(self.storage.storageClassName) || self.storage.storageClassName == oldSelf.storage.storageClassName) && has(self.storage.emptyDir) == has(oldSelf.storage.emptyDir) && (!has(self.storage.emptyDir) || self.storage.emptyDir == oldSelf.storage.emptyDir))",message="spec.storage.storageClassName and spec.storage.emptyDir are immutable: the volumes of existing members cannot move; create a new EtcdCluster (bootstrap.restore) to move the data"
// +kubebuilder:validation:XValidation:rule="!has(self.storage) || !has(oldSelf.storage) || !has(self.storage.size) || !has(oldSelf.storage.size) || quantity(string(self.storage.size)).compareTo(quantity(string(oldSelf.storage.size))) >= 0",message="spec.storage.size cannot shrink: a volume never gives space back; it may grow (with a StorageClass that allows volume expansion), or create a new EtcdCluster (bootstrap.restore) with smaller volumes"
// +kubebuilder:validation:XValidation:rule="has(self.bootstrap) == has(oldSelf.bootstrap) && (!has(self.bootstrap) || self.bootstrap == oldSelf.bootstrap)",message="spec.bootstrap is immutable: it is used only when the cluster is created"
// +kubebuilder:validation:XValidation:rule="has(self.tls) == has(oldSelf.tls) && (!has(self.tls) || self.tls.enabled == oldSelf.tls.enabled)",message="spec.tls.enabled is chosen when the cluster is created, and so is whether spec.tls is given (left out, status.defaults.tls says what the cluster runs): the members' peer URLs carry the scheme; create a new EtcdCluster (bootstrap.restore from this one's backups) to change it"
// +kubebuilder:validation:XValidation:rule="(has(self.tls) && has(self.tls.serverSecret)) == (has(oldSelf.tls) && has(oldSelf.tls.serverSecret)) && (!has(self.tls) || !has(self.tls.serverSecret) || self.tls.serverSecret == oldSelf.tls.serverSecret)",message="spec.tls.serverSecret is chosen when the cluster is created: members of other certificates would not trust each other during the change; renew or roll over the certificates inside the Secret, or create a new EtcdCluster (bootstrap.restore from this one's backups)"
// +kubebuilder:validation:XValidation:rule="!has(self.bootstrap) || !has(self.bootstrap.restore) || !has(self.backup) || self.bootstrap.restore.store.find('^[^?]*[^?/]') != self.backup.store.find('^[^?]*[^?/]')",message="spec.bootstrap.restore.store must differ from spec.backup.store (their bucket and prefix; query parameters and a trailing '/' do not make another store): a restored cluster is a new history, and its backups need their own store or prefix"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.backup) || !has(self.backup) || self.backup.store.find('^[^?]*[^?/]') == oldSelf.backup.store.find('^[^?]*[^?/]')",message="spec.backup.store cannot change in place: an EtcdRestore reads only the cluster's current store, so the backups already in the old one could no longer be restored in place (a new EtcdCluster can still start from them with spec.bootstrap.restore); to move the backups anyway, remove spec.backup in one change and set it with the new store in the next"
// +kubebuilder:validation:XValidation:rule="!(has(oldSelf.auth) && oldSelf.auth.enabled) || (has(self.auth) && self.auth.enabled)",message="spec.auth.enabled cannot be turned off: etcd keeps authentication on, and Steward's clients need the root password to reach it"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.auth) || !has(self.auth) || self.auth.enabled",message="spec.auth.enabled: false cannot be added to a running cluster: left out, status.defaults.auth says whether the cluster has authentication, and authentication cannot be turned off"
// +kubebuilder:validation:XValidation:rule="!(has(self.auth) && self.auth.enabled && has(self.tls) && !self.tls.enabled) || (oldSelf.hasValue() && has(oldSelf.value().auth) && oldSelf.value().auth.enabled)",optionalOldSelf=true,message="spec.auth.enabled: true needs TLS: without it the root password that Steward's clients log in with would cross the pod network in clear; remove spec.tls (new clusters get TLS) or set spec.tls.enabled: true"
// +kubebuilder:validation:XValidation:rule="!(has(oldSelf.auth) && oldSelf.auth.enabled) || !has(self.auth) || (has(self.auth.rootPasswordSecret) == has(oldSelf.auth.rootPasswordSecret) && (!has(self.auth.rootPasswordSecret) || self.auth.rootPasswordSecret == oldSelf.auth.rootPasswordSecret))",message="spec.auth.rootPasswordSecret cannot change once authentication is on: the members would restart with a password etcd does not know; change the password inside the Secret instead"
type EtcdClusterSpec struct {
	// Replicas is the number of etcd members. Odd sizes tolerate the most failures per
	// member: 3 tolerate one, 5 tolerate two. 0 hibernates a formed cluster: a full snapshot
	// first (with spec.backup), then every member stops; volumes, member identities and the
	// cluster ID are kept (status.hibernation), and scaling back resumes it on its data, at
	// the size it had, before any other scaling.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=9
	Replicas int32 `json:"replicas"`

	// Image runs both the etcd member and its sidecar (Steward is one binary). Empty: the
	// operator's own image.
	// +optional
	Image string `json:"image,omitempty"`

	// ImagePullPolicy of the member pods.
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// ImagePullSecrets name Secrets of the cluster's namespace with the credentials of the
	// registry the image comes from; the member pods pull with them. A change reaches the
	// members by a rolling update.
	// +kubebuilder:validation:XValidation:rule="self.all(s, has(s.name) && s.name != '')",message="spec.imagePullSecrets: every entry needs the name of a Secret in the cluster's namespace"
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// ServiceAccount tunes the ServiceAccount <name> the operator makes and the members run as.
	// +optional
	ServiceAccount ServiceAccountSpec `json:"serviceAccount,omitempty"`

	// Storage is where each member keeps its data. Only its size may change, and only grow:
	// the members' volume claims are expanded in place when their StorageClass allows it
	// (status.volumeExpansion), with no member restart.
	// +kubebuilder:default={size: "8Gi"}
	Storage StorageSpec `json:"storage,omitempty"`

	// Backup configures continuous backups: full snapshots on a schedule and deltas between them.
	// +optional
	Backup *BackupSpec `json:"backup,omitempty"`

	// Maintenance tunes the leader's housekeeping: scheduled defragmentation (the NOSPACE and
	// CORRUPT alarms are always handled).
	// +optional
	Maintenance *MaintenanceSpec `json:"maintenance,omitempty"`

	// Etcd tunes the etcd members.
	// +optional
	Etcd EtcdSpec `json:"etcd,omitempty"`

	// Scheduling places the member pods. By default members spread over nodes, then zones.
	// +optional
	Scheduling SchedulingSpec `json:"scheduling,omitempty"`

	// Resources of the etcd container. Left empty (no requests and no limits), a new cluster
	// requests cpu 100m and memory 256Mi, and sets no limit (status.defaults.resources).
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// SidecarResources of the sidecar container. Left empty (no requests and no limits), a new
	// cluster requests cpu 50m and memory 128Mi, and sets no limit (status.defaults.resources).
	// +optional
	SidecarResources corev1.ResourceRequirements `json:"sidecarResources,omitempty"`

	// PodMetadata adds labels and annotations to the member pods.
	// +optional
	PodMetadata PodMetadata `json:"podMetadata,omitempty"`

	// PriorityClassName of the member pods.
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// Bootstrap creates the cluster from a backup instead of empty. Immutable.
	// +optional
	Bootstrap *BootstrapSpec `json:"bootstrap,omitempty"`

	// TLS encrypts and authenticates client and peer traffic with the cluster's own CA.
	// Chosen when the cluster is created. Left out, a new cluster gets TLS (status.defaults);
	// spec.tls.enabled: false opts out.
	// +optional
	TLS *TLSSpec `json:"tls,omitempty"`

	// Auth turns etcd authentication on, with a root user that every Steward client logs in as.
	// It can be turned on for a running cluster with TLS, not off. Left out, a new cluster with
	// TLS gets it (status.defaults); spec.auth.enabled: false, given at creation, opts out.
	// +optional
	Auth *AuthSpec `json:"auth,omitempty"`

	// Network narrows what the cluster's NetworkPolicy admits.
	// +optional
	Network NetworkSpec `json:"network,omitempty"`

	// QuorumLoss says how a quorum lost for good is recovered.
	// +optional
	QuorumLoss QuorumLossSpec `json:"quorumLoss,omitempty"`

	// UpdateStrategy says how the members are restarted when their pod template changes.
	// +optional
	UpdateStrategy UpdateStrategySpec `json:"updateStrategy,omitempty"`
}

// ServiceAccountSpec tunes the cluster's ServiceAccount.
type ServiceAccountSpec struct {
	// Annotations the operator keeps on the ServiceAccount: for a workload identity, so the
	// sidecars reach the backup store with no credentials Secret, e.g.
	// eks.amazonaws.com/role-arn (EKS IAM roles for service accounts) or
	// iam.gke.io/gcp-service-account (GKE Workload Identity). An annotation removed here is
	// removed from the ServiceAccount; those others put there are left alone. A change
	// restarts the members by a rolling update, as some platforms give a pod its identity
	// only when it is created.
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('etcd.steward.dev/'))",message="spec.serviceAccount.annotations: keys under etcd.steward.dev/ are Steward's own; use another prefix"
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// NetworkSpec narrows the cluster's NetworkPolicy. The policy admits the peer port from the
// members only, and the sidecar API from the members and the operator, whatever this says.
type NetworkSpec struct {
	// ClientFrom lists who may reach the client port (2379), as a NetworkPolicy's peers (pods,
	// namespaces, IP blocks); the members always may. Empty: every pod of the cluster's
	// namespace.
	// +optional
	ClientFrom []networkingv1.NetworkPolicyPeer `json:"clientFrom,omitempty"`
}

// Leader update methods of a rolling update.
const (
	LeaderUpdateMoveLeader = "moveLeader"
	LeaderUpdateRestart    = "restart"
)

// UpdateStrategySpec says how a changed pod template reaches the members. The operator
// deletes the member pods one at a time, only while every member is Ready: the followers by
// name, each Ready and caught up before the next, the leader last.
type UpdateStrategySpec struct {
	// LeaderUpdateMethod is moveLeader (leadership moves to an updated voter before the
	// leader's pod is deleted: writes pause for a transfer only) or restart (the leader's pod
	// is deleted as it leads, and the cluster elects another).
	// +kubebuilder:default=moveLeader
	// +kubebuilder:validation:Enum=moveLeader;restart
	// +optional
	LeaderUpdateMethod string `json:"leaderUpdateMethod,omitempty"`
	// SkipBackup starts a rolling update, or a hibernation, without taking a full snapshot
	// first. By default (with spec.backup set) a full snapshot is stored before the first pod
	// is deleted, or before the members stop.
	// +optional
	SkipBackup bool `json:"skipBackup,omitempty"`
}

// Phases of a CA rollover.
const (
	// CARotationTrustBoth: a new CA is made (Secret <name>-ca-next); every ca.crt trusts
	// both, and the members restart, one at a time and the leader last, to trust both.
	CARotationTrustBoth = "TrustBoth"
	// CARotationNewLeaves: the new CA is the cluster's (the old one kept in <name>-ca-old and
	// still trusted); every certificate is issued again by it, and the kubelets update the
	// mounted Secrets.
	CARotationNewLeaves = "NewLeaves"
	// CARotationDropOld: the old CA is trusted no more, and the members restart again.
	CARotationDropOld = "DropOld"
)

// CARotationStatus is a CA rollover in progress.
type CARotationStatus struct {
	// Request is the etcd.steward.dev/rotate-ca value that started it.
	Request string `json:"request"`
	Phase   string `json:"phase"`
	// +optional
	Message   string      `json:"message,omitempty"`
	StartTime metav1.Time `json:"startTime"`
	// Automatic: the operator started it because its CA had less than 30 days left; it
	// leaves status.caRotated as it was.
	// +optional
	Automatic bool `json:"automatic,omitempty"`
}

// TokenKeyRotationStatus is a renewal of the token signing key, recorded before the key is
// made.
type TokenKeyRotationStatus struct {
	// Request is the etcd.steward.dev/rotate-token-key value that asked for it.
	Request   string      `json:"request"`
	StartTime metav1.Time `json:"startTime"`
}

// CAStatus identifies the CA that issues the cluster's certificates.
type CAStatus struct {
	// Fingerprint is the SHA-256 of the CA certificate, as `openssl x509 -noout -fingerprint
	// -sha256` prints it. For the cluster's own CA it is the one the operator expects in
	// Secret <name>-ca: it never replaces that CA by itself.
	Fingerprint string `json:"fingerprint"`
	// NotAfter is the end of the CA's validity.
	NotAfter metav1.Time `json:"notAfter"`
}

// TLSSpec turns on mutual TLS for client and peer traffic. By default the operator makes the
// cluster its own CA (Secret <name>-ca), and issues from it the members' certificate (Secret
// <name>-server-tls, one certificate naming the peer and client Services) and a client
// certificate (Secret <name>-client-tls, named in status.clientCertificateSecret). All three
// Secrets have cert-manager's keys: tls.crt, tls.key and ca.crt. Leaves are issued again when
// less than a third of their lifetime is left; etcd reads them at every handshake, so no
// member restarts. The peer port takes only the members' certificate, not the client one.
//
// With serverSecret, the certificates come from Secrets the user keeps (a cert-manager
// Certificate's secretName, say) and the operator makes no CA and no certificate.
//
// +kubebuilder:validation:XValidation:rule="!has(self.serverSecret) || self.enabled",message="spec.tls.serverSecret needs spec.tls.enabled: true"
// +kubebuilder:validation:XValidation:rule="!has(self.clientSecret) || has(self.serverSecret)",message="spec.tls.clientSecret goes with spec.tls.serverSecret: without it the operator makes the client certificate (Secret <name>-client-tls)"
type TLSSpec struct {
	// Enabled serves clients and peers with mutual TLS only.
	Enabled bool `json:"enabled"`
	// ServerSecret names a Secret in the cluster's namespace that holds the members'
	// certificate with cert-manager's keys: tls.crt (the certificate, then any intermediates),
	// tls.key, and ca.crt (the CAs the members trust). One certificate serves every member, as
	// server and as client of its peers: it needs a common name (peers are told apart from
	// clients by it), the usages "server auth" and "client auth", and a name for every member,
	// *.<name>-peer.<namespace>.svc. Renewals are read at the next handshake; a change of
	// ca.crt restarts the members one at a time, leader last, so a CA rollover is: put both
	// CAs in ca.crt, issue the certificates from the new CA, drop the old CA from ca.crt.
	// Chosen when the cluster is created.
	// +kubebuilder:validation:MinLength=1
	// +optional
	ServerSecret string `json:"serverSecret,omitempty"`
	// ClientSecret names the Secret of a client certificate for the cluster's users, published
	// in status.clientCertificateSecret. It must be trusted by the members' ca.crt and have
	// another common name than the members' certificate.
	// +kubebuilder:validation:MinLength=1
	// +optional
	ClientSecret string `json:"clientSecret,omitempty"`
}

// AuthSpec turns on etcd authentication. The leader's sidecar makes the root user with the
// password of the Secret, grants it the root role and enables authentication; every Steward
// client (backups, the restore drill, healing, status) logs in as root. A restore gives the
// restored root user this cluster's password, whatever the backup holds. A new password put in
// the Secret is given to root by the leader's sidecar, which still holds the old one.
type AuthSpec struct {
	// Enabled turns etcd authentication on.
	Enabled bool `json:"enabled"`
	// RootPasswordSecret names a Secret in the cluster's namespace whose key "password" is the
	// root user's password. Default: the operator makes <name>-root-password with a random
	// password once, and keeps it. It cannot change once authentication is on.
	// +optional
	RootPasswordSecret string `json:"rootPasswordSecret,omitempty"`
	// ApplicationUser is etcd's user for applications, which the members keep while
	// authentication is on: a user and a role of its name that may read and write the keys
	// under its prefix, and nothing of the cluster's administration (root stays Steward's).
	// Default: the user "app", every key, and its password in the Secret <name>-app-password
	// the operator makes.
	// +optional
	ApplicationUser *ApplicationUserSpec `json:"applicationUser,omitempty"`
}

// ApplicationUserStatus is the application user in force.
type ApplicationUserStatus struct {
	Name           string `json:"name"`
	PasswordSecret string `json:"passwordSecret"`
}

// ApplicationUserSpec names etcd's user for applications, what it may touch and its password.
type ApplicationUserSpec struct {
	// Name of the user, and of its role. Default: app.
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$`
	// +kubebuilder:validation:XValidation:rule="self != 'root'",message="spec.auth.applicationUser.name: root is Steward's own user; give the application user another name"
	// +optional
	Name string `json:"name,omitempty"`
	// Prefix is the keys the user may read and write (e.g. /registry/); empty: every key.
	// +optional
	Prefix string `json:"prefix,omitempty"`
	// PasswordSecret names a Secret in the cluster's namespace whose key "password" is the
	// user's password; a new password there reaches etcd within a minute or two, with no
	// restart. Default: the operator makes <name>-app-password with a random password once.
	// +optional
	PasswordSecret string `json:"passwordSecret,omitempty"`
}

// StorageSpec is a member's data volume: a PersistentVolumeClaim, or an emptyDir.
//
// +kubebuilder:validation:XValidation:rule="!has(self.emptyDir) || !has(self.storageClassName)",message="spec.storage: storageClassName applies to volume claims only; remove it or remove emptyDir"
type StorageSpec struct {
	// Size of each member's volume claim, or the size limit of its emptyDir.
	// +kubebuilder:default="8Gi"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`
	// StorageClassName of the volume claims; empty: the cluster's default class.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
	// EmptyDir keeps the data in a pod-local emptyDir instead of a volume claim: data is lost
	// with the pod, and members rejoin from their peers (or the backup after a quorum loss).
	// +optional
	EmptyDir *EmptyDirStorage `json:"emptyDir,omitempty"`
}

// EmptyDirStorage is ephemeral member storage: an emptyDir on the node's disk or in memory.
// A member that loses it rejoins empty, as a learner, like a member whose volume was lost.
type EmptyDirStorage struct {
	// Medium is "" (the node's disk) or "Memory" (tmpfs, counted against the pod's memory).
	// +kubebuilder:validation:Enum="";Memory
	// +optional
	Medium corev1.StorageMedium `json:"medium,omitempty"`
}

// BackupSpec configures continuous backups.
type BackupSpec struct {
	// Store is the object store URL: s3://bucket/prefix?region=…&endpoint=…, gs://…,
	// azblob://…, or file:///path on a volume.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(s3|gs|azblob|file|mem)://.+')",message="spec.backup.store must be a URL with scheme s3://, gs://, azblob://, file:// or mem://"
	Store string `json:"store"`
	// CredentialsSecret holds the backup store's credentials, one key per variable: for s3://,
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (optional AWS_SESSION_TOKEN, AWS_REGION);
	// for azblob://, AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN;
	// for gs://, GOOGLE_APPLICATION_CREDENTIALS holding the service-account key file's JSON
	// content. It is mounted into the sidecars only, and the backup store uses these
	// credentials only (none of the pod's environment). A change of the Secret (a rotation)
	// reaches the running members within a minute or two, without restarting them. Unset: the
	// cloud's default credentials (e.g. workload identity).
	// +optional
	CredentialsSecret *corev1.LocalObjectReference `json:"credentialsSecret,omitempty"`
	// FullSchedule is the cron schedule of full snapshots.
	// +kubebuilder:default="@hourly"
	// +optional
	FullSchedule string `json:"fullSchedule,omitempty"`
	// DeltaPeriod is how often deltas are written: the most that a total loss can lose.
	// +kubebuilder:default="5s"
	// +optional
	DeltaPeriod *metav1.Duration `json:"deltaPeriod,omitempty"`
	// Retention is "exponential" (hourly for a day, daily for a week, weekly for a month),
	// "limit:N" (the newest N full snapshots), "age:N" followed by h, d or w (every point in
	// time within the age stays restorable, e.g. age:30d), or "keep" (nothing is deleted).
	// Whatever the policy, the newest full snapshot and the deltas after it are kept.
	// +kubebuilder:default="exponential"
	// +kubebuilder:validation:XValidation:rule="self.matches('^(exponential|keep|limit:[1-9][0-9]{0,5}|age:[1-9][0-9]{0,3}[hdw])$')",message="spec.backup.retention must be exponential, keep, limit:N (N from 1 to 999999 full snapshots) or age:N followed by h, d or w (N from 1 to 9999, e.g. age:30d)"
	// +optional
	Retention string `json:"retention,omitempty"`
	// DrillSchedule is the cron schedule of restore drills: the backup leader restores the
	// newest backed-up revision into a scratch dir and compares its HashKV with its member's
	// (see docs/restore.md); "off" for none.
	// +kubebuilder:default="@daily"
	// +optional
	DrillSchedule string `json:"drillSchedule,omitempty"`
	// Encryption encrypts backups before they leave the pod (AES-256-GCM, see
	// docs/backup-format.md): the store never holds a key or value in the clear, and an
	// object planted in it by someone without the keys is never restored.
	// +optional
	Encryption *BackupEncryption `json:"encryption,omitempty"`
}

// BackupEncryption names the keys backups are encrypted with.
type BackupEncryption struct {
	// KeysSecret holds the keys: each data key is a key ID (letters, digits, '-', '_', '.'),
	// each value 32 random bytes in base64 or hex (head -c32 /dev/urandom | base64). Every
	// key stays readable; to rotate, add a key and make it active.
	KeysSecret corev1.LocalObjectReference `json:"keysSecret"`
	// ActiveKeyID is the key new backups are encrypted with; needed when the Secret holds
	// more than one.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]{0,64}$`
	// +optional
	ActiveKeyID string `json:"activeKeyID,omitempty"`
}

// MaintenanceSpec tunes the defragmentation the leader's sidecar runs: the members worth it,
// followers one at a time, the leader last after moving its leadership.
type MaintenanceSpec struct {
	// DefragSchedule is the cron schedule of the check; "off" for none.
	// +kubebuilder:default="@hourly"
	// +optional
	DefragSchedule string `json:"defragSchedule,omitempty"`
	// DefragThresholdPercent is the share of a member's database file that must be free pages
	// for it to be worth defragmenting.
	// +kubebuilder:default=45
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	DefragThresholdPercent *int32 `json:"defragThresholdPercent,omitempty"`
	// DefragMinReclaim is the least a member must give back to be worth defragmenting.
	// +kubebuilder:default="100Mi"
	// +optional
	DefragMinReclaim *resource.Quantity `json:"defragMinReclaim,omitempty"`
}

// EtcdSpec tunes the etcd members.
//
// +kubebuilder:validation:XValidation:rule="!has(self.autoCompactionRetention) || (has(self.autoCompactionMode) && self.autoCompactionMode == 'revision' ? self.autoCompactionRetention.matches('^[0-9]+$') : self.autoCompactionRetention.matches('^([0-9]+|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$'))",message="spec.etcd.autoCompactionRetention must be a number of revisions (e.g. 10000) with autoCompactionMode revision, and otherwise a duration (e.g. 1h or 30m) or a number of hours"
// +kubebuilder:validation:XValidation:rule="!has(self.heartbeatInterval) || !has(self.electionTimeout) || duration(self.electionTimeout).getMilliseconds() >= 5 * duration(self.heartbeatInterval).getMilliseconds()",message="spec.etcd.electionTimeout must be at least 5 times spec.etcd.heartbeatInterval, or members elect leaders on every delayed heartbeat"
type EtcdSpec struct {
	// QuotaBackendBytes is the database size at which etcd raises NOSPACE.
	// +optional
	QuotaBackendBytes *resource.Quantity `json:"quotaBackendBytes,omitempty"`
	// AutoCompactionMode is "periodic" or "revision".
	// +kubebuilder:validation:Enum=periodic;revision
	// +optional
	AutoCompactionMode string `json:"autoCompactionMode,omitempty"`
	// AutoCompactionRetention is etcd's --auto-compaction-retention: for periodic, a duration
	// (e.g. 1h, 30m) or a number of hours; for revision, a number of revisions.
	// +optional
	AutoCompactionRetention string `json:"autoCompactionRetention,omitempty"`
	// SnapshotCount is the number of applied entries after which etcd snapshots its state.
	// +kubebuilder:validation:Minimum=1
	// +optional
	SnapshotCount *int64 `json:"snapshotCount,omitempty"`
	// HeartbeatInterval is the leader's heartbeat period.
	// +optional
	HeartbeatInterval *metav1.Duration `json:"heartbeatInterval,omitempty"`
	// ElectionTimeout is how long a follower waits for a heartbeat before it campaigns.
	// +optional
	ElectionTimeout *metav1.Duration `json:"electionTimeout,omitempty"`
}

// SchedulingSpec places the member pods.
type SchedulingSpec struct {
	// Affinity replaces the default anti-affinity (members prefer distinct nodes).
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// TopologySpreadConstraints replace the default (spread over nodes, then zones).
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// PodMetadata is added to every member pod.
type PodMetadata struct {
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// BootstrapSpec creates a cluster from a backup (point-in-time restore into a new cluster).
type BootstrapSpec struct {
	// Restore names the backup to start from.
	// +optional
	Restore *RestoreSource `json:"restore,omitempty"`
}

// RestoreSource is a backup store and a point in its history.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.revision) && has(self.time))",message="spec.bootstrap.restore: give revision or time, not both (neither: the newest)"
type RestoreSource struct {
	// Store is the backup store URL to restore from (see spec.backup.store).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(s3|gs|azblob|file|mem)://.+')",message="spec.bootstrap.restore.store must be a URL with scheme s3://, gs://, azblob://, file:// or mem://"
	Store string `json:"store"`
	// CredentialsSecret holds the credentials of this store, with the keys of
	// spec.backup.credentialsSecret. A bootstrap restore reads this store with these
	// credentials only, and the backup store is written with its own Secret only; a rotation
	// reaches the running members within a minute or two. Unset: the cloud's default
	// credentials. (When this store is the backup store, the backup store's are used.)
	// +optional
	CredentialsSecret *corev1.LocalObjectReference `json:"credentialsSecret,omitempty"`
	// Revision restores exactly this revision.
	// +kubebuilder:validation:Minimum=1
	// +optional
	Revision *int64 `json:"revision,omitempty"`
	// Time restores the newest revision written at or before this time.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// Timeline is the backup timeline to read (see `steward backup list`). Default: the
	// newest, or for a time the one holding it, of the store's timelines; a store holding the
	// timelines of several clusters needs one named.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	// +optional
	Timeline *int64 `json:"timeline,omitempty"`
}

// QuorumLossSpec says how a quorum lost for good is recovered.
type QuorumLossSpec struct {
	// Policy is Automatic (recover from the best survivor, or the backup) or Manual (stop at
	// the QuorumLost condition, which names the chosen source and what would be lost, until
	// the annotation etcd.steward.dev/confirm-recovery is set to the epoch it names).
	// +kubebuilder:default=Automatic
	// +kubebuilder:validation:Enum=Automatic;Manual
	// +optional
	Policy string `json:"policy,omitempty"`
}

// Member roles, statuses and reasons, as status.members records them. A member is Ready while
// its pod is ready and its sidecar renews its Lease, Unknown once the Lease expired (or was
// never renewed), and NotReady when its pod is missing or not ready, or when it stayed
// Unknown longer than the grace.
const (
	RoleLeader  = "Leader"
	RoleMember  = "Member"
	RoleLearner = "Learner"

	MemberReady    = "Ready"
	MemberNotReady = "NotReady"
	MemberUnknown  = "Unknown"

	ReasonLeaseSucceeded             = "LeaseSucceeded"
	ReasonLeaseExpired               = "LeaseExpired"
	ReasonLeaseNotRenewed            = "LeaseNotRenewed"
	ReasonUnknownGracePeriodExceeded = "UnknownGracePeriodExceeded"
	ReasonPodNotReady                = "PodNotReady"
	ReasonPodMissing                 = "PodMissing"
	// ReasonHibernated: the cluster hibernates, and the member is stopped with its data kept.
	ReasonHibernated = "Hibernated"
	// ReasonFenced: the member is fenced (the annotation etcd.steward.dev/fenced-members):
	// its etcd is held stopped on purpose, its data kept; it is never restarted for it.
	ReasonFenced = "Fenced"
)

// Condition types.
const (
	ConditionReady           = "Ready"
	ConditionQuorate         = "Quorate"
	ConditionAllMembersReady = "AllMembersReady"
	ConditionBackupReady     = "BackupReady"
	ConditionProgressing     = "Progressing"
	ConditionDegraded        = "Degraded"
	ConditionQuorumLost      = "QuorumLost"
	// ConditionAlarmsActive is true while etcd reports an alarm (NOSPACE, CORRUPT), as the
	// leader's sidecar last saw it.
	ConditionAlarmsActive = "AlarmsActive"
	// ConditionCAReady, with TLS on, is true while the CA that issues the cluster's
	// certificates is the one expected (status.ca) and has more than 30 days left.
	ConditionCAReady = "CAReady"
	// ConditionHibernated is true while the cluster hibernates: every member stopped, with
	// its data, its identity and the cluster ID kept (status.hibernation).
	ConditionHibernated = "Hibernated"
	// ConditionVolumeExpansion is true while the members' volumes grow to spec.storage.size
	// (status.volumeExpansion), and false while a growth is refused (the reason and message
	// say why, and what to do); absent otherwise.
	ConditionVolumeExpansion = "VolumeExpansion"
	// ConditionOwnershipConflict is true while an object the cluster needs exists under its
	// name but was not made by this EtcdCluster: the operator leaves it alone and says how to
	// resolve it (rename or delete it, or adopt what a deleted cluster left behind).
	ConditionOwnershipConflict = "OwnershipConflict"
)

// Reasons of the VolumeExpansion condition.
const (
	ReasonVolumeExpanding = "Expanding"
	// ReasonExpansionNotAllowed: a claim's StorageClass does not allow volume expansion
	// (allowVolumeExpansion), does not exist, cannot be read, or the claim names none.
	ReasonExpansionNotAllowed = "ExpansionNotAllowed"
	// ReasonClaimNotOwned: a volume claim under a member's claim name is not the
	// StatefulSet's: it is left alone, and so is every other.
	ReasonClaimNotOwned = "ClaimNotOwned"
)

// Reasons of the CAReady condition.
const (
	ReasonCAValid = "CAValid"
	// ReasonCAExpiring: less than 30 days left. The cluster's own CA is rolled over
	// automatically; the issuer of spec.tls.serverSecret rolls over its own.
	ReasonCAExpiring = "CAExpiring"
	// ReasonCASecretMissing: the CA Secret of a cluster that has its CA is gone. No new CA
	// is made: the members trust the one they started with.
	ReasonCASecretMissing = "CASecretMissing"
	// ReasonCASecretChanged: the CA Secret holds another CA than status.ca. It is not used:
	// the members trust the one they started with.
	ReasonCASecretChanged = "CASecretChanged"
)

// Phases of a hibernation.
const (
	// HibernationStopping: hibernation is asked for and recorded; the members still run
	// (with spec.backup, a full snapshot is taken first).
	HibernationStopping = "Stopping"
	// HibernationStopped: the StatefulSet is scaled to 0; the ConfigMap still lists every
	// member and nothing leaves etcd's member list.
	HibernationStopped = "Stopped"
	// HibernationResuming: the StatefulSet is back at the size the cluster hibernated at;
	// the record goes once the StatefulSet has that size, and the members restart on their data.
	HibernationResuming = "Resuming"
)

// HibernationStatus is a hibernation in progress: the operator's record of the size the
// cluster resumes at and of the full snapshot taken before the members stopped.
type HibernationStatus struct {
	// Phase is Stopping, Stopped or Resuming.
	Phase string `json:"phase"`
	// Replicas is the number of members the cluster had when it hibernated: it resumes at
	// this size first, whatever spec.replicas then says, and scales afterwards.
	Replicas int32 `json:"replicas"`
	// Since is when the hibernation was asked for.
	Since metav1.Time `json:"since"`
	// SnapshotKey and SnapshotRevision are the full snapshot stored before the members
	// stopped (empty without spec.backup, with spec.updateStrategy.skipBackup, or when no
	// member served: Message says which).
	// +optional
	SnapshotKey string `json:"snapshotKey,omitempty"`
	// +optional
	SnapshotRevision int64 `json:"snapshotRevision,omitempty"`
	// Message is the current step, or what the hibernation waits for.
	// +optional
	Message string `json:"message,omitempty"`
}

// Defragmentation is one defragmentation round: followers one at a time, the leader last
// after its leadership moved.
type Defragmentation struct {
	// Time is when the round ended.
	Time metav1.Time `json:"time"`
	// Trigger is "schedule" or "NOSPACE".
	Trigger string `json:"trigger"`
	// ReclaimedBytes is what the round gave back, over every member.
	ReclaimedBytes int64 `json:"reclaimedBytes"`
	// Members says, per member in order, its database size before and after.
	// +optional
	Members []string `json:"members,omitempty"`
	// Error says why the round stopped early.
	// +optional
	Error string `json:"error,omitempty"`
}

// MemberStatus is one member as the operator last saw it.
type MemberStatus struct {
	// Name is the member's pod name.
	Name string `json:"name"`
	// ID is the etcd member ID (hex), from the member's Lease.
	// +optional
	ID string `json:"id,omitempty"`
	// Role is Leader, Member or Learner.
	// +optional
	Role string `json:"role,omitempty"`
	// Status is Ready, NotReady or Unknown.
	Status string `json:"status"`
	// Reason says why: LeaseSucceeded, LeaseExpired, UnknownGracePeriodExceeded, PodNotReady, Fenced, …
	// +optional
	Reason string `json:"reason,omitempty"`
	// LastTransitionTime is when Status last changed.
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`
	// LastReport is the member Lease's renewal as of the last change of this entry (a
	// renewal alone does not rewrite the status; the Lease's renewTime is the live heartbeat).
	// +optional
	LastReport *metav1.Time `json:"lastReport,omitempty"`
}

// Endpoints are how clients and peers reach the cluster.
type Endpoints struct {
	// Client is the client Service's URL.
	Client string `json:"client,omitempty"`
	// Peers are the members' peer URLs.
	// +optional
	Peers []string `json:"peers,omitempty"`
}

// Recoverability is what the backups of the cluster's own timeline restore without a break:
// every revision from FirstRevision to LastRevision, and every point in time from FirstTime
// on (a restore to a time after LastTime restores LastRevision). It starts at the oldest full
// snapshot from which the deltas continue without a hole to the newest stored revision.
type Recoverability struct {
	// Timeline is the timeline of the backup store that holds it.
	// +optional
	Timeline int64 `json:"timeline,omitempty"`
	// ClusterID is the etcd cluster ID (hex) whose history the timeline holds.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// +optional
	FirstRevision int64 `json:"firstRevision,omitempty"`
	// +optional
	FirstTime *metav1.Time `json:"firstTime,omitempty"`
	// +optional
	LastRevision int64 `json:"lastRevision,omitempty"`
	// +optional
	LastTime *metav1.Time `json:"lastTime,omitempty"`
}

// LastError is one error of the newest reconciliation, with a stable code.
type LastError struct {
	// Code is stable across releases (e.g. ERR_SYNC_STATEFULSET); match on it, not on Description.
	Code        string      `json:"code"`
	Description string      `json:"description"`
	ObservedAt  metav1.Time `json:"observedAt"`
}

// EtcdClusterStatus is the cluster as the operator observed it.
type EtcdClusterStatus struct {
	// ObservedGeneration is the generation the rest of this status describes; written last.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=name
	Members []MemberStatus `json:"members,omitempty"`
	// ClusterSize is the number of members of the etcd cluster.
	// +optional
	ClusterSize int32 `json:"clusterSize,omitempty"`
	// Replicas is the StatefulSet's current number of pods (the scale subresource's status).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas is the number of Ready members.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// ReadyMembers is "ready/desired", for kubectl get.
	// +optional
	ReadyMembers string `json:"readyMembers,omitempty"`
	// FencedMembers are the members whose fence (the annotation
	// etcd.steward.dev/fenced-members) is in force: their etcd is held stopped on purpose.
	// +optional
	FencedMembers []string `json:"fencedMembers,omitempty"`
	// Selector selects the member pods (the scale subresource's label selector).
	// +optional
	Selector string `json:"selector,omitempty"`
	// ClusterID is the etcd cluster ID (hex), once the cluster formed.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// Voters are the voting members as the members' reports last listed them.
	// +optional
	Voters []Voter `json:"voters,omitempty"`
	// Leader is the name of the member that leads.
	// +optional
	Leader string `json:"leader,omitempty"`
	// Revision is the newest revision a member reported. At rest it is written with any
	// other change of the status, otherwise at most once an hour: it may be up to about an
	// hour behind (the members' EtcdMember reports and the operator's metrics carry it live).
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// +optional
	Endpoints Endpoints `json:"endpoints,omitempty"`
	// ClientCertificateSecret names the Secret with a client certificate of the cluster's CA
	// (tls.crt, tls.key, ca.crt), with TLS on: the operator's own, or spec.tls.clientSecret.
	// +optional
	ClientCertificateSecret string `json:"clientCertificateSecret,omitempty"`
	// RootPasswordSecret names the Secret with etcd's root password (key "password"), with
	// authentication on.
	// +optional
	RootPasswordSecret string `json:"rootPasswordSecret,omitempty"`
	// ApplicationUser is etcd's user for applications and the Secret with its password (key
	// "password"), with authentication on: what applications log in as.
	// +optional
	ApplicationUser *ApplicationUserStatus `json:"applicationUser,omitempty"`
	// Defaults are what the cluster runs with where its spec leaves spec.tls, spec.auth or
	// the containers' resources out. The operator records them once, before it makes anything.
	// +optional
	Defaults *ClusterDefaults `json:"defaults,omitempty"`
	// LastFullSnapshot and LastDeltaSnapshot are the newest backups (from the snapshot Leases,
	// which carry them live). Like revision, written at rest at most once an hour unless
	// something else in the status changes; condition BackupReady says at once whether the
	// backups are current.
	// +optional
	LastFullSnapshot *SnapshotRef `json:"lastFullSnapshot,omitempty"`
	// +optional
	LastDeltaSnapshot *SnapshotRef `json:"lastDeltaSnapshot,omitempty"`
	// LastDefragmentation is the newest defragmentation round the leader's sidecar ran
	// (scheduled, or to recover from NOSPACE).
	// +optional
	LastDefragmentation *Defragmentation `json:"lastDefragmentation,omitempty"`
	// LastBackupTime is the time of the newest full or delta snapshot, as of the status's
	// last write (at rest up to about an hour behind, like revision).
	// +optional
	LastBackupTime *metav1.Time `json:"lastBackupTime,omitempty"`
	// Recoverability is what a restore can reach (EtcdRestore, bootstrap.restore), as the
	// backup leader's sidecar last reported it from the store's index: never from a report of
	// another cluster ID or one whose member no longer leads. Unset while no such report says.
	// Its end (lastRevision, lastTime) moves with every backup and is written at rest at most
	// once an hour, like revision; any other change of it is written at once.
	// +optional
	Recoverability *Recoverability `json:"recoverability,omitempty"`
	// Recovery is the quorum-loss recovery state: the directive in force (epoch, phase,
	// seed, source and why), the newest epoch issued, the last recovery, and what the cluster
	// waits for. The members carry the directive out (docs/architecture.md, "Recovery").
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +optional
	Recovery *runtime.RawExtension `json:"recovery,omitempty"`
	// Rollout is the rolling update in progress (nil: none): the member pods run an older
	// template than the StatefulSet's.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`
	// Hibernation is the hibernation in progress (nil: none): spec.replicas: 0 or the
	// annotation etcd.steward.dev/hibernate=true stopped the members, or is stopping them.
	// +optional
	Hibernation *HibernationStatus `json:"hibernation,omitempty"`
	// VolumeExpansion is the growth of the members' volumes to spec.storage.size in progress
	// (nil: none).
	// +optional
	VolumeExpansion *VolumeExpansionStatus `json:"volumeExpansion,omitempty"`
	// CARotation is the CA rollover in progress (nil: none).
	// +optional
	CARotation *CARotationStatus `json:"caRotation,omitempty"`
	// CARotated is the etcd.steward.dev/rotate-ca value of the last rollover completed, or
	// refused (the certificates of spec.tls.serverSecret are rolled over by their issuer).
	// +optional
	CARotated string `json:"caRotated,omitempty"`
	// CA is the CA that issues the cluster's certificates, with TLS on: the cluster's own, or
	// the issuer of spec.tls.serverSecret's certificate.
	// +optional
	CA *CAStatus `json:"ca,omitempty"`
	// TokenKeyRotation is the renewal of the token signing key asked for and not yet made
	// (nil: none): recorded before the new key is made.
	// +optional
	TokenKeyRotation *TokenKeyRotationStatus `json:"tokenKeyRotation,omitempty"`
	// TokenKeyRotated is the etcd.steward.dev/rotate-token-key value of the last renewal made,
	// or refused (the cluster has no authentication).
	// +optional
	TokenKeyRotated string `json:"tokenKeyRotated,omitempty"`
	// +optional
	LastErrors []LastError `json:"lastErrors,omitempty"`
}

// ClusterDefaults are what a cluster runs with where its spec leaves spec.tls, spec.auth,
// spec.resources or spec.sidecarResources out. A new cluster gets TLS, authentication with it,
// and resource requests. A cluster that existed before Steward had these defaults (its status
// written, or its StatefulSet there) keeps what its members run: the defaults never change a
// running cluster.
type ClusterDefaults struct {
	// TLS: mutual TLS with the cluster's own CA when spec.tls is left out.
	TLS bool `json:"tls"`
	// Auth: etcd authentication when spec.auth is left out.
	Auth bool `json:"auth"`
	// Resources: requests of cpu and memory for a container whose resources the spec leaves
	// empty (etcd: cpu 100m, memory 256Mi; sidecar: cpu 50m, memory 128Mi).
	// +optional
	Resources bool `json:"resources,omitempty"`
}

// Phases of a volume expansion.
const (
	// VolumeExpansionResizingClaims: the size is recorded; the members' volume claims are
	// asked for it, one write each.
	VolumeExpansionResizingClaims = "ResizingClaims"
	// VolumeExpansionRecreatingStatefulSet: every claim asks for the size; the StatefulSet is
	// deleted leaving its pods running (orphan) and made anew with the new claim template.
	VolumeExpansionRecreatingStatefulSet = "RecreatingStatefulSet"
)

// VolumeExpansionStatus is the operator's record of a growth of the members' volumes: the
// size, recorded before any claim is changed, and how far it went.
type VolumeExpansionStatus struct {
	// Size is the size the claims grow to (spec.storage.size when it was recorded).
	Size resource.Quantity `json:"size"`
	// Phase is ResizingClaims or RecreatingStatefulSet.
	Phase string `json:"phase"`
	// Since is when the growth was recorded.
	Since metav1.Time `json:"since"`
	// Message is the current step.
	// +optional
	Message string `json:"message,omitempty"`
}

// RolloutStatus is a rolling update's progress, as the operator recorded it: its decisions
// across reconciliations come from this record and from what the members report.
type RolloutStatus struct {
	// Revision is the StatefulSet's update revision the members are restarted on; empty
	// while the new pod template waits to be applied to the StatefulSet.
	// +optional
	Revision string `json:"revision,omitempty"`
	// Template identifies the new pod template while it waits, unapplied, for the full
	// snapshot that comes before it: until then the StatefulSet keeps the last template, so
	// a pod that restarts for any other reason (an eviction, a lost node) runs it.
	// +optional
	Template string `json:"template,omitempty"`
	// StartTime is when the operator first saw members on an older revision.
	StartTime metav1.Time `json:"startTime"`
	// SnapshotKey and SnapshotRevision are the full snapshot stored before the first pod was
	// deleted (empty with spec.updateStrategy.skipBackup, or without spec.backup).
	// +optional
	SnapshotKey string `json:"snapshotKey,omitempty"`
	// +optional
	SnapshotRevision int64 `json:"snapshotRevision,omitempty"`
	// Updated lists the members whose pods this rolling update deleted, in order.
	// +optional
	Updated []string `json:"updated,omitempty"`
	// Current is the member whose pod was deleted last, and CurrentSince when: the next pod
	// is deleted only once it is Ready, healthy and caught up.
	// +optional
	Current string `json:"current,omitempty"`
	// +optional
	CurrentSince *metav1.Time `json:"currentSince,omitempty"`
	// LeaderMoves counts the leadership transfers asked for; LeaderMovedFrom and
	// LeaderMovedAt are the newest one's leader and time.
	// +optional
	LeaderMoves int32 `json:"leaderMoves,omitempty"`
	// +optional
	LeaderMovedFrom string `json:"leaderMovedFrom,omitempty"`
	// +optional
	LeaderMovedAt *metav1.Time `json:"leaderMovedAt,omitempty"`
	// Stalled: the member restarted last did not become healthy in time; no other pod is
	// deleted until it does (the Progressing condition says RollingUpdateStalled).
	// +optional
	Stalled bool `json:"stalled,omitempty"`
	// Message is the current step, or what the rolling update waits for.
	// +optional
	Message string `json:"message,omitempty"`
}

// Voter is one voting member of the formed cluster.
type Voter struct {
	ID string `json:"id"`
	// Name is empty while the member has never started.
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	PeerURL string `json:"peerURL,omitempty"`
}

// SnapshotRef is one stored snapshot.
type SnapshotRef struct {
	Revision int64       `json:"revision"`
	Time     metav1.Time `json:"time"`
}

// EtcdCluster is an etcd cluster that heals itself and backs itself up.
//
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 52",message="metadata.name must be at most 52 characters: the member pods carry the label controller-revision-hash, <name>-<hash of up to 10 characters>, and a label value holds at most 63"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must start with a lowercase letter and hold only lowercase letters, digits and '-' (not at the end): it names the cluster's Services (<name>-client, <name>-peer) and the members' host names, which must be DNS labels"
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=ec,categories=steward
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Members",type=string,JSONPath=`.status.readyMembers`
// +kubebuilder:printcolumn:name="Leader",type=string,JSONPath=`.status.leader`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Last backup",type=date,JSONPath=`.status.lastBackupTime`
// +kubebuilder:printcolumn:name="Recoverable since",type=date,JSONPath=`.status.recoverability.firstTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Fenced",type=string,JSONPath=`.status.fencedMembers`,priority=1
type EtcdCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EtcdClusterSpec   `json:"spec,omitempty"`
	Status EtcdClusterStatus `json:"status,omitempty"`
}

// EtcdClusterList is a list of EtcdClusters.
//
// +kubebuilder:object:root=true
type EtcdClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdCluster `json:"items"`
}
