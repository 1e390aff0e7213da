package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestFenceAndUnfence: the annotation fences f-2 while it serves: the ConfigMap carries the
// fence to the sidecars, f-2's Ready pod is deleted once (its replacement's sidecar holds
// etcd), and f-2 shows as NotReady/Fenced: past three NotReady graces it is not restarted,
// no quorum is lost and the cluster is not Degraded. Fencing f-1 too would leave one Ready
// voter of three: refused, with its stable code and an Event, as a name of no member is.
// Removing the annotation unfences f-2, which comes back.
func TestFenceAndUnfence(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	if err := k8s.Create(ctx, newCluster(ns, "f", 3)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "StatefulSet", func() error { return get(t, ns, "f", &appsv1.StatefulSet{}) })
	waitReady(t, ns, "f", 3)
	var old corev1.Pod
	if err := get(t, ns, "f-2", &old); err != nil {
		t.Fatal(err)
	}
	setFence(t, ns, "f", "f-2")

	// f-2's pod stays Ready until the operator deletes it; the one made after holds etcd.
	stopped := false
	notF2 := func(i int) bool { return i != 2 || !stopped }
	testutil.Eventually(t, 30*time.Second, "f-2 fenced: its pod deleted, its status Fenced", func() error {
		var p corev1.Pod
		if err := get(t, ns, "f-2", &p); apierrors.IsNotFound(err) || (err == nil && p.UID != old.UID) {
			stopped = true
		}
		members(t, ns, "f", notF2)
		ec := getCluster(t, ns, "f")
		if !stopped {
			return fmt.Errorf("pod f-2 not deleted yet; fenced %v", ec.Status.FencedMembers)
		}
		if m := ec.Status.Members[2]; m.Status != v1alpha1.MemberNotReady || m.Reason != v1alpha1.ReasonFenced {
			return fmt.Errorf("f-2 is %s/%s", m.Status, m.Reason)
		}
		return nil
	})
	if fenced := configFenced(t, ns, "f"); !slices.Equal(fenced, []string{"f-2"}) {
		t.Errorf("the ConfigMap fences %v, want f-2", fenced)
	}
	if ec := getCluster(t, ns, "f"); !slices.Equal(ec.Status.FencedMembers, []string{"f-2"}) {
		t.Errorf("status.fencedMembers %v, want f-2", ec.Status.FencedMembers)
	}
	testutil.Eventually(t, 10*time.Second, "Events MemberFenced and FencedMemberStopped", func() error {
		if err := findEventMessage(ns, "MemberFenced", "member f-2 is fenced"); err != nil {
			return err
		}
		return findEventMessage(ns, "FencedMemberStopped", "its pod was deleted")
	})
	if out, err := kubectl(t, "-n", ns, "get", "ec", "f", "-o", "wide"); err != nil || !strings.Contains(out, `["f-2"]`) {
		t.Errorf("kubectl get ec does not show f-2 fenced (%v):\n%s", err, out)
	}

	var held corev1.Pod
	if err := get(t, ns, "f-2", &held); err != nil {
		t.Fatal(err)
	}
	testutil.Throughout(t, 3*4*time.Second, "f-2 held: not restarted, no fault", func() error {
		members(t, ns, "f", notF2)
		ec := getCluster(t, ns, "f")
		if m := ec.Status.Members[2]; m.Reason != v1alpha1.ReasonFenced {
			return fmt.Errorf("f-2 is %s/%s", m.Status, m.Reason)
		}
		if condition(ec, v1alpha1.ConditionQuorumLost) == metav1.ConditionTrue || condition(ec, v1alpha1.ConditionDegraded) == metav1.ConditionTrue ||
			condition(ec, v1alpha1.ConditionReady) != metav1.ConditionTrue {
			return fmt.Errorf("conditions %v", ec.Status.Conditions)
		}
		var p corev1.Pod
		if err := get(t, ns, "f-2", &p); err != nil || p.UID != held.UID || !p.DeletionTimestamp.IsZero() {
			return fmt.Errorf("the fenced f-2's held pod was deleted (%v)", err)
		}
		if findEvent(ns, "MemberRestarted") == nil {
			return fmt.Errorf("a fenced member was restarted")
		}
		return nil
	})

	// Fencing f-1 as well would leave f-0 alone of three: refused; f-9 is no member.
	setFence(t, ns, "f", "f-2,f-1,f-9")
	testutil.Eventually(t, 20*time.Second, "the fences of f-1 and f-9 refused", func() error {
		members(t, ns, "f", notF2)
		ec := getCluster(t, ns, "f")
		i := slices.IndexFunc(ec.Status.LastErrors, func(e v1alpha1.LastError) bool { return e.Code == "ERR_FENCE_REFUSED" })
		if i < 0 {
			return fmt.Errorf("lastErrors %v", ec.Status.LastErrors)
		}
		desc := ec.Status.LastErrors[i].Description
		if !strings.Contains(desc, "fencing f-1 would leave 1 Ready voters unfenced, fewer than the quorum of 2") ||
			!strings.Contains(desc, "f-9 is no member of f (its members: f-0, f-1, f-2)") {
			return fmt.Errorf("ERR_FENCE_REFUSED says %q", desc)
		}
		if !slices.Equal(ec.Status.FencedMembers, []string{"f-2"}) {
			return fmt.Errorf("status.fencedMembers %v, want f-2 alone", ec.Status.FencedMembers)
		}
		if c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionProgressing); c == nil || !strings.Contains(c.Message, "ERR_FENCE_REFUSED") {
			return fmt.Errorf("Progressing %+v does not name the refusal", c)
		}
		return nil
	})
	if err := findEventMessage(ns, "FenceRefused", "fencing f-1 would leave"); err != nil {
		t.Error(err)
	}
	if fenced := configFenced(t, ns, "f"); !slices.Equal(fenced, []string{"f-2"}) {
		t.Errorf("the ConfigMap fences %v, want f-2 alone", fenced)
	}
	var p1 corev1.Pod
	if err := get(t, ns, "f-1", &p1); err != nil || !p1.DeletionTimestamp.IsZero() {
		t.Errorf("pod f-1, whose fence was refused, is gone (%v)", err)
	}

	// Unfenced: the ConfigMap no longer holds f-2, whose etcd starts again.
	setFence(t, ns, "f", "")
	testutil.Eventually(t, 20*time.Second, "f-2 unfenced", func() error {
		ec := getCluster(t, ns, "f")
		if len(ec.Status.FencedMembers) != 0 || len(configFenced(t, ns, "f")) != 0 {
			return fmt.Errorf("status fences %v, the ConfigMap %v", ec.Status.FencedMembers, configFenced(t, ns, "f"))
		}
		return findEventMessage(ns, "MemberUnfenced", "member f-2 is unfenced")
	})
	waitReady(t, ns, "f", 3)
}

