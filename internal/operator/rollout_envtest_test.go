package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// rolloutPlayer plays, for one cluster, the StatefulSet controller (status.updateRevision,
// pods recreated with the controller-revision-hash label), the kubelet (a new pod turns
// Ready only readyAfter after it was created) and the sidecars (Leases renewed and reports
// written by Ready members; leadership follows the moves asked of the fake sidecars). It
// records every pod deletion it sees, and what the others looked like then.
type rolloutPlayer struct {
	t          *testing.T
	ns, name   string
	revision   string
	revisions  int
	gen        int64 // the StatefulSet generation that revision belongs to
	leader     int
	readyAfter time.Duration
	uids       map[string]types.UID
	created    map[string]time.Time
	reported   map[string]string
	published  time.Time // when the delta-snapshot Lease was renewed last
	// deletions are the pods seen deleted, in order, each with the problems seen then.
	deletions []string
	problems  []string
}

func newRolloutPlayer(t *testing.T, ns, name string) *rolloutPlayer {
	return &rolloutPlayer{t: t, ns: ns, name: name, revision: harnessRevision, revisions: 1, readyAfter: 1500 * time.Millisecond,
		uids: map[string]types.UID{}, created: map[string]time.Time{}, reported: map[string]string{}}
}

func (p *rolloutPlayer) step() {
	t := p.t
	t.Helper()
	ctx := context.Background()
	var sts appsv1.StatefulSet
	if err := get(t, p.ns, p.name, &sts); err != nil {
		t.Fatal(err)
	}
	if p.gen == 0 {
		p.gen = sts.Generation
	}
	if sts.Generation != p.gen {
		// The template changed: a new revision.
		p.gen, p.revisions = sts.Generation, p.revisions+1
		p.revision = fmt.Sprintf("r%d", p.revisions)
	}
	n := int(*sts.Spec.Replicas)
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(p.ns), client.MatchingLabels(sts.Spec.Selector.MatchLabels)); err != nil {
		t.Fatal(err)
	}
	have := map[string]*corev1.Pod{}
	for i := range pods.Items {
		have[pods.Items[i].Name] = &pods.Items[i]
	}
	ready := func(name string) bool {
		pod := have[name]
		return pod != nil && len(pod.Status.Conditions) > 0 && pod.Status.Conditions[0].Status == corev1.ConditionTrue
	}
	for i := 0; i < n; i++ {
		pn := fmt.Sprintf("%s-%d", p.name, i)
		pod, ok := have[pn]
		if ok && p.uids[pn] == "" {
			// A pod of the harness that made the cluster: it runs the first revision.
			p.uids[pn], p.created[pn] = pod.UID, time.Now().Add(-time.Hour)
		}
		if !ok {
			var others []string
			for j := 0; j < n; j++ {
				if o := fmt.Sprintf("%s-%d", p.name, j); o != pn && !ready(o) {
					others = append(others, o+" not Ready")
				}
			}
			if moves := sidecars.movesOf(p.ns); i == p.leader && p.revision != harnessRevision {
				others = append(others, fmt.Sprintf("deleted while it leads (moves %v)", moves))
			}
			p.deletions = append(p.deletions, pn)
			p.problems = append(p.problems, strings.Join(others, ", "))
			pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: pn, Labels: map[string]string{}, OwnerReferences: podOwners(&sts)},
				Spec: *sts.Spec.Template.Spec.DeepCopy()}
			for k, v := range sts.Spec.Template.Labels {
				pod.Labels[k] = v
			}
			pod.Labels[appsv1.ControllerRevisionHashLabelKey] = p.revision
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			if err := k8s.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
			have[pn] = pod
			p.uids[pn], p.created[pn] = pod.UID, time.Now()
		}
		if !ready(pn) && time.Since(p.created[pn]) >= p.readyAfter {
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
			if err := k8s.Status().Update(ctx, pod); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	// The StatefulSet controller's status: after the pods carry their revision.
	if sts.Status.UpdateRevision != p.revision || sts.Status.ObservedGeneration != sts.Generation {
		sts.Status.UpdateRevision, sts.Status.ObservedGeneration, sts.Status.Replicas = p.revision, sts.Generation, int32(n)
		if err := k8s.Status().Update(ctx, &sts); err != nil && !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	if time.Since(p.published) >= 2*time.Second {
		// The backup leader stores deltas: the backups are current (a no-op without spec.backup).
		renew(t, p.ns, p.name+"-delta-snapshot", "1000")
		p.published = time.Now()
	}
	if moves := sidecars.movesOf(p.ns); len(moves) > 0 {
		to := moves[len(moves)-1][strings.Index(moves[len(moves)-1], " -> ")+4:]
		fmt.Sscanf(strings.TrimPrefix(to, p.name+"-"), "%d", &p.leader)
	}
	for i := 0; i < n; i++ {
		pn := fmt.Sprintf("%s-%d", p.name, i)
		if !ready(pn) {
			continue
		}
		role := v1alpha1.RoleMember
		if i == p.leader {
			role = v1alpha1.RoleLeader
		}
		renew(t, p.ns, pn, fmt.Sprintf("%x:%s", 0xa0+i, role))
		p.report(pn, i, n)
	}
}

// report writes member i's report as its sidecar does: when something in it changed.
func (p *rolloutPlayer) report(pn string, i, n int) {
	t := p.t
	r := cluster.Report{Name: pn, At: time.Now(), Source: cluster.ReportFromEtcd, Serving: true, Formed: true, DataValid: true,
		ClusterID: "c1", MemberID: fmt.Sprintf("%x", 0xa0+i), Leader: i == p.leader, LeaderID: fmt.Sprintf("%x", 0xa0+p.leader), Applied: 1000}
	for j := 0; j < n; j++ {
		r.Members = append(r.Members, cluster.LiveMember{ID: fmt.Sprintf("%x", 0xa0+j), Name: fmt.Sprintf("%s-%d", p.name, j)})
	}
	key := fmt.Sprintf("%s %v %s", p.uids[pn], r.Leader, r.LeaderID)
	if p.reported[pn] == key {
		return
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var em v1alpha1.EtcdMember
	if err := get(t, p.ns, pn, &em); err != nil {
		t.Fatal(err)
	}
	em.Status.Report = &runtime.RawExtension{Raw: raw}
	if err := k8s.Status().Update(context.Background(), &em); err != nil {
		if apierrors.IsConflict(err) {
			return
		}
		t.Fatal(err)
	}
	p.reported[pn] = key
}

// TestRollingUpdateOrdered changes the pod template of a formed three-member cluster (the
// etcd container's CPU request) and plays the StatefulSet controller, the kubelet and the
// sidecars. No kubelet or StatefulSet controller runs here (see the suite), so pod
// recreation and readiness are simulated; the sidecars' API is the fake one. The operator
// must: take one full snapshot first; delete the followers' pods by name, one at a time,
// each only once the previous replacement is Ready; ask the leader's sidecar to move
// leadership to an updated member; delete the old leader's pod last; report it all in
// status.rollout, the Progressing condition and Events; and clear status.rollout at the end.
func TestRollingUpdateOrdered(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns, name := namespace(t), "ru"
	sidecars.set(ns, snapshotter.FullResult{Key: "v1/full/00000000000000000042-1.snap.zst", Revision: 42})
	p := formedCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) { ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "mem://ru"} })
	testutil.Eventually(t, 20*time.Second, "every member ready, on the first revision", func() error {
		p.step()
		ec := getCluster(t, ns, name)
		if condition(ec, v1alpha1.ConditionAllMembersReady) != metav1.ConditionTrue {
			return fmt.Errorf("conditions %v", ec.Status.Conditions)
		}
		if ec.Status.Rollout != nil || len(p.deletions) > 0 {
			return fmt.Errorf("rollout %+v, deletions %v before any change", ec.Status.Rollout, p.deletions)
		}
		return nil
	})

	start := time.Now()
	updateCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) {
		ec.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	})
	var sawUpdating, sawStatus bool
	testutil.Eventually(t, 120*time.Second, "every member on revision r2, status.rollout cleared", func() error {
		p.step()
		ec := getCluster(t, ns, name)
		if c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionProgressing); c != nil && c.Reason == ReasonRollingUpdate && strings.Contains(c.Message, "updating") && strings.Contains(c.Message, "of 3 left") {
			sawUpdating = true
		}
		if ro := ec.Status.Rollout; ro != nil && ro.Revision == "r2" && ro.SnapshotKey == "v1/full/00000000000000000042-1.snap.zst" && ro.SnapshotRevision == 42 && len(ro.Updated) > 0 {
			sawStatus = true
		}
		if len(p.deletions) < 3 || ec.Status.Rollout != nil {
			return fmt.Errorf("deletions %v, status.rollout %+v", p.deletions, ec.Status.Rollout)
		}
		if c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionProgressing); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("Progressing %+v", c)
		}
		return nil
	})
	t.Logf("rolling update of 3 members in %s", time.Since(start).Round(100*time.Millisecond))
	want := []string{name + "-1", name + "-2", name + "-0"}
	if !slices.Equal(p.deletions, want) {
		t.Errorf("pods deleted %v, want %v (followers by name, the leader last)", p.deletions, want)
	}
	for i, pr := range p.problems {
		if pr != "" {
			t.Errorf("%s deleted while %s", p.deletions[i], pr)
		}
	}
	if moves := sidecars.movesOf(ns); !slices.Equal(moves, []string{name + "-0 -> " + name + "-1"}) {
		t.Errorf("leadership moves asked %v, want one from %s-0 to %s-1", moves, name, name)
	}
	if n := sidecars.count(ns); n != 1 {
		t.Errorf("%d full snapshots asked, want 1 before the first pod", n)
	}
	if !sawUpdating || !sawStatus {
		t.Errorf("Progressing RollingUpdate \"updating … of 3 left\" seen %v; status.rollout with revision, snapshot and updated members seen %v", sawUpdating, sawStatus)
	}
	for _, e := range []struct{ reason, note string }{
		{"RollingUpdateSnapshot", "full snapshot v1/full/00000000000000000042-1.snap.zst at revision 42"},
		{ReasonRollingUpdate, "member " + name + "-1's pod was deleted to restart it on revision r2"},
		{ReasonRollingUpdate, "member " + name + "-2's pod was deleted"},
		{"LeadershipMoved", "leadership moved from " + name + "-0 to " + name + "-1"},
		{ReasonRollingUpdate, "member " + name + "-0's pod was deleted"},
		{"RollingUpdateDone", "every member runs revision r2"},
	} {
		testutil.Eventually(t, 10*time.Second, "Event "+e.reason+": "+e.note, func() error { return findEventWith(ns, e.reason, "EtcdCluster", e.note) })
	}
}

