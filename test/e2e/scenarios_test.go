package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// memberIDs maps each member pod to its etcd member ID, from the status.
func memberIDs(ec *v1alpha1.EtcdCluster) map[string]string {
	out := map[string]string{}
	for _, m := range ec.Status.Members {
		out[m.Name] = m.ID
	}
	return out
}

// deletePods deletes pods (and with claims, their PVCs) at once, without waiting.
func deletePods(t *testing.T, ns string, claims bool, pods ...string) {
	t.Helper()
	var names []string
	for _, p := range pods {
		names = append(names, "pod/"+p)
		if claims {
			names = append(names, "pvc/data-"+p)
		}
	}
	kubectl(t, ns, append([]string{"delete", "--wait=false"}, names...)...)
}

// losePods loses member pods and their volumes together, as a node that dies takes them:
// deleted, and etcd in each killed at once. A graceful deletion alone is no loss at once: a
// leader terminating hands its leadership over for seconds, and a member replaced
// meanwhile rejoins through it with the quorum intact.
func losePods(t *testing.T, ns, name string, pods ...string) {
	t.Helper()
	before := memberPods(t, ns, name)
	deletePods(t, ns, true, pods...)
	for _, p := range pods {
		for _, cs := range before[p].Status.ContainerStatuses {
			if cs.Name != "etcd" || cs.ContainerID == "" {
				continue
			}
			// Terminating, the pod's containers are not restarted; one that already
			// stopped has nothing to kill.
			if err := killContainer(cs.ContainerID); err != nil {
				t.Logf("%s: %v", p, err)
			}
		}
	}
}

// waitReplaced waits until each pod is a new pod (another UID) and running.
func waitReplaced(t *testing.T, ns, name string, before map[string]corev1.Pod, pods ...string) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("pods %v replaced", pods), func() error {
		now := memberPods(t, ns, name)
		for _, p := range pods {
			if pod, ok := now[p]; !ok || pod.UID == before[p].UID || pod.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pod %s not yet replaced", p)
			}
		}
		return nil
	})
}

// waitMemberReplaced waits until pod is a new member (not oldID) and etcd lists three
// voters, the lost member gone and none a learner.
func waitMemberReplaced(t *testing.T, ns, name, pod, oldID string) {
	t.Helper()
	testutil.Eventually(t, 3*time.Minute, fmt.Sprintf("%s a new member, promoted", pod), func() error {
		e, err := getEC(ns, name)
		if err != nil {
			return err
		}
		if id := memberIDs(e)[pod]; id == "" || id == oldID {
			return fmt.Errorf("%s has ID %q (was %s)", pod, id, oldID)
		}
		vs, err := voters(t, ns, name)
		if err != nil {
			return err
		}
		for id, learner := range vs {
			if fmt.Sprintf("%x", id) == oldID {
				return fmt.Errorf("the lost member %s is still in the cluster", oldID)
			}
			if learner {
				return fmt.Errorf("member %x is still a learner", id)
			}
		}
		if len(vs) != 3 {
			return fmt.Errorf("etcd lists %d members", len(vs))
		}
		return nil
	})
}

// runStep runs one step of a test that puts a cluster through steps in order, logging its
// time, and stops the test at the first step that fails: the later ones build on it.
func runStep(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, func(t *testing.T) {
		start := time.Now()
		f(t)
		t.Logf("%s: %s", name, time.Since(start).Round(100*time.Millisecond))
	}) {
		t.FailNow()
	}
}

