package operator

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/pki"
)

// TestClusterConfigBackup: the sidecars' configuration carries spec.backup, the restore drill
// schedule included (empty: the sidecar's default).
func TestClusterConfigBackup(t *testing.T) {
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	if c := clusterConfig(ec, 3); c.Backup != nil {
		t.Errorf("no spec.backup: config %+v", c.Backup)
	}
	for _, drill := range []string{"", "off", "0 3 * * *"} {
		ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://b/c", FullSchedule: "@hourly", Retention: "keep", DrillSchedule: drill}
		want := v1alpha1.BackupConfig{Store: "s3://b/c", FullSchedule: "@hourly", DeltaPeriod: "5s", Retention: "keep", DrillSchedule: drill}
		if c := clusterConfig(ec, 3); c.Backup == nil || *c.Backup != want {
			t.Errorf("drill schedule %q: config %+v, want %+v", drill, c.Backup, want)
		}
	}
}

// TestMemberSettingsRollThePods: spec.maintenance reaches the sidecars' configuration, and a
// change of what the ConfigMap sets for every member (etcd tuning, backups, maintenance)
// changes the pod template, so a rolling update carries it to the members; scaling does not.
func TestMemberSettingsRollThePods(t *testing.T) {
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	template := func() string { return templateHash(statefulSetSpec(ec, "img", 3).Template) }
	base := template()
	if ec.Spec.Replicas = 5; template() != base {
		t.Error("scaling changed the pod template")
	}
	threshold := int32(30)
	ec.Spec.Maintenance = &v1alpha1.MaintenanceSpec{DefragSchedule: "0 3 * * *", DefragThresholdPercent: &threshold}
	if c := clusterConfig(ec, 3).Maintenance; c == nil || c.DefragSchedule != "0 3 * * *" || c.DefragThreshold != 0.3 || c.DefragMinReclaim != -1 {
		t.Errorf("maintenance config %+v, want the schedule, a 0.3 threshold and the sidecar's own minimum", c)
	}
	withMaintenance := template()
	if withMaintenance == base {
		t.Error("spec.maintenance did not change the pod template")
	}
	count := int64(5000)
	if ec.Spec.Etcd.SnapshotCount = &count; template() == withMaintenance {
		t.Error("spec.etcd.snapshotCount did not change the pod template")
	}
}

// TestBackupEncryptionReachesTheSidecarOnly: spec.backup.encryption mounts the keys Secret
// into the sidecar, the one container that reads and writes backups, with the flags naming
// it and the active key; a new active key rolls the pods.
func TestBackupEncryptionReachesTheSidecarOnly(t *testing.T) {
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://b/c"}
	plain := statefulSetSpec(ec, "img", 3).Template
	ec.Spec.Backup.Encryption = &v1alpha1.BackupEncryption{KeysSecret: corev1.LocalObjectReference{Name: "keys"}, ActiveKeyID: "k2"}
	tpl := statefulSetSpec(ec, "img", 3).Template
	var secretVolume string
	for _, v := range tpl.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "keys" {
			secretVolume = v.Name
		}
	}
	if secretVolume == "" {
		t.Fatalf("no volume of Secret keys: %+v", tpl.Spec.Volumes)
	}
	for _, c := range tpl.Spec.Containers {
		mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == secretVolume && m.MountPath == BackupKeysMount && m.ReadOnly
		})
		args := strings.Join(c.Command, " ")
		flags := strings.Contains(args, "--encryption-keys "+BackupKeysMount) && strings.Contains(args, "--encryption-key-id k2")
		if want := c.Name == "sidecar"; mounted != want || flags != want {
			t.Errorf("container %s: keys mounted %t, flags %t (%s), want %t", c.Name, mounted, flags, args, want)
		}
	}
	if templateHash(plain) == templateHash(tpl) {
		t.Error("turning encryption on did not change the pod template")
	}
	ec.Spec.Backup.Encryption.ActiveKeyID = "k3"
	if templateHash(statefulSetSpec(ec, "img", 3).Template) == templateHash(tpl) {
		t.Error("a new active key did not change the pod template")
	}
}

