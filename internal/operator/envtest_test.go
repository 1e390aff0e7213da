package operator

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/kubeview"
	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/etcd-steward/steward/internal/testutil/kubemembers"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"go.uber.org/zap/zapcore"
)

// The suite runs one real kube-apiserver (and its etcd), built by `make kube-tools` into
// bin/k8s, with the CRDs from deploy/crd, and the operator against it. No kubelet and no
// StatefulSet controller run here: the tests play them (they create the member pods and mark
// them Ready) and play the sidecars (they renew the member Leases). test/e2e runs the real ones.
var (
	k8s        client.Client
	restConfig *rest.Config
	kubeconfig string
	reconciler *ClusterReconciler
	envErr     string
	// restoreReconciler takes its full snapshots from sidecars, the tests' stand-in for the
	// members' sidecars (no member runs here).
	restoreReconciler *RestoreReconciler
	sidecars          *fakeSidecars
)

// testOperatorNamespace is where the operator's pods would run, as the reconciler is told.
const testOperatorNamespace = "steward-system"

// testAllowedImages is the operator's --allowed-images: the clusters of the other tests run
// the default image, which is always allowed.
var testAllowedImages = []string{"registry.example.com/steward:*"}

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

// envtestParallel is how many of the tests that call t.Parallel run at once, unless
// -test.parallel says otherwise: they wait on the API server and on the operator's graces far
// more than they use the CPU (mostly idle with two at a time, the default on 2 cores).
const envtestParallel = "4"

func runSuite(m *testing.M) int {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", envtestParallel); err != nil {
			panic(err)
		}
	}
	api, err := testutil.StartAPIServer()
	if errors.Is(err, testutil.ErrNoKubeTools) {
		envErr = err.Error()
		return m.Run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer api.Stop()
	// The operator logs at debug level (V(1), the most verbose the operator uses) into
	// operatorLog, which the secret-grep test reads; errors also go to stderr. (Below V(4),
	// controller-runtime's own work queue logs its items, racing with the queue.)
	log.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(operatorLog, errorLines{os.Stderr})), zap.Level(zapcore.DebugLevel)))
	restConfig, kubeconfig = api.Config, api.Kubeconfig
	scheme, err := Scheme()
	if err != nil {
		panic(err)
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: stewardObjectsOnly()}})
	if err != nil {
		panic(err)
	}
	sidecars = newFakeSidecars()
	defer sidecars.Close()
	reconciler = &ClusterReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: eventRecorder(mgr),
		Image: "steward:test", AllowedImages: testAllowedImages, OperatorNamespace: testOperatorNamespace, Graces: Graces{Unknown: 2 * time.Second, NotReady: 4 * time.Second, Volume: time.Second, Rollout: 20 * time.Second, CAPropagation: 2 * time.Second},
		Sidecars: &Sidecars{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), HTTP: sidecars.Client()},
		Health:   &http.Client{Transport: healthTransport{}}}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		panic(err)
	}
	if err := (&BackupReconciler{Client: mgr.GetClient(), Recorder: eventRecorder(mgr),
		Sidecars: &Sidecars{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), HTTP: &http.Client{Transport: sidecarTransport{}}}}).SetupWithManager(mgr); err != nil {
		panic(err)
	}
	restoreReconciler = &RestoreReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: eventRecorder(mgr),
		Sidecars: &Sidecars{Client: mgr.GetClient(), HTTP: sidecars.Client()}}
	if err := restoreReconciler.SetupWithManager(mgr); err != nil {
		panic(err)
	}
	k8s, err = client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	<-done
	return code
}

func needEnv(t *testing.T) {
	t.Helper()
	if envErr != "" {
		if os.Getenv("STEWARD_REQUIRE_TOOLS") != "" {
			t.Fatal(envErr)
		}
		t.Skip(envErr)
	}
}

// namespace creates a namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// newCluster is a cluster without TLS and authentication, spelled out (a new cluster gets
// both by default): the tests of TLS and authentication turn them on, those of the defaults
// leave spec.tls and spec.auth out (newDefaultCluster).
func newCluster(ns, name string, replicas int32) *v1alpha1.EtcdCluster {
	ec := newDefaultCluster(ns, name, replicas)
	ec.Spec.TLS, ec.Spec.Auth = &v1alpha1.TLSSpec{}, &v1alpha1.AuthSpec{}
	return ec
}

// newDefaultCluster is a cluster whose spec leaves TLS and authentication to the defaults.
func newDefaultCluster(ns, name string, replicas int32) *v1alpha1.EtcdCluster {
	return &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: replicas}}
}