// TestThreeMembers creates a 3-member cluster and puts it through the faults a node brings,
// one after another, checking after each that no acknowledged write is lost.
func TestThreeMembers(t *testing.T) {
	t.Parallel() // touches nothing outside its namespace
	ns := namespace(t)
	storeSecret(t, ns)
	apply(t, ns, clusterYAML(ns, "main", 3, plainHTTP))
	ec := waitReady(t, ns, "main", 3, 3*time.Minute)
	acked := putKeys(t, ns, "main", "created", 50)
	assertKeysOnEveryMember(t, ns, "main", acked)

	runStep(t, "printer columns", func(t *testing.T) {
		out := kubectl(t, ns, "get", "ec", "main")
		lines := strings.Split(out, "\n")
		if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME READY MEMBERS LEADER REVISION LAST BACKUP RECOVERABLE SINCE AGE" {
			t.Fatalf("kubectl get ec:\n%s", out)
		}
		row := strings.Fields(lines[1])
		if row[0] != "main" || row[1] != "True" || row[2] != "3/3" || !strings.HasPrefix(row[3], "main-") {
			t.Fatalf("kubectl get ec row: %q", lines[1])
		}
	})

	runStep(t, "kubectl steward status and logs", func(t *testing.T) {
		var st struct {
			ClusterID string `json:"clusterID"`
			Members   []struct {
				Name     string `json:"name"`
				Revision int64  `json:"revision"`
				Serving  bool   `json:"serving"`
			} `json:"members"`
		}
		out := kubectlSteward(t, ns, "status", "main", "-o", "json")
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("kubectl steward status -o json: %v\n%s", err, out)
		}
		if st.ClusterID != ec.Status.ClusterID || len(st.Members) != 3 {
			t.Fatalf("kubectl steward status: cluster %q with %d members, want %q with 3:\n%s", st.ClusterID, len(st.Members), ec.Status.ClusterID, out)
		}
		for _, m := range st.Members {
			if !m.Serving || m.Revision == 0 {
				t.Errorf("kubectl steward status: member %s serving %v at revision %d, from its own report", m.Name, m.Serving, m.Revision)
			}
		}
		if logs := kubectlSteward(t, ns, "logs", "main-0", "-c", "sidecar", "--tail", "5"); strings.Count(logs, "\n") == 0 {
			t.Errorf("kubectl steward logs main-0: nothing")
		}
		var backup struct {
			Phase    string
			Revision int64
			Key      string
		}
		if err := json.Unmarshal([]byte(kubectlSteward(t, ns, "backup", "main", "--wait", "3m", "-o", "json")), &backup); err != nil {
			t.Fatal(err)
		}
		if backup.Phase != v1alpha1.BackupCompleted || backup.Revision == 0 || backup.Key == "" {
			t.Errorf("kubectl steward backup main: %+v, want a completed full snapshot", backup)
		}
		file := filepath.Join(t.TempDir(), "report.tar.gz")
		kubectlSteward(t, ns, "report", "main", "-f", file, "-o", "json")
		names := slices.Collect(maps.Keys(testutil.ReadTarball(t, file)))
		for _, want := range []string{"etcdcluster.yaml", "etcdmembers.yaml", "events.yaml", "logs/main-0-etcd.log"} {
			if !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, want) }) {
				t.Errorf("kubectl steward report main: the tarball holds %v, no %s", names, want)
			}
		}
	})

	runStep(t, "kubectl steward fence, then unfence", func(t *testing.T) {
		kubectlSteward(t, ns, "fence", "main-2")
		testutil.Eventually(t, 2*time.Minute, "main-2 fenced, its etcd held", func() error {
			e, err := getEC(ns, "main")
			if err != nil {
				return err
			}
			for _, m := range e.Status.Members {
				if m.Name == "main-2" && slices.Equal(e.Status.FencedMembers, []string{"main-2"}) && m.Reason == v1alpha1.ReasonFenced && m.Status != v1alpha1.MemberReady {
					return nil
				}
			}
			b, _ := json.Marshal(e.Status.Members)
			return fmt.Errorf("fenced %v, members %s", e.Status.FencedMembers, b)
		})
		// Two of three serve: writes go on; a second fence would leave one: refused.
		maps.Copy(acked, putKeys(t, ns, "main", "fenced", 10))
		if out, err := kubectlStewardErr(ns, "fence", "main-1"); err == nil {
			t.Fatalf("kubectl steward fence main-1 with main-2 fenced: accepted:\n%s", out)
		}
		kubectlSteward(t, ns, "unfence", "main-2")
		ec = waitReady(t, ns, "main", 3, 2*time.Minute)
		assertKeysOnEveryMember(t, ns, "main", acked)
	})

	runStep(t, "pod deleted returns with the same member ID", func(t *testing.T) {
		before, pods := memberIDs(ec), memberPods(t, ns, "main")
		deletePods(t, ns, false, "main-1")
		waitReplaced(t, ns, "main", pods, "main-1")
		ec = waitReady(t, ns, "main", 3, 2*time.Minute)
		if after := memberIDs(ec); after["main-1"] != before["main-1"] {
			t.Fatalf("member IDs before %v, after %v", before, after)
		}
		assertKeysOnEveryMember(t, ns, "main", acked)
	})

	runStep(t, "pod and volume deleted: replaced as a learner and promoted", func(t *testing.T) {
		w := startWriter(t, ns, "main", "replace", 100*time.Millisecond)
		before, pods := memberIDs(ec), memberPods(t, ns, "main")
		kubectlSteward(t, ns, "destroy", "main-2", "--yes") // its pod and volume, as the plugin deletes them
		waitReplaced(t, ns, "main", pods, "main-2")
		waitMemberReplaced(t, ns, "main", "main-2", before["main-2"])
		ec = waitReady(t, ns, "main", 3, 2*time.Minute)
		w.Stop()
		for k, v := range w.Acked() {
			acked[k] = v
		}
		assertKeysOnEveryMember(t, ns, "main", acked)
	})

	runStep(t, "an eviction that would break quorum is refused", func(t *testing.T) {
		evict := func(pod string) error {
			return kube.SubResource("eviction").Create(context.Background(),
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}},
				&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}})
		}
		pods := memberPods(t, ns, "main")
		testutil.Eventually(t, time.Minute, "the PodDisruptionBudget allows one disruption", func() error {
			var pdb policyv1.PodDisruptionBudget
			if err := kube.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "main"}, &pdb); err != nil {
				return err
			}
			if pdb.Status.DisruptionsAllowed != 1 {
				return fmt.Errorf("disruptions allowed: %d", pdb.Status.DisruptionsAllowed)
			}
			return nil
		})
		if err := evict("main-0"); err != nil {
			t.Fatalf("evicting one member of a healthy cluster: %v", err)
		}
		err := evict("main-1")
		if !apierrors.IsTooManyRequests(err) {
			t.Fatalf("evicting a second member while the first is away: got %v, want 429 Too Many Requests", err)
		}
		waitReplaced(t, ns, "main", pods, "main-0")
		ec = waitReady(t, ns, "main", 3, 2*time.Minute)
		assertKeysOnEveryMember(t, ns, "main", acked)
	})

	runStep(t, "etcd killed in a member being replaced", func(t *testing.T) {
		before, pods := memberIDs(ec), memberPods(t, ns, "main")
		deletePods(t, ns, true, "main-0")
		waitReplaced(t, ns, "main", pods, "main-0")
		// Kill the etcd container as soon as it runs in the new pod: mid-join.
		testutil.Eventually(t, time.Minute, "the etcd container of the new main-0 killed", func() error {
			return killEtcd(t, ns, "main", "main-0")
		})
		waitMemberReplaced(t, ns, "main", "main-0", before["main-0"])
		ec = waitReady(t, ns, "main", 3, 3*time.Minute)
		assertKeysOnEveryMember(t, ns, "main", acked)
	})

	runStep(t, "backup store down and back", func(t *testing.T) {
		kubectl(t, "steward-s3", "scale", "deployment/s3", "--replicas=0")
		defer kubectl(t, "steward-s3", "scale", "deployment/s3", "--replicas=1")
		w := startWriter(t, ns, "main", "store-down", 200*time.Millisecond)
		waitCondition(t, ns, "main", v1alpha1.ConditionBackupReady, "False", 2*time.Minute)
		waitEvent(t, ns, "main", "BackupStale", time.Minute)
		if e, _ := getEC(ns, "main"); condition(e, v1alpha1.ConditionReady) != "True" {
			t.Fatalf("the cluster stopped being Ready while only the store is down: %v", e.Status.Conditions)
		}
		kubectl(t, "steward-s3", "scale", "deployment/s3", "--replicas=1")
		waitCondition(t, ns, "main", v1alpha1.ConditionBackupReady, "True", 2*time.Minute)
		w.Stop()
		if len(w.Acked()) == 0 {
			t.Fatal("no write succeeded while the store was down")
		}
		for k, v := range w.Acked() {
			acked[k] = v
		}
	})

	runStep(t, "two members and their volumes lost at once, the seed crashing mid-recovery", func(t *testing.T) {
		w := startWriter(t, ns, "main", "two-lost", 100*time.Millisecond)
		pods := memberPods(t, ns, "main")
		losePods(t, ns, "main", "main-0", "main-1")
		// A second fault in the middle of the recovery: the seed's etcd crashes.
		testutil.Eventually(t, 3*time.Minute, "the seed's etcd killed mid-recovery", func() error {
			phase := kubectl(t, ns, "get", "ec", "main", "-o", "jsonpath={.status.recovery.directive.phase}")
			seed := kubectl(t, ns, "get", "ec", "main", "-o", "jsonpath={.status.recovery.directive.seed}")
			if phase != "Seeding" && phase != "Rejoining" {
				return fmt.Errorf("directive phase %q", phase)
			}
			return killEtcd(t, ns, "main", seed)
		})
		waitReplaced(t, ns, "main", pods, "main-0", "main-1")
		ec = waitReady(t, ns, "main", 3, 4*time.Minute)
		waitEvent(t, ns, "main", "QuorumLost", time.Minute)
		waitEvent(t, ns, "main", "Recovery", time.Minute)
		w.Stop()
		for k, v := range w.Acked() {
			acked[k] = v
		}
		assertKeysOnEveryMember(t, ns, "main", acked)
	})

	runStep(t, "every pod and volume lost: restored from the backups", func(t *testing.T) {
		for k, v := range putKeys(t, ns, "main", "before-loss", 1) {
			acked[k] = v
		}
		// Every acknowledged write is at or below the revision a read gets after the last.
		c := etcdClient(t, ns, "main")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.Get(ctx, "none")
		if err != nil {
			t.Fatal(err)
		}
		written := resp.Header.Revision
		backedUp := waitBackedUp(t, ns, "main", written, time.Minute)
		pods := memberPods(t, ns, "main")
		losePods(t, ns, "main", "main-0", "main-1", "main-2")
		waitReplaced(t, ns, "main", pods, "main-0", "main-1", "main-2")
		ec = waitReady(t, ns, "main", 3, 5*time.Minute)
		c = etcdClient(t, ns, "main")
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if resp, err = c.Get(ctx, "none"); err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision < backedUp {
			t.Fatalf("restored at revision %d, below the newest backed-up revision %d", resp.Header.Revision, backedUp)
		}
		assertKeysOnEveryMember(t, ns, "main", acked)
		// Every member reported its volume empty: all three restored and started together,
		// none joined as a learner.
		founders := kubectl(t, ns, "get", "ec", "main", "-o", "jsonpath={.status.recovery.lastRecovery.founders}")
		restored := kubectl(t, ns, "get", "ec", "main", "-o", "jsonpath={.status.recovery.lastRecovery.restored}")
		if strings.Count(founders, "main-") != 3 || strings.Count(restored, "main-") != 2 {
			t.Errorf("the recovery's founders %s, of which restored besides the seed %s: want all three members, two besides the seed", founders, restored)
		}
	})

	runStep(t, "a new cluster restored at a revision equals the source at that revision", func(t *testing.T) {
		c := etcdClient(t, ns, "main")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.Get(ctx, "", clientv3.WithPrefix())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		rev := resp.Header.Revision
		want := map[string]string{}
		for _, kv := range resp.Kvs {
			want[string(kv.Key)] = string(kv.Value)
		}
		putKeys(t, ns, "main", "after-copy", 5) // newer than the copy: must not be in it
		// The store holds main's history before its restore from backups above (timeline 1, its
		// first cluster ID) and since (timeline 2, its new one): a restore never guesses which
		// of two clusters' histories to read, so the copy names the timeline.
		var made struct {
			Ready    bool
			Revision int64
		}
		out := kubectlSteward(t, ns, "restore", "main", "--into", "copy", "--to-revision", fmt.Sprint(rev), "--timeline", "2", "--wait", "4m", "-o", "json")
		if err := json.Unmarshal([]byte(out), &made); err != nil || !made.Ready {
			t.Fatalf("kubectl steward restore main --into copy: %v\n%s", err, out)
		}
		waitReady(t, ns, "copy", 3, 4*time.Minute)
		cc := etcdClient(t, ns, "copy")
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := cc.Get(ctx, "", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kvs) != len(want) {
			t.Fatalf("the copy holds %d keys, the source held %d at revision %d", len(got.Kvs), len(want), rev)
		}
		for _, kv := range got.Kvs {
			if want[string(kv.Key)] != string(kv.Value) {
				t.Fatalf("key %s: copy %q, source at %d %q", kv.Key, kv.Value, rev, want[string(kv.Key)])
			}
		}
	})
}