// TestStoreCredentialsReachTheSidecarOnly: the credentials Secrets of the backup store and of
// the store a bootstrap restore reads are mounted into the sidecar only, each on its own
// (whole Secrets, not subPath: a rotation reaches the running sidecar), each named by its own
// flag; no container takes credentials from its environment.
func TestStoreCredentialsReachTheSidecarOnly(t *testing.T) {
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://b/c", CredentialsSecret: &corev1.LocalObjectReference{Name: "backup-creds"}}
	ec.Spec.Bootstrap = &v1alpha1.BootstrapSpec{Restore: &v1alpha1.RestoreSource{Store: "s3://other/c",
		CredentialsSecret: &corev1.LocalObjectReference{Name: "restore-creds"}}}
	tpl := statefulSetSpec(ec, "img", 3).Template
	volumeOf := map[string]string{}
	for _, v := range tpl.Spec.Volumes {
		if v.Secret != nil {
			volumeOf[v.Secret.SecretName] = v.Name
		}
	}
	for _, c := range tpl.Spec.Containers {
		if len(c.EnvFrom) > 0 {
			t.Errorf("container %s takes its environment from %+v", c.Name, c.EnvFrom)
		}
		args := strings.Join(c.Command, " ")
		for secret, want := range map[string]struct{ mount, flag string }{
			"backup-creds":  {BackupCredentialsMount, "--store-credentials"},
			"restore-creds": {RestoreCredentialsMount, "--restore-store-credentials"},
		} {
			if volumeOf[secret] == "" {
				t.Fatalf("no volume of Secret %s: %+v", secret, tpl.Spec.Volumes)
			}
			mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == volumeOf[secret] && m.MountPath == want.mount && m.ReadOnly && m.SubPath == ""
			})
			flag := strings.Contains(args, want.flag+" "+want.mount)
			if sidecar := c.Name == "sidecar"; mounted != sidecar || flag != sidecar {
				t.Errorf("container %s: Secret %s mounted at %s %t, %s %t (%s), want %t", c.Name, secret, want.mount, mounted, want.flag, flag, args, sidecar)
			}
		}
	}
	if volumeOf["backup-creds"] == volumeOf["restore-creds"] {
		t.Errorf("both Secrets share the volume %s", volumeOf["backup-creds"])
	}
}