// deleteCluster deletes the EtcdCluster and waits until the operator's finalizer let it go.
func deleteCluster(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	if err := k8s.Delete(context.Background(), getCluster(t, ns, name)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, timeout, "the cluster deleted", func() error {
		if err := get(t, ns, name, &v1alpha1.EtcdCluster{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
}

func get(t *testing.T, ns, name string, obj client.Object) error {
	t.Helper()
	return k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
}

func getCluster(t *testing.T, ns, name string) *v1alpha1.EtcdCluster {
	t.Helper()
	ec := &v1alpha1.EtcdCluster{}
	if err := get(t, ns, name, ec); err != nil {
		t.Fatal(err)
	}
	return ec
}

// updateCluster changes the cluster as a user would, again on a conflict: the operator writes
// the status meanwhile, which changes the object's version.
func updateCluster(t *testing.T, ns, name string, change func(*v1alpha1.EtcdCluster)) {
	t.Helper()
	// The operator may write the status several times a second (a requeue every second while
	// it waits): retry for a few seconds, not retry.DefaultRetry's 50 ms.
	backoff := wait.Backoff{Steps: 30, Duration: 20 * time.Millisecond, Factor: 1.3, Cap: time.Second, Jitter: 0.2}
	if err := retry.RetryOnConflict(backoff, func() error {
		ec := getCluster(t, ns, name)
		change(ec)
		return k8s.Update(context.Background(), ec)
	}); err != nil {
		t.Fatal(err)
	}
}

// waitStatefulSet waits for the operator to have made the cluster's StatefulSet, which the
// harness's members need.
func waitStatefulSet(t *testing.T, ns, name string) appsv1.StatefulSet {
	t.Helper()
	var sts appsv1.StatefulSet
	testutil.Eventually(t, time.Minute, "the StatefulSet "+name, func() error { return get(t, ns, name, &sts) })
	return sts
}

// harnessRevision is the one revision of the pods members makes.
const harnessRevision = kubemembers.Revision

// members plays the StatefulSet controller, the kubelet and the sidecars: it makes the pods
// 0..replicas-1 of the StatefulSet exist (deleting those above), marks the pods of ready
// ordinals Ready, and renews those members' Leases with "<id>:<role>" (ordinal 0 leads).
func members(t *testing.T, ns, name string, ready func(i int) bool) int32 {
	return membersRenewing(t, ns, name, ready, ready)
}

// membersRenewing is members with the sidecars that renew their Lease chosen apart.
func membersRenewing(t *testing.T, ns, name string, ready, renewing func(i int) bool) int32 {
	t.Helper()
	var sts appsv1.StatefulSet
	if err := get(t, ns, name, &sts); err != nil {
		t.Fatal(err)
	}
	// A member the ConfigMap no longer lists was removed from etcd by the leader's sidecar:
	// its etcd stopped, so its pod is not Ready and its Lease is not renewed.
	listed := map[string]bool{}
	var cm corev1.ConfigMap
	if err := get(t, ns, name+"-config", &cm); err == nil {
		if cc, err := v1alpha1.ParseClusterConfig(cm.Data); err == nil {
			for _, m := range cc.Members {
				listed[m.Name] = true
			}
		}
	}
	removed := func(i int) bool { return len(listed) > 0 && !listed[fmt.Sprintf("%s-%d", name, i)] }
	n, err := kubemembers.Pods(context.Background(), k8s, &sts, func(i int) bool { return ready(i) && !removed(i) })
	if err != nil {
		t.Fatal(err)
	}
	for i := int32(0); i < n; i++ {
		if !renewing(int(i)) || removed(int(i)) {
			continue
		}
		pn := fmt.Sprintf("%s-%d", name, i)
		if i == 0 {
			leaderReport(t, ns, name, pn)
		}
		renew(t, ns, pn, fmt.Sprintf("%x:%s", 0xa0+i, map[bool]string{true: v1alpha1.RoleLeader, false: v1alpha1.RoleMember}[i == 0]))
	}
	return n
}

// podOwners are the owner references the StatefulSet controller gives the pods it makes.
func podOwners(sts *appsv1.StatefulSet) []metav1.OwnerReference { return kubemembers.Owners(sts) }

func all(int) bool { return true }

// leaderReport plays the leader's sidecar: etcd lists exactly the members of the ConfigMap
// (the leader's sidecar removes the others), and the report says so.
func leaderReport(t *testing.T, ns, name, leader string) {
	t.Helper()
	ctx := context.Background()
	var cm corev1.ConfigMap
	if err := get(t, ns, name+"-config", &cm); err != nil {
		t.Fatal(err)
	}
	var cc v1alpha1.ClusterConfig
	if err := yaml.Unmarshal([]byte(cm.Data[v1alpha1.ClusterConfigKey]), &cc); err != nil {
		t.Fatal(err)
	}
	r := cluster.Report{Name: leader, At: time.Now(), Serving: true, Formed: true, Leader: true, ClusterID: "c1", MemberID: "a0"}
	for _, m := range cc.Members {
		r.Members = append(r.Members, cluster.LiveMember{Name: m.Name})
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var em v1alpha1.EtcdMember
	if err := get(t, ns, leader, &em); err != nil {
		if apierrors.IsNotFound(err) {
			return // the operator creates it on its next pass
		}
		t.Fatal(err)
	}
	if em.Status.Report != nil && string(em.Status.Report.Raw) != "" {
		var old cluster.Report
		if json.Unmarshal(em.Status.Report.Raw, &old) == nil && len(old.Members) == len(r.Members) {
			return // unchanged: no write, as the real sidecar
		}
	}
	em.Status.Report = &runtime.RawExtension{Raw: raw}
	if err := k8s.Status().Update(ctx, &em); err != nil && !apierrors.IsConflict(err) {
		t.Fatal(err)
	}
}

// renew renews a member Lease as its sidecar does.
func renew(t *testing.T, ns, name, holder string) {
	t.Helper()
	var l coordinationv1.Lease
	if err := get(t, ns, name, &l); err != nil {
		if apierrors.IsNotFound(err) {
			return // the operator creates it on its next pass
		}
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity, l.Spec.RenewTime = &holder, &now
	if err := k8s.Update(context.Background(), &l); err != nil && !apierrors.IsConflict(err) {
		t.Fatal(err)
	}
}

// poke changes an annotation of the cluster, so the operator reconciles it again.
func poke(t *testing.T, ns, name, v string) {
	t.Helper()
	updateCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) {
		if ec.Annotations == nil {
			ec.Annotations = map[string]string{}
		}
		ec.Annotations["test/poke"] = v
	})
}

func condition(ec *v1alpha1.EtcdCluster, typ string) metav1.ConditionStatus {
	if c := apimeta.FindStatusCondition(ec.Status.Conditions, typ); c != nil {
		return c.Status
	}
	return ""
}

// waitReady drives the members until the cluster reports n of n Ready.
func waitReady(t *testing.T, ns, name string, n int32) *v1alpha1.EtcdCluster {
	t.Helper()
	var ec *v1alpha1.EtcdCluster
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("%s Ready with %d members", name, n), func() error {
		members(t, ns, name, all)
		ec = getCluster(t, ns, name)
		if ec.Status.ReadyReplicas != n || ec.Status.Replicas != n || condition(ec, v1alpha1.ConditionAllMembersReady) != metav1.ConditionTrue {
			return fmt.Errorf("status: %d/%d ready of %d, conditions %v", ec.Status.ReadyReplicas, ec.Status.Replicas, n, ec.Status.Conditions)
		}
		return nil
	})
	return ec
}

func TestCreateMakesEveryOwnedObject(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "main", 3)
	ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://backups/main", CredentialsSecret: &corev1.LocalObjectReference{Name: "store"}}
	ec.Spec.PodMetadata.Labels = map[string]string{"team": "a"}
	if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "store"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "id"}}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	testutil.Eventually(t, 20*time.Second, "StatefulSet main", func() error { return get(t, ns, "main", &sts) })

	if *sts.Spec.Replicas != 3 || sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType ||
		sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement || sts.Spec.ServiceName != "main-peer" {
		t.Errorf("StatefulSet spec: replicas %d, update %s, policy %s, service %s", *sts.Spec.Replicas,
			sts.Spec.UpdateStrategy.Type, sts.Spec.PodManagementPolicy, sts.Spec.ServiceName)
	}
	pod := sts.Spec.Template
	if len(pod.Spec.Containers) != 2 || pod.Spec.Containers[0].Name != "etcd" || pod.Spec.Containers[1].Name != "sidecar" ||
		pod.Spec.Containers[0].Image != "steward:test" || pod.Spec.ServiceAccountName != "main" {
		t.Errorf("pod template: %+v", pod.Spec)
	}
	if pod.Labels["team"] != "a" || pod.Labels[LabelCluster] != "main" {
		t.Errorf("pod labels %v", pod.Labels)
	}
	if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "store" }) ||
		!slices.Contains(pod.Spec.Containers[1].Command, BackupCredentialsMount) {
		t.Errorf("sidecar %v, volumes %v: the store credentials come from the Secret, mounted into the sidecar", pod.Spec.Containers[1].Command, pod.Spec.Volumes)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().Cmp(resource.MustParse("8Gi")) != 0 {
		t.Errorf("claim templates %v", sts.Spec.VolumeClaimTemplates)
	}
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("claims must survive scaling to 0 (fencing keeps the survivors' data): %v", p)
	}
	if c := pod.Spec.TopologySpreadConstraints; len(c) != 2 || c[0].TopologyKey != corev1.LabelHostname || c[0].WhenUnsatisfiable != corev1.DoNotSchedule ||
		c[1].TopologyKey != corev1.LabelTopologyZone || c[1].WhenUnsatisfiable != corev1.ScheduleAnyway {
		t.Errorf("default spread: over nodes required, then over zones preferred; got %v", c)
	}

	var cm corev1.ConfigMap
	if err := get(t, ns, "main-config", &cm); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"main-2.main-peer." + ns + ".svc:2380", "store: s3://backups/main", "token: " + string(getCluster(t, ns, "main").UID)} {
		if !strings.Contains(cm.Data[v1alpha1.ClusterConfigKey], want) {
			t.Errorf("ConfigMap %s lacks %q:\n%s", v1alpha1.ClusterConfigKey, want, cm.Data[v1alpha1.ClusterConfigKey])
		}
	}
	var peer, clientSvc corev1.Service
	if err := get(t, ns, "main-peer", &peer); err != nil {
		t.Fatal(err)
	}
	if peer.Spec.ClusterIP != corev1.ClusterIPNone || !peer.Spec.PublishNotReadyAddresses {
		t.Errorf("peer Service must be headless and publish not-ready addresses: %+v", peer.Spec)
	}
	if err := get(t, ns, "main-client", &clientSvc); err != nil || clientSvc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Errorf("client Service: %v %+v", err, clientSvc.Spec)
	}
	for _, l := range []string{"main-0", "main-1", "main-2", "main-full-snapshot", "main-delta-snapshot"} {
		var lease coordinationv1.Lease
		if err := get(t, ns, l, &lease); err != nil {
			t.Errorf("Lease %s: %v", l, err)
		} else if lease.Spec.HolderIdentity != nil {
			t.Errorf("Lease %s is created empty; its sidecar sets the holder", l)
		}
	}
	var pdb policyv1.PodDisruptionBudget
	if err := get(t, ns, "main", &pdb); err != nil || pdb.Spec.MinAvailable.IntValue() != 3 {
		t.Errorf("PDB: %v, minAvailable %v (3 until the members are Ready)", err, pdb.Spec.MinAvailable)
	}
	var role rbacv1.Role
	if err := get(t, ns, "main", &role); err != nil {
		t.Fatal(err)
	}
	for _, rule := range role.Rules {
		// Events are created under generated names; EtcdMembers and Leases are listed
		// namespace-wide (list and watch cannot name several objects) but only read: every
		// write is limited by name.
		readOnly := !strings.Contains(strings.Join(rule.Verbs, ","), "update") && !strings.Contains(strings.Join(rule.Verbs, ","), "patch")
		if len(rule.ResourceNames) == 0 && rule.Resources[0] != "events" && !((rule.Resources[0] == "etcdmembers" || rule.Resources[0] == "leases") && readOnly) {
			t.Errorf("sidecar rule %v is not limited to this cluster's objects", rule)
		}
	}
	for _, obj := range []client.Object{&corev1.ServiceAccount{}, &rbacv1.RoleBinding{}} {
		if err := get(t, ns, "main", obj); err != nil {
			t.Errorf("%T main: %v", obj, err)
		}
	}
	for _, obj := range []client.Object{&sts, &cm, &peer, &pdb, &role} {
		if refs := obj.GetOwnerReferences(); len(refs) != 1 || refs[0].Kind != "EtcdCluster" || refs[0].Controller == nil || !*refs[0].Controller {
			t.Errorf("%s: owner references %v", obj.GetName(), refs)
		}
	}

	got := waitReady(t, ns, "main", 3)
	if !strings.Contains(strings.Join(got.Finalizers, ","), Finalizer) {
		t.Errorf("finalizers %v", got.Finalizers)
	}
	if got.Status.ObservedGeneration != got.Generation || got.Status.Leader != "main-0" || got.Status.ReadyMembers != "3/3" ||
		got.Status.Members[1].ID != "a1" || got.Status.Members[1].Role != v1alpha1.RoleMember || got.Status.Selector == "" {
		t.Errorf("status %+v", got.Status)
	}
	// Every member is Ready but no snapshot is stored yet: the budget allows no eviction.
	if err := get(t, ns, "main", &pdb); err != nil || pdb.Spec.MinAvailable.IntValue() != 3 {
		t.Errorf("PDB minAvailable %v with backups not current, want 3", pdb.Spec.MinAvailable)
	}
	if condition(got, v1alpha1.ConditionBackupReady) != metav1.ConditionFalse {
		t.Errorf("BackupReady %v before any snapshot", condition(got, v1alpha1.ConditionBackupReady))
	}
	// The backup leader stores a delta and renews the delta-snapshot Lease (holder = revision).
	renew(t, ns, "main-delta-snapshot", "42")
	testutil.Eventually(t, 10*time.Second, "BackupReady and minAvailable 2", func() error {
		renew(t, ns, "main-delta-snapshot", "42")
		if err := get(t, ns, "main", &pdb); err != nil {
			return err
		}
		ec := getCluster(t, ns, "main")
		if pdb.Spec.MinAvailable.IntValue() != 2 || condition(ec, v1alpha1.ConditionBackupReady) != metav1.ConditionTrue || ec.Status.LastBackupTime == nil {
			return fmt.Errorf("minAvailable %v, BackupReady %v", pdb.Spec.MinAvailable, condition(ec, v1alpha1.ConditionBackupReady))
		}
		if d := ec.Status.LastDeltaSnapshot; d == nil || d.Revision != 42 {
			return fmt.Errorf("status.lastDeltaSnapshot %+v, want revision 42 from the Lease", d)
		}
		return nil
	})
}