// waitCondition waits until the cluster's condition has the status.
func waitCondition(t *testing.T, ns, name, typ, status string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, fmt.Sprintf("%s=%s", typ, status), func() error {
		e, err := getEC(ns, name)
		if err != nil {
			return err
		}
		if got := condition(e, typ); got != status {
			b, _ := json.Marshal(e.Status.Conditions)
			return fmt.Errorf("%s=%s: %s", typ, got, b)
		}
		return nil
	})
}

// killEtcd kills the etcd container of a member pod through the node's containerd, as a
// crash would; an error while it is not running.
func killEtcd(t *testing.T, ns, name, pod string) error {
	for _, cs := range memberPods(t, ns, name)[pod].Status.ContainerStatuses {
		if cs.Name == "etcd" && cs.State.Running != nil && cs.ContainerID != "" {
			return killContainer(cs.ContainerID)
		}
	}
	return fmt.Errorf("the etcd container of %s is not running", pod)
}

func killContainer(containerID string) error { return kubeNode.KillContainer(containerID) }

// TestScaleUnderLoad scales a cluster 1→3→5→3→1→3 with kubectl while a client writes every
// 100 ms: every step ends Ready with etcd listing exactly the desired voters, and no
// acknowledged write is lost. The operator's pod is killed as the first member leaves in
// 5→3; each scale-down must leave exactly the lower members in etcd, with their IDs. The last
// step finds the volumes that scaling down kept, holding the data of members since removed:
// those members must rejoin as new ones.
func TestScaleUnderLoad(t *testing.T) {
	t.Parallel() // touches nothing outside its namespace
	ns := namespace(t)
	storeSecret(t, ns)
	apply(t, ns, clusterYAML(ns, "s", 1, plainHTTP))
	waitReady(t, ns, "s", 1, 3*time.Minute)
	w := startWriter(t, ns, "s", "scale", 100*time.Millisecond)
	for _, n := range []int32{3, 5, 3, 1, 3} {
		start := time.Now()
		ec, err := getEC(ns, "s")
		if err != nil {
			t.Fatal(err)
		}
		from, ids := ec.Spec.Replicas, memberIDs(ec)
		kubectl(t, ns, "scale", "ec/s", fmt.Sprintf("--replicas=%d", n))
		if from == 5 && n == 3 {
			// A second fault as the first member leaves: the operator restarts.
			waitEventMatching(t, ns, "s", "ScalingDown", "s-4", 2*time.Minute)
			restartOperator(t)
		}
		waitReady(t, ns, "s", n, 4*time.Minute)
		testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("etcd lists %d voters", n), func() error {
			vs, err := voters(t, ns, "s")
			if err != nil {
				return err
			}
			learners := 0
			for _, l := range vs {
				if l {
					learners++
				}
			}
			if int32(len(vs)) != n || learners > 0 {
				return fmt.Errorf("%d members, %d learners", len(vs), learners)
			}
			return nil
		})
		testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("%d member pods", n), func() error {
			if pods := memberPods(t, ns, "s"); int32(len(pods)) != n {
				return fmt.Errorf("%d pods", len(pods))
			}
			return nil
		})
		if n < from {
			assertScaledDown(t, ns, "s", ids, n)
		}
		t.Logf("scaled to %d in %s", n, time.Since(start).Round(100*time.Millisecond))
	}
	w.Stop()
	t.Logf("%d writes acknowledged, %d failed", len(w.Acked()), w.fails)
	waitEvent(t, ns, "s", "ScalingUp", time.Minute)
	waitEvent(t, ns, "s", "ScalingDown", time.Minute)
	assertKeysOnEveryMember(t, ns, "s", w.Acked())
}

