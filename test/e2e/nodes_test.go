package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/etcd-steward/steward/test/e2e/node"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The faults of whole nodes. The suite's first node holds the control plane, the operator,
// the S3 server and CoreDNS; the faults strike the others, each running one member.

// nodeOf is the node each member pod runs on.
func nodeOf(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for podName, p := range memberPods(t, ns, name) {
		out[podName] = p.Spec.NodeName
	}
	return out
}

// TestNodeFaults puts a 3-member cluster, spread one member per node on volumes pinned to
// their nodes (as local disks are), through the faults of nodes while a client writes through
// the client Service: a network partition of a member's node while it runs on, a drain, a
// power-off marked out of service (the member moves to another node), the member destroyed
// to go back to its node, and two nodes powered off at once and marked out of service (the
// quorum lost for good, recovered from the survivor). Each ends with every acknowledged
// write on every member and the cluster's ID unchanged: no second cluster formed.
func TestNodeFaults(t *testing.T) {
	if len(kubeNode.Workers()) < 3 {
		t.Skipf("needs 3 nodes, the suite runs %d (STEWARD_E2E_NODES)", len(kubeNode.Workers()))
	}
	ns := namespace(t)
	storeSecret(t, ns)
	// Volumes pinned to their nodes (node.LocalClass), as local disks are.
	apply(t, ns, strings.Replace(clusterYAML(ns, "nf", 3, plainHTTP), "storage: {size: 1Gi}", "storage: {size: 1Gi, storageClassName: "+node.LocalClass+"}", 1))
	waitReady(t, ns, "nf", 3, 3*time.Minute)
	id := etcdClusterID(t, ns, "nf")
	acked := map[string]string{}

	placed := nodeOf(t, ns, "nf")
	runStep(t, "one member per node", func(t *testing.T) {
		nodes := slices.Sorted(maps.Values(placed))
		if len(slices.Compact(slices.Clone(nodes))) != 3 {
			t.Fatalf("members placed on %v: want one per node", placed)
		}
	})
	// The faults strike the nodes without the control plane, in turn.
	var victims []string // member pods, by the node they run on
	for _, pod := range slices.Sorted(maps.Keys(placed)) {
		if placed[pod] != node.NodeName {
			victims = append(victims, pod)
		}
	}

	runStep(t, "a member's node partitioned, then healed", func(t *testing.T) {
		pod, nodeName := victims[0], placed[victims[0]]
		w := startWriter(t, ns, "nf", "partition", 200*time.Millisecond)
		if err := kubeNode.Partition(nodeName); err != nil {
			t.Fatal(err)
		}
		healed := false
		defer func() {
			if !healed {
				_ = kubeNode.Heal(nodeName)
			}
		}()
		// The writer's connection may be to the member cut off: it reconnects through the
		// Service once the member's pod has left the Service's endpoints.
		testutil.Eventually(t, 3*time.Minute, "writes acknowledged again with "+nodeName+" cut off", func() error {
			return w.serving(5 * time.Second)
		})
		testutil.Throughout(t, 30*time.Second, "serving with "+nodeName+" cut off, and no recovery", func() error {
			if ec, err := getEC(ns, "nf"); err == nil && directive(ec) != "" {
				return fmt.Errorf("a recovery directive while two members keep the quorum: %s", directive(ec))
			}
			return w.serving(10 * time.Second)
		})
		if err := kubeNode.Heal(nodeName); err != nil {
			t.Fatal(err)
		}
		healed = true
		settled(t, ns, w, 4*time.Minute, id, acked)
		t.Logf("%s on %s rejoined; %d writes acknowledged", pod, nodeName, len(w.Acked()))
	})

	runStep(t, "a member's node drained", func(t *testing.T) {
		first, second := placed[victims[0]], placed[victims[1]]
		w := startWriter(t, ns, "nf", "drain", 200*time.Millisecond)
		defer func() {
			for _, n := range []string{first, second} {
				if _, err := kubectlIn("", "", "uncordon", n); err != nil {
					t.Errorf("uncordon %s: %v", n, err)
				}
			}
		}()
		if out, err := kubectlIn("", "", "drain", first, "--delete-emptydir-data", "--timeout=3m"); err != nil {
			t.Fatalf("drain %s: %v\n%s", first, err, out)
		}
		// The budget lets one member go at a time: the second node's member must stay while
		// the first is away.
		out, err := kubectlIn("", "", "drain", second, "--delete-emptydir-data", "--timeout=20s")
		if err == nil {
			t.Fatalf("drain %s with the member of %s away succeeded: the disruption budget let two members go\n%s", second, first, out)
		}
		if !strings.Contains(out+err.Error(), "disruption budget") {
			t.Fatalf("drain %s failed, but not for the disruption budget: %v\n%s", second, err, out)
		}
		testutil.Throughout(t, 20*time.Second, "serving with a member drained away", func() error { return w.serving(10 * time.Second) })
		for _, n := range []string{first, second} {
			kubectl(t, "", "uncordon", n)
		}
		waitReady(t, ns, "nf", 3, 4*time.Minute)
		if now := nodeOf(t, ns, "nf"); !maps.Equal(now, placed) {
			t.Errorf("after the drain the members run on %v, before on %v: want one per node again", now, placed)
		}
		w.Stop()
		maps.Copy(acked, w.Acked())
		assertKeysOnEveryMember(t, ns, "nf", acked)
		assertOneCluster(t, ns, "nf", id)
	})

	runStep(t, "a member's node powered off, then marked out of service", func(t *testing.T) {
		pod, nodeName := victims[1], placed[victims[1]]
		before := memberPods(t, ns, "nf")[pod]
		w := startWriter(t, ns, "nf", "poweroff", 200*time.Millisecond)
		if err := kubeNode.PowerOff(nodeName); err != nil {
			t.Fatal(err)
		}
		defer nodeBack(t, nodeName)
		testutil.Eventually(t, 3*time.Minute, "writes acknowledged again with "+nodeName+" off", func() error {
			return w.serving(5 * time.Second)
		})
		// Nobody said the node is off: its pod may still run for all the control plane knows,
		// so it is never deleted by force, and the status says the member waits for its node
		// and how to mark the node off.
		testutil.Eventually(t, 2*time.Minute, "the status saying "+pod+" waits for its node", func() error {
			ec, err := getEC(ns, "nf")
			if err != nil {
				return err
			}
			for _, c := range ec.Status.Conditions {
				if c.Type == v1alpha1.ConditionDegraded && strings.Contains(c.Message, pod+" waits for its node: node "+nodeName+" is not Ready") &&
					strings.Contains(c.Message, "kubectl taint node "+nodeName) {
					return nil
				}
			}
			return fmt.Errorf("conditions %+v", ec.Status.Conditions)
		})
		testutil.Throughout(t, 30*time.Second, "serving with "+nodeName+" off, its pod never removed", func() error {
			var p corev1.Pod
			if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, &p); err != nil {
				return fmt.Errorf("pod %s: %w (removed while its node may run)", pod, err)
			}
			if p.UID != before.UID {
				return fmt.Errorf("pod %s was replaced (UID %s, before %s) while its node may run", pod, p.UID, before.UID)
			}
			return w.serving(10 * time.Second)
		})
		// Marked out of service, the node is known to be off for good, and its volume with it
		// (pinned to it, as local disks are): the member comes back on another node with a new
		// volume, as a new member that joins as a learner.
		claim := memberClaim(t, ns, pod)
		marked := time.Now()
		kubectl(t, "", "taint", "node", nodeName, outOfServiceKey+"=nodeshutdown:NoExecute")
		testutil.Eventually(t, 5*time.Minute, pod+" back on another node, on a new volume", func() error {
			return onNewVolume(ns, pod, nodeName, claim)
		})
		t.Logf("%s back on another node with a new claim, Ready %s after %s was marked out of service", pod, time.Since(marked).Round(time.Second), nodeName)
		waitEvent(t, ns, "nf", "VolumeReplaced", time.Minute)
		settled(t, ns, w, 5*time.Minute, id, acked)
	})

	runStep(t, "a member destroyed (kubectl steward destroy) comes back on the node without one", func(t *testing.T) {
		// The node of the last step is back: the default spreading puts the member it lost
		// back on it, one member per node again.
		pod, nodeName := victims[1], placed[victims[1]]
		waitSchedulable(t, nodeName)
		w := startWriter(t, ns, "nf", "destroy", 200*time.Millisecond)
		claim := memberClaim(t, ns, pod)
		kubectlSteward(t, ns, "destroy", pod, "--yes")
		testutil.Eventually(t, 5*time.Minute, pod+" on "+nodeName+" again, on a new volume", func() error {
			if err := onNewVolume(ns, pod, "", claim); err != nil {
				return err
			}
			if now := nodeOf(t, ns, "nf")[pod]; now != nodeName {
				return fmt.Errorf("%s runs on %s, want %s (the node without a member)", pod, now, nodeName)
			}
			return nil
		})
		settled(t, ns, w, 5*time.Minute, id, acked)
		if now := nodeOf(t, ns, "nf"); !maps.Equal(now, placed) {
			t.Fatalf("members on %v, want %v: one per node", now, placed)
		}
	})

	runStep(t, "two members' nodes powered off (the quorum lost), marked out of service: recovered from the survivor", func(t *testing.T) {
		twoNodesLost(t, ns, placed, victims, id, acked)
	})
}