func TestMemberLeaseExpiryAndNotReadyPodDeleted(t *testing.T) {
	t.Parallel() // its own namespace
	needEnv(t)
	ns := namespace(t)
	if err := k8s.Create(context.Background(), newCluster(ns, "c", 3)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ns, "c", &appsv1.StatefulSet{}) })
	waitReady(t, ns, "c", 3)

	// Member 2's sidecar stops renewing its Lease (2s here), its renewTime a minute behind the
	// operator's clock: the operator judges freshness by when it saw a renewal, so c-2 turns
	// Unknown only once the Lease lapses after the operator last saw it renewed.
	var l coordinationv1.Lease
	if err := get(t, ns, "c-2", &l); err != nil {
		t.Fatal(err)
	}
	past := metav1.NewMicroTime(time.Now().Add(-time.Minute))
	l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &past, ptr(int32(2))
	if err := k8s.Update(context.Background(), &l); err != nil {
		t.Fatal(err)
	}
	var old corev1.Pod
	if err := get(t, ns, "c-2", &old); err != nil {
		t.Fatal(err)
	}
	// Its pod stays Ready (etcd serves): Unknown, past the Unknown grace (2s) still Unknown with
	// the reason saying so; the cluster stays Ready, Degraded names the cause, nothing is deleted.
	seen := map[string]bool{}
	testutil.Eventually(t, 30*time.Second, "c-2 Unknown past the Unknown grace", func() error {
		membersRenewing(t, ns, "c", all, func(i int) bool { return i < 2 })
		ec := getCluster(t, ns, "c")
		m := ec.Status.Members[2]
		seen[m.Status+"/"+m.Reason] = true
		if m.Status != v1alpha1.MemberUnknown || m.Reason != v1alpha1.ReasonUnknownGracePeriodExceeded {
			return fmt.Errorf("c-2 is %s/%s; seen %v", m.Status, m.Reason, seen)
		}
		if c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionTrue ||
			!strings.Contains(c.Message, "have not renewed their Leases") {
			return fmt.Errorf("Degraded: %+v", c)
		}
		return nil
	})
	if !seen[v1alpha1.MemberUnknown+"/"+v1alpha1.ReasonLeaseExpired] {
		t.Errorf("c-2 never showed Unknown/LeaseExpired: %v", seen)
	}
	// Three NotReady graces (4s each) later: still serving, nothing deleted, no fence.
	testutil.Throughout(t, 3*4*time.Second, "c-2 Unknown, serving, its pod kept", func() error {
		membersRenewing(t, ns, "c", all, func(i int) bool { return i < 2 })
		ec := getCluster(t, ns, "c")
		if m := ec.Status.Members[2]; m.Status != v1alpha1.MemberUnknown {
			return fmt.Errorf("c-2, its pod Ready and its Lease not renewed, turned %s/%s", m.Status, m.Reason)
		}
		if condition(ec, v1alpha1.ConditionReady) != metav1.ConditionTrue || condition(ec, v1alpha1.ConditionQuorumLost) == metav1.ConditionTrue {
			return fmt.Errorf("conditions %v", ec.Status.Conditions)
		}
		var p corev1.Pod
		if err := get(t, ns, "c-2", &p); err != nil || p.UID != old.UID || !p.DeletionTimestamp.IsZero() {
			return fmt.Errorf("pod c-2, Ready with its Lease not renewed, was deleted (%v)", err)
		}
		return nil
	})

	// Its sidecar renews again: the first renewal after the lapse wakes the operator (renewals
	// otherwise wake nothing), and c-2 is Ready again at once, not at the next 5-minute pass.
	testutil.Eventually(t, 10*time.Second, "c-2 Ready again after its first renewal", func() error {
		membersRenewing(t, ns, "c", all, all)
		if m := getCluster(t, ns, "c").Status.Members[2]; m.Status != v1alpha1.MemberReady {
			return fmt.Errorf("c-2 is %s/%s", m.Status, m.Reason)
		}
		return nil
	})

	// Its pod turns NotReady (the kubelet's probe, etcd's own read, fails): past the NotReady
	// grace (4s) the operator deletes it (case 9).
	testutil.Eventually(t, 30*time.Second, "pod c-2 deleted", func() error {
		membersRenewing(t, ns, "c", func(i int) bool { return i < 2 }, func(i int) bool { return i < 2 })
		var p corev1.Pod
		err := get(t, ns, "c-2", &p)
		if apierrors.IsNotFound(err) || (err == nil && (p.UID != old.UID || !p.DeletionTimestamp.IsZero())) {
			return nil
		}
		return fmt.Errorf("pod c-2 still there (%v)", err)
	})
	testutil.Eventually(t, 10*time.Second, "Event MemberRestarted", func() error { return findEvent(ns, "MemberRestarted") })
}

func findEvent(ns, reason string) error {
	var evs eventsv1.EventList
	if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		return err
	}
	var reasons []string
	for _, e := range evs.Items {
		if e.Reason == reason {
			return nil
		}
		reasons = append(reasons, e.Reason)
	}
	return fmt.Errorf("no Event %s among %v", reason, reasons)
}

func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return kubectlIn(t, "", args...)
}

// kubectlIn is kubectl reading stdin (a manifest for "-f -").
func kubectlIn(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(testutil.KubeBin(), "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestScaleOneThreeFiveThree scales through the scale subresource (kubectl scale) and checks
// that the StatefulSet grows and shrinks one member at a time, each step after every member
// is Ready, and that member Leases follow.
func TestScaleOneThreeFiveThree(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := namespace(t)
	if err := k8s.Create(context.Background(), newCluster(ns, "s", 1)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ns, "s", &appsv1.StatefulSet{}) })
	waitReady(t, ns, "s", 1)

	// Every size the operator writes to the StatefulSet, from a watch (polling could miss one).
	wc, err := client.NewWithWatch(restConfig, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &appsv1.StatefulSetList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	sizes := make(chan int32, 100)
	go func() {
		for ev := range w.ResultChan() {
			if sts, ok := ev.Object.(*appsv1.StatefulSet); ok {
				sizes <- *sts.Spec.Replicas
			}
		}
	}()
	last := int32(1)
	for _, n := range []int32{3, 5, 3} {
		if out, err := kubectl(t, "-n", ns, "scale", "ec/s", fmt.Sprintf("--replicas=%d", n)); err != nil {
			t.Fatalf("kubectl scale: %v\n%s", err, out)
		}
		testutil.Eventually(t, 60*time.Second, fmt.Sprintf("scaled to %d", n), func() error {
			size := members(t, ns, "s", all)
			ec := getCluster(t, ns, "s")
			if size != n || ec.Status.ReadyReplicas != n || ec.Status.ClusterSize != n {
				return fmt.Errorf("StatefulSet %d, ready %d, cluster size %d", size, ec.Status.ReadyReplicas, ec.Status.ClusterSize)
			}
			return nil
		})
		for drained := false; !drained; {
			select {
			case size := <-sizes:
				if d := size - last; d > 1 || d < -1 {
					t.Errorf("StatefulSet went from %d to %d members at once", last, size)
				}
				last = size
			default:
				drained = true
			}
		}
		var leases coordinationv1.LeaseList
		if err := k8s.List(context.Background(), &leases, client.InNamespace(ns), client.MatchingLabels{LabelLeaseKind: "member"}); err != nil {
			t.Fatal(err)
		}
		if int32(len(leases.Items)) != n {
			t.Errorf("%d member Leases at size %d", len(leases.Items), n)
		}
	}
	out, err := kubectl(t, "-n", ns, "get", "ec", "s")
	if err != nil {
		t.Fatalf("kubectl get ec: %v\n%s", err, out)
	}
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if want := "NAME READY MEMBERS LEADER REVISION LAST BACKUP RECOVERABLE SINCE AGE"; strings.Join(header, " ") != want {
		t.Errorf("kubectl get ec header %q, want %q", strings.Join(header, " "), want)
	}
	if !strings.Contains(out, "3/3") || !strings.Contains(out, "s-0") {
		t.Errorf("kubectl get ec:\n%s", out)
	}
}

func TestPauseStopsReconciliation(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "p", 1)
	ec.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "Progressing=False Paused", func() error {
		c := apimeta.FindStatusCondition(getCluster(t, ns, "p").Status.Conditions, v1alpha1.ConditionProgressing)
		if c == nil || c.Reason != "Paused" {
			return fmt.Errorf("Progressing %v", c)
		}
		return nil
	})
	if err := get(t, ns, "p", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a paused cluster got its StatefulSet: %v", err)
	}
	updateCluster(t, ns, "p", func(ec *v1alpha1.EtcdCluster) { delete(ec.Annotations, v1alpha1.AnnotationPaused) })
	testutil.Eventually(t, 20*time.Second, "StatefulSet after resuming", func() error { return get(t, ns, "p", &appsv1.StatefulSet{}) })
}

