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

// TestNodeFaults puts a 3-member cluster, spread one member per node, through the faults of a
// member's node while a client writes through the client Service: a network partition while
// the node runs on, a drain, and a power-off. Each ends with every acknowledged write on
// every member and the cluster's ID unchanged: no second cluster formed.
func TestNodeFaults(t *testing.T) {
	if len(kubeNode.Workers()) < 3 {
		t.Skipf("needs 3 nodes, the suite runs %d (STEWARD_E2E_NODES)", len(kubeNode.Workers()))
	}
	ns := namespace(t)
	storeSecret(t, ns)
	apply(t, ns, clusterYAML(ns, "nf", 3, plainHTTP))
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
		waitReady(t, ns, "nf", 3, 4*time.Minute)
		w.Stop()
		maps.Copy(acked, w.Acked())
		assertKeysOnEveryMember(t, ns, "nf", acked)
		assertOneCluster(t, ns, "nf", id)
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

	runStep(t, "a member's node powered off, then on", func(t *testing.T) {
		pod, nodeName := victims[1], placed[victims[1]]
		before := memberPods(t, ns, "nf")[pod]
		w := startWriter(t, ns, "nf", "poweroff", 200*time.Millisecond)
		if err := kubeNode.PowerOff(nodeName); err != nil {
			t.Fatal(err)
		}
		on := false
		defer func() {
			if !on {
				_ = kubeNode.PowerOn(context.Background(), nodeName)
			}
		}()
		testutil.Eventually(t, 3*time.Minute, "writes acknowledged again with "+nodeName+" off", func() error {
			return w.serving(5 * time.Second)
		})
		// Nobody said the node is off: its pod may still run for all the control plane knows,
		// so it is never deleted by force, and the status names the member it waits for.
		testutil.Eventually(t, 2*time.Minute, "the status naming "+pod+" as not Ready", func() error {
			ec, err := getEC(ns, "nf")
			if err != nil {
				return err
			}
			for _, m := range ec.Status.Members {
				if m.Name == pod && m.Status != v1alpha1.MemberReady {
					return nil
				}
			}
			return fmt.Errorf("members %+v", ec.Status.Members)
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
		if err := kubeNode.PowerOn(context.Background(), nodeName); err != nil {
			t.Fatal(err)
		}
		on = true
		waitReady(t, ns, "nf", 3, 5*time.Minute)
		w.Stop()
		maps.Copy(acked, w.Acked())
		assertKeysOnEveryMember(t, ns, "nf", acked)
		assertOneCluster(t, ns, "nf", id)
	})
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