// TestTLSObjects: with spec.tls the members' URLs are https, both containers mount the
// members' certificate Secret, the sidecar gets --tls-dir, and the certificate the operator
// issues verifies for every member's DNS name (any ordinal: scaling needs no new one), for
// the client Service's names and for localhost.
func TestTLSObjects(t *testing.T) {
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}, Spec: v1alpha1.EtcdClusterSpec{TLS: &v1alpha1.TLSSpec{Enabled: true}}}
	for _, m := range clusterConfig(ec, 3).Members {
		if !strings.HasPrefix(m.ClientURL, "https://") || !strings.HasPrefix(m.PeerURL, "https://") || !strings.HasPrefix(m.SidecarURL, "https://") {
			t.Errorf("member %s: client %s, peer %s, sidecar %s: want https", m.Name, m.ClientURL, m.PeerURL, m.SidecarURL)
		}
	}
	tpl := statefulSetSpec(ec, "img", 3).Template
	if !slices.ContainsFunc(tpl.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "tls" && v.Secret != nil && v.Secret.SecretName == "c-server-tls"
	}) {
		t.Fatalf("no volume of Secret c-server-tls: %+v", tpl.Spec.Volumes)
	}
	for _, c := range tpl.Spec.Containers {
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "tls" && m.MountPath == TLSMount && m.ReadOnly }) {
			t.Errorf("container %s does not mount the certificate", c.Name)
		}
		if flag := strings.Contains(strings.Join(c.Command, " "), "--tls-dir "+TLSMount); flag != (c.Name == "sidecar") {
			t.Errorf("container %s: --tls-dir %t", c.Name, flag)
		}
	}

	// The user's certificates: the pods mount their Secret, and nothing else changes.
	provided := ec.DeepCopy()
	provided.Spec.TLS.ServerSecret = "users-certs"
	if p := statefulSetSpec(provided, "img", 3).Template; !slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "tls" && v.Secret != nil && v.Secret.SecretName == "users-certs"
	}) || len(p.Spec.Volumes) != len(tpl.Spec.Volumes) || !reflect.DeepEqual(p.Spec.Containers, tpl.Spec.Containers) {
		t.Fatalf("with spec.tls.serverSecret: volumes %+v", p.Spec.Volumes)
	}

	now := time.Now()
	ca, err := pki.NewCA("c-ca", now, pki.CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ca.Issue(serverLeaf(ec), now, pki.LeafValidity)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pki.ParseCerts(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{memberDNS(ec, 0), memberDNS(ec, 8), memberDNS(ec, 1) + ".cluster.local", "c-client", "c-client.ns",
		"c-client.ns.svc", "c-client.ns.svc.cluster.local", "localhost", "127.0.0.1"}
	for _, n := range names {
		if err := certs[0].VerifyHostname(n); err != nil {
			t.Errorf("the members' certificate does not serve %s: %v", n, err)
		}
	}
	for _, n := range []string{"c-0.other-peer.ns.svc", "d-client.ns.svc", "c-0.c-peer.other.svc"} {
		if certs[0].VerifyHostname(n) == nil {
			t.Errorf("the members' certificate serves %s, a name of another cluster", n)
		}
	}

	// The etcd container calls its sidecar over loopback and TLS, verifying the member's name,
	// which the certificate serves; the sidecar's probe stays plain text (an open endpoint).
	etcd, sidecar := tpl.Spec.Containers[0], tpl.Spec.Containers[1]
	cmd := strings.Join(etcd.Command, " ")
	if !strings.Contains(cmd, fmt.Sprintf("--sidecar https://127.0.0.1:%d", SidecarPort)) || !strings.Contains(cmd, "--sidecar-ca "+TLSMount+"/ca.crt") {
		t.Fatalf("the etcd container does not call its sidecar over TLS: %s", cmd)
	}
	name := etcd.Command[slices.Index(etcd.Command, "--sidecar-server-name")+1]
	env := map[string]string{"POD_NAME": memberName(ec, 2), "POD_NAMESPACE": ec.Namespace}
	for _, e := range etcd.Env {
		if _, ok := env[e.Name]; ok && e.ValueFrom != nil {
			name = strings.ReplaceAll(name, "$("+e.Name+")", env[e.Name])
		}
	}
	if err := certs[0].VerifyHostname(name); err != nil || name != memberDNS(ec, 2) {
		t.Fatalf("the etcd container of member 2 verifies its sidecar as %q: %v", name, err)
	}
	if p := sidecar.LivenessProbe.HTTPGet; p == nil || p.Scheme == corev1.URISchemeHTTPS {
		t.Fatalf("the sidecar's liveness probe: %+v; want plain HTTP", p)
	}
}

// TestAuthObjects: with spec.auth the sidecar alone mounts the root password (the generated
// Secret, or the one the spec names) and is given its file, and the etcd container alone
// mounts the token signing key where the sidecar's --token-key-dir says, whence etcd signs
// its tokens (JWT); without, nothing of them.
func TestAuthObjects(t *testing.T) {
	for _, tc := range []struct {
		auth   *v1alpha1.AuthSpec
		secret string
	}{
		{nil, ""},
		{&v1alpha1.AuthSpec{}, ""},
		{&v1alpha1.AuthSpec{Enabled: true}, "c-root-password"},
		{&v1alpha1.AuthSpec{Enabled: true, RootPasswordSecret: "mine"}, "mine"},
	} {
		ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}, Spec: v1alpha1.EtcdClusterSpec{Auth: tc.auth}}
		tpl := statefulSetSpec(ec, "img", 3).Template
		i := slices.IndexFunc(tpl.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "root-password" })
		switch {
		case tc.secret == "" && i >= 0:
			t.Errorf("%+v: a root password volume without authentication", tc.auth)
		case tc.secret != "" && (i < 0 || tpl.Spec.Volumes[i].Secret == nil || tpl.Spec.Volumes[i].Secret.SecretName != tc.secret):
			t.Errorf("%+v: no volume of Secret %s: %+v", tc.auth, tc.secret, tpl.Spec.Volumes)
		}
		for _, c := range tpl.Spec.Containers {
			want := tc.secret != "" && c.Name == "sidecar"
			mounts := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == "root-password" && m.MountPath == RootPasswordMount && m.ReadOnly
			})
			flag := strings.Contains(strings.Join(c.Command, " "), "--root-password-file "+RootPasswordFile)
			if mounts != want || flag != want {
				t.Errorf("%+v: container %s mounts the password %t, has its flag %t; want %t", tc.auth, c.Name, mounts, flag, want)
			}
			mountsKey := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == "token-key" && m.MountPath == TokenKeyMount && m.ReadOnly
			})
			keyFlag := strings.Contains(strings.Join(c.Command, " "), "--token-key-dir "+TokenKeyMount)
			if mountsKey != (tc.secret != "" && c.Name == "etcd") || keyFlag != want {
				t.Errorf("%+v: container %s mounts the token key %t, has --token-key-dir %t", tc.auth, c.Name, mountsKey, keyFlag)
			}
		}
		k := slices.IndexFunc(tpl.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "token-key" })
		switch {
		case tc.secret == "" && k >= 0:
			t.Errorf("%+v: a token key volume without authentication", tc.auth)
		case tc.secret != "":
			if k < 0 || tpl.Spec.Volumes[k].Secret == nil || tpl.Spec.Volumes[k].Secret.SecretName != "c-token-key" {
				t.Fatalf("%+v: no volume of Secret c-token-key: %+v", tc.auth, tpl.Spec.Volumes)
			}
			// The files etcd's auth-token setting names.
			for _, f := range []string{pki.TokenKeyFile, pki.TokenPublicKeyFile} {
				if !slices.Contains(tpl.Spec.Volumes[k].Secret.Items, corev1.KeyToPath{Key: f, Path: f}) {
					t.Errorf("the token key volume has no file %s: %+v", f, tpl.Spec.Volumes[k].Secret.Items)
				}
				if !strings.Contains(etcdproc.JWTAuthToken(TokenKeyMount), TokenKeyMount+"/"+f) {
					t.Errorf("etcd's auth-token %s does not name %s", etcdproc.JWTAuthToken(TokenKeyMount), f)
				}
			}
		}
	}
}