// TestAtRestNoWrites: reconciling a cluster that does not change writes nothing.
func TestAtRestNoWrites(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	if err := k8s.Create(context.Background(), newCluster(ns, "r", 3)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ns, "r", &appsv1.StatefulSet{}) })
	waitReady(t, ns, "r", 3)
	versions := func() map[string]string {
		v := map[string]string{}
		for _, obj := range []client.Object{&v1alpha1.EtcdCluster{}, &appsv1.StatefulSet{}, &policyv1.PodDisruptionBudget{}, &rbacv1.Role{}, &corev1.ServiceAccount{}, &rbacv1.RoleBinding{},
			&networkingv1.NetworkPolicy{}} {
			if err := get(t, ns, "r", obj); err != nil {
				t.Fatal(err)
			}
			v[fmt.Sprintf("%T", obj)] = obj.GetResourceVersion()
		}
		for _, name := range []string{"r-config", "r-peer", "r-client"} {
			var obj client.Object = &corev1.Service{}
			if name == "r-config" {
				obj = &corev1.ConfigMap{}
			}
			if err := get(t, ns, name, obj); err != nil {
				t.Fatal(err)
			}
			v[name] = obj.GetResourceVersion()
		}
		return v
	}
	// Let the operator settle (its last writes land, including retries after a conflict a
	// second later), then reconcile directly several times.
	var before map[string]string
	var since time.Time
	testutil.Eventually(t, 30*time.Second, "settled", func() error {
		v := versions()
		if fmt.Sprint(v) != fmt.Sprint(before) {
			before, since = v, time.Now()
			return fmt.Errorf("still changing")
		}
		if time.Since(since) < 3*time.Second {
			return fmt.Errorf("unchanged for %s only", time.Since(since).Round(time.Millisecond))
		}
		return nil
	})
	// The sidecars keep renewing their Leases (a renewal alone changes nothing).
	membersRenewing(t, ns, "r", all, all)
	for i := 0; i < 5; i++ {
		if _, err := reconciler.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "r"}}); err != nil {
			t.Fatal(err)
		}
	}
	if after := versions(); fmt.Sprint(after) != fmt.Sprint(before) {
		ec := getCluster(t, ns, "r")
		raw := ""
		if ec.Status.Recovery != nil {
			raw = string(ec.Status.Recovery.Raw)
		}
		t.Errorf("reconciling an unchanged cluster wrote objects:\nbefore %v\nafter  %v\nstatus %+v\nrecovery %s", before, after, ec.Status, raw)
	}
}

func TestDeleteCleansUp(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	if err := k8s.Create(ctx, newCluster(ns, "d", 3)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ns, "d", &appsv1.StatefulSet{}) })
	if err := k8s.Delete(ctx, getCluster(t, ns, "d")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "everything deleted", func() error {
		for _, obj := range []client.Object{&v1alpha1.EtcdCluster{}, &appsv1.StatefulSet{}, &policyv1.PodDisruptionBudget{}, &rbacv1.Role{},
			&rbacv1.RoleBinding{}, &corev1.ServiceAccount{}} {
			if err := get(t, ns, "d", obj); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T d still exists (%v)", obj, err)
			}
		}
		for _, name := range []string{"d-config", "d-peer", "d-client", "d-0", "d-full-snapshot", "d-sidecar-token"} {
			for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.Service{}, &coordinationv1.Lease{}, &corev1.Secret{}} {
				if err := get(t, ns, name, obj); err == nil {
					return fmt.Errorf("%T %s still exists", obj, name)
				}
			}
		}
		return nil
	})
}