// twoNodesLost powers off the nodes of two members at once: the quorum is lost. Until the nodes
// are known to be off, nothing is deleted by force (their members may still run). Marked out
// of service, Kubernetes deletes their pods, and the recovery fences and waits for the two
// voters' logs; their volumes are pinned to their nodes, so the logs are gone with them: the
// operator replaces the two claims, the new members report their data dirs empty, and the
// recovery goes on from the survivor, every acknowledged write kept (the survivor had them:
// the writer's puts were acknowledged by a quorum of three, and the survivor's log is not
// behind the leader's for more than a round trip).
func twoNodesLost(t *testing.T, ns string, placed map[string]string, victims []string, id string, acked map[string]string) {
	before := memberPods(t, ns, "nf")
	claims := map[string]corev1.PersistentVolumeClaim{}
	var survivor string
	for pod := range before {
		if slices.Contains(victims, pod) {
			claims[pod] = memberClaim(t, ns, pod)
		} else {
			survivor = pod
		}
	}
	w := startWriter(t, ns, "nf", "twolost", 200*time.Millisecond)
	testutil.Eventually(t, time.Minute, "a first write", func() error { return w.serving(5 * time.Second) })
	var nodes []string
	for _, pod := range victims {
		nodes = append(nodes, placed[pod])
	}
	for _, n := range nodes {
		if err := kubeNode.PowerOff(n); err != nil {
			t.Fatal(err)
		}
		defer nodeBack(t, n)
	}
	waitCondition(t, ns, "nf", v1alpha1.ConditionQuorumLost, "True", 3*time.Minute)
	testutil.Throughout(t, 30*time.Second, "the lost members' pods kept while their nodes may run", func() error {
		for _, pod := range victims {
			var p corev1.Pod
			if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, &p); err != nil {
				return fmt.Errorf("pod %s: %w (removed while its node may run)", pod, err)
			}
			if p.UID != before[pod].UID {
				return fmt.Errorf("pod %s replaced while its node may run", pod)
			}
		}
		return nil
	})
	marked := time.Now()
	for _, n := range nodes {
		kubectl(t, "", "taint", "node", n, outOfServiceKey+"=nodeshutdown:NoExecute")
	}
	for _, pod := range victims {
		waitEventMatching(t, ns, "nf", "VolumeReplaced", "recovery waits for the log of member "+pod, 4*time.Minute)
	}
	waitEventMatching(t, ns, "nf", "Recovery", fmt.Sprintf("seed %s, from %s", survivor, cluster.RecoverFromSurvivor), 4*time.Minute)
	settled(t, ns, w, 6*time.Minute, id, acked)
	t.Logf("recovered from %s, every member Ready, %s after the nodes were marked out of service", survivor, time.Since(marked).Round(time.Second))
	for _, pod := range victims {
		if err := onNewVolume(ns, pod, placed[pod], claims[pod]); err != nil {
			t.Error(err)
		}
	}
}

