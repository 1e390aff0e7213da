package operator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/pki"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// Ports and paths inside a member pod.
const (
	ClientPort  = 2379
	PeerPort    = 2380
	SidecarPort = 2381
	HealthPort  = 2382
	DataMount   = "/var/lib/etcd"
	// TokenMount is where the member pods mount the sidecar API token Secret; TokenFile is the
	// token file both containers read.
	TokenMount = "/var/run/steward/sidecar-api"
	TokenFile  = TokenMount + "/token"
	// BackupKeysMount is where the sidecar mounts the backup encryption keys Secret.
	BackupKeysMount = "/var/run/steward/backup-keys"
	// BackupCredentialsMount and RestoreCredentialsMount are where the sidecar mounts the
	// credentials Secrets of the backup store and of the store a bootstrap restore reads.
	BackupCredentialsMount  = "/etc/steward/store/backup"
	RestoreCredentialsMount = "/etc/steward/store/restore"
)

// Labels on every owned object; LabelCluster alone selects a cluster's pods.
const (
	LabelCluster   = v1alpha1.LabelCluster
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelComponent = "app.kubernetes.io/component"
	// LabelLeaseKind marks Leases: "member", "full-snapshot" or "delta-snapshot".
	LabelLeaseKind = "etcd.steward.dev/lease"
	// annotationTemplateHash on the StatefulSet identifies the pod template it was given.
	annotationTemplateHash = "etcd.steward.dev/template-hash"
	// annotationTemplatePending on the StatefulSet identifies a pod template rendered but
	// not applied yet: it waits for the rolling update to own the change.
	annotationTemplatePending = "etcd.steward.dev/template-pending"
	// annotationConfigHash on the pod template identifies the member settings of the ConfigMap.
	annotationConfigHash = "etcd.steward.dev/config-hash"
	// AnnotationTrust on the pod template identifies the CAs the members trust (spec.tls): a
	// change restarts them.
	AnnotationTrust = "etcd.steward.dev/trust"
	// AnnotationTokenKey on the pod template identifies the key pair etcd signs its
	// authentication tokens with (spec.auth): a change restarts the members.
	AnnotationTokenKey = "etcd.steward.dev/token-key"
	// annotationServiceAccountHash on the pod template identifies the annotations
	// spec.serviceAccount puts on the members' ServiceAccount: a workload identity may reach a
	// pod only when it is created, so a change restarts the members.
	annotationServiceAccountHash = "etcd.steward.dev/service-account"
	// annotationManagedAnnotations on the ServiceAccount lists the keys of the annotations
	// spec.serviceAccount put there (comma-separated): the ones the operator changes and removes.
	annotationManagedAnnotations = "etcd.steward.dev/managed-annotations"
)

// Requests of a container whose resources the spec leaves empty, on a cluster whose defaults
// say so (status.defaults.resources). No limits: a memory limit would kill etcd under load
// rather than slow it, and a CPU limit throttles its heartbeats into elections.
var (
	defaultEtcdRequests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("256Mi")}
	defaultSidecarRequests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"),
		corev1.ResourceMemory: resource.MustParse("128Mi")}
)

// containerResources is spec, or when it is empty and the cluster's defaults give requests,
// the default requests.
func containerResources(ec *v1alpha1.EtcdCluster, spec corev1.ResourceRequirements, defaults corev1.ResourceList) corev1.ResourceRequirements {
	empty := len(spec.Requests) == 0 && len(spec.Limits) == 0 && len(spec.Claims) == 0
	if !empty || ec.Status.Defaults == nil || !ec.Status.Defaults.Resources {
		return spec
	}
	return corev1.ResourceRequirements{Requests: defaults.DeepCopy()}
}