// TestValidation: the API server itself accepts good specs and refuses bad ones with a
// message that names the field (CEL and OpenAPI rules in the CRD).
func TestValidation(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	dur := func(s string) *metav1.Duration { d, _ := time.ParseDuration(s); return &metav1.Duration{Duration: d} }
	rev := int64(7)
	now := metav1.Now()
	good := func(name string) *v1alpha1.EtcdCluster {
		ec := newCluster(ns, name, 3)
		ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://b/p", Retention: "limit:3", DeltaPeriod: dur("10s")}
		ec.Spec.Etcd = v1alpha1.EtcdSpec{HeartbeatInterval: dur("100ms"), ElectionTimeout: dur("1s")}
		return ec
	}
	create := []struct {
		name   string
		mutate func(*v1alpha1.EtcdCluster)
		want   string // "" = accepted
	}{
		{"valid", func(*v1alpha1.EtcdCluster) {}, ""},
		{"zero replicas stop the cluster", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Replicas = 0 }, ""},
		{"negative replicas", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Replicas = -1 }, "spec.replicas"},
		{"store without scheme", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Backup.Store = "/var/backups" }, "spec.backup.store must be a URL"},
		{"bad retention", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Backup.Retention = "limit:0" }, "spec.backup.retention must be"},
		{"election below 5 heartbeats", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Etcd.ElectionTimeout = dur("300ms") }, "spec.etcd.electionTimeout must be at least 5 times"},
		{"emptyDir with a storage class", func(ec *v1alpha1.EtcdCluster) {
			sc := "fast"
			ec.Spec.Storage = v1alpha1.StorageSpec{EmptyDir: &v1alpha1.EmptyDirStorage{}, StorageClassName: &sc}
		}, "storageClassName applies to volume claims only"},
		{"restore to a revision and a time", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.Bootstrap = &v1alpha1.BootstrapSpec{Restore: &v1alpha1.RestoreSource{Store: "s3://b/old", Revision: &rev, Time: &now}}
		}, "give revision or time, not both"},
		{"restore from the store the new cluster backs up to", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.Bootstrap = &v1alpha1.BootstrapSpec{Restore: &v1alpha1.RestoreSource{Store: "s3://b/p"}}
		}, "spec.bootstrap.restore.store must differ from spec.backup.store"},
		{"restore from the same store spelled otherwise", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.Bootstrap = &v1alpha1.BootstrapSpec{Restore: &v1alpha1.RestoreSource{Store: "s3://b/p/?region=eu-west-1"}}
		}, "spec.bootstrap.restore.store must differ from spec.backup.store"},
		{"restore from another prefix of the bucket", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.Bootstrap = &v1alpha1.BootstrapSpec{Restore: &v1alpha1.RestoreSource{Store: "s3://b/p2"}}
		}, ""},
		{"name of 52 characters", func(ec *v1alpha1.EtcdCluster) { ec.Name = "n" + strings.Repeat("a", 51) }, ""},
		{"name of 53 characters", func(ec *v1alpha1.EtcdCluster) { ec.Name = "n" + strings.Repeat("a", 52) }, "metadata.name must be at most 52 characters"},
		{"name starting with a digit", func(ec *v1alpha1.EtcdCluster) { ec.Name = "1st" }, "metadata.name must start with a lowercase letter"},
		{"name with a dot", func(ec *v1alpha1.EtcdCluster) { ec.Name = "etcd.main" }, "metadata.name must start with a lowercase letter"},
		{"compaction retention in hours", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Etcd.AutoCompactionRetention = "72" }, ""},
		{"compaction retention as a duration", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Etcd.AutoCompactionRetention = "1h30m" }, ""},
		{"compaction retention in words", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Etcd.AutoCompactionRetention = "1 hour" },
			"spec.etcd.autoCompactionRetention must be"},
		{"compaction retention of revisions", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.Etcd.AutoCompactionMode, ec.Spec.Etcd.AutoCompactionRetention = "revision", "10000"
		}, ""},
		{"compaction retention of revisions as a duration", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.Etcd.AutoCompactionMode, ec.Spec.Etcd.AutoCompactionRetention = "revision", "1h"
		}, "spec.etcd.autoCompactionRetention must be"},
		{"unknown quorum-loss policy", func(ec *v1alpha1.EtcdCluster) { ec.Spec.QuorumLoss.Policy = "Sometimes" }, "spec.quorumLoss.policy"},
		{"a pull Secret without a name", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}, {}}
		}, "spec.imagePullSecrets: every entry needs the name of a Secret"},
		{"a ServiceAccount annotation of Steward's", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.ServiceAccount.Annotations = map[string]string{"eks.amazonaws.com/role-arn": "r", "etcd.steward.dev/managed-annotations": "x"}
		}, "keys under etcd.steward.dev/ are Steward's own"},
		{"the user's certificates", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true, ServerSecret: "certs", ClientSecret: "client"}
		}, ""},
		{"the user's certificates with TLS off", func(ec *v1alpha1.EtcdCluster) { ec.Spec.TLS = &v1alpha1.TLSSpec{ServerSecret: "certs"} },
			"spec.tls.serverSecret needs spec.tls.enabled: true"},
		{"a client Secret of the user's alone", func(ec *v1alpha1.EtcdCluster) { ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true, ClientSecret: "client"} },
			"spec.tls.clientSecret goes with spec.tls.serverSecret"},
		// The root password would cross the pod network in clear.
		{"authentication without TLS", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Auth = &v1alpha1.AuthSpec{Enabled: true} },
			"spec.auth.enabled: true needs TLS: without it the root password that Steward's clients log in with would cross the pod network in clear"},
		{"authentication with TLS", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.TLS, ec.Spec.Auth = &v1alpha1.TLSSpec{Enabled: true}, &v1alpha1.AuthSpec{Enabled: true}
		}, ""},
		{"authentication with TLS by default", func(ec *v1alpha1.EtcdCluster) { ec.Spec.TLS, ec.Spec.Auth = nil, &v1alpha1.AuthSpec{Enabled: true} }, ""},
		{"TLS and authentication by default", func(ec *v1alpha1.EtcdCluster) { ec.Spec.TLS, ec.Spec.Auth = nil, nil }, ""},
	}
	for i, tc := range create {
		t.Run(tc.name, func(t *testing.T) {
			ec := good(fmt.Sprintf("v%d", i))
			tc.mutate(ec)
			err := k8s.Create(ctx, ec, client.DryRunAll)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted; want refused with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("refused with %v; want the message to contain %q", err, tc.want)
			}
		})
	}

	// Immutable fields: storage, bootstrap and TLS; authentication only goes on, with its Secret.
	type change struct {
		name   string
		mutate func(*v1alpha1.EtcdCluster)
		want   string
	}
	updates := func(name string, changes []change) {
		for _, tc := range changes {
			t.Run("update "+name+" "+tc.name, func(t *testing.T) {
				var err error
				for try := 0; try < 10; try++ { // the operator writes the finalizer and status meanwhile
					cur := getCluster(t, ns, name)
					tc.mutate(cur)
					if err = k8s.Update(ctx, cur, client.DryRunAll); !apierrors.IsConflict(err) {
						break
					}
				}
				switch {
				case tc.want == "" && err != nil:
					t.Fatalf("refused: %v", err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Fatalf("got %v; want refused with %q", err, tc.want)
				}
			})
		}
	}
	ec := good("immutable")
	ec.Spec.Bootstrap = &v1alpha1.BootstrapSpec{Restore: &v1alpha1.RestoreSource{Store: "s3://b/old", Revision: &rev}}
	ec.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	updates("immutable", []change{
		{"scale", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Replicas = 5 }, ""},
		{"storage grown", func(ec *v1alpha1.EtcdCluster) { q := resource.MustParse("20Gi"); ec.Spec.Storage.Size = &q }, ""},
		{"storage shrunk", func(ec *v1alpha1.EtcdCluster) { q := resource.MustParse("4Gi"); ec.Spec.Storage.Size = &q }, "spec.storage.size cannot shrink"},
		{"storage class", func(ec *v1alpha1.EtcdCluster) { c := "fast"; ec.Spec.Storage.StorageClassName = &c }, "spec.storage.storageClassName and spec.storage.emptyDir are immutable"},
		{"storage in an emptyDir", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Storage.EmptyDir = &v1alpha1.EmptyDirStorage{} }, "spec.storage.storageClassName and spec.storage.emptyDir are immutable"},
		{"bootstrap revision", func(ec *v1alpha1.EtcdCluster) { r := int64(8); ec.Spec.Bootstrap.Restore.Revision = &r }, "spec.bootstrap is immutable"},
		{"bootstrap removed", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Bootstrap = nil }, "spec.bootstrap is immutable"},
		{"tls turned on", func(ec *v1alpha1.EtcdCluster) { ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true} }, "spec.tls.enabled is chosen when the cluster is created"},
		// Left out, spec.tls would mean the defaults, which may differ.
		{"tls left out", func(ec *v1alpha1.EtcdCluster) { ec.Spec.TLS = nil }, "spec.tls.enabled is chosen when the cluster is created"},
		{"auth turned on without TLS", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Auth = &v1alpha1.AuthSpec{Enabled: true} }, "spec.auth.enabled: true needs TLS"},
		{"auth turned on without TLS, with a Secret of the user's", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.Auth = &v1alpha1.AuthSpec{Enabled: true, RootPasswordSecret: "mine"}
		}, "spec.auth.enabled: true needs TLS"},
		// The backups of the old store would be out of an EtcdRestore's reach.
		{"backup store moved", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Backup.Store = "s3://b/q" }, "spec.backup.store cannot change in place"},
		{"backup store spelled otherwise", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Backup.Store = "s3://b/p/?region=eu-west-1" }, ""},
		{"backups turned off, the way to move them", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Backup = nil }, ""},
	})
	unbacked := good("unbacked")
	unbacked.Spec.Backup = nil
	unbacked.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"}
	if err := k8s.Create(ctx, unbacked); err != nil {
		t.Fatal(err)
	}
	updates("unbacked", []change{
		{"backups turned on in a new store", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://b/q"} }, ""},
	})
	tlsOnly := good("tls-only")
	tlsOnly.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true}
	tlsOnly.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"}
	if err := k8s.Create(ctx, tlsOnly); err != nil {
		t.Fatal(err)
	}
	updates("tls-only", []change{
		{"auth turned on", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Auth = &v1alpha1.AuthSpec{Enabled: true} }, ""},
		{"auth turned on with a Secret of the user's", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.Auth = &v1alpha1.AuthSpec{Enabled: true, RootPasswordSecret: "mine"}
		}, ""},
		{"tls turned off", func(ec *v1alpha1.EtcdCluster) { ec.Spec.TLS.Enabled = false }, "spec.tls.enabled is chosen when the cluster is created"},
	})
	// Left out, spec.tls and spec.auth are the defaults the operator recorded (status.defaults):
	// what they mean cannot change, and authentication cannot be turned off.
	defaulted := good("defaulted")
	defaulted.Spec.TLS, defaulted.Spec.Auth = nil, nil
	defaulted.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"}
	if err := k8s.Create(ctx, defaulted); err != nil {
		t.Fatal(err)
	}
	updates("defaulted", []change{
		{"tls turned off", func(ec *v1alpha1.EtcdCluster) { ec.Spec.TLS = &v1alpha1.TLSSpec{} }, "spec.tls.enabled is chosen when the cluster is created"},
		{"tls spelled out", func(ec *v1alpha1.EtcdCluster) { ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true} }, "spec.tls.enabled is chosen when the cluster is created"},
		{"auth turned off", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Auth = &v1alpha1.AuthSpec{} }, "spec.auth.enabled: false cannot be added to a running cluster"},
		{"auth spelled out", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Auth = &v1alpha1.AuthSpec{Enabled: true} }, ""},
	})
	authed := good("authed")
	authed.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true}
	authed.Spec.Auth = &v1alpha1.AuthSpec{Enabled: true, RootPasswordSecret: "mine"}
	authed.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"}
	if err := k8s.Create(ctx, authed); err != nil {
		t.Fatal(err)
	}
	updates("authed", []change{
		{"scale", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Replicas = 5 }, ""},
		{"auth turned off", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Auth.Enabled = false }, "spec.auth.enabled cannot be turned off"},
		{"auth removed", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Auth = nil }, "spec.auth.enabled cannot be turned off"},
		{"another password Secret", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Auth.RootPasswordSecret = "yours" }, "spec.auth.rootPasswordSecret cannot change"},
		{"the generated password Secret instead", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Auth.RootPasswordSecret = "" }, "spec.auth.rootPasswordSecret cannot change"},
	})

	provided := good("provided")
	provided.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true, ServerSecret: "certs"}
	provided.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"}
	if err := k8s.Create(ctx, provided); err != nil {
		t.Fatal(err)
	}
	updates("provided", []change{
		{"a client Secret named", func(ec *v1alpha1.EtcdCluster) { ec.Spec.TLS.ClientSecret = "client" }, ""},
		{"another server Secret", func(ec *v1alpha1.EtcdCluster) { ec.Spec.TLS.ServerSecret = "other" }, "spec.tls.serverSecret is chosen when the cluster is created"},
		{"the operator's certificates instead", func(ec *v1alpha1.EtcdCluster) { ec.Spec.TLS.ServerSecret = "" }, "spec.tls.serverSecret is chosen when the cluster is created"},
	})
	updates("immutable", []change{
		{"the user's certificates on a cluster without TLS", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: true, ServerSecret: "certs"}
		}, "spec.tls.serverSecret is chosen when the cluster is created"},
	})

	// EtcdBackup: the cluster it names cannot change.
	b := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"}, Spec: v1alpha1.EtcdBackupSpec{Cluster: "immutable"}}
	if err := k8s.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	var err error
	for try := 0; try < 10; try++ { // the backup reconciler writes its status meanwhile
		if err = get(t, ns, "b", b); err != nil {
			t.Fatal(err)
		}
		b.Spec.Cluster = "other"
		if err = k8s.Update(ctx, b); !apierrors.IsConflict(err) {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "spec.cluster is immutable") {
		t.Errorf("EtcdBackup cluster change: %v", err)
	}
	if out, err := kubectl(t, "-n", ns, "get", "etcdbackup"); err != nil || !strings.Contains(out, "CLUSTER") {
		t.Errorf("kubectl get etcdbackup: %v\n%s", err, out)
	}
}

// operatorPodSelectable checks that the operator's Deployment in manifest labels its pods with
// OperatorPodLabels and gives it POD_NAMESPACE.
func operatorPodSelectable(manifest string) error {
	for _, doc := range strings.Split(manifest, "\n---") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" {
			continue
		}
		for k, v := range OperatorPodLabels {
			if d.Spec.Template.Labels[k] != v {
				return fmt.Errorf("the operator's pods are labelled %v: they lack %s=%s", d.Spec.Template.Labels, k, v)
			}
		}
		if !slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Env, func(e corev1.EnvVar) bool {
			return e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
		}) {
			return fmt.Errorf("the operator is not given POD_NAMESPACE from its pod")
		}
		return nil
	}
	return fmt.Errorf("no Deployment")
}

// TestDeployManifests: the kustomize build and the Helm chart render, and the API server
// accepts every object they hold (server-side dry run).
func TestDeployManifests(t *testing.T) {
	needEnv(t)
	root := testutil.RepoRoot()
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "steward-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kustomized, err := kubectl(t, "kustomize", filepath.Join(root, "deploy"))
	if err != nil {
		t.Fatalf("kustomize build: %v\n%s", err, kustomized)
	}
	helm := testutil.Tool(t, "k8s/helm")
	chart, err := exec.Command(helm, "template", "steward", filepath.Join(root, "deploy", "helm", "steward"),
		"--namespace", "steward-system", "--include-crds", "--set", "metrics.monitors=false").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, chart)
	}
	// The chart names the members' image itself: an operator that had to read it from its own
	// pod could not start while the API server is away, and would crash-loop for minutes after.
	if !strings.Contains(string(chart), "- --member-image=steward:") {
		t.Errorf("helm output: the operator is not given --member-image=steward:... (the chart's own image)")
	}
	crds, err := filepath.Glob(filepath.Join(root, "deploy", "crd", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs in deploy/crd: %v", err)
	}
	for name, manifest := range map[string]string{"kustomize": kustomized, "helm": string(chart)} {
		for _, kind := range []string{"CustomResourceDefinition", "ClusterRole", "Deployment", "ValidatingAdmissionPolicy"} {
			if !strings.Contains(manifest, "kind: "+kind+"\n") {
				t.Errorf("%s output has no %s", name, kind)
			}
		}
		for _, crd := range crds {
			// etcd.steward.dev_etcdmembers.yaml -> etcdmembers.etcd.steward.dev
			group, plural, _ := strings.Cut(strings.TrimSuffix(filepath.Base(crd), ".yaml"), "_")
			if !strings.Contains(manifest, "name: "+plural+"."+group+"\n") {
				t.Errorf("%s output lacks the CRD %s.%s", name, plural, group)
			}
		}
		// The members' NetworkPolicies admit the operator's pods by these labels, and its
		// namespace from POD_NAMESPACE.
		if err := operatorPodSelectable(manifest); err != nil {
			t.Errorf("%s output: %v", name, err)
		}
		if out, err := kubectlIn(t, manifest, "apply", "--dry-run=server", "-f", "-"); err != nil {
			t.Errorf("%s output refused by the API server: %v\n%s", name, err, out)
		}
	}
	// The examples the docs tell users to apply pass the CRDs' validation.
	examples, err := filepath.Glob(filepath.Join(root, "deploy", "examples", "*.yaml"))
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples in deploy/examples: %v", err)
	}
	for _, ex := range examples {
		if out, err := kubectl(t, "apply", "--dry-run=server", "-n", "steward-system", "-f", ex); err != nil {
			t.Errorf("%s refused by the API server: %v\n%s", filepath.Base(ex), err, out)
		}
	}
}

// TestEvenSizeWarns: the ValidatingAdmissionPolicy of deploy/ warns on even sizes and lets
// them through.
func TestEvenSizeWarns(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	if out, err := kubectl(t, "apply", "-f", filepath.Join(testutil.RepoRoot(), "deploy", "policy", "even-size-warning.yaml")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	manifest := fmt.Sprintf("apiVersion: etcd.steward.dev/v1alpha1\nkind: EtcdCluster\nmetadata: {name: even, namespace: %s, annotations: {%s: \"true\"}}\nspec: {replicas: 4}\n", ns, v1alpha1.AnnotationPaused)
	testutil.Eventually(t, 30*time.Second, "a warning for 4 members", func() error {
		out, err := kubectlIn(t, manifest, "apply", "--dry-run=server", "-f", "-")
		if err != nil {
			return fmt.Errorf("refused: %v\n%s", err, out)
		}
		if !strings.Contains(out, "Warning:") || !strings.Contains(out, "spec.replicas is 4") {
			return fmt.Errorf("no warning: %s", out)
		}
		return nil
	})
}

// writeReport writes a member's report into its EtcdMember, as its sidecar does.
func writeReport(t *testing.T, ns string, r cluster.Report, ack *cluster.DirectiveAck) {
	t.Helper()
	var em v1alpha1.EtcdMember
	if err := get(t, ns, r.Name, &em); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	em.Status.Report = &runtime.RawExtension{Raw: raw}
	if ack != nil {
		a, _ := json.Marshal(ack)
		em.Status.Ack = &runtime.RawExtension{Raw: a}
	}
	if err := k8s.Status().Update(context.Background(), &em); err != nil && !apierrors.IsConflict(err) {
		t.Fatal(err)
	}
}

// directive reads the recovery directive from the status.
func directive(t *testing.T, ec *v1alpha1.EtcdCluster) *cluster.Directive {
	t.Helper()
	if ec.Status.Recovery == nil {
		return nil
	}
	var rec struct {
		Directive *cluster.Directive `json:"directive"`
	}
	if err := json.Unmarshal(ec.Status.Recovery.Raw, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Directive
}

// TestQuietAtRest: a formed cluster with backups on, whose members renew their Leases and
// refresh their reports' figures, and whose backup leader publishes each new revision stored
// (as a serving etcd taking writes does every few seconds), causes no write of its
// EtcdCluster: renewals wake nothing, neither does the moving end of the recoverable window,
// an unchanged status is not written again (times read back in another zone included), and
// no message carries an age.
func TestQuietAtRest(t *testing.T) {
	t.Parallel() // its own namespace
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "quiet", 3)
	ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://backups/quiet", DeltaPeriod: &metav1.Duration{Duration: time.Second}}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ns, "quiet", &appsv1.StatefulSet{}) })
	waitReady(t, ns, "quiet", 3)
	// Let the passes that follow readiness settle: the status stops changing.
	var rv string
	var settled []byte
	backupLeader := kubeview.NewReporter(k8s, ns, "quiet", "quiet-0")
	start := time.Now()
	report := func(rev int64) {
		writeReport(t, ns, cluster.Report{Name: "quiet-1", At: time.Now(), Serving: true, Formed: true, ClusterID: "c1", MemberID: "a1", Revision: rev}, nil)
		now := time.Now()
		if err := backupLeader.PublishBackup(ctx, cluster.BackupStatus{Leader: true, Ready: true, Timeline: 1, DeltaPeriod: time.Second,
			LatestFullRevision: 1, LatestFullTime: start, CurrentRevision: rev, CurrentAt: now,
			Recoverable: &cluster.Recoverable{Timeline: 1, ClusterID: "c1", FirstRevision: 1, FirstTime: start, LastRevision: rev, LastTime: now}}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 30*time.Second, "the status settled", func() error {
		members(t, ns, "quiet", all)
		report(99)
		ec := getCluster(t, ns, "quiet")
		if age := time.Since(ec.CreationTimestamp.Time); age < 3*reconciler.Graces.NotReady {
			// A young pod's NotReady grace is a deadline: past it, only lapses wake the operator.
			return fmt.Errorf("the cluster is %s old", age)
		}
		if ec.Status.Recoverability == nil {
			return fmt.Errorf("no recoverable window in the status yet")
		}
		if ec.ResourceVersion != rv {
			rv = ec.ResourceVersion
			settled, _ = json.Marshal(ec)
			return fmt.Errorf("resourceVersion moved to %s", rv)
		}
		return nil
	})
	// Twenty seconds of renewals, report refreshes and backups: no write.
	rev := int64(100)
	testutil.Throughout(t, 20*time.Second, "the EtcdCluster unwritten at rest", func() error {
		members(t, ns, "quiet", all)
		rev++
		report(rev)
		if ec := getCluster(t, ns, "quiet"); ec.ResourceVersion != rv {
			now, _ := json.Marshal(ec)
			return fmt.Errorf("resourceVersion %s, was %s: %s\nwas %s", ec.ResourceVersion, rv, now, settled)
		}
		return nil
	})
}

// answeringHosts holds member hosts whose etcd answers /readyz (a linearizable read) when the
// operator asks it directly, whatever their pods say (healthTransport).
var answeringHosts sync.Map

// healthTransport stands in for the members' etcd health ports, which envtest lacks: a member
// answers /readyz while its pod is Ready (the pod's readiness probe is that same read), or
// while answeringHosts names it.
type healthTransport struct{}

func (healthTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	host := req.URL.Hostname()
	_, ok := answeringHosts.Load(host)
	if parts := strings.Split(host, "."); !ok && len(parts) == 4 {
		var pod corev1.Pod
		ok = k8s.Get(req.Context(), client.ObjectKey{Namespace: parts[2], Name: parts[0]}, &pod) == nil && pod.DeletionTimestamp == nil && podReady(&pod)
	}
	if !ok || req.URL.Path != "/readyz" {
		return nil, fmt.Errorf("dial %s: connection refused", req.URL.Host)
	}
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Body: http.NoBody, Request: req}, nil
}

// TestNoFenceWhileAMemberAnswers: every pod of a formed cluster is NotReady past every grace
// and every Lease stale, but one member's etcd, asked directly, answers a linearizable read
// (pods' readiness and Leases are second-hand; a kubelet or the API server can be behind):
// no pod is deleted, no directive stays, and an Event says why. Once no member answers,
// the recovery fences as before, and only once its directive is stored.
func TestNoFenceWhileAMemberAnswers(t *testing.T) {
	t.Parallel() // its own namespace
	needEnv(t)
	ns := namespace(t)
	createFormed(t, newCluster(ns, "qa", 3))
	host := memberDNS(getCluster(t, ns, "qa"), 1)
	answeringHosts.Store(host, true)
	defer answeringHosts.Delete(host)
	pods := map[string]types.UID{}
	for i := 0; i < 3; i++ {
		var p corev1.Pod
		if err := get(t, ns, fmt.Sprintf("qa-%d", i), &p); err != nil {
			t.Fatal(err)
		}
		pods[p.Name] = p.UID
	}
	none := func(int) bool { return false }
	testutil.Eventually(t, 60*time.Second, "the recovery withdrawn because qa-1 answers", func() error {
		membersRenewing(t, ns, "qa", none, none)
		return findEventMessage(ns, "Recovery", "qa-1 answers a linearizable read")
	})
	// Three recovery graces (4s each) later: no pod deleted, no directive in force.
	testutil.Throughout(t, 12*time.Second, "nothing fenced while qa-1 answers", func() error {
		membersRenewing(t, ns, "qa", none, none)
		if d := directive(t, getCluster(t, ns, "qa")); d != nil && d.Phase != cluster.PhaseFencing {
			return fmt.Errorf("directive %+v while qa-1 answers", d)
		}
		for name, uid := range pods {
			var p corev1.Pod
			if err := get(t, ns, name, &p); err != nil || p.UID != uid || !p.DeletionTimestamp.IsZero() {
				return fmt.Errorf("pod %s deleted while qa-1 answers a linearizable read (%v)", name, err)
			}
		}
		return nil
	})

	// qa-1 stops answering: the recovery fences, with the directive stored first.
	answeringHosts.Delete(host)
	testutil.Eventually(t, 60*time.Second, "a pod fenced", func() error {
		membersRenewing(t, ns, "qa", none, none)
		return findEventMessage(ns, "Fenced", "no member answered a linearizable read")
	})
	if d := directive(t, getCluster(t, ns, "qa")); d == nil {
		t.Fatal("pods fenced, and no directive stored")
	}
}

// findEventMessage finds an Event of the reason whose note contains part.
func findEventMessage(ns, reason, part string) error {
	var evs eventsv1.EventList
	if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		return err
	}
	var notes []string
	for _, e := range evs.Items {
		if e.Reason == reason {
			if strings.Contains(e.Note, part) {
				return nil
			}
			notes = append(notes, e.Note)
		}
	}
	return fmt.Errorf("no Event %s saying %q among %q", reason, part, notes)
}

// TestQuorumLossRecovery plays a quorum lost for good on objects: every member down, one
// with its data intact (q-0), two wiped. The operator fences (deletes the pods older than the
// directive), waits for every voter's report from disk, chooses q-0 as the seed, waits for its
// acknowledgement, lets the others rejoin, and retires the directive once they serve. With the
// Manual policy it stops before the seed acts, names it, and goes on only once confirmed.
func TestQuorumLossRecovery(t *testing.T) {
	t.Parallel() // its own namespace
	for _, policy := range []string{v1alpha1.QuorumLossAutomatic, v1alpha1.QuorumLossManual} {
		t.Run(policy, func(t *testing.T) { quorumLossRecovery(t, policy) })
	}
}

func quorumLossRecovery(t *testing.T, policy string) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "q", 3)
	ec.Spec.QuorumLoss.Policy = policy
	createFormed(t, ec)

	// Every member stops serving; their sidecars report from disk: q-0 holds the newest log.
	none := func(int) bool { return false }
	diskReports := func() {
		now := time.Now()
		writeReport(t, ns, cluster.Report{Name: "q-0", At: now, Source: cluster.ReportFromDisk, DataValid: true, Owner: "q-0",
			MemberID: "a0", ClusterID: "c1", Formed: true, LastTerm: 5, LastIndex: 120, Commit: 118, Applied: 118}, nil)
		for _, n := range []string{"q-1", "q-2"} {
			writeReport(t, ns, cluster.Report{Name: n, At: now, Source: cluster.ReportFromDisk, DataEmpty: true}, nil)
		}
	}
	var d *cluster.Directive
	testutil.Eventually(t, 60*time.Second, "a directive that chooses q-0", func() error {
		membersRenewing(t, ns, "q", none, none)
		diskReports()
		ec := getCluster(t, ns, "q")
		d = directive(t, ec)
		c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionQuorumLost)
		if policy == v1alpha1.QuorumLossManual {
			if c == nil || c.Reason != "AwaitingConfirmation" || !strings.Contains(c.Message, "from q-0") {
				return fmt.Errorf("QuorumLost %+v, directive %+v", c, d)
			}
			return nil
		}
		if d == nil || d.Phase != cluster.PhaseSeeding {
			return fmt.Errorf("directive %+v; QuorumLost %+v", d, c)
		}
		return nil
	})
	if policy == v1alpha1.QuorumLossManual {
		// Held: fenced, nothing chosen on disk yet; nothing happens until the confirmation.
		if d == nil || d.Phase != cluster.PhaseFencing {
			t.Fatalf("Manual: directive %+v, want Fencing until confirmed", d)
		}
		updateCluster(t, ns, "q", func(ec *v1alpha1.EtcdCluster) {
			ec.Annotations = map[string]string{v1alpha1.AnnotationConfirmRecovery: fmt.Sprint(d.Epoch)}
		})
		testutil.Eventually(t, 30*time.Second, "Seeding after the confirmation", func() error {
			membersRenewing(t, ns, "q", none, none)
			diskReports()
			d = directive(t, getCluster(t, ns, "q"))
			if d == nil || d.Phase != cluster.PhaseSeeding {
				return fmt.Errorf("directive %+v", d)
			}
			return nil
		})
	}
	if d.Seed != "q-0" || d.Mode != cluster.RecoverFromSurvivor {
		t.Fatalf("seed %s mode %s, want q-0 from its own data (survivor)", d.Seed, d.Mode)
	}
	testutil.Eventually(t, 10*time.Second, "Event Fenced", func() error { return findEvent(ns, "Fenced") })

	// A fault during Seeding: the seed's pod is lost and comes back (a new pod, after the
	// directive). The recovery goes on with the same epoch and seed; the new pod is not fenced.
	var seedPod corev1.Pod
	testutil.Eventually(t, 10*time.Second, "the seed's pod", func() error {
		membersRenewing(t, ns, "q", none, none)
		return get(t, ns, "q-0", &seedPod)
	})
	// (The operator may have fenced that very pod meanwhile: gone either way.)
	if err := k8s.Delete(ctx, &seedPod, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	var reborn types.UID
	testutil.Eventually(t, 20*time.Second, "the seed's pod back, the recovery unchanged", func() error {
		membersRenewing(t, ns, "q", none, none)
		diskReports()
		var p corev1.Pod
		if err := get(t, ns, "q-0", &p); err != nil || p.UID == seedPod.UID {
			return fmt.Errorf("q-0 not recreated yet (%v)", err)
		}
		if reborn == "" {
			reborn = p.UID
		}
		if p.UID != reborn {
			return fmt.Errorf("the seed's new pod was deleted again")
		}
		now := directive(t, getCluster(t, ns, "q"))
		if now == nil || now.Epoch != d.Epoch || now.Phase != cluster.PhaseSeeding || now.Seed != "q-0" {
			return fmt.Errorf("directive after the seed's pod was lost: %+v", now)
		}
		return nil
	})
	for i := 0; i < 3; i++ { // a few more passes: still the same directive, the new pod kept
		if _, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "q"}}); err != nil {
			t.Fatal(err)
		}
	}
	var p corev1.Pod
	if err := get(t, ns, "q-0", &p); err != nil || p.UID != reborn {
		t.Fatalf("the seed's new pod was fenced: %v", err)
	}
	if now := directive(t, getCluster(t, ns, "q")); now == nil || now.Epoch != d.Epoch || now.Phase != cluster.PhaseSeeding {
		t.Fatalf("directive %+v", now)
	}

	// The seed carries the directive out and serves; the others rejoin and serve.
	epoch := d.Epoch
	testutil.Eventually(t, 60*time.Second, "recovery retired", func() error {
		membersRenewing(t, ns, "q", all, all)
		writeReport(t, ns, cluster.Report{Name: "q-0", At: time.Now(), Source: cluster.ReportFromEtcd, Serving: true, DataValid: true,
			Leader: true, MemberID: "a0", ClusterID: "c2", Formed: true, AppliedEpoch: epoch, Revision: 200,
			Members: []cluster.LiveMember{{ID: "a0", Name: "q-0"}, {ID: "a1", Name: "q-1"}, {ID: "a2", Name: "q-2"}}},
			&cluster.DirectiveAck{Epoch: epoch, Result: cluster.DirectiveResult{Member: "q-0", MemberID: "a0", ClusterID: "c2", Revision: 200}})
		for i, n := range []string{"q-1", "q-2"} {
			writeReport(t, ns, cluster.Report{Name: n, At: time.Now(), Source: cluster.ReportFromEtcd, Serving: true, DataValid: true,
				MemberID: fmt.Sprintf("a%d", i+1), ClusterID: "c2", Formed: true, AppliedEpoch: epoch}, nil)
		}
		ec := getCluster(t, ns, "q")
		if d := directive(t, ec); d != nil {
			return fmt.Errorf("directive %d still in force: %s (%s)", d.Epoch, d.Phase, d.Reason)
		}
		if condition(ec, v1alpha1.ConditionQuorumLost) != metav1.ConditionFalse || ec.Status.ClusterID != "c2" {
			return fmt.Errorf("QuorumLost %v, cluster %q", condition(ec, v1alpha1.ConditionQuorumLost), ec.Status.ClusterID)
		}
		return nil
	})
}

// TestEtcdBackupRefusedOrWaiting: an EtcdBackup of a cluster without spec.backup fails with
// a message that says what to do; one of a cluster that does not exist (yet) waits.
func TestEtcdBackupRefusedOrWaiting(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "nob", 1)
	ec.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	for _, b := range []*v1alpha1.EtcdBackup{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "of-nob"}, Spec: v1alpha1.EtcdBackupSpec{Cluster: "nob"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "of-missing"}, Spec: v1alpha1.EtcdBackupSpec{Cluster: "missing"}},
	} {
		if err := k8s.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 20*time.Second, "outcomes", func() error {
		var a, b v1alpha1.EtcdBackup
		if err := get(t, ns, "of-nob", &a); err != nil {
			return err
		}
		if err := get(t, ns, "of-missing", &b); err != nil {
			return err
		}
		if a.Status.Phase != v1alpha1.BackupFailed || !strings.Contains(a.Status.Message, "no spec.backup") || a.Status.EndTime == nil {
			return fmt.Errorf("of-nob: %+v", a.Status)
		}
		if b.Status.Phase != v1alpha1.BackupPending || !strings.Contains(b.Status.Message, "does not exist") {
			return fmt.Errorf("of-missing: %+v", b.Status)
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, "Event BackupFailed", func() error { return findEvent(ns, "BackupFailed") })
}

// TestUnboundVolumeReported: a member's volume claim that stays Pending gets a condition and
// an Event naming it and its storage class; nothing is deleted.
func TestUnboundVolumeReported(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "v", 1)
	class := "no-such-class"
	ec.Spec.Storage.StorageClassName = &class
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ns, "v", &sts) })
	// What the StatefulSet controller would create for v-0 (no PV controller runs: it stays Pending).
	tmpl := sts.Spec.VolumeClaimTemplates[0]
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-v-0", Labels: tmpl.Labels}, Spec: tmpl.Spec}
	if err := k8s.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "VolumeNotBound", func() error {
		c := apimeta.FindStatusCondition(getCluster(t, ns, "v").Status.Conditions, v1alpha1.ConditionProgressing)
		if c == nil || c.Reason != "VolumeNotBound" || !strings.Contains(c.Message, "data-v-0") || !strings.Contains(c.Message, class) {
			return fmt.Errorf("Progressing %+v", c)
		}
		return findEvent(ns, "VolumeNotBound")
	})
	if err := get(t, ns, "data-v-0", &corev1.PersistentVolumeClaim{}); err != nil {
		t.Errorf("the claim must stay: %v", err)
	}
}

// TestBootstrapRestore: a new EtcdCluster with spec.bootstrap.restore starts as a recovery
// from that backup: its first member is told to restore the target and start alone, the
// others join it, and the directive retires once all serve.
func TestBootstrapRestore(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	rev := int64(4242)
	ec := newCluster(ns, "br", 3)
	ec.Spec.Bootstrap = &v1alpha1.BootstrapSpec{Restore: &v1alpha1.RestoreSource{Store: "s3://old/main", Revision: &rev}}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	var d *cluster.Directive
	testutil.Eventually(t, 20*time.Second, "the bootstrap directive", func() error {
		d = directive(t, getCluster(t, ns, "br"))
		if d == nil {
			return errors.New("no directive yet")
		}
		return nil
	})
	if d.Epoch != 1 || d.Phase != cluster.PhaseSeeding || d.Seed != "br-0" || d.Restore == nil || d.Restore.Revision != rev || d.Restore.Store != "s3://old/main" {
		t.Fatalf("directive %+v", d)
	}
	var sts appsv1.StatefulSet
	if err := get(t, ns, "br", &sts); err != nil || *sts.Spec.Replicas != 3 {
		t.Fatalf("StatefulSet: %v (every member starts; the others wait for the seed)", err)
	}
	testutil.Eventually(t, 60*time.Second, "bootstrap retired", func() error {
		membersRenewing(t, ns, "br", all, func(int) bool { return false })
		writeReport(t, ns, cluster.Report{Name: "br-0", At: time.Now(), Source: cluster.ReportFromEtcd, Serving: true, DataValid: true,
			Leader: true, MemberID: "b0", ClusterID: "restored", Formed: true, AppliedEpoch: 1, Revision: rev,
			Members: []cluster.LiveMember{{ID: "b0", Name: "br-0"}, {ID: "b1", Name: "br-1"}, {ID: "b2", Name: "br-2"}}},
			&cluster.DirectiveAck{Epoch: 1, Result: cluster.DirectiveResult{Member: "br-0", MemberID: "b0", ClusterID: "restored", Revision: rev}})
		for i, n := range []string{"br-1", "br-2"} {
			writeReport(t, ns, cluster.Report{Name: n, At: time.Now(), Source: cluster.ReportFromEtcd, Serving: true, DataValid: true,
				MemberID: fmt.Sprintf("b%d", i+1), ClusterID: "restored", Formed: true}, nil)
		}
		for i := 0; i < 3; i++ {
			renew(t, ns, fmt.Sprintf("br-%d", i), fmt.Sprintf("b%d:%s", i, map[bool]string{true: v1alpha1.RoleLeader, false: v1alpha1.RoleMember}[i == 0]))
		}
		ec := getCluster(t, ns, "br")
		if d := directive(t, ec); d != nil {
			return fmt.Errorf("directive %d in force: %s (%s)", d.Epoch, d.Phase, d.Reason)
		}
		if ec.Status.ClusterID != "restored" || ec.Status.ReadyReplicas != 3 {
			return fmt.Errorf("cluster %q, %d ready", ec.Status.ClusterID, ec.Status.ReadyReplicas)
		}
		return nil
	})
}

// createFormed creates the 3-member cluster and waits until its members are Ready and the
// status records the cluster ID and three voters.
func createFormed(t *testing.T, ec *v1alpha1.EtcdCluster) {
	t.Helper()
	if err := k8s.Create(context.Background(), ec); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ec.Namespace, ec.Name, &appsv1.StatefulSet{}) })
	waitReady(t, ec.Namespace, ec.Name, 3)
	testutil.Eventually(t, 10*time.Second, "voters recorded", func() error {
		if got := getCluster(t, ec.Namespace, ec.Name); got.Status.ClusterID != "c1" || len(got.Status.Voters) != 3 {
			return fmt.Errorf("cluster %q voters %v", got.Status.ClusterID, got.Status.Voters)
		}
		return nil
	})
}
