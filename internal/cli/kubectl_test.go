package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/maintenance"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/etcd-steward/steward/internal/pki"
	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/etcd-steward/steward/internal/units"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
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
	// tunnel stands in for the port-forward to member pods (no kubelet runs here); the
	// subtests that reach etcd set it.
	var tunnel tunnel
	run := func(args ...string) (string, error) {
		cmd := newKubectlTree("kubectl-steward", &kubeFlags{tunnel: func(ctx context.Context, pod string, port int) (net.Conn, error) {
			if tunnel == nil {
				return nil, fmt.Errorf("no tunnel to pod %s in this test", pod)
			}
			return tunnel(ctx, pod, port)
		}})
		var out, progress bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&progress) // -o json stays parseable
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

	t.Run("status of fenced members", func(t *testing.T) {
		// main-2's fence is in force, main-1's asked for but not applied (refused, or
		// suspended while a recovery runs); put back as it was for the subtests after.
		fenced := &v1alpha1.EtcdCluster{}
		must(c.Get(ctx, client.ObjectKeyFromObject(ec), fenced))
		before := fenced.DeepCopy()
		fenced.Annotations = map[string]string{v1alpha1.AnnotationFencedMembers: "main-1,main-2"}
		must(c.Update(ctx, fenced))
		fenced.Status.FencedMembers = []string{"main-2"}
		fenced.Status.Members[2].Status, fenced.Status.Members[2].Reason = v1alpha1.MemberNotReady, v1alpha1.ReasonFenced
		must(c.Status().Update(ctx, fenced))
		t.Cleanup(func() {
			fenced.Annotations, fenced.Status = before.Annotations, before.Status
			must(c.Update(ctx, fenced))
			must(c.Status().Update(ctx, fenced))
		})
		out, err := run("status", "main", "-o", "json")
		var st clusterStatus
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("status -o json (%v):\n%s", err, out)
		}
		if !slices.Equal(st.Fenced, []string{"main-2"}) || !slices.Equal(st.FenceAsked, []string{"main-1", "main-2"}) || !st.Members[2].Fenced || st.Members[1].Fenced {
			t.Errorf("fenced %v, asked %v, members %+v: want main-2 fenced, main-1 asked for only", st.Fenced, st.FenceAsked, st.Members)
		}
		table, err := run("status", "main")
		if err != nil || !strings.Contains(table, "main-2; asked for but not in force: main-1") || !regexp.MustCompile(`main-2 +a2 +follower +NotReady \(Fenced\) +true`).MatchString(table) {
			t.Errorf("status table (%v):\n%s", err, table)
		}
	})

	t.Run("backup", func(t *testing.T) {
		// Play the operator: complete the backup the plugin creates, in 90s.
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = testutil.Poll(30*time.Second, 100*time.Millisecond, func() error {
				var list v1alpha1.EtcdBackupList
				if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) == 0 {
					return fmt.Errorf("no EtcdBackup yet")
				}
				eb := list.Items[0]
				start := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
				end := metav1.NewTime(start.Add(90 * time.Second))
				eb.Status = v1alpha1.EtcdBackupStatus{Phase: v1alpha1.BackupCompleted, Revision: 42, Size: 4096, Key: "full/42", StartTime: &start, EndTime: &end}
				return c.Status().Update(ctx, &eb)
			})
		}()
		out, err := run("backup", "main", "--wait", "30s", "-o", "json")
		<-done
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var res backupResult
		if err := json.Unmarshal([]byte(out), &res); err != nil || !strings.Contains(out, `"took": "1m30s"`) {
			t.Fatalf("backup -o json (%v), want the result alone, its duration a string:\n%s", err, out)
		}
		var list v1alpha1.EtcdBackupList
		must(c.List(ctx, &list, client.InNamespace(ns)))
		if len(list.Items) != 1 || list.Items[0].Spec.Cluster != "main" {
			t.Fatalf("EtcdBackups: %+v", list.Items)
		}
		want := backupResult{Cluster: "main", Backup: list.Items[0].Name, Phase: v1alpha1.BackupCompleted, Revision: 42, Size: 4096, Key: "full/42", Took: units.Duration(90 * time.Second)}
		if res != want {
			t.Errorf("backup -o json: %+v, want %+v", res, want)
		}
		table, err := run("backup", "main", "--wait", "0")
		if err != nil || !regexp.MustCompile(`(?m)^main\s+main-\w+\s+-\s+-\s+-\s+-\s+-$`).MatchString(table) {
			t.Errorf("backup --wait 0 (%v): want a row of the backup just created, nothing known of it yet:\n%s", err, table)
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
		// Play the operator: the restore succeeds at the revision asked for.
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = testutil.Poll(30*time.Second, 100*time.Millisecond, func() error {
				var list v1alpha1.EtcdRestoreList
				if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) == 0 {
					return fmt.Errorf("no EtcdRestore yet")
				}
				er := list.Items[0]
				er.Status = v1alpha1.EtcdRestoreStatus{Phase: v1alpha1.RestoreSucceeded, Target: &v1alpha1.RestoreTargetStatus{Revision: 5, Timeline: 2}, RestoredRevision: 5,
					Conditions: []metav1.Condition{{Type: "Restored", Status: metav1.ConditionTrue, Reason: "Done", Message: "every member rejoined", LastTransitionTime: metav1.Now()}}}
				return c.Status().Update(ctx, &er)
			})
		}()
		out, err := run("restore", "main", "--to-revision", "5", "--wait", "30s", "-o", "json")
		<-done
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var list v1alpha1.EtcdRestoreList
		must(c.List(ctx, &list, client.InNamespace(ns)))
		if len(list.Items) != 1 || list.Items[0].Spec.Cluster != "main" || list.Items[0].Spec.Revision == nil || *list.Items[0].Spec.Revision != 5 {
			t.Fatalf("EtcdRestores: %+v", list.Items)
		}
		var res restoreResult
		mustIn(t, json.Unmarshal([]byte(out), &res))
		want := restoreResult{Cluster: "main", Restore: list.Items[0].Name, Phase: v1alpha1.RestoreSucceeded, Timeline: 2, Target: 5, Restored: 5, Message: "every member rejoined"}
		if res != want {
			t.Errorf("restore -o json: %+v, want %+v", res, want)
		}
	})

	t.Run("restore --dry-run and --into", func(t *testing.T) {
		var main v1alpha1.EtcdCluster
		must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "main"}, &main))
		before := main.Status
		t.Cleanup(func() {
			must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "main"}, &main))
			main.Status = before
			must(c.Status().Update(ctx, &main))
		})
		first, last := metav1.NewTime(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)), metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
		main.Status.Revision = 130
		main.Status.Recoverability = &v1alpha1.Recoverability{Timeline: 3, FirstRevision: 20, FirstTime: &first, LastRevision: 120, LastTime: &last}
		must(c.Status().Update(ctx, &main))
		var restoresBefore v1alpha1.EtcdRestoreList
		must(c.List(ctx, &restoresBefore, client.InNamespace(ns)))

		out, err := run("restore", "main", "--to-revision", "100", "--dry-run", "-o", "json")
		var plan restorePlan
		if err != nil || json.Unmarshal([]byte(out), &plan) != nil {
			t.Fatalf("dry run in the window (%v):\n%s", err, out)
		}
		if plan.Dropped != 30 || plan.Revision != 130 || !strings.Contains(plan.Verdict, "every write after revision 100 would be dropped (at least 30 revisions") {
			t.Errorf("dry run: %+v", plan)
		}
		if out, err := run("restore", "main", "--to-revision", "7", "--dry-run"); err == nil || !strings.Contains(err.Error(), "revision 7 is before the recoverable revisions 20-120") ||
			!strings.Contains(out, "refused") {
			t.Errorf("dry run before the window: %v\n%s", err, out)
		}
		// Past the window the status last recorded, not past the cluster: the backups taken
		// since may hold it.
		out, err = run("restore", "main", "--to-revision", "125", "--dry-run", "-o", "json")
		if err != nil || json.Unmarshal([]byte(out), &plan) != nil || plan.Dropped != 5 || !strings.Contains(plan.Verdict, "the operator checks it against the store") {
			t.Errorf("dry run past the recorded window (%v): %+v", err, plan)
		}
		if _, err := run("restore", "main", "--to-time", "2026-11-27T08:00:00Z", "--dry-run"); err == nil || !strings.Contains(err.Error(), "before the recoverable") {
			t.Errorf("dry run before the window: %v", err)
		}
		var restoresAfter v1alpha1.EtcdRestoreList
		must(c.List(ctx, &restoresAfter, client.InNamespace(ns)))
		if len(restoresAfter.Items) != len(restoresBefore.Items) {
			t.Errorf("a dry run created an EtcdRestore")
		}

		out, err = run("restore", "main", "--to-revision", "100", "--into", "copy", "--wait", "0", "-o", "json")
		if err != nil {
			t.Fatalf("restore --into (%v):\n%s", err, out)
		}
		var copyEC v1alpha1.EtcdCluster
		must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "copy"}, &copyEC))
		r := copyEC.Spec.Bootstrap
		if copyEC.Spec.Backup != nil || r == nil || r.Restore == nil || r.Restore.Store != main.Spec.Backup.Store || r.Restore.Revision == nil || *r.Restore.Revision != 100 ||
			r.Restore.Timeline == nil || *r.Restore.Timeline != 3 || copyEC.Spec.Replicas != main.Spec.Replicas {
			t.Errorf("the new cluster's spec: %+v, bootstrap %+v", copyEC.Spec, r)
		}
		if _, err := run("restore", "main", "--into", "copy", "--wait", "0"); err == nil || !strings.Contains(err.Error(), "exists already") {
			t.Errorf("restore --into an existing name: %v", err)
		}
	})

	t.Run("live figures", func(t *testing.T) {
		// The status's figures are as of its last write (at most an hour behind on a cluster
		// at rest): revision 130, no delta snapshot. The members report 140-142 of the
		// cluster's ID, and the backup leader's Leases publish a full snapshot at 135 and a
		// delta at 141.
		var main v1alpha1.EtcdCluster
		must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "main"}, &main))
		before := main.Status
		main.Status.Revision = 130
		main.Status.Recoverability = &v1alpha1.Recoverability{Timeline: 3, ClusterID: "c0ffee", FirstRevision: 20, LastRevision: 120}
		must(c.Status().Update(ctx, &main))
		owner := *metav1.NewControllerRef(&main, v1alpha1.GroupVersion.WithKind("EtcdCluster"))
		renewed := metav1.NewMicroTime(time.Now().Add(-2 * time.Second))
		for name, rev := range map[string]string{v1alpha1.FullSnapshotLeaseName("main"): "135", v1alpha1.DeltaSnapshotLeaseName("main"): "141"} {
			must(c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: []metav1.OwnerReference{owner}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &rev, RenewTime: &renewed}}))
		}
		setReports := func(clusterID string, base int) {
			for i := 0; i < 3; i++ {
				var em v1alpha1.EtcdMember
				must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("main-%d", i)}, &em))
				em.Status.Report = &runtime.RawExtension{Raw: []byte(fmt.Sprintf(`{"name":"main-%d","clusterID":%q,"at":%q,"serving":true,"revision":%d,"lastIndex":%d}`,
					i, clusterID, time.Now().Format(time.RFC3339Nano), base+i, 100+i))}
				must(c.Status().Update(ctx, &em))
			}
		}
		setReports("c0ffee", 140)
		t.Cleanup(func() {
			setReports("", 40)
			for _, name := range []string{v1alpha1.FullSnapshotLeaseName("main"), v1alpha1.DeltaSnapshotLeaseName("main")} {
				must(c.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
			}
			must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "main"}, &main))
			main.Status = before
			must(c.Status().Update(ctx, &main))
		})

		out, err := run("status", "main", "-o", "json")
		var st clusterStatus
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("status -o json (%v):\n%s", err, out)
		}
		if st.Revision != 142 || st.RevisionFrom != "live, from the members' reports" || st.Backup == nil || st.Backup.LastDeltaRev != 141 || st.Backup.LastFullRev != 135 ||
			st.Backup.From != "live, from the snapshot Leases" || st.Backup.LastBackupAge == "" || !strings.HasPrefix(st.Backup.RecoverableFrom, "from the status, as of ") || len(st.Unread) != 0 {
			t.Errorf("status: revision %d (%s), unread %v, backup %+v; want 142 and the snapshots at 135 and 141, live", st.Revision, st.RevisionFrom, st.Unread, st.Backup)
		}
		table, err := run("status", "main")
		if err != nil || !strings.Contains(table, "142 (live, from the members' reports)") || !strings.Contains(table, "revision 141 at") ||
			!regexp.MustCompile(`last backup +\d+s ago \(live, from the snapshot Leases\)`).MatchString(table) {
			t.Errorf("status table (%v):\n%s", err, table)
		}
		out, err = run("restore", "main", "--to-revision", "100", "--dry-run", "-o", "json")
		var plan restorePlan
		if err != nil || json.Unmarshal([]byte(out), &plan) != nil || plan.Revision != 142 || plan.Dropped != 42 ||
			!strings.Contains(plan.Verdict, "at least 42 revisions: the cluster's revision is 142, live, from the members' reports") {
			t.Errorf("dry run (%v): %+v; want 42 dropped from the live revision 142", err, plan)
		}
		out, err = run("restore", "main", "--to-revision", "138", "--dry-run", "-o", "json")
		if err != nil || json.Unmarshal([]byte(out), &plan) != nil || !strings.Contains(plan.Verdict, "the snapshot Leases say they hold revision 141 by now") {
			t.Errorf("dry run past the recorded window (%v): %+v", err, plan)
		}

		// A user who may read the cluster, its EtcdMembers and Events but not Leases gets the
		// status's snapshots, labelled with the time of the status's last write.
		user, err := api.Env.ControlPlane.AddUser(envtest.User{Name: "viewer"}, nil)
		must(err)
		kc, err := user.KubeConfig()
		must(err)
		viewer := filepath.Join(t.TempDir(), "viewer.kubeconfig")
		must(os.WriteFile(viewer, kc, 0o600))
		must(c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "viewer"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"etcdclusters", "etcdmembers"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}}}}))
		must(c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "viewer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "viewer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "viewer"}}}))
		out, err = run("status", "main", "-o", "json", "--kubeconfig", viewer)
		st = clusterStatus{}
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("status as a user without Leases (%v):\n%s", err, out)
		}
		if st.Revision != 142 || st.Backup == nil || st.Backup.LastDelta != nil || st.Backup.LastFullRev != 40 || st.StatusWritten == nil ||
			!strings.HasPrefix(st.Backup.From, "from the status, as of "+st.StatusWritten.UTC().Format(time.RFC3339)) ||
			len(st.Unread) != 1 || !strings.Contains(st.Unread[0], "snapshot Leases of plugin/main") {
			t.Errorf("status without Leases: revision %d, written %v, unread %v, backup %+v; want the status's full snapshot at 40, as of its last write", st.Revision, st.StatusWritten, st.Unread, st.Backup)
		}
		table, err = run("status", "main", "--kubeconfig", viewer)
		if err != nil || !regexp.MustCompile(`last backup +\S+ ago \(from the status, as of \d{4}-\d\d-\d\dT`).MatchString(table) || !strings.Contains(table, "not read") {
			t.Errorf("status table without Leases (%v):\n%s", err, table)
		}
	})

	t.Run("hibernate", func(t *testing.T) {
		for _, c2 := range []struct{ arg, want string }{{"on", "true"}, {"off", ""}} {
			out, err := run("hibernate", "main", c2.arg, "-o", "json")
			if err != nil {
				t.Fatalf("hibernate %s: %v\n%s", c2.arg, err, out)
			}
			var res hibernation
			mustIn(t, json.Unmarshal([]byte(out), &res))
			if res.Cluster != "main" || res.Hibernate != (c2.arg == "on") || !strings.Contains(res.Next, v1alpha1.AnnotationHibernate) {
				t.Errorf("hibernate %s -o json: %+v", c2.arg, res)
			}
			var got v1alpha1.EtcdCluster
			must(c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "main"}, &got))
			if got.Annotations[v1alpha1.AnnotationHibernate] != c2.want {
				t.Errorf("hibernate %s: annotation %q, want %q", c2.arg, got.Annotations[v1alpha1.AnnotationHibernate], c2.want)
			}
		}
		if out, err := run("hibernate", "main", "off"); err != nil || !regexp.MustCompile(`(?m)^main\s+off\s+the members start`).MatchString(out) {
			t.Errorf("hibernate main off (%v):\n%s", err, out)
		}
		if _, err := run("hibernate", "main", "maybe"); err == nil {
			t.Error("hibernate maybe: accepted")
		}
	})

	t.Run("fence", func(t *testing.T) {
		fencedNow := func() string {
			var got v1alpha1.EtcdCluster
			must(c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "main"}, &got))
			return got.Annotations[v1alpha1.AnnotationFencedMembers]
		}
		out, err := run("fence", "main-2", "-o", "json")
		if err != nil {
			t.Fatalf("fence main-2: %v\n%s", err, out)
		}
		var res fenceChange
		if err := json.Unmarshal([]byte(out), &res); err != nil || !res.Fenced || !res.Changed || !slices.Equal(res.All, []string{"main-2"}) {
			t.Errorf("fence main-2 -o json (%v): %s", err, out)
		}
		if got := fencedNow(); got != "main-2" {
			t.Errorf("fence main-2: annotation %q", got)
		}
		// Of three members, one more fenced would leave one Ready voter: refused, nothing written.
		if _, err := run("fence", "main-1"); err == nil || !strings.Contains(err.Error(), "fencing main-1 would leave 1 Ready voters unfenced, fewer than the quorum of 2 of 3 members") {
			t.Errorf("fence main-1 past the quorum: %v", err)
		}
		if _, err := run("fence", "main-7"); err == nil || !strings.Contains(err.Error(), "has no member main-7: its members are main-0, main-1, main-2") {
			t.Errorf("fence of no member: %v", err)
		}
		if _, err := run("fence", "main"); err == nil || !strings.Contains(err.Error(), "<cluster>-<ordinal>") {
			t.Errorf("fence of a cluster's name: %v", err)
		}
		if got := fencedNow(); got != "main-2" {
			t.Errorf("refused fences changed the annotation: %q", got)
		}
		if out, err := run("unfence", "main-2"); err != nil || !strings.Contains(out, "unfenced") {
			t.Errorf("unfence main-2 (%v):\n%s", err, out)
		}
		if got := fencedNow(); got != "" {
			t.Errorf("unfence main-2: annotation %q", got)
		}
		if out, err := run("unfence", "main-2"); err != nil || !strings.Contains(out, "already unfenced") {
			t.Errorf("unfence of a member not fenced (%v):\n%s", err, out)
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
		if _, err := run("destroy", "main-1", "--yes", "-o", "yaml"); err == nil || !strings.Contains(err.Error(), "unknown output format") {
			t.Errorf("destroy -o yaml: %v", err)
		}
		for _, o := range []client.Object{stranger, pod, pvc} {
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil || o.GetDeletionTimestamp() != nil {
				t.Fatalf("%s deleted by a refused destroy (%v)", o.GetName(), err)
			}
		}
		out, err := run("destroy", "main-1", "--yes", "-o", "json")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var res destroyedMember
		mustIn(t, json.Unmarshal([]byte(out), &res))
		if want := (destroyedMember{Cluster: "main", Member: "main-1", ID: "a1", Volume: "data-main-1"}); res != want {
			t.Errorf("destroy -o json: %+v, want %+v", res, want)
		}
		for _, o := range []client.Object{pod, pvc} {
			// Gone, or going (the volume waits for its protection finalizer).
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) && o.GetDeletionTimestamp() == nil {
				t.Errorf("%s not deleted (%v)", o.GetName(), err)
			}
		}
	})

	t.Run("logs", func(t *testing.T) {
		if _, err := run("logs", "main-0", "-o", "json"); err == nil || !strings.Contains(err.Error(), "takes no -o") {
			t.Errorf("logs -o json: %v, want refused: the lines are printed as the container wrote them", err)
		}
	})

	t.Run("report", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "r.tar.gz")
		out, err := run("report", "main", "-f", file, "-o", "json")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var res reportFile
		mustIn(t, json.Unmarshal([]byte(out), &res))
		if res.Namespace != ns || res.Cluster != "main" || res.File != file {
			t.Errorf("report -o json: %+v", res)
		}
		files := testutil.ReadTarball(t, file)
		for _, want := range []string{"etcdcluster.yaml", "etcdmembers.yaml", "events.yaml", "statefulsets.yaml", "secrets.txt"} {
			if _, ok := files[want]; !ok {
				t.Errorf("the report lacks %s (has %v)", want, keys(files))
			}
		}
		if got := strings.Join(res.Problems, "\n"); got != strings.TrimSuffix(files["problems.txt"], "\n") {
			t.Errorf("report -o json names problems %q, the tarball's problems.txt %q", got, files["problems.txt"])
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
		other := filepath.Join(t.TempDir(), "r.tar.gz")
		if out, err := run("report", "main", "-f", other); err != nil || !regexp.MustCompile(`(?m)^`+ns+`\s+main\s+`+regexp.QuoteMeta(other)+`\s+`).MatchString(out) {
			t.Errorf("report table (%v):\n%s", err, out)
		}
	})

	t.Run("an unknown output format changes nothing", func(t *testing.T) {
		for _, args := range [][]string{{"backup", "main"}, {"restore", "main"}, {"hibernate", "main", "on"}, {"report", "main", "-f", filepath.Join(t.TempDir(), "r")}} {
			if _, err := run(append(args, "-o", "yaml")...); err == nil || !strings.Contains(err.Error(), "unknown output format") {
				t.Errorf("%v -o yaml: %v", args, err)
			}
		}
		var backups v1alpha1.EtcdBackupList
		var restores v1alpha1.EtcdRestoreList
		var got v1alpha1.EtcdCluster
		must(c.List(ctx, &backups, client.InNamespace(ns)))
		must(c.List(ctx, &restores, client.InNamespace(ns)))
		must(c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "main"}, &got))
		if len(backups.Items) != 2 || len(restores.Items) != 1 || got.Annotations[v1alpha1.AnnotationHibernate] != "" {
			t.Errorf("refused verbs acted: %d EtcdBackups (2 before), %d EtcdRestores (1 before), hibernate annotation %q",
				len(backups.Items), len(restores.Items), got.Annotations[v1alpha1.AnnotationHibernate])
		}
	})

	// clusterOf creates EtcdCluster name, with TLS and authentication (secure) or without,
	// with what the operator would have made for its members: the pods of its StatefulSet and
	// its ConfigMap listing the members' client URLs as the operator writes them (their names
	// in the peer Service).
	clusterOf := func(name string, members int, secure bool) *v1alpha1.EtcdCluster {
		ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.EtcdClusterSpec{Replicas: int32(members), TLS: &v1alpha1.TLSSpec{Enabled: secure}, Auth: &v1alpha1.AuthSpec{Enabled: secure}}}
		must(c.Create(ctx, ec))
		cc := v1alpha1.ClusterConfig{Name: name, Namespace: ns}
		sts := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: name, UID: types.UID(name + "-sts"), Controller: ptrTo(true)}
		scheme := "http"
		if secure {
			scheme = "https"
		}
		for i := 0; i < members; i++ {
			m := fmt.Sprintf("%s-%d", name, i)
			cc.Members = append(cc.Members, v1alpha1.MemberConfig{Name: m, ClientURL: fmt.Sprintf("%s://%s.%s-peer.%s.svc:2379", scheme, m, name, ns)})
			must(c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m, Labels: map[string]string{v1alpha1.LabelCluster: name},
				OwnerReferences: []metav1.OwnerReference{sts}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Image: "steward"}}}}))
		}
		raw, err := yaml.Marshal(cc)
		must(err)
		must(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.ConfigMapName(name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "EtcdCluster", Name: name, UID: ec.UID, Controller: ptrTo(true)}}},
			Data: map[string]string{v1alpha1.ClusterConfigKey: string(raw)}}))
		return ec
	}

	t.Run("move-leader and defrag", func(t *testing.T) {
		// Real etcd members named as the operator names them, advertising the client URLs of
		// the ConfigMap; the tunnel reaches a member pod's port 2379 at its member's listener.
		ms := testutil.Cluster(t, 3, func(cfg *embed.Config) {
			cfg.Name = strings.Replace(cfg.Name, "m", "kv-", 1)
			u, _ := url.Parse(fmt.Sprintf("http://%s.kv-peer.%s.svc:2379", cfg.Name, ns))
			cfg.AdvertiseClientUrls = []url.URL{*u}
		})
		listen := map[string]string{}
		for i, m := range ms {
			u, _ := url.Parse(m.Endpoint)
			listen[fmt.Sprintf("kv-%d", i)] = u.Host
		}
		var mu sync.Mutex
		reached := map[string]bool{}
		tunnel = func(ctx context.Context, pod string, port int) (net.Conn, error) {
			if port != 2379 || listen[pod] == "" {
				return nil, fmt.Errorf("no member pod %s port %d", pod, port)
			}
			mu.Lock()
			reached[pod] = true
			mu.Unlock()
			var d net.Dialer
			return d.DialContext(ctx, "tcp", listen[pod])
		}
		t.Cleanup(func() { tunnel = nil })
		clusterOf("kv", 3, false)
		leader := func() string {
			t.Helper()
			st, err := ms[0].Client.Status(ctx, ms[0].Endpoint)
			mustIn(t, err)
			for i, m := range ms {
				if uint64(m.Etcd.Server.MemberID()) == st.Leader {
					return fmt.Sprintf("kv-%d", i)
				}
			}
			t.Fatalf("leader %x is none of the members", st.Leader)
			return ""
		}
		other := func(not string) string {
			for _, n := range []string{"kv-0", "kv-1", "kv-2"} {
				if n != not {
					return n
				}
			}
			return ""
		}

		before := leader()
		target := other(before)
		out, err := run("move-leader", "kv", target, "-o", "json")
		if err != nil {
			t.Fatalf("move-leader kv %s: %v\n%s", target, err, out)
		}
		var moved leaderMove
		mustIn(t, json.Unmarshal([]byte(out), &moved))
		if moved != (leaderMove{Cluster: "kv", Before: before, After: target, Moved: true}) {
			t.Errorf("move-leader kv %s printed %+v; %s led before", target, moved, before)
		}
		if now := leader(); now != target {
			t.Errorf("after move-leader kv %s, etcd says %s leads", target, now)
		}
		out, err = run("move-leader", "kv")
		if err != nil || !strings.Contains(out, target) {
			t.Fatalf("move-leader kv (%v):\n%s", err, out)
		}
		if now := leader(); now == target {
			t.Errorf("move-leader kv without a member left the leadership with %s", now)
		}
		if _, err := run("move-leader", "kv", "kv-9"); err == nil || !strings.Contains(err.Error(), `no member named "kv-9"`) {
			t.Errorf("move-leader to a member that does not exist: %v", err)
		}

		// One member by name: the leader, whose leadership moves away first.
		lead := leader()
		out, err = run("defrag", "kv", lead, "-o", "json")
		if err != nil {
			t.Fatalf("defrag kv %s: %v\n%s", lead, err, out)
		}
		var res maintenance.Result
		mustIn(t, json.Unmarshal([]byte(out), &res))
		if len(res.Members) != 1 || res.Members[0].Name != lead || res.Members[0].MovedTo == "" {
			t.Errorf("defrag kv %s (the leader): %+v", lead, res.Members)
		}
		if now := leader(); now == lead {
			t.Errorf("defrag kv %s: it still leads; leadership should have moved before its defragmentation", lead)
		}
		// Every member, one at a time, the leader last.
		lead = leader()
		out, err = run("defrag", "kv", "--all", "-o", "json")
		if err != nil {
			t.Fatalf("defrag kv --all: %v\n%s", err, out)
		}
		res = maintenance.Result{}
		mustIn(t, json.Unmarshal([]byte(out), &res))
		if len(res.Members) != 3 || res.Members[2].Name != lead || res.Members[0].WasLeader || res.Members[1].WasLeader {
			t.Errorf("defrag kv --all (%s led): %+v", lead, res.Members)
		}
		for _, args := range [][]string{{"defrag", "kv"}, {"defrag", "kv", "kv-1", "--all"}} {
			if _, err := run(args...); err == nil || !strings.Contains(err.Error(), "name a member") {
				t.Errorf("%v: %v", args, err)
			}
		}
		if _, err := run("defrag", "kv", "kv-7"); err == nil || !strings.Contains(err.Error(), `no member named "kv-7"`) {
			t.Errorf("defrag of a member that does not exist: %v", err)
		}
		mu.Lock()
		if len(reached) != 3 {
			t.Errorf("the tunnel reached %v, want the three member pods", reached)
		}
		mu.Unlock()
	})

	t.Run("move-leader with TLS and authentication", func(t *testing.T) {
		// As a cluster runs by default: etcd takes only clients with a certificate of the
		// cluster's CA and logs them in as root with the password; the members' certificate
		// names them in the peer Service.
		now := time.Now()
		ca, err := pki.NewCA("kvt-ca", now, pki.CAValidity)
		mustIn(t, err)
		var hosts []string
		for i := 0; i < 3; i++ {
			hosts = append(hosts, fmt.Sprintf("kvt-%d.kvt-peer.%s.svc", i, ns))
		}
		serverDir, adminDir := filepath.Join(t.TempDir(), "server"), filepath.Join(t.TempDir(), "admin")
		serverCert, serverKey, err := ca.Issue(pki.Leaf{CommonName: pki.MemberCN, DNSNames: hosts, IPs: []net.IP{net.ParseIP("127.0.0.1")}}, now, pki.LeafValidity)
		mustIn(t, err)
		mustIn(t, pki.WriteDir(serverDir, serverCert, serverKey, ca.CertPEM))
		clientCert, clientKey, err := ca.Issue(pki.ClientLeaf(), now, pki.LeafValidity)
		mustIn(t, err)
		mustIn(t, pki.WriteDir(adminDir, clientCert, clientKey, ca.CertPEM))
		ms := testutil.Cluster(t, 3, func(cfg *embed.Config) {
			cfg.Name = strings.Replace(cfg.Name, "m", "kvt-", 1)
			cfg.ListenClientUrls[0].Scheme = "https"
			u, _ := url.Parse(fmt.Sprintf("https://%s.kvt-peer.%s.svc:2379", cfg.Name, ns))
			cfg.AdvertiseClientUrls = []url.URL{*u}
			cfg.ClientTLSInfo = transport.TLSInfo{CertFile: filepath.Join(serverDir, pki.CertFile), KeyFile: filepath.Join(serverDir, pki.KeyFile),
				TrustedCAFile: filepath.Join(serverDir, pki.CAFile), ClientCertAuth: true}
		})
		listen := map[string]string{}
		for i, m := range ms {
			u, _ := url.Parse(m.Endpoint)
			listen[fmt.Sprintf("kvt-%d", i)] = u.Host
		}
		admin, err := etcdutil.Dialer{TLSDir: adminDir}.New([]string{ms[0].Endpoint}, 5*time.Second)
		mustIn(t, err)
		defer admin.Close()
		const password = "kvt-root-secret"
		_, err = admin.UserAdd(ctx, etcdutil.RootUser, password)
		mustIn(t, err)
		_, err = admin.UserGrantRole(ctx, etcdutil.RootUser, etcdutil.RootUser)
		mustIn(t, err)
		_, err = admin.AuthEnable(ctx)
		mustIn(t, err)
		tunnel = func(ctx context.Context, pod string, port int) (net.Conn, error) {
			if port != 2379 || listen[pod] == "" {
				return nil, fmt.Errorf("no member pod %s port %d", pod, port)
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", listen[pod])
		}
		t.Cleanup(func() { tunnel = nil })

		ec := clusterOf("kvt", 3, true)
		owner := []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "EtcdCluster", Name: "kvt", UID: ec.UID, Controller: ptrTo(true)}}
		mustIn(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kvt-client-tls", OwnerReferences: owner},
			Data: map[string][]byte{pki.CertFile: clientCert, pki.KeyFile: clientKey, pki.CAFile: ca.CertPEM}}))
		pw := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kvt-root-password", OwnerReferences: owner},
			Data: map[string][]byte{v1alpha1.RootPasswordKey: []byte("a wrong password")}}
		mustIn(t, c.Create(ctx, pw))
		ec.Status.ClientCertificateSecret, ec.Status.RootPasswordSecret = "kvt-client-tls", "kvt-root-password"
		mustIn(t, c.Status().Update(ctx, ec))

		if _, err := run("move-leader", "kvt"); err == nil || !strings.Contains(err.Error(), "authentication failed") {
			t.Errorf("move-leader with a wrong root password: %v", err)
		}
		pw.Data[v1alpha1.RootPasswordKey] = []byte(password + "\n") // as the operator writes it
		mustIn(t, c.Update(ctx, pw))
		st, err := admin.Status(ctx, ms[0].Endpoint)
		mustIn(t, err)
		target := "kvt-0"
		if uint64(ms[0].Etcd.Server.MemberID()) == st.Leader {
			target = "kvt-1"
		}
		out, err := run("move-leader", "kvt", target, "-o", "json")
		if err != nil {
			t.Fatalf("move-leader kvt %s: %v\n%s", target, err, out)
		}
		var moved leaderMove
		mustIn(t, json.Unmarshal([]byte(out), &moved))
		if moved.After != target || !moved.Moved {
			t.Errorf("move-leader kvt %s printed %+v", target, moved)
		}
	})

	t.Run("move-leader and defrag refuse", func(t *testing.T) {
		reached := []string{}
		tunnel = func(_ context.Context, pod string, _ int) (net.Conn, error) {
			reached = append(reached, pod)
			return nil, fmt.Errorf("refused")
		}
		t.Cleanup(func() { tunnel = nil })
		// A ConfigMap under the cluster's name that the cluster did not make.
		mustIn(t, c.Create(ctx, &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "planted"}, Spec: v1alpha1.EtcdClusterSpec{Replicas: 1}}))
		mustIn(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.ConfigMapName("planted")},
			Data: map[string]string{v1alpha1.ClusterConfigKey: "members: [{name: web-1, clientURL: 'http://web-1:2379'}]"}}))
		if _, err := run("move-leader", "planted"); err == nil || !strings.Contains(err.Error(), "was not made by EtcdCluster planted") {
			t.Errorf("a planted ConfigMap: %v", err)
		}
		// A member URL whose pod is not the cluster's (the pod web-1 of the destroy test).
		ec := clusterOf("stray", 1, false)
		var cm corev1.ConfigMap
		mustIn(t, c.Get(ctx, types.NamespacedName{Namespace: ns, Name: v1alpha1.ConfigMapName("stray")}, &cm))
		cm.Data[v1alpha1.ClusterConfigKey] = "members: [{name: web-1, clientURL: 'http://web-1.stray-peer.plugin.svc:2379'}]"
		mustIn(t, c.Update(ctx, &cm))
		if _, err := run("move-leader", "stray"); err == nil || !strings.Contains(err.Error(), "web-1 is not a member of a Steward cluster") {
			t.Errorf("a member whose pod is not the cluster's: %v", err)
		}
		// Hibernating: the members are the operator's.
		ec.Annotations = map[string]string{v1alpha1.AnnotationHibernate: "true"}
		mustIn(t, c.Update(ctx, ec))
		if _, err := run("defrag", "stray", "--all"); err == nil || !strings.Contains(err.Error(), "hibernates") {
			t.Errorf("defrag of a hibernating cluster: %v", err)
		}
		if len(reached) != 0 {
			t.Errorf("refused verbs reached pods %v", reached)
		}
	})

	t.Run("certificate", func(t *testing.T) {
		ca, err := pki.NewCA("secure-ca", time.Now(), 365*24*time.Hour)
		mustIn(t, err)
		next, err := pki.NewCA("secure-ca-next", time.Now(), 365*24*time.Hour)
		mustIn(t, err)
		caKey, err := ca.KeyPEM()
		mustIn(t, err)
		// A cluster with its own CA, amid a rollover: the members trust both CAs.
		secure := func(name string, tls v1alpha1.TLSSpec, owned bool) *v1alpha1.EtcdCluster {
			ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.EtcdClusterSpec{Replicas: 1, TLS: &tls}}
			mustIn(t, c.Create(ctx, ec))
			var owners []metav1.OwnerReference
			if owned {
				owners = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "EtcdCluster", Name: name, UID: ec.UID, Controller: ptrTo(true)}}
			}
			mustIn(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.CASecretName(name), OwnerReferences: owners},
				Data: map[string][]byte{pki.CertFile: ca.CertPEM, pki.KeyFile: caKey}}))
			mustIn(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.ClientCertificateSecretName(name), OwnerReferences: owners},
				Data: map[string][]byte{pki.CAFile: append(slices.Clone(ca.CertPEM), next.CertPEM...)}}))
			ec.Status.CA = &v1alpha1.CAStatus{Fingerprint: pki.Fingerprint(ca.Cert), NotAfter: metav1.NewTime(ca.Cert.NotAfter)}
			ec.Status.ClientCertificateSecret = v1alpha1.ClientCertificateSecretName(name)
			ec.Status.Endpoints.Client = "https://" + name + "-client." + ns + ".svc:2379"
			mustIn(t, c.Status().Update(ctx, ec))
			return ec
		}
		ec := secure("secure", v1alpha1.TLSSpec{Enabled: true}, true)
		dir := filepath.Join(t.TempDir(), "alice")
		out, err := run("certificate", "secure", "alice", "--dir", dir, "--validity", "48h", "-o", "json")
		if err != nil {
			t.Fatalf("certificate secure alice: %v\n%s", err, out)
		}
		var issued issuedCertificate
		mustIn(t, json.Unmarshal([]byte(out), &issued))
		if issued.User != "alice" || issued.Key != filepath.Join(dir, "tls.key") || issued.CAFingerprint != pki.Fingerprint(ca.Cert) ||
			issued.Endpoint != ec.Status.Endpoints.Client || time.Until(issued.NotAfter) > 48*time.Hour || time.Until(issued.NotAfter) < 47*time.Hour {
			t.Errorf("certificate printed %+v", issued)
		}
		if fi, err := os.Stat(issued.Key); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("the key file: %v, mode %v", err, fi.Mode())
		}
		certPEM, err := os.ReadFile(issued.Cert)
		mustIn(t, err)
		bundle, err := os.ReadFile(issued.CA)
		mustIn(t, err)
		if !bytes.Equal(bundle, append(slices.Clone(ca.CertPEM), next.CertPEM...)) {
			t.Errorf("ca.crt is not the CAs the members trust:\n%s", bundle)
		}
		pair, err := tls.LoadX509KeyPair(issued.Cert, issued.Key)
		mustIn(t, err)
		certs, err := pki.ParseCerts(certPEM)
		mustIn(t, err)
		roots := x509.NewCertPool()
		roots.AddCert(ca.Cert)
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || certs[0].Subject.CommonName != "alice" || len(pair.Certificate) != 1 {
			t.Errorf("the certificate: %v, CN %q", err, certs[0].Subject.CommonName)
		}
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Error("the client certificate can serve")
		}
		if _, err := run("certificate", "secure", "alice", "--dir", dir); err == nil || !strings.Contains(err.Error(), "never overwritten") {
			t.Errorf("a second certificate into the same directory: %v", err)
		}
		if again, _ := os.ReadFile(issued.Cert); !bytes.Equal(again, certPEM) {
			t.Error("a refused certificate overwrote the first")
		}

		for _, tc := range []struct {
			name, cluster, user, want string
		}{
			{"root", "secure", "root", "without the root password"},
			{"the members' name", "secure", pki.MemberCN, "etcd takes for a peer"},
			{"a name with a slash", "secure", "a/b", "at most 64 characters"},
			{"no TLS", "kv", "alice", "has no TLS"},
		} {
			if _, err := run("certificate", tc.cluster, tc.user, "--dir", t.TempDir()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
			}
		}
		secure("provided", v1alpha1.TLSSpec{Enabled: true, ServerSecret: "mine"}, true)
		if _, err := run("certificate", "provided", "alice", "--dir", t.TempDir()); err == nil || !strings.Contains(err.Error(), "spec.tls.serverSecret mine") {
			t.Errorf("certificates of the user's issuer: %v", err)
		}
		secure("strange", v1alpha1.TLSSpec{Enabled: true}, false)
		if _, err := run("certificate", "strange", "alice", "--dir", t.TempDir()); err == nil || !strings.Contains(err.Error(), "was not made by EtcdCluster strange") {
			t.Errorf("a CA Secret the cluster did not make: %v", err)
		}
		ec.Status.CA.Fingerprint = pki.Fingerprint(next.Cert)
		mustIn(t, c.Status().Update(ctx, ec))
		empty := t.TempDir()
		if _, err := run("certificate", "secure", "bob", "--dir", empty); err == nil || !strings.Contains(err.Error(), "not the one EtcdCluster plugin/secure records") {
			t.Errorf("a CA other than status.ca: %v", err)
		}
		if files, _ := os.ReadDir(empty); len(files) != 0 {
			t.Errorf("a refused certificate wrote %v", files)
		}
	})
}

func mustIn(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ptrTo[T any](v T) *T { return &v }

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