// serviceAccountAnnotations are the ServiceAccount's annotations with those spec.serviceAccount
// asks for (want): the ones the operator put there before (annotationManagedAnnotations) and
// want no longer has are removed; others' are kept as they are.
func serviceAccountAnnotations(current, want map[string]string) map[string]string {
	out := maps.Clone(current)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range strings.Split(current[annotationManagedAnnotations], ",") {
		if _, ok := want[k]; !ok {
			delete(out, k)
		}
	}
	delete(out, annotationManagedAnnotations)
	maps.Copy(out, want)
	if len(want) > 0 {
		out[annotationManagedAnnotations] = strings.Join(slices.Sorted(maps.Keys(want)), ",")
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Names of a cluster's objects (docs/kubernetes.md, "What the operator creates").
func statefulSetName(ec *v1alpha1.EtcdCluster) string { return ec.Name }
func configMapName(ec *v1alpha1.EtcdCluster) string   { return v1alpha1.ConfigMapName(ec.Name) }
func tokenSecretName(ec *v1alpha1.EtcdCluster) string {
	return v1alpha1.SidecarTokenSecretName(ec.Name)
}
func clientServiceName(ec *v1alpha1.EtcdCluster) string { return ec.Name + "-client" }
func peerServiceName(ec *v1alpha1.EtcdCluster) string   { return ec.Name + "-peer" }
func memberName(ec *v1alpha1.EtcdCluster, i int) string { return fmt.Sprintf("%s-%d", ec.Name, i) }
func fullLeaseName(ec *v1alpha1.EtcdCluster) string     { return v1alpha1.FullSnapshotLeaseName(ec.Name) }
func deltaLeaseName(ec *v1alpha1.EtcdCluster) string    { return v1alpha1.DeltaSnapshotLeaseName(ec.Name) }

// ordinal returns the ordinal of a member (pod or Lease) name of cluster ec.
func ordinal(ec *v1alpha1.EtcdCluster, name string) (int, bool) {
	s, ok := strings.CutPrefix(name, ec.Name+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0 && strconv.Itoa(i) == s
}

func selectorLabels(ec *v1alpha1.EtcdCluster) map[string]string {
	return map[string]string{LabelCluster: ec.Name}
}

func commonLabels(ec *v1alpha1.EtcdCluster, component string) map[string]string {
	return map[string]string{
		LabelCluster:   ec.Name,
		LabelName:      "etcd",
		LabelInstance:  ec.Name,
		LabelManagedBy: "steward",
		LabelComponent: component,
	}
}

// memberDNS is a member's stable DNS name through the peer Service.
func memberDNS(ec *v1alpha1.EtcdCluster, i int) string {
	return fmt.Sprintf("%s.%s.%s.svc", memberName(ec, i), peerServiceName(ec), ec.Namespace)
}

// etcdCommand runs the etcd container, which takes its configuration from the sidecar in the
// same pod, over loopback. With TLS the sidecar serves its API with the members' certificate,
// which names the member, not the loopback address.
func etcdCommand(ec *v1alpha1.EtcdCluster) []string {
	cmd := []string{"/steward", "etcd", "--sidecar", fmt.Sprintf("%s://127.0.0.1:%d", scheme(ec), SidecarPort), "--api-token-file", TokenFile,
		"--listen-health", fmt.Sprintf("0.0.0.0:%d", HealthPort)}
	if TLSEnabled(ec) {
		cmd = append(cmd, "--sidecar-ca", TLSMount+"/"+pki.CAFile,
			"--sidecar-server-name", fmt.Sprintf("$(POD_NAME).%s.$(POD_NAMESPACE).svc", peerServiceName(ec)))
	}
	return cmd
}

// memberConfigHash identifies what the ConfigMap sets for every member alike (etcd tuning,
// backups, maintenance); the member list, which scaling changes, is not part of it.
func memberConfigHash(ec *v1alpha1.EtcdCluster) string {
	c := clusterConfig(ec, 0)
	b, err := json.Marshal(struct {
		Etcd        v1alpha1.EtcdConfig
		Backup      *v1alpha1.BackupConfig
		Maintenance *v1alpha1.MaintenanceConfig
	}{c.Etcd, c.Backup, c.Maintenance})
	if err != nil {
		panic(err) // plain structs always marshal
	}
	return shortHash(b)
}

// shortHash is the hex of b's SHA-256, cut to 64 bits: what an annotation compares.
func shortHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// clusterConfig renders the ConfigMap content for a cluster of n members.
func clusterConfig(ec *v1alpha1.EtcdCluster, n int) v1alpha1.ClusterConfig {
	c := v1alpha1.ClusterConfig{Name: ec.Name, Namespace: ec.Namespace, Token: string(ec.UID),
		QuorumLossPolicy: ec.Spec.QuorumLoss.Policy}
	if c.QuorumLossPolicy == "" {
		c.QuorumLossPolicy = v1alpha1.QuorumLossAutomatic
	}
	for i := 0; i < n; i++ {
		dns := memberDNS(ec, i)
		c.Members = append(c.Members, v1alpha1.MemberConfig{Name: memberName(ec, i),
			ClientURL:  fmt.Sprintf("%s://%s:%d", scheme(ec), dns, ClientPort),
			PeerURL:    fmt.Sprintf("%s://%s:%d", scheme(ec), dns, PeerPort),
			SidecarURL: fmt.Sprintf("%s://%s:%d", scheme(ec), dns, SidecarPort)})
	}
	e := ec.Spec.Etcd
	if e.QuotaBackendBytes != nil {
		c.Etcd.QuotaBackendBytes = e.QuotaBackendBytes.Value()
	}
	c.Etcd.AutoCompactionMode, c.Etcd.AutoCompactionRetention = e.AutoCompactionMode, e.AutoCompactionRetention
	if e.SnapshotCount != nil {
		c.Etcd.SnapshotCount = *e.SnapshotCount
	}
	if e.HeartbeatInterval != nil {
		c.Etcd.HeartbeatMillis = e.HeartbeatInterval.Milliseconds()
	}
	if e.ElectionTimeout != nil {
		c.Etcd.ElectionMillis = e.ElectionTimeout.Milliseconds()
	}
	if b := ec.Spec.Backup; b != nil {
		c.Backup = &v1alpha1.BackupConfig{Store: b.Store, FullSchedule: b.FullSchedule, Retention: b.Retention, DeltaPeriod: snapshotter.DefaultDeltaPeriod.String(), DrillSchedule: b.DrillSchedule}
		if b.DeltaPeriod != nil {
			c.Backup.DeltaPeriod = b.DeltaPeriod.Duration.String()
		}
	}
	if m := ec.Spec.Maintenance; m != nil {
		c.Maintenance = &v1alpha1.MaintenanceConfig{DefragSchedule: m.DefragSchedule, DefragThreshold: -1, DefragMinReclaim: -1}
		if m.DefragThresholdPercent != nil {
			c.Maintenance.DefragThreshold = float64(*m.DefragThresholdPercent) / 100
		}
		if m.DefragMinReclaim != nil {
			c.Maintenance.DefragMinReclaim = m.DefragMinReclaim.Value()
		}
	}
	if b := ec.Spec.Bootstrap; b != nil && b.Restore != nil {
		c.Restore = &v1alpha1.RestoreConfig{Store: b.Restore.Store, Time: b.Restore.Time}
		if b.Restore.Revision != nil {
			c.Restore.Revision = *b.Restore.Revision
		}
	}
	return c
}

// configMapData is the ConfigMap's data for a cluster of n members, fenced of them fenced.
func configMapData(ec *v1alpha1.EtcdCluster, n int, fenced []string) (map[string]string, error) {
	c := clusterConfig(ec, n)
	c.FencedMembers = fenced
	b, err := yaml.Marshal(c)
	if err != nil {
		return nil, err
	}
	return map[string]string{v1alpha1.ClusterConfigKey: string(b)}, nil
}

// statefulSetSpec renders the member StatefulSet's spec for the given replica count.
func statefulSetSpec(ec *v1alpha1.EtcdCluster, defaultImage string, replicas int32) appsv1.StatefulSetSpec {
	image := memberImage(ec, defaultImage)
	labels := commonLabels(ec, "member")
	maps.Copy(labels, ec.Spec.PodMetadata.Labels)
	maps.Copy(labels, selectorLabels(ec)) // user labels never override the selector
	annotations := maps.Clone(ec.Spec.PodMetadata.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	// The sidecars read the ConfigMap when they start: a change of what it sets for every
	// member changes the template, and reaches the members by a rolling update.
	annotations[annotationConfigHash] = memberConfigHash(ec)
	if sa := ec.Spec.ServiceAccount.Annotations; len(sa) > 0 {
		b, err := json.Marshal(sa) // keys sorted
		if err != nil {
			panic(err) // a map of strings always marshals
		}
		annotations[annotationServiceAccountHash] = shortHash(b)
	}

	env := []corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	// The root file system is read-only; /tmp holds the etcd container's generated config.
	// The sidecar API token is mounted as a directory (not subPath), so a token replaced in
	// the Secret reaches the running containers.
	mounts := []corev1.VolumeMount{{Name: "data", MountPath: DataMount}, {Name: "tmp", MountPath: "/tmp"},
		{Name: "api-token", MountPath: TokenMount, ReadOnly: true}}
	if TLSEnabled(ec) {
		// Both containers: etcd serves from the certificate, the sidecar dials with it.
		mounts = append(mounts, corev1.VolumeMount{Name: "tls", MountPath: TLSMount, ReadOnly: true})
	}
	nonRoot := true
	noEscalation := false
	secCtx := &corev1.SecurityContext{AllowPrivilegeEscalation: &noEscalation, ReadOnlyRootFilesystem: &nonRoot,
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	probe := func(path string, port int, failures int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt(port)}},
			PeriodSeconds: 5, FailureThreshold: failures, TimeoutSeconds: 3}
	}
	etcd := corev1.Container{
		Name:            "etcd",
		Image:           image,
		ImagePullPolicy: ec.Spec.ImagePullPolicy,
		Command:         etcdCommand(ec),
		Ports: []corev1.ContainerPort{{Name: "client", ContainerPort: ClientPort}, {Name: "peer", ContainerPort: PeerPort},
			{Name: "health", ContainerPort: HealthPort}},
		Env:             env,
		VolumeMounts:    mounts,
		Resources:       containerResources(ec, ec.Spec.Resources, defaultEtcdRequests),
		ReadinessProbe:  probe("/readyz", HealthPort, 3),
		StartupProbe:    &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromInt(HealthPort)}}, PeriodSeconds: 5, FailureThreshold: 120},
		LivenessProbe:   probe("/livez", HealthPort, 6),
		SecurityContext: secCtx,
	}
	sidecar := corev1.Container{
		Name:            "sidecar",
		Image:           image,
		ImagePullPolicy: ec.Spec.ImagePullPolicy,
		Command: []string{"/steward", "sidecar", "--name", "$(POD_NAME)", "--data-dir", DataMount + "/data",
			"--listen", fmt.Sprintf("0.0.0.0:%d", SidecarPort), "--kubernetes-cluster", ec.Name, "--api-token-file", TokenFile},
		Ports:           []corev1.ContainerPort{{Name: "sidecar", ContainerPort: SidecarPort}},
		Env:             env,
		VolumeMounts:    mounts,
		Resources:       containerResources(ec, ec.Spec.SidecarResources, defaultSidecarRequests),
		LivenessProbe:   probe("/healthz", SidecarPort, 6),
		SecurityContext: secCtx,
	}
	if TLSEnabled(ec) {
		sidecar.Command = append(sidecar.Command, "--tls-dir", TLSMount)
	}
	if authEnabled(ec) {
		// Only the sidecar logs in to etcd: only it sees the root password. Only etcd signs
		// tokens: only it sees the key, where the sidecar's generated configuration names it.
		// The application user's password too: the leader's sidecar keeps the user.
		app := appUser(ec)
		sidecar.VolumeMounts = append(slices.Clone(sidecar.VolumeMounts), corev1.VolumeMount{Name: "root-password", MountPath: RootPasswordMount, ReadOnly: true},
			corev1.VolumeMount{Name: "app-password", MountPath: AppPasswordMount, ReadOnly: true})
		sidecar.Command = append(sidecar.Command, "--root-password-file", RootPasswordFile, "--token-key-dir", TokenKeyMount,
			"--app-user", app.Name, "--app-password-file", AppPasswordFile)
		if app.Prefix != "" {
			sidecar.Command = append(sidecar.Command, "--app-user-prefix", app.Prefix)
		}
		etcd.VolumeMounts = append(slices.Clone(etcd.VolumeMounts), corev1.VolumeMount{Name: "token-key", MountPath: TokenKeyMount, ReadOnly: true})
	}
	if enc := backupEncryption(ec); enc != nil {
		// Only the sidecar reads and writes backups: only it sees the keys.
		sidecar.VolumeMounts = append(slices.Clone(sidecar.VolumeMounts), corev1.VolumeMount{Name: "backup-keys", MountPath: BackupKeysMount, ReadOnly: true})
		sidecar.Command = append(sidecar.Command, "--encryption-keys", BackupKeysMount)
		if enc.ActiveKeyID != "" {
			sidecar.Command = append(sidecar.Command, "--encryption-key-id", enc.ActiveKeyID)
		}
	}
	// Only the sidecar reads and writes stores: only it sees their credentials, each store's
	// its own. Whole-directory mounts (not subPath, not environment variables), so a rotated
	// Secret reaches the running sidecar, which reads the files again.
	for _, c := range storeCredentials(ec) {
		sidecar.VolumeMounts = append(slices.Clone(sidecar.VolumeMounts), corev1.VolumeMount{Name: c.volume, MountPath: c.mount, ReadOnly: true})
		sidecar.Command = append(sidecar.Command, c.flag, c.mount)
	}
	podSpec := corev1.PodSpec{
		ServiceAccountName:        ec.Name,
		ImagePullSecrets:          ec.Spec.ImagePullSecrets,
		Containers:                []corev1.Container{etcd, sidecar},
		NodeSelector:              ec.Spec.Scheduling.NodeSelector,
		Tolerations:               ec.Spec.Scheduling.Tolerations,
		Affinity:                  ec.Spec.Scheduling.Affinity,
		TopologySpreadConstraints: ec.Spec.Scheduling.TopologySpreadConstraints,
		PriorityClassName:         ec.Spec.PriorityClassName,
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &nonRoot, RunAsUser: ptr(int64(65532)),
			RunAsGroup: ptr(int64(65532)), FSGroup: ptr(int64(65532)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		TerminationGracePeriodSeconds: ptr(int64(60)),
		Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr(resource.MustParse("64Mi"))}}},
			// Readable by the pod's group (fsGroup) only.
			{Name: "api-token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: tokenSecretName(ec),
				Items: []corev1.KeyToPath{{Key: v1alpha1.SidecarTokenKey, Path: "token"}}, DefaultMode: ptr(int32(0o440))}}}},
	}
	if TLSEnabled(ec) {
		podSpec.Volumes = append(podSpec.Volumes, corev1.Volume{Name: "tls", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: serverSecretName(ec), DefaultMode: ptr(int32(0o440))}}})
	}
	if authEnabled(ec) {
		podSpec.Volumes = append(podSpec.Volumes, corev1.Volume{Name: "root-password", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: rootPasswordSecretName(ec),
				Items: []corev1.KeyToPath{{Key: v1alpha1.RootPasswordKey, Path: "password"}}, DefaultMode: ptr(int32(0o440))}}},
			corev1.Volume{Name: "app-password", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: appUser(ec).PasswordSecret,
				Items: []corev1.KeyToPath{{Key: v1alpha1.RootPasswordKey, Path: "password"}}, DefaultMode: ptr(int32(0o440))}}},
			corev1.Volume{Name: "token-key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: tokenKeySecretName(ec),
				Items:       []corev1.KeyToPath{{Key: pki.TokenKeyFile, Path: pki.TokenKeyFile}, {Key: pki.TokenPublicKeyFile, Path: pki.TokenPublicKeyFile}},
				DefaultMode: ptr(int32(0o440))}}})
	}
	if enc := backupEncryption(ec); enc != nil {
		podSpec.Volumes = append(podSpec.Volumes, corev1.Volume{Name: "backup-keys", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: enc.KeysSecret.Name, DefaultMode: ptr(int32(0o440))}}})
	}
	for _, c := range storeCredentials(ec) {
		podSpec.Volumes = append(podSpec.Volumes, corev1.Volume{Name: c.volume, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: c.secret, DefaultMode: ptr(int32(0o440))}}})
	}
	if podSpec.Affinity == nil && len(podSpec.TopologySpreadConstraints) == 0 {
		// Over nodes, required: with as many nodes as members, one member per node, so that
		// deleting a pod (a fence) stops one member, and one lost node costs one member. Fewer
		// nodes share the members evenly (skew is counted over the nodes there are). A node
		// whose taints the pods do not tolerate (out of service, cordoned) is not counted: a
		// member whose node is lost comes back on the others. Over zones, preferred: nodes need
		// not carry a zone.
		spread := func(key string, when corev1.UnsatisfiableConstraintAction) corev1.TopologySpreadConstraint {
			return corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: when,
				LabelSelector: &metav1.LabelSelector{MatchLabels: selectorLabels(ec)}, NodeTaintsPolicy: ptr(corev1.NodeInclusionPolicyHonor)}
		}
		podSpec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{
			spread(corev1.LabelHostname, corev1.DoNotSchedule), spread(corev1.LabelTopologyZone, corev1.ScheduleAnyway)}
	}
	size := ec.Spec.Storage.Size
	if size == nil {
		q := resource.MustParse("8Gi")
		size = &q
	}
	var claims []corev1.PersistentVolumeClaim
	if ed := ec.Spec.Storage.EmptyDir; ed != nil {
		podSpec.Volumes = append(podSpec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: ed.Medium, SizeLimit: size}}})
	} else {
		claims = []corev1.PersistentVolumeClaim{{
			ObjectMeta: metav1.ObjectMeta{Name: "data", Labels: commonLabels(ec, "member")},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ec.Spec.Storage.StorageClassName,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *size}},
			},
		}}
	}
	return appsv1.StatefulSetSpec{
		Replicas:            &replicas,
		ServiceName:         peerServiceName(ec),
		Selector:            &metav1.LabelSelector{MatchLabels: selectorLabels(ec)},
		PodManagementPolicy: appsv1.ParallelPodManagement, // a new cluster needs all its members up to elect
		UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
		// Claims survive scaling (a hibernated cluster scales to 0 and keeps its members' data)
		// and go with the cluster.
		PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
			WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
		},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
			Spec:       podSpec,
		},
		VolumeClaimTemplates: claims,
	}
}