// onNewVolume: the member's pod is Ready on a claim other than old, on a node other than
// notOn ("": any node).
func onNewVolume(ns, pod, notOn string, old corev1.PersistentVolumeClaim) error {
	var p corev1.Pod
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, &p); err != nil {
		return err
	}
	var c corev1.PersistentVolumeClaim
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "data-" + pod}, &c); err != nil {
		return err
	}
	if p.Spec.NodeName == "" || p.Spec.NodeName == notOn || !podReady(&p) || c.UID == old.UID {
		return fmt.Errorf("pod %s on node %q (ready %v), claim %s (was %s)", pod, p.Spec.NodeName, podReady(&p), c.UID, old.UID)
	}
	return nil
}

// nodeBack powers a node on and takes its out-of-service mark away (when it has one), then
// waits until new pods can be placed on it.
func nodeBack(t *testing.T, name string) {
	t.Helper()
	if err := kubeNode.PowerOn(context.Background(), name); err != nil {
		t.Errorf("power on %s: %v", name, err)
	}
	_, _ = kubectlIn("", "", "taint", "node", name, outOfServiceKey+"-")
	waitSchedulable(t, name)
}

// waitSchedulable waits for the node to be Ready and without taints, so that the scheduler's
// spreading counts it.
func waitSchedulable(t *testing.T, name string) {
	t.Helper()
	testutil.Eventually(t, 3*time.Minute, "node "+name+" Ready and without taints", func() error {
		var n corev1.Node
		if err := kube.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
			return err
		}
		if len(n.Spec.Taints) > 0 || n.Spec.Unschedulable {
			return fmt.Errorf("taints %v, unschedulable %v", n.Spec.Taints, n.Spec.Unschedulable)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("not Ready: %+v", n.Status.Conditions)
	})
}