// TestRollingUpdateStalls: a replacement pod that never turns Ready stops the rolling update
// after the grace: no second pod is deleted, Progressing says RollingUpdateStalled with an
// Event; once the member is back, the rolling update goes on.
func TestRollingUpdateStalls(t *testing.T) {
	t.Parallel() // its own namespace
	needEnv(t)
	ns, name := namespace(t), "rs"
	p := formedCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) { ec.Spec.UpdateStrategy.SkipBackup = true })
	p.readyAfter = time.Hour // the new template does not start
	updateCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) {
		ec.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	})
	testutil.Eventually(t, 90*time.Second, "rolling update stalled", func() error {
		p.step()
		ec := getCluster(t, ns, name)
		c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionProgressing)
		if c == nil || c.Reason != ReasonRollingUpdateStalled || !strings.Contains(c.Message, name+"-1 has not come back healthy") {
			return fmt.Errorf("Progressing %+v, deletions %v", c, p.deletions)
		}
		if ro := ec.Status.Rollout; ro == nil || !ro.Stalled || ro.Current != name+"-1" {
			return fmt.Errorf("status.rollout %+v", ro)
		}
		return findEventWith(ns, ReasonRollingUpdateStalled, "EtcdCluster", name+"-1 has not come back healthy")
	})
	// The replacement NotReady past the grace is deleted again (case 9), by itself.
	if d := slices.Compact(slices.Clone(p.deletions)); !slices.Equal(d, []string{name + "-1"}) {
		t.Errorf("pods deleted %v: only %s-1, whose replacement never turned Ready", p.deletions, name)
	}
	p.readyAfter = 0 // fixed: the member comes back, the rolling update goes on
	// Done once every member's pod was deleted in turn (the first one several times, above)
	// and the status says it is over.
	want := []string{name + "-1", name + "-2", name + "-0"}
	testutil.Eventually(t, 90*time.Second, "rolling update done", func() error {
		p.step()
		if ec := getCluster(t, ns, name); !slices.Equal(slices.Compact(slices.Clone(p.deletions)), want) || ec.Status.Rollout != nil {
			return fmt.Errorf("deletions %v (want %v, the first one repeated), status.rollout %+v", p.deletions, want, ec.Status.Rollout)
		}
		return nil
	})
}