// assertScaledDown fails the test unless etcd's voters are exactly the members below
// ordinal n, with the IDs they had before the scale-down (ids, by member): the highest
// ordinals removed, and no other member removed (and added again).
func assertScaledDown(t *testing.T, ns, name string, ids map[string]string, n int32) {
	t.Helper()
	want := map[string]bool{}
	for i := range n {
		id := ids[fmt.Sprintf("%s-%d", name, i)]
		if id == "" {
			t.Fatalf("member %s-%d had no ID before the scale-down: %v", name, i, ids)
		}
		want[id] = true
	}
	vs, err := voters(t, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for id := range vs {
		got[fmt.Sprintf("%x", id)] = true
	}
	if !maps.Equal(got, want) {
		t.Fatalf("after scaling down to %d, etcd lists %v; want the members below %d as before (%v)", n, slices.Sorted(maps.Keys(got)), n, ids)
	}
}

// TestQuorumLossManual loses two of three members with their volumes under the Manual
// policy: the operator fences and waits, naming the survivor it would recover from, until
// the user confirms with the annotation; then the cluster heals from that survivor with
// every acknowledged write.
func TestQuorumLossManual(t *testing.T) {
	ns := namespace(t)
	storeSecret(t, ns)
	apply(t, ns, clusterYAML(ns, "m", 3, plainHTTP+"  quorumLoss: {policy: Manual}\n"))
	waitReady(t, ns, "m", 3, 3*time.Minute)
	acked := putKeys(t, ns, "m", "manual", 50)
	assertKeysOnEveryMember(t, ns, "m", acked)
	pods := memberPods(t, ns, "m")
	losePods(t, ns, "m", "m-0", "m-1")
	var epoch string
	testutil.Eventually(t, 3*time.Minute, "QuorumLost awaiting confirmation, naming m-2", func() error {
		e, err := getEC(ns, "m")
		if err != nil {
			return err
		}
		for _, c := range e.Status.Conditions {
			if c.Type == v1alpha1.ConditionQuorumLost && c.Status == metav1.ConditionTrue && c.Reason == "AwaitingConfirmation" {
				if !strings.Contains(c.Message, "m-2") {
					return fmt.Errorf("the condition does not name the survivor: %s", c.Message)
				}
				epoch = kubectl(t, ns, "get", "ec", "m", "-o", "jsonpath={.status.recovery.directive.epoch}")
				return nil
			}
		}
		b, _ := json.Marshal(e.Status.Conditions)
		return fmt.Errorf("conditions %s", b)
	})
	// Held: nothing proceeds for a while without the confirmation.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		e, err := getEC(ns, "m")
		if err != nil {
			t.Fatal(err)
		}
		if condition(e, v1alpha1.ConditionReady) == "True" || condition(e, v1alpha1.ConditionQuorumLost) != "True" {
			t.Fatalf("the Manual policy went on without a confirmation: %+v", e.Status.Conditions)
		}
		time.Sleep(time.Second)
	}
	kubectl(t, ns, "annotate", "ec/m", v1alpha1.AnnotationConfirmRecovery+"="+epoch)
	// A second fault as the recovery starts: the operator restarts.
	restartOperator(t)
	waitReplaced(t, ns, "m", pods, "m-0", "m-1")
	waitReady(t, ns, "m", 3, 4*time.Minute)
	assertKeysOnEveryMember(t, ns, "m", acked)
}