// TestImagePullSecretsReachThePods: spec.imagePullSecrets are the member pods' pull Secrets,
// and a change of them changes the pod template (a rolling update carries it); without them
// the template is what it was.
func TestImagePullSecretsReachThePods(t *testing.T) {
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	plain := statefulSetSpec(ec, "img", 3).Template
	if plain.Spec.ImagePullSecrets != nil {
		t.Fatalf("pull Secrets without spec.imagePullSecrets: %v", plain.Spec.ImagePullSecrets)
	}
	ec.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
	tpl := statefulSetSpec(ec, "img", 3).Template
	if !reflect.DeepEqual(tpl.Spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "registry"}}) {
		t.Errorf("pod pull Secrets %v; want registry", tpl.Spec.ImagePullSecrets)
	}
	if templateHash(tpl) == templateHash(plain) {
		t.Error("spec.imagePullSecrets did not change the pod template")
	}
}

// TestDefaultResources: a container whose resources the spec leaves empty gets the default
// requests, and no limits, only when the cluster's defaults say so (a new cluster); anything
// the spec gives (requests or limits alone) is used as it is.
func TestDefaultResources(t *testing.T) {
	containers := func(ec *v1alpha1.EtcdCluster) (etcd, sidecar corev1.ResourceRequirements) {
		cs := statefulSetSpec(ec, "img", 3).Template.Spec.Containers
		return cs[0].Resources, cs[1].Resources
	}
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	for _, d := range []*v1alpha1.ClusterDefaults{nil, {TLS: true, Auth: true}} {
		ec.Status.Defaults = d
		if e, s := containers(ec); !reflect.DeepEqual(e, corev1.ResourceRequirements{}) || !reflect.DeepEqual(s, corev1.ResourceRequirements{}) {
			t.Errorf("defaults %+v (an existing cluster): etcd %v, sidecar %v; want nothing added", d, e, s)
		}
	}
	ec.Status.Defaults = &v1alpha1.ClusterDefaults{Resources: true}
	e, s := containers(ec)
	if e.Limits != nil || e.Requests.Cpu().String() != "100m" || e.Requests.Memory().String() != "256Mi" {
		t.Errorf("etcd of a new cluster: %v; want requests cpu 100m, memory 256Mi and no limits", e)
	}
	if s.Limits != nil || s.Requests.Cpu().String() != "50m" || s.Requests.Memory().String() != "128Mi" {
		t.Errorf("sidecar of a new cluster: %v; want requests cpu 50m, memory 128Mi and no limits", s)
	}
	limits := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	requests := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	ec.Spec.Resources, ec.Spec.SidecarResources = limits, requests
	if e, s := containers(ec); !reflect.DeepEqual(e, limits) || !reflect.DeepEqual(s, requests) {
		t.Errorf("the spec's resources: etcd %v, sidecar %v; want them as given", e, s)
	}
}

