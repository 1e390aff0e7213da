package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/etcd-steward/steward/internal/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestKubectlPlugin runs the plugin's verbs against a real API server, with the objects the
// operator and the members would have written: what each prints, creates, changes and
// refuses.
func TestKubectlPlugin(t *testing.T) {
	api, err := testutil.StartAPIServer()
	if errors.Is(err, testutil.ErrNoKubeTools) {
		if os.Getenv("STEWARD_REQUIRE_TOOLS") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Stop)
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(api.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "plugin"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, error) {
		cmd := newKubectlCommand("kubectl-steward")
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"--kubeconfig", api.Kubeconfig, "-n", ns}, args...))
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	labels := map[string]string{v1alpha1.LabelCluster: "main"}
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "main"},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: 3, Backup: &v1alpha1.BackupSpec{Store: "s3://bucket/main"}}}
	must(c.Create(ctx, ec))
	now := time.Now()
	ec.Status = v1alpha1.EtcdClusterStatus{ClusterID: "c0ffee", ReadyReplicas: 3, Leader: "main-0", Revision: 42,
		Conditions:       []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AllGood", Message: "serving", LastTransitionTime: metav1.Now()}},
		LastFullSnapshot: &v1alpha1.SnapshotRef{Revision: 40, Time: metav1.NewTime(now.Add(-time.Minute))},
		Recoverability: &v1alpha1.Recoverability{Timeline: 2, ClusterID: "c0ffee", FirstRevision: 7, FirstTime: &metav1.Time{Time: time.Date(2026, 11, 1, 0, 0, 1, 0, time.UTC)},
			LastRevision: 42, LastTime: &metav1.Time{Time: time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)}}}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("main-%d", i)
		ec.Status.Members = append(ec.Status.Members, v1alpha1.MemberStatus{Name: name, ID: fmt.Sprintf("a%d", i), Role: "follower", Status: "Ready", LastTransitionTime: metav1.Now()})
		em := &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
		must(c.Create(ctx, em))
		em.Status.Report = &runtime.RawExtension{Raw: []byte(fmt.Sprintf(`{"name":%q,"at":%q,"serving":true,"revision":%d,"lastIndex":%d}`,
			name, now.Format(time.RFC3339Nano), 40+i, 100+i))}
		must(c.Status().Update(ctx, em))
	}
	must(c.Status().Update(ctx, ec))
	must(c.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "main.1"}, Type: "Normal", Reason: "ScalingUp",
		Message: "member main-2 added", InvolvedObject: corev1.ObjectReference{Kind: "EtcdCluster", Namespace: ns, Name: "main"}, LastTimestamp: metav1.Now()}))
	must(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "main-root-password", Labels: labels},
		Data: map[string][]byte{"password": []byte("hunter2-secret-value")}}))

	t.Run("status", func(t *testing.T) {
		out, err := run("status", "main", "-o", "json")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var st clusterStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status -o json: %v\n%s", err, out)
		}
		if st.ClusterID != "c0ffee" || st.Ready != 3 || len(st.Members) != 3 || st.Members[2].Revision != 42 || st.Members[2].LastIndex != 102 ||
			!st.Members[1].Serving || st.Backup == nil || st.Backup.LastFullRev != 40 || st.Backup.Recoverable == nil || st.Backup.Recoverable.FirstRevision != 7 ||
			len(st.Events) != 1 || st.Events[0].Reason != "ScalingUp" {
			t.Errorf("status: %+v", st)
		}
		table, err := run("status", "main")
		if err != nil || !strings.Contains(table, "main-2") || !strings.Contains(table, "ScalingUp") || !strings.Contains(table, "s3://bucket/main") ||
			!strings.Contains(table, "revisions 7-42 of timeline 2, 2026-11-01T00:00:01Z to 2026-11-27T06:00:00Z") {
			t.Errorf("status table (%v):\n%s", err, table)
		}
		if _, err := run("status", "nope"); err == nil || !strings.Contains(err.Error(), "no EtcdCluster nope in namespace plugin") {
			t.Errorf("status of a cluster that does not exist: %v", err)
		}
	})

	t.Run("backup", func(t *testing.T) {
		// Play the operator: complete the backup the plugin creates.
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = testutil.Poll(30*time.Second, 100*time.Millisecond, func() error {
				var list v1alpha1.EtcdBackupList
				if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) == 0 {
					return fmt.Errorf("no EtcdBackup yet")
				}
				eb := list.Items[0]
				eb.Status = v1alpha1.EtcdBackupStatus{Phase: v1alpha1.BackupCompleted, Revision: 42, Size: 4096, Key: "full/42"}
				return c.Status().Update(ctx, &eb)
			})
		}()
		out, err := run("backup", "main", "--wait", "30s")
		<-done
		if err != nil || !strings.Contains(out, "completed: revision 42, 4096 bytes, full/42") {
			t.Errorf("backup (%v):\n%s", err, out)
		}
		var list v1alpha1.EtcdBackupList
		must(c.List(ctx, &list, client.InNamespace(ns)))
		if len(list.Items) != 1 || list.Items[0].Spec.Cluster != "main" {
			t.Errorf("EtcdBackups: %+v", list.Items)
		}
		must(c.Create(ctx, &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nobackup"}, Spec: v1alpha1.EtcdClusterSpec{Replicas: 1}}))
		if _, err := run("backup", "nobackup"); err == nil || !strings.Contains(err.Error(), "has no spec.backup") {
			t.Errorf("backup of a cluster without a store: %v", err)
		}
	})

	t.Run("restore", func(t *testing.T) {
		if _, err := run("restore", "main", "--to-revision", "5", "--to-time", "2026-11-27T10:00:00Z"); err == nil || !strings.Contains(err.Error(), "give one") {
			t.Errorf("two targets: %v", err)
		}
		if _, err := run("restore", "main", "--to-time", "yesterday"); err == nil || !strings.Contains(err.Error(), "RFC 3339") {
			t.Errorf("a bad time: %v", err)
		}
		var before v1alpha1.EtcdRestoreList
		must(c.List(ctx, &before, client.InNamespace(ns)))
		if len(before.Items) != 0 {
			t.Fatalf("a refused restore created %d EtcdRestores", len(before.Items))
		}
		out, err := run("restore", "main", "--to-revision", "5", "--wait", "0")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var list v1alpha1.EtcdRestoreList
		must(c.List(ctx, &list, client.InNamespace(ns)))
		if len(list.Items) != 1 || list.Items[0].Spec.Cluster != "main" || list.Items[0].Spec.Revision == nil || *list.Items[0].Spec.Revision != 5 {
			t.Errorf("EtcdRestores: %+v", list.Items)
		}
	})

	t.Run("hibernate", func(t *testing.T) {
		for _, c2 := range []struct{ arg, want string }{{"on", "true"}, {"off", ""}} {
			if out, err := run("hibernate", "main", c2.arg); err != nil {
				t.Fatalf("hibernate %s: %v\n%s", c2.arg, err, out)
			}
			var got v1alpha1.EtcdCluster
			must(c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "main"}, &got))
			if got.Annotations[v1alpha1.AnnotationHibernate] != c2.want {
				t.Errorf("hibernate %s: annotation %q, want %q", c2.arg, got.Annotations[v1alpha1.AnnotationHibernate], c2.want)
			}
		}
		if _, err := run("hibernate", "main", "maybe"); err == nil {
			t.Error("hibernate maybe: accepted")
		}
	})

	t.Run("destroy", func(t *testing.T) {
		owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "main", UID: "sts-uid", Controller: ptrTo(true)}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "main-1", Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Image: "steward"}}}}
		stranger := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-1"}, Spec: pod.Spec}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-main-1", Labels: labels},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		for _, o := range []client.Object{pod, stranger, pvc} {
			must(c.Create(ctx, o))
		}
		if _, err := run("destroy", "web-1", "--yes"); err == nil || !strings.Contains(err.Error(), "not a member of a Steward cluster") {
			t.Errorf("destroy of a pod not Steward's: %v", err)
		}
		if _, err := run("destroy", "main-1"); err == nil || !strings.Contains(err.Error(), "add --yes") {
			t.Errorf("destroy without --yes: %v", err)
		}
		for _, o := range []client.Object{stranger, pod, pvc} {
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil || o.GetDeletionTimestamp() != nil {
				t.Fatalf("%s deleted by a refused destroy (%v)", o.GetName(), err)
			}
		}
		if out, err := run("destroy", "main-1", "--yes"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, o := range []client.Object{pod, pvc} {
			// Gone, or going (the volume waits for its protection finalizer).
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) && o.GetDeletionTimestamp() == nil {
				t.Errorf("%s not deleted (%v)", o.GetName(), err)
			}
		}
	})

	t.Run("report", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "r.tar.gz")
		if out, err := run("report", "main", "-f", file); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		files := readTarball(t, file)
		for _, want := range []string{"etcdcluster.yaml", "etcdmembers.yaml", "events.yaml", "statefulsets.yaml", "secrets.txt"} {
			if _, ok := files[want]; !ok {
				t.Errorf("the report lacks %s (has %v)", want, keys(files))
			}
		}
		if !strings.Contains(files["etcdmembers.yaml"], `lastIndex`) {
			t.Errorf("the members' reports are not in the report:\n%s", files["etcdmembers.yaml"])
		}
		if !strings.Contains(files["secrets.txt"], "main-root-password: keys password") {
			t.Errorf("secrets.txt: %q", files["secrets.txt"])
		}
		for name, data := range files {
			if strings.Contains(data, "hunter2-secret-value") {
				t.Errorf("%s holds a secret's value", name)
			}
		}
		if _, err := run("report", "main", "-f", file); err == nil {
			t.Error("a second report overwrote the first")
		}
	})
}

func ptrTo[T any](v T) *T { return &v }

func readTarball(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = string(data)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
