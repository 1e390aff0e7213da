package kubeview_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/kubeview"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// The suite runs a real kube-apiserver (bin/k8s) and real members: `steward sidecar
// --kubernetes-cluster` and `steward etcd` processes on this machine, whose only view of
// their cluster is the API server. No operator runs: the test creates the objects the
// operator would (ConfigMap, EtcdCluster, Leases, EtcdMembers), with 127.0.0.1 URLs.
var (
	api    *testutil.APIServer
	apiErr error
)

func TestMain(m *testing.M) {
	api, apiErr = testutil.StartAPIServer()
	if apiErr != nil && !errors.Is(apiErr, testutil.ErrNoKubeTools) {
		fmt.Fprintln(os.Stderr, apiErr)
		os.Exit(1)
	}
	code := m.Run()
	if api != nil {
		api.Stop()
	}
	os.Exit(code)
}

func needAPI(t *testing.T) client.Client {
	t.Helper()
	if apiErr != nil {
		if os.Getenv("STEWARD_REQUIRE_TOOLS") != "" {
			t.Fatal(apiErr)
		}
		t.Skip(apiErr)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(api.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type testMember struct {
	name, clusterName, kubeconfig string
	tokenFile                     string // the cluster's sidecar API token, as the pods mount it
	client, peer, sidecar, health int
	dataDir                       string
	procs                         []*exec.Cmd
}

// newCluster creates a namespace and, in it, what the operator would for a cluster of n members
// named c, backing up into a file:// store in the test's temp dir.
func newCluster(t *testing.T, c client.Client, n int) (string, []*testMember) {
	t.Helper()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kv-"}}
	if err := c.Create(context.Background(), nsObj); err != nil {
		t.Fatal(err)
	}
	return nsObj.Name, clusterNamed(t, c, nsObj.Name, "c", n, "file://"+filepath.Join(t.TempDir(), "store"), nil)
}

// clusterNamed creates the objects of cluster name: ConfigMap (with 127.0.0.1 URLs), the
// EtcdCluster, member and snapshot Leases, EtcdMembers.
func clusterNamed(t *testing.T, c client.Client, ns, name string, n int, store string, restore *v1alpha1.RestoreConfig) []*testMember {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{v1alpha1.LabelCluster: name}
	dir := t.TempDir()
	cc := v1alpha1.ClusterConfig{Name: name, Namespace: ns, Token: "token-" + ns + "-" + name, QuorumLossPolicy: v1alpha1.QuorumLossAutomatic,
		Backup:  &v1alpha1.BackupConfig{Store: store, FullSchedule: "@hourly", DeltaPeriod: "1s", Retention: "keep"},
		Restore: restore}
	// The sidecar API token: a file for the members (the pods' mount) and the Secret the
	// operator sends it from.
	tokenFile := filepath.Join(dir, "api-token")
	if _, err := sidecarapi.EnsureTokenFile(tokenFile); err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.SidecarTokenSecretName(name), Labels: labels},
		Data: map[string][]byte{v1alpha1.SidecarTokenKey: token}}); err != nil {
		t.Fatal(err)
	}
	var ms []*testMember
	for i := 0; i < n; i++ {
		mn := fmt.Sprintf("%s-%d", name, i)
		m := &testMember{name: mn, clusterName: name, client: testutil.FreePort(t), peer: testutil.FreePort(t),
			sidecar: testutil.FreePort(t), health: testutil.FreePort(t), dataDir: filepath.Join(dir, mn), tokenFile: tokenFile}
		ms = append(ms, m)
		cc.Members = append(cc.Members, v1alpha1.MemberConfig{Name: m.name, ClientURL: fmt.Sprintf("http://127.0.0.1:%d", m.client),
			PeerURL: fmt.Sprintf("http://127.0.0.1:%d", m.peer), SidecarURL: fmt.Sprintf("http://127.0.0.1:%d", m.sidecar)})
		dur := int32(30)
		if err := c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m.name, Labels: labels},
			Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &dur}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m.name, Labels: labels}}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := yaml.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-config", Labels: labels},
		Data: map[string]string{v1alpha1.ClusterConfigKey: string(b)}}); err != nil {
		t.Fatal(err)
	}
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: int32(n), Backup: &v1alpha1.BackupSpec{Store: store}}}
	if err := c.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	// The snapshot Leases, made as the operator makes them: controlled by the EtcdCluster (a
	// Lease of that name the cluster does not control says nothing of its backups).
	for _, l := range []string{v1alpha1.FullSnapshotLeaseName(name), v1alpha1.DeltaSnapshotLeaseName(name)} {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: l, Labels: labels}}
		if err := controllerutil.SetControllerReference(ec, lease, c.Scheme()); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, lease); err != nil {
			t.Fatal(err)
		}
	}
	// The sidecars run with exactly the rights the operator gives them (its Role), as a user
	// of their own: a request the Role does not allow fails here as it would in a pod.
	user := "steward-sidecar:" + ns + ":" + name
	if err := c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: operator.SidecarRules(ec, n)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}); err != nil {
		t.Fatal(err)
	}
	au, err := api.Env.ControlPlane.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := au.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "sidecar.kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		m.kubeconfig = kubeconfig
	}
	return ms
}