// outOfServiceKey is the taint that says a node is off (Kubernetes then deletes its pods by force).
const outOfServiceKey = "node.kubernetes.io/out-of-service"

// settled waits for the cluster to be Ready with its three members, stops the writer, and
// checks that every write acknowledged so far is on every member and that the cluster is the
// one it was.
func settled(t *testing.T, ns string, w *writer, timeout time.Duration, id string, acked map[string]string) {
	t.Helper()
	waitReady(t, ns, "nf", 3, timeout)
	w.Stop()
	maps.Copy(acked, w.Acked())
	assertKeysOnEveryMember(t, ns, "nf", acked)
	assertOneCluster(t, ns, "nf", id)
}

// assertOneCluster checks that etcd reports the cluster ID it had, and three voters.
func assertOneCluster(t *testing.T, ns, name, id string) {
	t.Helper()
	if now := etcdClusterID(t, ns, name); now != id {
		t.Fatalf("cluster ID %s, was %s: a second cluster formed", now, id)
	}
	testutil.Eventually(t, time.Minute, "three voters", func() error {
		vs, err := voters(t, ns, name)
		if err != nil {
			return err
		}
		if len(vs) != 3 || slices.Contains(slices.Collect(maps.Values(vs)), true) {
			return fmt.Errorf("members %v (id -> learner)", vs)
		}
		return nil
	})
}

// memberClaim is a member pod's data claim.
func memberClaim(t *testing.T, ns, pod string) corev1.PersistentVolumeClaim {
	t.Helper()
	var c corev1.PersistentVolumeClaim
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "data-" + pod}, &c); err != nil {
		t.Fatal(err)
	}
	return c
}