// TestRollingUpdateSnapshotFails: while the full snapshot before a rolling update fails, no
// pod is deleted and the StatefulSet keeps the pod template the members run, so a pod
// evicted meanwhile comes back on it; status.rollout says why and what to do, with a Warning
// Event. Once the snapshot is taken, the template is applied and the rolling update goes on.
func TestRollingUpdateSnapshotFails(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns, name := namespace(t), "rf"
	p := formedCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) { ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "mem://rf"} })
	updateCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) {
		ec.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}
	})
	testutil.Eventually(t, 30*time.Second, "the failed snapshot reported", func() error {
		p.step()
		ro := getCluster(t, ns, name).Status.Rollout
		if ro == nil || !strings.Contains(ro.Message, "failed, so no member is restarted") || !strings.Contains(ro.Message, "skipBackup") {
			return fmt.Errorf("status.rollout %+v", ro)
		}
		return findEventWith(ns, "RollingUpdateSnapshotFailed", "EtcdCluster", "no member is restarted")
	})
	if len(p.deletions) > 0 || sidecars.count(ns) == 0 {
		t.Fatalf("pods deleted %v, %d snapshots asked: want none deleted after a failed snapshot", p.deletions, sidecars.count(ns))
	}
	cpu := func(spec corev1.PodSpec) string {
		for _, c := range spec.Containers {
			if c.Name == "etcd" {
				return c.Resources.Requests.Cpu().String()
			}
		}
		return ""
	}
	var sts appsv1.StatefulSet
	if err := get(t, ns, name, &sts); err != nil {
		t.Fatal(err)
	}
	if got := cpu(sts.Spec.Template.Spec); got == "200m" || sts.Annotations[annotationTemplatePending] == "" {
		t.Fatalf("StatefulSet template CPU request %s, pending %q: the new template must wait, recorded as pending, while its snapshot fails", got, sts.Annotations[annotationTemplatePending])
	}
	// An eviction meanwhile: the pod comes back on the template its members run.
	evicted := &corev1.Pod{}
	if err := get(t, ns, name+"-2", evicted); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(context.Background(), evicted); err != nil {
		t.Fatal(err)
	}
	p.step()
	if err := get(t, ns, name+"-2", evicted); err != nil || cpu(evicted.Spec) == "200m" {
		t.Fatalf("the evicted pod came back with CPU request %s (err %v): want the last template's", cpu(evicted.Spec), err)
	}
	sidecars.set(ns, snapshotter.FullResult{Key: "v1/full/00000000000000000077-1.snap.zst", Revision: 77})
	testutil.Eventually(t, 120*time.Second, "rolling update done", func() error {
		p.step()
		if ec := getCluster(t, ns, name); len(p.deletions) < 4 || ec.Status.Rollout != nil {
			return fmt.Errorf("deletions %v, status.rollout %+v", p.deletions, ec.Status.Rollout)
		}
		return nil
	})
	if err := get(t, ns, name, &sts); err != nil {
		t.Fatal(err)
	}
	if got := cpu(sts.Spec.Template.Spec); got != "200m" || sts.Annotations[annotationTemplatePending] != "" {
		t.Errorf("StatefulSet template CPU request %s, pending %q after the rolling update: want 200m, none pending", got, sts.Annotations[annotationTemplatePending])
	}
}

// formedCluster creates a 3-member cluster (changed by setup), plays its members until it is
// Ready and formed with name-0 leading, and returns the player that goes on playing them.
func formedCluster(t *testing.T, ns, name string, setup func(*v1alpha1.EtcdCluster)) *rolloutPlayer {
	t.Helper()
	ec := newCluster(ns, name, 3)
	setup(ec)
	if err := k8s.Create(context.Background(), ec); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ns, name, &appsv1.StatefulSet{}) })
	waitReady(t, ns, name, 3)
	p := newRolloutPlayer(t, ns, name)
	testutil.Eventually(t, 20*time.Second, "cluster formed", func() error {
		p.step()
		if ec := getCluster(t, ns, name); ec.Status.ClusterID != "c1" || ec.Status.Leader != name+"-0" {
			return fmt.Errorf("cluster %q leader %q", ec.Status.ClusterID, ec.Status.Leader)
		}
		return nil
	})
	return p
}