// start runs the member's sidecar and etcd as processes, as the member pod's two containers.
func (m *testMember) start(t *testing.T, ns string) {
	t.Helper()
	bin := testutil.StewardBinary(t)
	logs := filepath.Join(filepath.Dir(m.dataDir), m.name+".log")
	out, err := os.OpenFile(logs, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	sidecar := exec.Command(bin, "sidecar", "--name", m.name, "--data-dir", m.dataDir,
		"--listen", fmt.Sprintf("127.0.0.1:%d", m.sidecar), "--kubernetes-cluster", m.clusterName, "--log-level", "warn", "--api-token-file", m.tokenFile)
	sidecar.Env = append(os.Environ(), "KUBECONFIG="+m.kubeconfig, "POD_NAMESPACE="+ns)
	etcd := exec.Command(bin, "etcd", "--sidecar", fmt.Sprintf("http://127.0.0.1:%d", m.sidecar),
		"--listen-health", fmt.Sprintf("127.0.0.1:%d", m.health), "--log-level", "warn", "--api-token-file", m.tokenFile)
	for _, p := range []*exec.Cmd{sidecar, etcd} {
		p.Stdout, p.Stderr = out, out
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		m.procs = append(m.procs, p)
	}
	t.Cleanup(func() {
		m.stop()
		out.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logs); err == nil {
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("%s: end of its log:\n%s", m.name, b)
			}
		}
	})
	t.Logf("%s: logs in %s", m.name, logs)
}

// stop kills the member's processes (as a node failure would) and waits for them.
func (m *testMember) stop() {
	for _, p := range m.procs {
		_ = p.Process.Signal(syscall.SIGKILL)
		_, _ = p.Process.Wait()
	}
	m.procs = nil
}

func reportOf(t *testing.T, c client.Client, ns, name string) (cluster.Report, error) {
	t.Helper()
	var em v1alpha1.EtcdMember
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &em); err != nil {
		return cluster.Report{}, err
	}
	if em.Status.Report == nil {
		return cluster.Report{}, fmt.Errorf("%s has not reported", name)
	}
	var r cluster.Report
	return r, yaml.Unmarshal(em.Status.Report.Raw, &r)
}