// TestRestoreInPlace: an EtcdRestore takes a running 3-member cluster back to revision R of
// its backups: a full snapshot of the present first, every member stopped, one restoring R,
// the others rejoining it, the operator's pod killed once it fences. Afterwards every member
// holds exactly what the cluster held at R, and it takes writes again; the restore was
// carried out once (one snapshot, one directive, each pod fenced once).
func TestRestoreInPlace(t *testing.T) {
	t.Parallel() // touches nothing outside its namespace
	ns := namespace(t)
	storeSecret(t, ns)
	apply(t, ns, clusterYAML(ns, "r", 3, plainHTTP))
	waitReady(t, ns, "r", 3, 3*time.Minute)
	atR := putKeys(t, ns, "r", "before", 30)
	c := etcdClient(t, ns, "r")
	ctx := context.Background()
	resp, err := c.Get(ctx, "before/0000")
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	after := putKeys(t, ns, "r", "after", 20)
	for k := range atR { // overwritten after R: the restore brings the old values back
		if _, err := c.Put(ctx, k, "overwritten"); err != nil {
			t.Fatal(err)
		}
		break
	}

	start := time.Now()
	// Every pod each member had, to prove each fenced exactly once.
	seen := map[string]map[types.UID]bool{}
	track := func() {
		for name, p := range memberPods(t, ns, "r") {
			if seen[name] == nil {
				seen[name] = map[types.UID]bool{}
			}
			seen[name][p.UID] = true
		}
	}
	track()
	// First a dry run: nothing made (checked below: one restore, one directive), the target
	// accepted, the writes after it to be dropped.
	var plan struct{ Verdict string }
	if err := json.Unmarshal([]byte(kubectlSteward(t, ns, "restore", "r", "--to-revision", fmt.Sprint(rev), "--dry-run", "-o", "json")), &plan); err != nil ||
		!strings.Contains(plan.Verdict, fmt.Sprintf("every write after revision %d would be dropped", rev)) {
		t.Fatalf("kubectl steward restore r --dry-run: %+v, %v", plan, err)
	}
	// Asked as a user would, with the plugin, which makes the EtcdRestore and returns.
	var asked struct{ Restore string }
	if err := json.Unmarshal([]byte(kubectlSteward(t, ns, "restore", "r", "--to-revision", fmt.Sprint(rev), "--wait", "0", "-o", "json")), &asked); err != nil || asked.Restore == "" {
		t.Fatalf("kubectl steward restore r: %+v, %v", asked, err)
	}
	back := asked.Restore
	// A second fault once the snapshot of the present is taken and the members are being
	// stopped: the operator restarts.
	var snapshot string
	testutil.Eventually(t, 5*time.Minute, "EtcdRestore "+back+" past its snapshot, fencing or restoring", func() error {
		track()
		er := getRestore(t, ns, back)
		switch er.Status.Phase {
		case "Fencing", "Restoring":
			snapshot = fmt.Sprintf("%+v", er.Status.Snapshot)
			return nil
		case "Rejoining", "Succeeded", "Failed":
			t.Fatalf("the restore reached %s before the test saw it fence or restore: %s", er.Status.Phase, er.Status.Message)
		}
		return fmt.Errorf("phase %q", er.Status.Phase)
	})
	restartOperator(t)
	testutil.Eventually(t, 8*time.Minute, fmt.Sprintf("EtcdRestore %s Succeeded at revision %d", back, rev), func() error {
		track()
		out, err := kubectlIn(ns, "", "get", "etcdrestore", back, "-o", "jsonpath={.status.phase} {.status.restoredRevision} {.status.message}")
		if err != nil {
			return err
		}
		if strings.HasPrefix(out, "Failed") {
			t.Fatalf("the restore failed: %s", out)
		}
		if !strings.HasPrefix(out, fmt.Sprintf("Succeeded %d", rev)) {
			return fmt.Errorf("EtcdRestore: %s", out)
		}
		return nil
	})
	t.Logf("restored in place to revision %d in %s", rev, time.Since(start).Round(time.Second))
	// The target was checked against the store by a member's sidecar, in the cluster's
	// namespace with its own credentials (the operator reads no store itself).
	checked, err := kubectlIn(ns, "", "get", "etcdrestore", back, "-o", "jsonpath={.status.target.checked}")
	if err != nil || !strings.HasPrefix(checked, "against the store: timeline ") || !strings.Contains(checked, fmt.Sprintf("gives revision %d ", rev)) {
		t.Fatalf("EtcdRestore %s's target was checked %q (%v); want against the store, giving revision %d", back, checked, err, rev)
	}
	// Carried out once: one snapshot, one directive (the newest epoch the cluster issued is
	// the restore's, the one after the epoch its request saw), each pod fenced once.
	er := getRestore(t, ns, back)
	if got := fmt.Sprintf("%+v", er.Status.Snapshot); got != snapshot {
		t.Errorf("the restore's snapshot of the present is %s, was %s before the operator restarted", got, snapshot)
	}
	ec, err := getEC(ns, "r")
	if err != nil {
		t.Fatal(err)
	}
	var recovery struct {
		LastEpoch int64 `json:"lastEpoch"`
	}
	if ec.Status.Recovery == nil || json.Unmarshal(ec.Status.Recovery.Raw, &recovery) != nil || er.Status.Request == nil ||
		er.Status.Epoch != er.Status.Request.AfterEpoch+1 || recovery.LastEpoch != er.Status.Epoch {
		t.Errorf("the restore's directive has epoch %d, its request %+v, the cluster's newest epoch %d; want one directive, the next epoch after the request's",
			er.Status.Epoch, er.Status.Request, recovery.LastEpoch)
	}
	for _, reason := range []string{"RestoreStarted", "Restored"} {
		if n := countEvents(t, ns, "EtcdCluster", "r", reason); n != 1 {
			t.Errorf("%d %s Events on the cluster; want 1", n, reason)
		}
	}
	for name, uids := range seen {
		if len(uids) != 2 {
			t.Errorf("member %s had %d pods over the restore (%v); want its pod fenced (replaced) exactly once", name, len(uids), slices.Collect(maps.Keys(uids)))
		}
	}
	waitReady(t, ns, "r", 3, 3*time.Minute)
	assertKeysOnEveryMember(t, ns, "r", atR)
	c = etcdClient(t, ns, "r")
	for k := range after {
		testutil.Eventually(t, 30*time.Second, "read "+k, func() error {
			resp, err := c.Get(ctx, k)
			if err != nil {
				return err
			}
			if len(resp.Kvs) != 0 {
				t.Fatalf("%s, written after revision %d, is still there after the restore", k, rev)
			}
			return nil
		})
	}
	assertKeysOnEveryMember(t, ns, "r", putKeys(t, ns, "r", "restored", 10))
}