// setFence sets the annotation etcd.steward.dev/fenced-members to names ("" removes it).
func setFence(t *testing.T, ns, name, names string) {
	t.Helper()
	updateCluster(t, ns, name, func(ec *v1alpha1.EtcdCluster) {
		if ec.Annotations == nil {
			ec.Annotations = map[string]string{}
		}
		ec.Annotations[v1alpha1.AnnotationFencedMembers] = names
		if names == "" {
			delete(ec.Annotations, v1alpha1.AnnotationFencedMembers)
		}
	})
}

// configFenced are the members the cluster's ConfigMap fences.
func configFenced(t *testing.T, ns, name string) []string {
	t.Helper()
	var cm corev1.ConfigMap
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: v1alpha1.ConfigMapName(name)}, &cm); err != nil {
		t.Fatal(err)
	}
	cc, err := v1alpha1.ParseClusterConfig(cm.Data)
	if err != nil {
		t.Fatal(err)
	}
	return cc.FencedMembers
}

// TestFenceSuspendedDuringRecovery: fr-0 is fenced when every member stops and fr-1 and fr-2
// lose their data: the recovery needs fr-0's data. While its directive is in force the fence
// is suspended (not in the ConfigMap or the status, an Event says so), and fr-0 is chosen as
// the seed; once the recovery is done the annotation, still there, fences fr-0 again.
func TestFenceSuspendedDuringRecovery(t *testing.T) {
	t.Parallel() // its own namespace
	needEnv(t)
	ns := namespace(t)
	createFormed(t, newCluster(ns, "fr", 3))
	setFence(t, ns, "fr", "fr-0")
	notFr0 := func(i int) bool { return i != 0 }
	testutil.Eventually(t, 30*time.Second, "fr-0 fenced", func() error {
		members(t, ns, "fr", notFr0)
		if ec := getCluster(t, ns, "fr"); !slices.Equal(ec.Status.FencedMembers, []string{"fr-0"}) {
			return fmt.Errorf("status.fencedMembers %v", ec.Status.FencedMembers)
		}
		return nil
	})

	// Every member stops; from disk, fr-0 holds the cluster's data, the others nothing.
	none := func(int) bool { return false }
	testutil.Eventually(t, 60*time.Second, "a directive that seeds fr-0, the fence suspended", func() error {
		membersRenewing(t, ns, "fr", none, none)
		now := time.Now()
		writeReport(t, ns, cluster.Report{Name: "fr-0", At: now, Source: cluster.ReportFromDisk, DataValid: true, Owner: "fr-0",
			MemberID: "a0", ClusterID: "c1", Formed: true, LastTerm: 5, LastIndex: 120, Commit: 118, Applied: 118}, nil)
		for _, n := range []string{"fr-1", "fr-2"} {
			writeReport(t, ns, cluster.Report{Name: n, At: now, Source: cluster.ReportFromDisk, DataEmpty: true}, nil)
		}
		ec := getCluster(t, ns, "fr")
		if d := directive(t, ec); d == nil || d.Phase != cluster.PhaseSeeding || d.Seed != "fr-0" {
			return fmt.Errorf("directive %+v", d)
		}
		if len(ec.Status.FencedMembers) != 0 || len(configFenced(t, ns, "fr")) != 0 {
			return fmt.Errorf("fences in force while the recovery runs: status %v, ConfigMap %v", ec.Status.FencedMembers, configFenced(t, ns, "fr"))
		}
		if c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionAllMembersReady); c == nil || !strings.Contains(c.Message, "suspended while recovery") {
			return fmt.Errorf("AllMembersReady %+v does not say the fence is suspended", c)
		}
		return findEventMessage(ns, "FenceSuspended", "fr-0 unfenced: the fences of fr-0 are suspended while recovery")
	})

	// fr-0 carries the directive out and serves; the others rejoin; the fence holds again.
	epoch := directive(t, getCluster(t, ns, "fr")).Epoch
	testutil.Eventually(t, 60*time.Second, "recovery retired, fr-0 fenced again", func() error {
		members(t, ns, "fr", all)
		writeReport(t, ns, cluster.Report{Name: "fr-0", At: time.Now(), Source: cluster.ReportFromEtcd, Serving: true, DataValid: true,
			Leader: true, MemberID: "a0", ClusterID: "c2", Formed: true, AppliedEpoch: epoch, Revision: 200,
			Members: []cluster.LiveMember{{ID: "a0", Name: "fr-0"}, {ID: "a1", Name: "fr-1"}, {ID: "a2", Name: "fr-2"}}},
			&cluster.DirectiveAck{Epoch: epoch, Result: cluster.DirectiveResult{Member: "fr-0", MemberID: "a0", ClusterID: "c2", Revision: 200}})
		for i, n := range []string{"fr-1", "fr-2"} {
			writeReport(t, ns, cluster.Report{Name: n, At: time.Now(), Source: cluster.ReportFromEtcd, Serving: true, DataValid: true,
				MemberID: fmt.Sprintf("a%d", i+1), ClusterID: "c2", Formed: true, AppliedEpoch: epoch}, nil)
		}
		ec := getCluster(t, ns, "fr")
		if d := directive(t, ec); d != nil {
			return fmt.Errorf("directive %d still in force: %s (%s)", d.Epoch, d.Phase, d.Reason)
		}
		if !slices.Equal(ec.Status.FencedMembers, []string{"fr-0"}) || !slices.Equal(configFenced(t, ns, "fr"), []string{"fr-0"}) {
			return fmt.Errorf("fences in force: status %v, ConfigMap %v; AllMembersReady %+v", ec.Status.FencedMembers, configFenced(t, ns, "fr"),
				apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionAllMembersReady))
		}
		return nil
	})
}
