package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// operatorLog holds everything the suite's operator logs at debug level and above.
var operatorLog = &syncBuffer{}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// errorLines passes on only the operator's error lines (JSON, one entry per write).
type errorLines struct{ w io.Writer }

func (e errorLines) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"level":"error"`)) {
		return e.w.Write(p)
	}
	return len(p), nil
}

// TestSecretsStayOutOfKubernetes: a cluster with TLS and etcd authentication whose backups need store credentials
// from a Secret, with its sidecar API token Secret; an EtcdBackup that fails, and an EtcdRestore
// refused by the store, which the members' sidecar checks with the credentials' values. None of the
// secret values appears in any Event (both APIs), any Steward object, the StatefulSet,
// ConfigMaps or Pods (nor any TLS private key or the root password), the operator's log at debug level, or its metrics.
func TestSecretsStayOutOfKubernetes(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	s3 := testutil.FakeS3(t, "bk")
	const s3Secret = "S3-secret-9f2c7e1a4b6d8e0f"
	if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "store-creds"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "steward", "AWS_SECRET_ACCESS_KEY": s3Secret}}); err != nil {
		t.Fatal(err)
	}
	ec := newCluster(ns, "sg", 3)
	ec.Spec.Backup = &v1alpha1.BackupSpec{Store: s3.StoreURL("bk", "sg"), CredentialsSecret: &corev1.LocalObjectReference{Name: "store-creds"}}
	ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true}
	ec.Spec.Auth = &v1alpha1.AuthSpec{Enabled: true}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ns, "sg", &appsv1.StatefulSet{}) })
	waitReady(t, ns, "sg", 3)
	var tokenSecret corev1.Secret
	testutil.Eventually(t, 20*time.Second, "token Secret", func() error { return get(t, ns, v1alpha1.SidecarTokenSecretName("sg"), &tokenSecret) })
	token := strings.TrimSpace(string(tokenSecret.Data[v1alpha1.SidecarTokenKey]))
	var rootSecret corev1.Secret
	testutil.Eventually(t, 20*time.Second, "root password Secret", func() error { return get(t, ns, v1alpha1.RootPasswordSecretName("sg"), &rootSecret) })
	secrets := map[string]string{"the S3 secret key": s3Secret, "the sidecar API token": token,
		"etcd's root password": strings.TrimSpace(string(rootSecret.Data[v1alpha1.RootPasswordKey]))}
	for _, name := range []string{"sg-ca", "sg-server-tls", "sg-client-tls"} {
		var s corev1.Secret
		testutil.Eventually(t, 20*time.Second, "Secret "+name, func() error { return get(t, ns, name, &s) })
		// A line of the key's PEM body: found in any output that holds the key, escaped or not.
		secrets["the private key of "+name] = strings.Split(string(s.Data["tls.key"]), "\n")[1]
	}

	// A full snapshot the sidecars refuse (no result set for the namespace yet).
	if err := k8s.Create(ctx, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fails"}, Spec: v1alpha1.EtcdBackupSpec{Cluster: "sg"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "EtcdBackup fails", func() error {
		var b v1alpha1.EtcdBackup
		if err := get(t, ns, "fails", &b); err != nil {
			return err
		}
		if b.Status.Phase != v1alpha1.BackupFailed {
			return fmt.Errorf("status %+v", b.Status)
		}
		return nil
	})

	// A restore whose target the members' sidecar checks against the store; the store is down.
	sidecars.setStore(ns, ec.Spec.Backup.Store)
	sidecars.set(ns, snapshotter.FullResult{Key: "v1/timeline/1/full/00000000000000000500.snap.zst", Timeline: 1, Revision: 500})
	renew(t, ns, "sg-delta-snapshot", "500")
	s3.SetDown(true)
	if err := k8s.Create(ctx, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "refused"}, Spec: v1alpha1.EtcdRestoreSpec{Cluster: "sg"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "EtcdRestore refused by the store", func() error {
		membersRenewing(t, ns, "sg", all, all)
		er := getRestore(t, ns, "refused")
		if er.Status.Phase != v1alpha1.RestoreFailed || !strings.Contains(er.Status.Message, "cannot give the target") {
			return fmt.Errorf("%s: %s", er.Status.Phase, er.Status.Message)
		}
		return nil
	})

	outputs := map[string]string{"the operator's log": operatorLog.String()}
	for what, list := range map[string]client.ObjectList{
		"Events": &corev1.EventList{}, "events.k8s.io Events": &eventsv1.EventList{},
		"EtcdClusters": &v1alpha1.EtcdClusterList{}, "EtcdMembers": &v1alpha1.EtcdMemberList{},
		"EtcdBackups": &v1alpha1.EtcdBackupList{}, "EtcdRestores": &v1alpha1.EtcdRestoreList{},
		"StatefulSets": &appsv1.StatefulSetList{}, "ConfigMaps": &corev1.ConfigMapList{}, "Pods": &corev1.PodList{},
	} {
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		outputs[what] = string(b)
	}
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var m strings.Builder
	for _, f := range families {
		m.WriteString(f.String())
	}
	outputs["the operator's metrics"] = m.String()
	if !strings.Contains(outputs["EtcdRestores"], "cannot give the target") || !strings.Contains(outputs["the operator's log"], ns) {
		t.Fatalf("the outputs do not hold the scenario: restores %s", outputs["EtcdRestores"])
	}
	for what, out := range outputs {
		for name, value := range secrets {
			if strings.Contains(out, value) {
				t.Errorf("%s holds %s", what, name)
			}
		}
	}
}