// backupEncryption is the cluster's backup encryption, nil if backups are not encrypted.
func backupEncryption(ec *v1alpha1.EtcdCluster) *v1alpha1.BackupEncryption {
	if b := ec.Spec.Backup; b != nil {
		return b.Encryption
	}
	return nil
}

// storeCredential is one store's credentials Secret as the sidecar gets it: a volume, where
// it is mounted, and the flag naming that directory.
type storeCredential struct {
	secret, volume, mount, flag string
}

// storeCredentials are the credentials Secrets of the backup store and of the store a
// bootstrap restore reads, each mounted on its own.
func storeCredentials(ec *v1alpha1.EtcdCluster) []storeCredential {
	var out []storeCredential
	if b := ec.Spec.Backup; b != nil && b.CredentialsSecret != nil {
		out = append(out, storeCredential{b.CredentialsSecret.Name, "backup-store-credentials", BackupCredentialsMount, "--store-credentials"})
	}
	if b := ec.Spec.Bootstrap; b != nil && b.Restore != nil && b.Restore.CredentialsSecret != nil {
		out = append(out, storeCredential{b.Restore.CredentialsSecret.Name, "restore-store-credentials", RestoreCredentialsMount, "--restore-store-credentials"})
	}
	return out
}

// credentialSecrets are the names of the Secrets the member pods read store credentials
// from, each once.
func credentialSecrets(ec *v1alpha1.EtcdCluster) []string {
	var out []string
	for _, c := range storeCredentials(ec) {
		if !slices.Contains(out, c.secret) {
			out = append(out, c.secret)
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }
