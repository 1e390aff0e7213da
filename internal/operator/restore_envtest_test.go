package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/agent"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/testutil"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// fakeSidecars answers POST /v1/snapshots/full for the members of every test cluster (their
// sidecar URLs name pods that do not run here): the full snapshot each namespace's test set,
// counted.
//
// It also answers POST /v1/leader/move, recording "<from> -> <to>" per namespace: the test
// that asked plays the leadership change; and POST /v1/restore/target with the sidecar's own
// handler over the store each namespace's cluster backs up to (404, as a sidecar without
// backups, for a namespace whose store the test did not set).
type fakeSidecars struct {
	*httptest.Server
	mu     sync.Mutex
	result map[string]snapshotter.FullResult // by namespace
	calls  map[string]int
	moves  map[string][]string
	stores map[string]string // by namespace
}

func newFakeSidecars() *fakeSidecars {
	f := &fakeSidecars{result: map[string]snapshotter.FullResult{}, calls: map[string]int{}, moves: map[string][]string{}, stores: map[string]string{}}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The request was sent to http://<pod>.<cluster>-peer.<namespace>.svc:<port>.
		parts := strings.Split(r.Header.Get("X-Sidecar-Host"), ".")
		if r.Method == http.MethodPost && r.URL.Path == agent.ResolveTargetPath && len(parts) >= 3 {
			f.mu.Lock()
			storeURL := f.stores[parts[2]]
			f.mu.Unlock()
			agent.NewService(agent.Config{StoreURL: storeURL}, agent.Member{Name: parts[0], View: staticView{}}, zap.NewNop(), nil).HandleResolveTarget(w, r)
			return
		}
		if r.Method == http.MethodPost && r.URL.Path == "/v1/leader/move" && len(parts) >= 3 {
			var req cluster.MoveLeaderRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			f.mu.Lock()
			f.moves[parts[2]] = append(f.moves[parts[2]], parts[0]+" -> "+req.To)
			f.mu.Unlock()
			_ = json.NewEncoder(w).Encode(cluster.MoveLeaderResponse{From: parts[0], Leader: req.To})
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/v1/snapshots/full" || len(parts) < 3 {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusNotFound)
			return
		}
		ns := parts[2]
		f.mu.Lock()
		res, ok := f.result[ns]
		f.calls[ns]++
		f.mu.Unlock()
		if !ok {
			http.Error(w, "full snapshot failed: no store", http.StatusInternalServerError)
			return
		}
		res.Created = time.Now()
		_ = json.NewEncoder(w).Encode(res)
	}))
	return f
}

// Client sends every request to the fake, naming the host it was meant for.
func (f *fakeSidecars) Client() *http.Client {
	to, _ := url.Parse(f.URL)
	return &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("X-Sidecar-Host", r.URL.Hostname())
		r.URL.Scheme, r.URL.Host, r.Host = to.Scheme, to.Host, to.Host
		return http.DefaultTransport.RoundTrip(r)
	})}
}

func (f *fakeSidecars) set(ns string, res snapshotter.FullResult) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.result[ns] = res
}

// setStore makes the sidecars of namespace ns resolve restore targets in storeURL.
func (f *fakeSidecars) setStore(ns, storeURL string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stores[ns] = storeURL
}

func (f *fakeSidecars) movesOf(ns string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.moves[ns])
}

func (f *fakeSidecars) count(ns string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[ns]
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func getRestore(t *testing.T, ns, name string) *v1alpha1.EtcdRestore {
	t.Helper()
	er := &v1alpha1.EtcdRestore{}
	if err := get(t, ns, name, er); err != nil {
		t.Fatal(err)
	}
	return er
}

func lastEpoch(t *testing.T, ec *v1alpha1.EtcdCluster) int64 {
	t.Helper()
	if ec.Status.Recovery == nil {
		return 0
	}
	st, err := decodeRecovery(ec.Status.Recovery.Raw)
	if err != nil {
		t.Fatal(err)
	}
	return st.LastEpoch
}

// restorableCluster creates a 3-member cluster with backups in store and plays its members
// until it is Ready with its cluster ID recorded.
func restorableCluster(t *testing.T, ns, name, store string) {
	t.Helper()
	restorableClusterWith(t, ns, name, &v1alpha1.BackupSpec{Store: store})
}

// restorableClusterWith is restorableCluster with backups as b says.
func restorableClusterWith(t *testing.T, ns, name string, b *v1alpha1.BackupSpec) {
	t.Helper()
	ec := newCluster(ns, name, 3)
	ec.Spec.Backup = b
	if err := k8s.Create(context.Background(), ec); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ns, name, &appsv1.StatefulSet{}) })
	waitReady(t, ns, name, 3)
	testutil.Eventually(t, 10*time.Second, "cluster ID recorded", func() error {
		if ec := getCluster(t, ns, name); ec.Status.ClusterID != "c1" || len(ec.Status.Voters) != 3 {
			return fmt.Errorf("cluster %q voters %v", ec.Status.ClusterID, ec.Status.Voters)
		}
		return nil
	})
}

// TestEtcdRestoreInPlace plays a restore in place on objects: the EtcdRestore takes one full
// snapshot, issues one directive carrying its target (pinned to the snapshot's timeline),
// and follows it through fencing, the seed's restore and the others rejoining to Succeeded.
// An operator restarted mid-way issues no second directive and takes no second snapshot; a
// second EtcdRestore of the cluster meanwhile fails; the EtcdRestore deleted after fencing
// stays until the restore is over.
func TestEtcdRestoreInPlace(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	// A store no sidecar here resolves targets in: checked against the snapshot.
	restorableCluster(t, ns, "rs", "file:///nonexistent/"+ns)
	sidecars.set(ns, snapshotter.FullResult{Key: "v1/full/00000000000000000500-1.snap.zst", Timeline: 2, Revision: 500})
	renew(t, ns, "rs-delta-snapshot", "490") // the deltas lag the present

	rev := int64(400)
	if err := k8s.Create(ctx, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "back"},
		Spec: v1alpha1.EtcdRestoreSpec{Cluster: "rs", Revision: &rev}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the restore waiting for the deltas", func() error {
		membersRenewing(t, ns, "rs", all, all)
		if er := getRestore(t, ns, "back"); !strings.Contains(er.Status.Message, "waiting for the deltas to reach revision 500") {
			return fmt.Errorf("EtcdRestore %s: %s", er.Status.Phase, er.Status.Message)
		}
		return nil
	})
	renew(t, ns, "rs-delta-snapshot", "500")
	var d *cluster.Directive
	testutil.Eventually(t, 30*time.Second, "the restore's directive", func() error {
		membersRenewing(t, ns, "rs", all, all)
		d = directive(t, getCluster(t, ns, "rs"))
		er := getRestore(t, ns, "back")
		if d == nil || er.Status.Epoch == 0 {
			return fmt.Errorf("directive %+v; EtcdRestore %+v", d, er.Status)
		}
		return nil
	})
	er := getRestore(t, ns, "back")
	if d.Epoch != er.Status.Epoch || d.Restore == nil || d.Restore.Revision != 400 || d.Restore.Timeline != 2 || d.Restore.Store != "" {
		t.Fatalf("directive %+v (restore %+v), EtcdRestore epoch %d: want revision 400 of timeline 2 from the cluster's store", d, d.Restore, er.Status.Epoch)
	}
	if s := er.Status.Snapshot; s == nil || s.Revision != 500 || s.Timeline != 2 || er.Status.Target == nil || !strings.Contains(er.Status.Target.Checked, "not against the store") {
		t.Fatalf("snapshot %+v, target %+v", s, er.Status.Target)
	}
	if !strings.Contains(strings.Join(er.Finalizers, ","), v1alpha1.RestoreFinalizer) {
		t.Errorf("finalizers %v: a restore that fences must finish", er.Finalizers)
	}
	if n := sidecars.count(ns); n != 1 {
		t.Errorf("%d full snapshots requested, want 1", n)
	}

	// The operator restarts: a new reconciler, the same objects. No second directive, no
	// second snapshot.
	restarted := &RestoreReconciler{Client: k8s, APIReader: k8s, Recorder: restoreReconciler.Recorder, Sidecars: restoreReconciler.Sidecars}
	epoch := lastEpoch(t, getCluster(t, ns, "rs"))
	for i := 0; i < 3; i++ {
		if _, err := restarted.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "back"}}); err != nil {
			t.Fatal(err)
		}
	}
	if e := lastEpoch(t, getCluster(t, ns, "rs")); e != epoch || sidecars.count(ns) != 1 {
		t.Fatalf("after a restart: last epoch %d (was %d), %d snapshots", e, epoch, sidecars.count(ns))
	}

	// A second restore of the cluster while this one runs fails, saying why.
	if err := k8s.Create(ctx, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "again"},
		Spec: v1alpha1.EtcdRestoreSpec{Cluster: "rs"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the second restore refused", func() error {
		er := getRestore(t, ns, "again")
		if er.Status.Phase != v1alpha1.RestoreFailed || !strings.Contains(er.Status.Message, "EtcdRestore back is restoring") {
			return fmt.Errorf("second restore %+v", er.Status)
		}
		return nil
	})

	// Fencing: the members' pods are replaced; their sidecars report their data from disk,
	// which their data dirs record the restore supersedes.
	none := func(int) bool { return false }
	diskReports := func() {
		var superseded int64
		if d := directive(t, getCluster(t, ns, "rs")); d != nil && d.Restore != nil {
			superseded = d.Epoch
		}
		for i := 0; i < 3; i++ {
			n := fmt.Sprintf("rs-%d", i)
			writeReport(t, ns, cluster.Report{Name: n, At: time.Now(), Source: cluster.ReportFromDisk, DataValid: true, Owner: n,
				MemberID: fmt.Sprintf("a%d", i), ClusterID: "c1", Formed: true, LastTerm: 2, LastIndex: 100, Commit: 100, Applied: 100, Revision: 500,
				SupersededBy: superseded}, nil)
		}
	}
	progressing := false
	testutil.Eventually(t, 60*time.Second, "Restoring", func() error {
		membersRenewing(t, ns, "rs", none, none)
		diskReports()
		ec := getCluster(t, ns, "rs")
		if c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionProgressing); c != nil && c.Reason == "Restoring" && strings.Contains(c.Message, "revision 400") {
			progressing = true
		}
		er := getRestore(t, ns, "back")
		if d := directive(t, ec); d == nil || d.Phase != cluster.PhaseSeeding || er.Status.Phase != v1alpha1.RestoreRestoring {
			return fmt.Errorf("directive %+v; EtcdRestore %s: %s", d, er.Status.Phase, er.Status.Message)
		}
		return nil
	})
	if !progressing {
		t.Errorf("the cluster's Progressing condition never said Restoring: %+v", apimeta.FindStatusCondition(getCluster(t, ns, "rs").Status.Conditions, v1alpha1.ConditionProgressing))
	}
	d = directive(t, getCluster(t, ns, "rs"))
	if d.Mode != cluster.RecoverFromBackup || d.Epoch != er.Status.Epoch {
		t.Fatalf("directive %+v: want the restore's epoch %d, from backup", d, er.Status.Epoch)
	}

	// The seed restores the target and serves a new cluster; the others rejoin. Deleted once
	// the seed has restored: too late to cancel (heal.CancelRestore refuses), so the
	// EtcdRestore stays until the restore is over.
	seed, epoch := d.Seed, d.Epoch
	deleted := false
	testutil.Eventually(t, 60*time.Second, "restore done", func() error {
		membersRenewing(t, ns, "rs", all, all)
		for i := 0; i < 3; i++ {
			n := fmt.Sprintf("rs-%d", i)
			r := cluster.Report{Name: n, At: time.Now(), Source: cluster.ReportFromEtcd, Serving: true, DataValid: true,
				MemberID: fmt.Sprintf("a%d", i), ClusterID: "c2", Formed: true, AppliedEpoch: epoch, Revision: 400}
			var ack *cluster.DirectiveAck
			if n == seed {
				r.Leader, r.Members = true, []cluster.LiveMember{{ID: "a0", Name: "rs-0"}, {ID: "a1", Name: "rs-1"}, {ID: "a2", Name: "rs-2"}}
				ack = &cluster.DirectiveAck{Epoch: epoch, Result: cluster.DirectiveResult{Member: n, MemberID: r.MemberID, ClusterID: "c2", Revision: 400}}
			}
			writeReport(t, ns, r, ack)
		}
		if !deleted {
			if err := k8s.Delete(ctx, getRestore(t, ns, "back")); err != nil {
				t.Fatal(err)
			}
			deleted = true
		}
		ec := getCluster(t, ns, "rs")
		if d := directive(t, ec); d != nil {
			return fmt.Errorf("directive %d in force: %s (%s)", d.Epoch, d.Phase, d.Reason)
		}
		if er := (&v1alpha1.EtcdRestore{}); !apierrors.IsNotFound(get(t, ns, "back", er)) {
			return fmt.Errorf("EtcdRestore still there: %s, restored %d, cluster %s: %s", er.Status.Phase, er.Status.RestoredRevision, er.Status.ClusterID, er.Status.Message)
		}
		return nil
	})
	if ec := getCluster(t, ns, "rs"); ec.Status.ClusterID != "c2" {
		t.Errorf("cluster ID %q, want the restored cluster's c2", ec.Status.ClusterID)
	}
	if e := lastEpoch(t, getCluster(t, ns, "rs")); e != epoch {
		t.Errorf("last epoch %d: one directive, %d, was to be issued", e, epoch)
	}
	testutil.Eventually(t, 10*time.Second, "Events", func() error {
		for _, want := range []string{"RestoreStarted", "Restored"} {
			if err := findEventWith(ns, want, "EtcdCluster", "back"); err != nil {
				return err
			}
		}
		if err := findEventWith(ns, "Restored", "EtcdCluster", "revision 400, new cluster c2"); err != nil {
			return err
		}
		return findEventWith(ns, v1alpha1.RestoreFencing, "EtcdRestore", "")
	})
}

// findEventWith finds an Event of reason about a kind whose note contains note.
func findEventWith(ns, reason, kind, note string) error {
	var evs eventsv1.EventList
	if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, e := range evs.Items {
		if e.Reason == reason && e.Regarding.Kind == kind && strings.Contains(e.Note, note) {
			return nil
		}
	}
	return fmt.Errorf("no Event %s on a %s with %q", reason, kind, note)
}

// TestEtcdRestoreBadTargetsFailBeforeFencing: targets the store or the present cannot give
// fail before anything is stopped: no directive is written.
func TestEtcdRestoreBadTargetsFailBeforeFencing(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	// A store the members' sidecar reads, holding no backups: the sidecar's resolution of
	// the restore says so.
	empty := filepath.Join(t.TempDir(), "store")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	restorableCluster(t, ns, "bad", "file://"+empty)
	sidecars.setStore(ns, "file://"+empty)
	sidecars.set(ns, snapshotter.FullResult{Key: "v1/full/00000000000000000500-1.snap.zst", Timeline: 1, Revision: 500})
	renew(t, ns, "bad-delta-snapshot", "500")
	beyond, future := int64(501), metav1.NewTime(time.Now().Add(time.Hour))
	cases := map[string]struct {
		spec v1alpha1.EtcdRestoreSpec
		want string
	}{
		"empty-store": {v1alpha1.EtcdRestoreSpec{Cluster: "bad"}, "cannot give the target"},
	}
	for name, tc := range cases {
		if err := k8s.Create(ctx, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: tc.spec}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 60*time.Second, name+" fails", func() error {
			membersRenewing(t, ns, "bad", all, all)
			er := getRestore(t, ns, name)
			if er.Status.Phase != v1alpha1.RestoreFailed || !strings.Contains(er.Status.Message, tc.want) || !strings.Contains(er.Status.Message, "nothing was stopped") {
				return fmt.Errorf("%s: %s: %s", name, er.Status.Phase, er.Status.Message)
			}
			if c := apimeta.FindStatusCondition(er.Status.Conditions, v1alpha1.RestoreConditionTargetChecked); c == nil || c.Status != metav1.ConditionFalse {
				return fmt.Errorf("TargetChecked %+v", c)
			}
			return nil
		})
	}
	// The bounds from the full snapshot taken first apply to any store: no sidecar resolves
	// these in it.
	if err := os.Remove(empty); err != nil {
		t.Fatal(err)
	}
	sidecars.setStore(ns, "")
	for name, spec := range map[string]v1alpha1.EtcdRestoreSpec{
		"beyond": {Cluster: "bad", Revision: &beyond},
		"future": {Cluster: "bad", Time: &future},
	} {
		if err := k8s.Create(ctx, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 60*time.Second, name+" fails", func() error {
			membersRenewing(t, ns, "bad", all, all)
			er := getRestore(t, ns, name)
			if er.Status.Phase != v1alpha1.RestoreFailed || !strings.Contains(er.Status.Message, "nothing was stopped") {
				return fmt.Errorf("%s: %s: %s", name, er.Status.Phase, er.Status.Message)
			}
			return nil
		})
	}
	if d := directive(t, getCluster(t, ns, "bad")); d != nil || lastEpoch(t, getCluster(t, ns, "bad")) != 0 {
		t.Fatalf("a directive was issued for a bad target: %+v", d)
	}
	// A cluster without backups is refused.
	nob := newCluster(ns, "nob", 1)
	nob.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"}
	if err := k8s.Create(ctx, nob); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "of-nob"}, Spec: v1alpha1.EtcdRestoreSpec{Cluster: "nob"}}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "of-missing"}, Spec: v1alpha1.EtcdRestoreSpec{Cluster: "missing"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "refused and waiting", func() error {
		if er := getRestore(t, ns, "of-nob"); er.Status.Phase != v1alpha1.RestoreFailed || !strings.Contains(er.Status.Message, "no spec.backup") {
			return fmt.Errorf("of-nob: %+v", er.Status)
		}
		if er := getRestore(t, ns, "of-missing"); er.Status.Phase != v1alpha1.RestorePending || !strings.Contains(er.Status.Message, "does not exist") {
			return fmt.Errorf("of-missing: %+v", er.Status)
		}
		return nil
	})
}

// TestEtcdRestoreValidation: the API server refuses what cannot be restored, naming the
// field; kubectl get shows the columns.
func TestEtcdRestoreValidation(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	rev, tl, zero := int64(5), int64(2), int64(0)
	now := metav1.NewTime(time.Now().Add(-time.Hour))
	for _, tc := range []struct {
		name string
		spec v1alpha1.EtcdRestoreSpec
		want string
	}{
		{"newest", v1alpha1.EtcdRestoreSpec{Cluster: "c"}, ""},
		{"revision", v1alpha1.EtcdRestoreSpec{Cluster: "c", Revision: &rev, Timeline: &tl}, ""},
		{"time", v1alpha1.EtcdRestoreSpec{Cluster: "c", Time: &now}, ""},
		{"both", v1alpha1.EtcdRestoreSpec{Cluster: "c", Revision: &rev, Time: &now}, "give spec.revision or spec.time, not both"},
		{"revision 0", v1alpha1.EtcdRestoreSpec{Cluster: "c", Revision: &zero}, "spec.revision"},
		{"timeline 0", v1alpha1.EtcdRestoreSpec{Cluster: "c", Timeline: &zero}, "spec.timeline"},
		{"no cluster", v1alpha1.EtcdRestoreSpec{}, "spec.cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := k8s.Create(ctx, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "v-"}, Spec: tc.spec}, client.DryRunAll)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v; want refused with %q", err, tc.want)
			}
		})
	}
	// The spec cannot change: an EtcdRestore is one restore.
	er := &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fixed"}, Spec: v1alpha1.EtcdRestoreSpec{Cluster: "c", Revision: &rev}}
	if err := k8s.Create(ctx, er); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.EtcdRestore)
		want   string
	}{
		{"cluster", func(er *v1alpha1.EtcdRestore) { er.Spec.Cluster = "other" }, "spec.cluster is immutable"},
		{"revision", func(er *v1alpha1.EtcdRestore) { r := int64(6); er.Spec.Revision = &r }, "spec is immutable"},
	} {
		var err error
		for try := 0; try < 10; try++ { // the restore reconciler writes its status meanwhile
			cur := getRestore(t, ns, "fixed")
			tc.mutate(cur)
			if err = k8s.Update(ctx, cur, client.DryRunAll); !apierrors.IsConflict(err) {
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s change: %v, want refused with %q", tc.name, err, tc.want)
		}
	}
	out, err := kubectl(t, "-n", ns, "get", "er", "fixed")
	if err != nil {
		t.Fatalf("kubectl get er: %v\n%s", err, out)
	}
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if want := "NAME CLUSTER PHASE TARGET RESTORED AGE"; strings.Join(header, " ") != want {
		t.Errorf("kubectl get er header %q, want %q", strings.Join(header, " "), want)
	}
}

// TestEtcdRestoreCancelledByDeletion: an EtcdRestore deleted while its members are fenced and
// every one still holds its own data is cancelled: the cluster's recovery withdraws the
// directive (a new epoch without the target), the members keep their cluster, and the
// EtcdRestore goes.
func TestEtcdRestoreCancelledByDeletion(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	restorableCluster(t, ns, "rc", "file:///nonexistent/"+ns)
	sidecars.set(ns, snapshotter.FullResult{Key: "v1/full/00000000000000000500-1.snap.zst", Timeline: 2, Revision: 500})
	renew(t, ns, "rc-delta-snapshot", "500")
	rev := int64(400)
	if err := k8s.Create(ctx, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "undo"},
		Spec: v1alpha1.EtcdRestoreSpec{Cluster: "rc", Revision: &rev}}); err != nil {
		t.Fatal(err)
	}
	var epoch int64
	testutil.Eventually(t, 30*time.Second, "the restore's directive", func() error {
		membersRenewing(t, ns, "rc", all, all)
		d := directive(t, getCluster(t, ns, "rc"))
		if d == nil || d.Restore == nil {
			return fmt.Errorf("directive %+v", d)
		}
		epoch = d.Epoch
		return nil
	})
	if err := k8s.Delete(ctx, getRestore(t, ns, "undo")); err != nil {
		t.Fatal(err)
	}
	none := func(int) bool { return false }
	testutil.Eventually(t, 60*time.Second, "the restore cancelled and the EtcdRestore gone", func() error {
		// Fenced: the pods are replaced and their sidecars report their own data from disk.
		membersRenewing(t, ns, "rc", none, none)
		for i := 0; i < 3; i++ {
			n := fmt.Sprintf("rc-%d", i)
			writeReport(t, ns, cluster.Report{Name: n, At: time.Now(), Source: cluster.ReportFromDisk, DataValid: true, Owner: n,
				MemberID: fmt.Sprintf("a%d", i), ClusterID: "c1", Formed: true, LastTerm: 2, LastIndex: 100, Commit: 100, Applied: 100, Revision: 500}, nil)
		}
		ec := getCluster(t, ns, "rc")
		if ec.Annotations[v1alpha1.AnnotationCancelRestore] != fmt.Sprint(epoch) {
			return fmt.Errorf("annotations %v", ec.Annotations)
		}
		if d := directive(t, ec); d != nil && d.Restore != nil {
			return fmt.Errorf("the restore's directive %d is still in force: %s (%s)", d.Epoch, d.Phase, d.Reason)
		}
		if lastEpoch(t, ec) <= epoch {
			return fmt.Errorf("last epoch %d: no directive withdrew %d", lastEpoch(t, ec), epoch)
		}
		if er := (&v1alpha1.EtcdRestore{}); !apierrors.IsNotFound(get(t, ns, "undo", er)) {
			return fmt.Errorf("EtcdRestore still there: %s: %s", er.Status.Phase, er.Status.Message)
		}
		return nil
	})
	if ec := getCluster(t, ns, "rc"); ec.Status.ClusterID != "c1" {
		t.Fatalf("cluster ID %q after the cancel, want c1 (nothing restored)", ec.Status.ClusterID)
	}
}