func holder(t *testing.T, c client.Client, ns, name string) string {
	t.Helper()
	var l coordinationv1.Lease
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// TestMembersFormAndHealThroughTheAPIServer: three members whose only view is the API server
// form a cluster, report in their EtcdMembers, renew their Leases and publish backups; a
// leading member dropped from the ConfigMap hands leadership over and is removed from etcd;
// added back, it joins as a learner and is promoted; and a member whose data is wiped while
// it is down rejoins under a new member ID, with every key.
func TestMembersFormAndHealThroughTheAPIServer(t *testing.T) {
	c := needAPI(t)
	ns, ms := newCluster(t, c, 3)
	for _, m := range ms {
		m.start(t, ns)
	}

	ids := map[string]string{}
	testutil.Eventually(t, 90*time.Second, "3 members serving, reporting and renewing", func() error {
		leaders, clusterIDs := 0, map[string]bool{}
		for _, m := range ms {
			r, err := reportOf(t, c, ns, m.name)
			if err != nil {
				return err
			}
			if !r.Serving || !r.Formed {
				return fmt.Errorf("%s reports serving=%v formed=%v (case %s: %s)", m.name, r.Serving, r.Formed, r.Case, r.Reason)
			}
			clusterIDs[r.ClusterID] = true
			h := holder(t, c, ns, m.name)
			if h != r.MemberID+":"+v1alpha1.RoleMember && h != r.MemberID+":"+v1alpha1.RoleLeader {
				return fmt.Errorf("Lease %s holder %q, member %s", m.name, h, r.MemberID)
			}
			if strings.HasSuffix(h, v1alpha1.RoleLeader) {
				leaders++
			}
			ids[m.name] = r.MemberID
		}
		if leaders != 1 || len(clusterIDs) != 1 {
			return fmt.Errorf("%d Leaders, cluster IDs %v", leaders, clusterIDs)
		}
		return nil
	})

	endpoints := func(ms ...*testMember) []string {
		var out []string
		for _, m := range ms {
			out = append(out, fmt.Sprintf("http://127.0.0.1:%d", m.client))
		}
		return out
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints(ms...), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 50; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("k%02d", i), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}

	// The backup leader publishes its progress in the snapshot Leases: the full snapshot taken
	// when it started, and the newest revision stored (the 50 puts above, within a delta).
	put, err := cli.Get(ctx, "k49")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "snapshot Leases", func() error {
		full, delta := holder(t, c, ns, "c-full-snapshot"), holder(t, c, ns, "c-delta-snapshot")
		rev, err := strconv.ParseInt(delta, 10, 64)
		if full == "" || err != nil || rev < put.Header.Revision {
			return fmt.Errorf("full-snapshot holder %q, delta-snapshot holder %q, want at least revision %d", full, delta, put.Header.Revision)
		}
		var ems v1alpha1.EtcdMemberList
		if err := c.List(ctx, &ems, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, em := range ems.Items {
			b := em.Status.Backup
			if b == nil || !b.Ready {
				continue
			}
			// It says what a restore reaches: from its first full snapshot to the puts above.
			rep, _ := kubeview.MemberReport(&em, time.Time{})
			if w := b.Recoverable; w == nil || w.Timeline != 1 || w.ClusterID != rep.ClusterID || w.FirstRevision < 1 || w.FirstTime == nil ||
				w.LastRevision < put.Header.Revision || w.LastTime == nil {
				return fmt.Errorf("%s says its backups are ready, and recoverable: %+v; want timeline 1 of cluster %s up to at least revision %d", em.Name, w, rep.ClusterID, put.Header.Revision)
			}
			return nil
		}
		return fmt.Errorf("no member says its backups are ready")
	})

	// An EtcdBackup is carried out by the operator's backup reconciler through the sidecars.
	if err := c.Create(ctx, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b1"},
		Spec: v1alpha1.EtcdBackupSpec{Cluster: "c"}}); err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(10)
	br := &operator.BackupReconciler{Client: c, Recorder: rec, Sidecars: sidecars(t, c, ns)}
	var eb v1alpha1.EtcdBackup
	testutil.Eventually(t, time.Minute, "EtcdBackup b1 ends", func() error {
		if _, err := br.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "b1"}}); err != nil {
			return err
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "b1"}, &eb); err != nil {
			return err
		}
		if eb.Status.Phase != v1alpha1.BackupCompleted && eb.Status.Phase != v1alpha1.BackupFailed {
			return fmt.Errorf("%s: %s", eb.Status.Phase, eb.Status.Message)
		}
		return nil
	})
	if eb.Status.Phase != v1alpha1.BackupCompleted || eb.Status.Revision < put.Header.Revision || eb.Status.Size <= 0 || eb.Status.StartTime == nil || eb.Status.EndTime == nil {
		t.Fatalf("EtcdBackup status %+v", eb.Status)
	}
	if _, err := os.Stat(filepath.Join(storeDir(t, c, ns), eb.Status.Key)); err != nil {
		t.Errorf("the stored object %s: %v", eb.Status.Key, err)
	}
	if ev := <-rec.Events; !strings.Contains(ev, "BackupCompleted") {
		t.Errorf("event %q", ev)
	}

	// A new cluster restored from c's backups to the revision of the 50th put
	// (bootstrap.restore). The test plays the operator's part: the first directive.
	storeURL := "file://" + storeDir(t, c, ns)
	target := cluster.RestoreTarget{Store: storeURL, Revision: put.Header.Revision}
	rs := clusterNamed(t, c, ns, "r", 1, "file://"+filepath.Join(t.TempDir(), "r-store"),
		&v1alpha1.RestoreConfig{Store: storeURL, Revision: put.Header.Revision})
	if _, err := cli.Put(ctx, "after-the-target", "1"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	writeRecovery(t, c, ns, "r", cluster.Directive{Epoch: 1, Phase: cluster.PhaseSeeding, Mode: cluster.RecoverFromBackup,
		Seed: "r-0", Restore: &target, IssuedAt: now, PhaseSince: now})
	rs[0].start(t, ns)
	testutil.Eventually(t, 60*time.Second, "r restored to the target revision", func() error {
		r, err := reportOf(t, c, ns, "r-0")
		if err != nil {
			return err
		}
		if !r.Serving || r.AppliedEpoch != 1 {
			return fmt.Errorf("r-0: serving=%v epoch %d, case %s: %s", r.Serving, r.AppliedEpoch, r.Case, r.Reason)
		}
		one, err := clientv3.New(clientv3.Config{Endpoints: endpoints(rs[0]), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer one.Close()
		gctx, gcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer gcancel()
		resp, err := one.Get(gctx, "", clientv3.WithPrefix())
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 50 || resp.Header.Revision != put.Header.Revision {
			return fmt.Errorf("r holds %d keys at revision %d, want the 50 of c at revision %d", len(resp.Kvs), resp.Header.Revision, put.Header.Revision)
		}
		return nil
	})
	rs[0].stop()

	// Scale-down as the operator does it: c-2 leaves the ConfigMap first, while it leads. It
	// hands leadership over, the new leader removes it from etcd, and only then would the
	// operator stop its pod.
	st, err := cli.Status(ctx, endpoints(ms[2])[0])
	if err != nil {
		t.Fatal(err)
	}
	if st.Leader != st.Header.MemberId {
		lst, err := cli.Status(ctx, endpoints(ms[0])[0])
		if err != nil {
			t.Fatal(err)
		}
		leaderCli, err := clientv3.New(clientv3.Config{Endpoints: []string{memberURL(t, cli, lst.Leader)}, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaderCli.MoveLeader(ctx, st.Header.MemberId); err != nil {
			t.Fatal(err)
		}
		leaderCli.Close()
	}
	setMembers(t, c, ns, 2)
	testutil.Eventually(t, 60*time.Second, "c-2 removed from etcd, leadership handed over", func() error {
		lctx, lcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer lcancel()
		list, err := cli.MemberList(lctx)
		if err != nil {
			return err
		}
		for _, m := range list.Members {
			if m.Name == "c-2" {
				return fmt.Errorf("etcd still lists c-2")
			}
		}
		if len(list.Members) != 2 {
			return fmt.Errorf("%d members listed", len(list.Members))
		}
		return nil
	})
	// Clients of the remaining members write on (a client still dialling c-2 may see its etcd
	// stop, as with any removed member).
	rest, err := clientv3.New(clientv3.Config{Endpoints: endpoints(ms[0], ms[1]), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer rest.Close()
	if _, err := rest.Put(ctx, "after-scale-down", "1"); err != nil {
		t.Fatalf("write after the scale-down: %v", err)
	}
	ms[2].stop()
	if err := os.RemoveAll(ms[2].dataDir); err != nil {
		t.Fatal(err)
	}

	// Scaling back up: c-2 is in the ConfigMap again and starts empty; it joins as a learner
	// and is promoted. Then it loses its disk while it is down, and comes back.
	setMembers(t, c, ns, 3)
	ms[2].start(t, ns)
	testutil.Eventually(t, 120*time.Second, "c-2 back as a voter", func() error {
		r, err := reportOf(t, c, ns, "c-2")
		if err != nil {
			return err
		}
		if !r.Serving || r.Learner || r.MemberID == ids["c-2"] {
			return fmt.Errorf("c-2: serving=%v learner=%v id %s, case %s: %s", r.Serving, r.Learner, r.MemberID, r.Case, r.Reason)
		}
		ids["c-2"] = r.MemberID
		return nil
	})
	ms[2].stop()
	if err := os.RemoveAll(ms[2].dataDir); err != nil {
		t.Fatal(err)
	}
	ms[2].start(t, ns)
	ms[2].stop()
	if err := os.RemoveAll(ms[2].dataDir); err != nil {
		t.Fatal(err)
	}
	ms[2].start(t, ns)
	testutil.Eventually(t, 120*time.Second, "c-2 back as a new voting member with every key", func() error {
		r, err := reportOf(t, c, ns, "c-2")
		if err != nil {
			return err
		}
		if !r.Serving || r.Learner || r.MemberID == ids["c-2"] {
			return fmt.Errorf("c-2: serving=%v learner=%v id %s (was %s), case %s: %s", r.Serving, r.Learner, r.MemberID, ids["c-2"], r.Case, r.Reason)
		}
		if h := holder(t, c, ns, "c-2"); !strings.HasPrefix(h, r.MemberID+":") {
			return fmt.Errorf("Lease c-2 holder %q", h)
		}
		one, err := clientv3.New(clientv3.Config{Endpoints: endpoints(ms[2]), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer one.Close()
		gctx, gcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer gcancel()
		resp, err := one.Get(gctx, "k", clientv3.WithPrefix(), clientv3.WithSerializable())
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 50 {
			return fmt.Errorf("c-2 holds %d of 50 keys", len(resp.Kvs))
		}
		if resp, err := one.Get(gctx, "after-scale-down", clientv3.WithSerializable()); err != nil || len(resp.Kvs) != 1 {
			return fmt.Errorf("c-2 lacks the write made while it was out: %v", err)
		}
		return nil
	})
}

// setMembers rewrites the ConfigMap with the first n members, as the operator does when it
// scales.
func setMembers(t *testing.T, c client.Client, ns string, n int) {
	t.Helper()
	changeConfig(t, c, ns, func(cc *v1alpha1.ClusterConfig) {
		if all, ok := allMembers[ns]; ok {
			cc.Members = all
		} else {
			allMembers[ns] = cc.Members
		}
		cc.Members = cc.Members[:n]
	})
}

// changeConfig rewrites the cluster's ConfigMap with change made to its configuration.
func changeConfig(t *testing.T, c client.Client, ns string, change func(*v1alpha1.ClusterConfig)) {
	t.Helper()
	cm, cc := readConfig(t, c, ns)
	change(&cc)
	b, err := yaml.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[v1alpha1.ClusterConfigKey] = string(b)
	if err := c.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

// allMembers keeps each test cluster's full member list while its ConfigMap lists fewer.
var allMembers = map[string][]v1alpha1.MemberConfig{}

// memberURL returns the client URL of member id.
func memberURL(t *testing.T, cli *clientv3.Client, id uint64) string {
	t.Helper()
	list, err := cli.MemberList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range list.Members {
		if m.ID == id && len(m.ClientURLs) > 0 {
			return m.ClientURLs[0]
		}
	}
	t.Fatalf("member %x not listed", id)
	return ""
}

// storeDir is the directory of cluster c's file:// backup store.
func storeDir(t *testing.T, c client.Client, ns string) string {
	t.Helper()
	_, cc := readConfig(t, c, ns)
	return strings.TrimPrefix(cc.Backup.Store, "file://")
}

// readConfig reads cluster c's ConfigMap and its cluster.yaml.
func readConfig(t *testing.T, c client.Client, ns string) (*corev1.ConfigMap, v1alpha1.ClusterConfig) {
	t.Helper()
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "c-config"}, &cm); err != nil {
		t.Fatal(err)
	}
	var cc v1alpha1.ClusterConfig
	if err := yaml.Unmarshal([]byte(cm.Data[v1alpha1.ClusterConfigKey]), &cc); err != nil {
		t.Fatal(err)
	}
	return &cm, cc
}

// writeRecovery records a directive in a cluster's status.recovery, as the operator does.
func writeRecovery(t *testing.T, c client.Client, ns, name string, d cluster.Directive) {
	t.Helper()
	var ec v1alpha1.EtcdCluster
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &ec); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(map[string]any{"directive": d, "lastEpoch": d.Epoch})
	if err != nil {
		t.Fatal(err)
	}
	ec.Status.Recovery = &runtime.RawExtension{Raw: raw}
	if err := c.Status().Update(context.Background(), &ec); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseRenewedWhenTheReportIsRefused: the member's report cannot be written (here its
// EtcdMember is missing; a webhook or quota does the same), yet the Lease is renewed: a
// serving member never looks silent because its report failed.
func TestLeaseRenewedWhenTheReportIsRefused(t *testing.T) {
	c := needAPI(t)
	ctx := context.Background()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kv-"}}
	if err := c.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	if err := c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c-0"}}); err != nil {
		t.Fatal(err)
	}
	v, err := kubeview.New(ctx, api.Config, ns, "c", "c-0", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = v.Report(ctx, cluster.Report{Name: "c-0", At: time.Now(), Serving: true, MemberID: "a0", Formed: true})
	if err == nil || !strings.Contains(err.Error(), "EtcdMember") {
		t.Fatalf("Report = %v, want the refused report named", err)
	}
	var l coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c-0"}, &l); err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "a0:"+v1alpha1.RoleMember || l.Spec.RenewTime == nil {
		t.Fatalf("Lease %+v: not renewed while the report was refused", l.Spec)
	}
}

// sidecars is the operator's sidecar client for cluster c in ns. The operator calls a
// member's sidecar at its name in the cluster's peer Service; here the members run on this
// machine, so the transport takes each such name to the sidecar's 127.0.0.1 URL the
// ConfigMap lists.
func sidecars(t *testing.T, c client.Client, ns string) *operator.Sidecars {
	t.Helper()
	_, cc := readConfig(t, c, ns)
	local := map[string]string{}
	for _, m := range cc.Members {
		u, err := url.Parse(m.SidecarURL)
		if err != nil {
			t.Fatal(err)
		}
		local[m.Name] = u.Host
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, _ := strings.Cut(addr, ".") // <member>.<cluster>-peer.<ns>.svc:<port>
		if to, ok := local[host]; ok {
			addr = to
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	return &operator.Sidecars{Client: c, APIReader: c, HTTP: &http.Client{Transport: &http.Transport{DialContext: dial}}}
}