// TestRollingUpdateUnderLoad changes the members' etcd settings of a running 3-member
// cluster while a client writes every 100 ms: the operator takes a full snapshot, then
// deletes the pods of the OnDelete StatefulSet one at a time, followers first and the leader
// last after moving its leadership, each back and caught up before the next; the operator's
// pod is killed once one member is updated. Every member's pod is replaced exactly once and
// keeps its ID (its volume), every acknowledged write is on every member, and the cluster
// reports the rolling update in its Events.
func TestRollingUpdateUnderLoad(t *testing.T) {
	t.Parallel() // touches nothing outside its namespace
	ns := namespace(t)
	storeSecret(t, ns)
	apply(t, ns, clusterYAML(ns, "ru", 3, plainHTTP))
	ec := waitReady(t, ns, "ru", 3, 3*time.Minute)
	leader, ids, before := ec.Status.Leader, memberIDs(ec), memberPods(t, ns, "ru")
	if leader == "" || len(ids) != 3 {
		t.Fatalf("leader %q, member IDs %v", leader, ids)
	}
	w := startWriter(t, ns, "ru", "roll", 100*time.Millisecond)
	start := time.Now()
	// Every pod each member had, to prove each replaced exactly once.
	seen := map[string]map[types.UID]bool{}
	track := func() map[string]corev1.Pod {
		pods := memberPods(t, ns, "ru")
		for name, p := range pods {
			if seen[name] == nil {
				seen[name] = map[types.UID]bool{}
			}
			seen[name][p.UID] = true
		}
		return pods
	}
	track()
	kubectl(t, ns, "patch", "ec/ru", "--type=merge", "-p", `{"spec":{"etcd":{"snapshotCount":20000}}}`)
	// A second fault once one member is updated and the others not: the operator restarts.
	testutil.Eventually(t, 5*time.Minute, "one member's pod deleted by the rolling update", func() error {
		track()
		e, err := getEC(ns, "ru")
		if err != nil {
			return err
		}
		if e.Status.Rollout == nil || len(e.Status.Rollout.Updated) != 1 || countEvents(t, ns, "EtcdCluster", "ru", "RollingUpdate") != 1 {
			return fmt.Errorf("rollout %+v", e.Status.Rollout)
		}
		return nil
	})
	restartOperator(t)
	testutil.Eventually(t, 8*time.Minute, "every member pod replaced, the rolling update over", func() error {
		pods := track()
		for name, p := range before {
			if now, ok := pods[name]; !ok || now.UID == p.UID {
				return fmt.Errorf("pod %s not replaced yet", name)
			}
		}
		e, err := getEC(ns, "ru")
		if err != nil {
			return err
		}
		if e.Status.Rollout != nil || condition(e, v1alpha1.ConditionReady) != "True" || e.Status.ReadyReplicas != 3 {
			return fmt.Errorf("rollout %+v, ready %d", e.Status.Rollout, e.Status.ReadyReplicas)
		}
		return nil
	})
	t.Logf("rolling update of 3 members in %s", time.Since(start).Round(100*time.Millisecond))
	w.Stop()
	t.Logf("%d writes acknowledged, %d failed", len(w.Acked()), w.fails)
	if after := memberIDs(waitReady(t, ns, "ru", 3, time.Minute)); !maps.Equal(after, ids) {
		t.Errorf("member IDs %v after the rolling update, were %v: a member was replaced, not restarted", after, ids)
	}
	for name, uids := range seen {
		if len(uids) != 2 {
			t.Errorf("member %s had %d pods over the rolling update (%v); want its pod replaced exactly once", name, len(uids), slices.Collect(maps.Keys(uids)))
		}
	}
	// The pods went in order: followers first, the leader last.
	var deleted []string
	testutil.Eventually(t, time.Minute, "three RollingUpdate Events", func() error {
		var events corev1.EventList
		if err := kube.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
			return err
		}
		sort.Slice(events.Items, func(i, j int) bool { return eventTime(events.Items[i]).Before(eventTime(events.Items[j])) })
		deleted = deleted[:0]
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "EtcdCluster" && e.Reason == "RollingUpdate" {
				name, _, _ := strings.Cut(strings.TrimPrefix(e.Message, "member "), "'s pod")
				for range occurrences(e) {
					deleted = append(deleted, name)
				}
			}
		}
		if len(deleted) < 3 {
			return fmt.Errorf("pods deleted by the rolling update: %v", deleted)
		}
		return nil
	})
	if len(deleted) != 3 || deleted[2] != leader || len(slices.Compact(slices.Sorted(slices.Values(deleted)))) != 3 {
		t.Errorf("pods deleted %v: want each member's once, the leader %s last", deleted, leader)
	}
	if n := countEvents(t, ns, "EtcdCluster", "ru", "RollingUpdateSnapshot"); n != 1 {
		t.Errorf("%d RollingUpdateSnapshot Events; want one full snapshot before the rolling update", n)
	}
	waitEvent(t, ns, "ru", "LeadershipMoved", time.Minute)
	waitEvent(t, ns, "ru", "RollingUpdateDone", time.Minute)
	assertKeysOnEveryMember(t, ns, "ru", w.Acked())
}

func getRestore(t *testing.T, ns, name string) *v1alpha1.EtcdRestore {
	t.Helper()
	er := &v1alpha1.EtcdRestore{}
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, er); err != nil {
		t.Fatal(err)
	}
	return er
}

func eventTime(e corev1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}