// TestEtcdRestoreRunsNothingOfTheTenants: checking an EtcdRestore's target never reads the
// cluster's store from the operator: nothing a namespace user writes (the store URL, the
// credentials Secret's variables) runs with the operator's identity or in its environment. The
// Secret's AWS_* variables would make an AWS SDK post the operator's ServiceAccount token to a
// server of the user's, and the store's endpoint is that server: it receives nothing while the
// target is checked (here by a sidecar without backups: not against the store).
func TestEtcdRestoreRunsNothingOfTheTenants(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	var hits atomic.Int32
	capture := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "captured", http.StatusForbidden)
	}))
	defer capture.Close()
	ns := namespace(t)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"}, StringData: map[string]string{
		"AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/secrets/kubernetes.io/serviceaccount/token",
		"AWS_ROLE_ARN":                "arn:aws:iam::123456789012:role/tenant",
		"AWS_ENDPOINT_URL_STS":        capture.URL,
		"AWS_ENDPOINT_URL":            capture.URL,
		"AWS_REGION":                  "us-east-1",
	}}
	if err := k8s.Create(ctx, creds); err != nil {
		t.Fatal(err)
	}
	restorableClusterWith(t, ns, "tn", &v1alpha1.BackupSpec{Store: "s3://bucket/tn?endpoint=" + capture.URL + "&region=us-east-1",
		CredentialsSecret: &corev1.LocalObjectReference{Name: "creds"}})
	// The members' sidecars read the store as the tenant, from the tenant's pods; these have
	// no backups.
	sidecars.set(ns, snapshotter.FullResult{Key: "v1/full/00000000000000000500-1.snap.zst", Timeline: 1, Revision: 500})
	renew(t, ns, "tn-delta-snapshot", "500")
	if err := k8s.Create(ctx, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "back"},
		Spec: v1alpha1.EtcdRestoreSpec{Cluster: "tn"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the target checked", func() error {
		if n := hits.Load(); n != 0 {
			t.Fatalf("the tenant's server received %d requests while the operator checked the restore target", n)
		}
		membersRenewing(t, ns, "tn", all, all)
		er := getRestore(t, ns, "back")
		c := apimeta.FindStatusCondition(er.Status.Conditions, v1alpha1.RestoreConditionTargetChecked)
		if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "not against the store") {
			return fmt.Errorf("EtcdRestore %s: %s; TargetChecked %+v", er.Status.Phase, er.Status.Message, c)
		}
		return nil
	})
	if n := hits.Load(); n != 0 {
		t.Fatalf("the tenant's server received %d requests while the operator checked the restore target", n)
	}
}