// TestServiceAccountAnnotations: the annotations spec.serviceAccount asks for are set, the
// keys the operator set before and the spec dropped are removed, others' are kept, and the
// record of the operator's keys goes with the last of them.
func TestServiceAccountAnnotations(t *testing.T) {
	const role, gsa = "eks.amazonaws.com/role-arn", "iam.gke.io/gcp-service-account"
	cases := []struct {
		name          string
		current, want map[string]string
		result        map[string]string
	}{
		{"none asked, none there", nil, nil, nil},
		{"others' kept when none asked", map[string]string{"team": "a"}, nil, map[string]string{"team": "a"}},
		{"set", map[string]string{"team": "a"}, map[string]string{role: "r1", gsa: "g"},
			map[string]string{"team": "a", role: "r1", gsa: "g", annotationManagedAnnotations: role + "," + gsa}},
		{"changed and dropped",
			map[string]string{"team": "a", role: "r1", gsa: "g", annotationManagedAnnotations: role + "," + gsa},
			map[string]string{role: "r2"},
			map[string]string{"team": "a", role: "r2", annotationManagedAnnotations: role}},
		{"all dropped", map[string]string{"team": "a", role: "r2", annotationManagedAnnotations: role}, nil, map[string]string{"team": "a"}},
		{"a key of others' asked for becomes the operator's", map[string]string{role: "theirs"}, map[string]string{role: "r1"},
			map[string]string{role: "r1", annotationManagedAnnotations: role}},
		{"others' keys kept as the operator's all go", map[string]string{gsa: "theirs", role: "r1", annotationManagedAnnotations: role},
			map[string]string{}, map[string]string{gsa: "theirs"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := serviceAccountAnnotations(tc.current, tc.want); !reflect.DeepEqual(got, tc.result) {
				t.Fatalf("got %v; want %v", got, tc.result)
			}
		})
	}
}

// TestServiceAccountAnnotationsRollThePods: the annotations spec.serviceAccount sets change
// the pod template (a workload identity may reach a pod only when it is created); none leave
// it as it was.
func TestServiceAccountAnnotationsRollThePods(t *testing.T) {
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	template := func() string { return templateHash(statefulSetSpec(ec, "img", 3).Template) }
	base := template()
	if ec.Spec.ServiceAccount.Annotations = map[string]string{}; template() != base {
		t.Error("empty spec.serviceAccount.annotations changed the pod template")
	}
	ec.Spec.ServiceAccount.Annotations = map[string]string{"eks.amazonaws.com/role-arn": "r1"}
	r1 := template()
	if r1 == base {
		t.Error("spec.serviceAccount.annotations did not change the pod template")
	}
	if ec.Spec.ServiceAccount.Annotations["eks.amazonaws.com/role-arn"] = "r2"; template() == r1 {
		t.Error("another role did not change the pod template")
	}
}
