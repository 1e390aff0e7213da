package operator

import (
	"fmt"
	"github.com/etcd-steward/steward/internal/units"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/heal"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

var graces = Graces{Unknown: time.Minute, NotReady: 5 * time.Minute}

// world builds observations of a cluster named c with n pods.
type world struct {
	o Observation
}

func healthy(n int) *world {
	w := &world{o: Observation{Now: t0, Name: "c", Desired: int32(n), Formed: true, StatefulSetReplicas: int32(n), ConfigMembers: int32(n), Graces: graces,
		Backup: &BackupObservation{LastDelta: t0.Add(-2 * time.Second), DeltaPeriod: 5 * time.Second}}}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("c-%d", i)
		role := v1alpha1.RoleMember
		if i == 0 {
			role = v1alpha1.RoleLeader
		}
		w.o.Members = append(w.o.Members, MemberObservation{Name: name, Ordinal: i,
			Pod:   &PodState{Ready: true, Created: t0.Add(-time.Hour)},
			Lease: &LeaseState{Holder: fmt.Sprintf("%x:%s", 100+i, role), Renewed: t0.Add(-5 * time.Second), Duration: 30 * time.Second}})
		w.o.Previous.Members = append(w.o.Previous.Members, v1alpha1.MemberStatus{Name: name, ID: fmt.Sprintf("%x", 100+i),
			Role: role, Status: v1alpha1.MemberReady, Reason: v1alpha1.ReasonLeaseSucceeded,
			LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))})
	}
	for _, c := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionQuorate, v1alpha1.ConditionAllMembersReady, v1alpha1.ConditionBackupReady} {
		w.setCond(c, true)
	}
	return w
}

func (w *world) setCond(t string, ok bool) *world {
	apimeta.SetStatusCondition(&w.o.Previous.Conditions, metav1.Condition{Type: t, Status: boolStatus(ok), Reason: "Test",
		LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))})
	return w
}

// prevStatus sets the recorded status of member i.
func (w *world) prevStatus(i int, status, reason string, since time.Duration) *world {
	w.o.Previous.Members[i].Status, w.o.Previous.Members[i].Reason = status, reason
	w.o.Previous.Members[i].LastTransitionTime = metav1.NewTime(t0.Add(-since))
	return w
}

// fence asks for the named members to be fenced (the annotation); fenced records them as
// fenced by the last pass (status.fencedMembers).
func (w *world) fence(names ...string) *world {
	w.o.FenceRequest = names
	return w
}

func (w *world) fenced(names ...string) *world {
	w.o.Previous.FencedMembers = names
	return w
}

// volumeLost records member i's claim as lost with its node (marked out of service).
func (w *world) volumeLost(i int) *world {
	w.o.Members[i].Volume = &VolumeState{Claim: "data-" + w.o.Members[i].Name, UID: "uid-" + w.o.Members[i].Name, NodeLost: "its volume is on node n2, marked out of service"}
	return w
}

// nodeDown records member i's pod on node n2, which is not Ready.
func (w *world) nodeDown(i int) *world {
	w.o.Members[i].Pod.Node = "n2"
	w.o.Members[i].NodeDown = "node n2 is not Ready (NodeStatusUnknown: Kubelet stopped posting node status.)"
	return w
}

// answers records that the operator asked every member directly, and that only those named
// answered a linearizable read.
func (w *world) answers(names ...string) *world {
	w.o.Answers = map[string]bool{}
	for _, m := range w.o.Members {
		w.o.Answers[m.Name] = slices.Contains(names, m.Name)
	}
	return w
}

func (w *world) leaseExpired(i int) *world {
	w.o.Members[i].Lease.Renewed = t0.Add(-2 * time.Minute)
	return w
}

func (w *world) podNotReady(i int, age time.Duration) *world {
	w.o.Members[i].Pod = &PodState{Ready: false, Created: t0.Add(-age)}
	return w
}

func memberOf(d Decision, name string) v1alpha1.MemberStatus {
	for _, m := range d.Members {
		if m.Name == name {
			return m
		}
	}
	return v1alpha1.MemberStatus{}
}

func cond(d Decision, t string) metav1.ConditionStatus {
	if c := apimeta.FindStatusCondition(d.Conditions, t); c != nil {
		return c.Status
	}
	return "absent"
}

// TestDecide has one named row per row of the operator's status table (cases 1-13, see
// docs/decisions.md), plus the rows Steward adds.
func TestDecide(t *testing.T) {
	tests := []struct {
		name  string
		world *world
		want  Case
		check func(t *testing.T, d Decision)
	}{
		{"1 pink of health: nothing to do", healthy(3), CasePinkOfHealth, func(t *testing.T, d Decision) {
			if d.StatefulSetReplicas != 3 || len(d.DeletePods) != 0 || d.QuorumLost || d.Leader != "c-0" {
				t.Errorf("healthy cluster: %+v", d)
			}
			if d.MinAvailable != 2 {
				t.Errorf("PDB minAvailable = %d, want 2 (a majority of 3)", d.MinAvailable)
			}
		}},
		{"2 member status out of sync with its lease: expired lease makes it Unknown", healthy(3).leaseExpired(2), CaseLeasesOutOfSync, func(t *testing.T, d Decision) {
			if m := memberOf(d, "c-2"); m.Status != v1alpha1.MemberUnknown || m.Reason != v1alpha1.ReasonLeaseExpired || m.ID != "66" {
				t.Errorf("c-2 = %+v, want Unknown/LeaseExpired with id from the holder", m)
			}
		}},
		{"2 member status out of sync with its lease: renewed lease makes it Ready",
			healthy(3).prevStatus(1, v1alpha1.MemberUnknown, v1alpha1.ReasonLeaseExpired, 10*time.Second), CaseLeasesOutOfSync,
			func(t *testing.T, d Decision) {
				if m := memberOf(d, "c-1"); m.Status != v1alpha1.MemberReady || m.LastTransitionTime.Time != t0 {
					t.Errorf("c-1 = %+v, want Ready since now", m)
				}
			}},
		{"3 all members Ready but AllMembersReady stale", healthy(3).setCond(v1alpha1.ConditionAllMembersReady, false), CaseAllMembersReadyStaleFalse,
			func(t *testing.T, d Decision) {
				if cond(d, v1alpha1.ConditionAllMembersReady) != metav1.ConditionTrue {
					t.Error("AllMembersReady not set true")
				}
			}},
		{"4 not all members Ready but AllMembersReady stale", healthy(3).podNotReady(1, time.Minute), CaseAllMembersReadyStaleTrue,
			func(t *testing.T, d Decision) {
				if cond(d, v1alpha1.ConditionAllMembersReady) != metav1.ConditionFalse || cond(d, v1alpha1.ConditionDegraded) != metav1.ConditionTrue {
					t.Error("AllMembersReady not set false, or Degraded not true")
				}
				if d.MinAvailable != 2 {
					t.Errorf("PDB minAvailable = %d, want 2: no eviction while a member is not Ready", d.MinAvailable)
				}
			}},
		{"5 majority Ready but Ready stale", healthy(3).setCond(v1alpha1.ConditionReady, false), CaseReadyConditionStaleFalse,
			func(t *testing.T, d Decision) {
				if cond(d, v1alpha1.ConditionReady) != metav1.ConditionTrue {
					t.Error("Ready not set true")
				}
			}},
		{"6 majority NotReady but Ready stale", healthy(3).podNotReady(1, time.Minute).podNotReady(2, time.Minute), CaseReadyConditionStaleTrue,
			func(t *testing.T, d Decision) {
				if cond(d, v1alpha1.ConditionReady) != metav1.ConditionFalse || cond(d, v1alpha1.ConditionQuorate) != metav1.ConditionFalse {
					t.Error("Ready/Quorate not set false")
				}
				if d.QuorumLost {
					t.Error("quorum called lost before the grace passed")
				}
			}},
		{"7 member Unknown longer than the grace, its pod Ready: still Unknown, the reason and Degraded say why, nothing deleted",
			healthy(3).leaseExpired(2).prevStatus(2, v1alpha1.MemberUnknown, v1alpha1.ReasonLeaseExpired, 2*time.Minute), CaseUnknownTooLong,
			func(t *testing.T, d Decision) {
				if m := memberOf(d, "c-2"); m.Status != v1alpha1.MemberUnknown || m.Reason != v1alpha1.ReasonUnknownGracePeriodExceeded {
					t.Errorf("c-2 = %+v", m)
				}
				if c := apimeta.FindStatusCondition(d.Conditions, v1alpha1.ConditionDegraded); c == nil || !strings.Contains(c.Message, "sidecars of c-2 have not renewed") {
					t.Errorf("Degraded = %+v, want the silent sidecar named", c)
				}
				if len(d.DeletePods) > 0 || d.QuorumLost {
					t.Errorf("deleted %v, quorum lost %t", d.DeletePods, d.QuorumLost)
				}
			}},
		{"7 every Lease stale for an hour (sidecars cannot write, or a skewed clock), every pod Ready: Unknown, Ready, nothing deleted or fenced",
			healthy(3).leaseExpired(0).leaseExpired(1).leaseExpired(2).
				prevStatus(0, v1alpha1.MemberUnknown, v1alpha1.ReasonUnknownGracePeriodExceeded, time.Hour).
				prevStatus(1, v1alpha1.MemberUnknown, v1alpha1.ReasonUnknownGracePeriodExceeded, time.Hour).
				prevStatus(2, v1alpha1.MemberUnknown, v1alpha1.ReasonUnknownGracePeriodExceeded, time.Hour).
				setCond(v1alpha1.ConditionAllMembersReady, false).setCond(v1alpha1.ConditionDegraded, true), CasePinkOfHealth,
			func(t *testing.T, d Decision) {
				if d.Unknown != 3 || len(d.DeletePods) > 0 || d.QuorumLost || cond(d, v1alpha1.ConditionReady) != metav1.ConditionTrue {
					t.Errorf("unknown %d, deleted %v, quorum lost %t, Ready %s", d.Unknown, d.DeletePods, d.QuorumLost, cond(d, v1alpha1.ConditionReady))
				}
			}},
		{"7 a member Unknown: its pod is Ready, so the PodDisruptionBudget allows no eviction",
			healthy(3).leaseExpired(2).prevStatus(2, v1alpha1.MemberUnknown, v1alpha1.ReasonLeaseExpired, 30*time.Second).
				setCond(v1alpha1.ConditionAllMembersReady, false), CasePinkOfHealth,
			func(t *testing.T, d Decision) {
				if d.MinAvailable != 3 {
					t.Errorf("minAvailable %d, want 3: three pods are Ready, one of them Unknown", d.MinAvailable)
				}
			}},
		{"7 member Unknown within the grace stays Unknown",
			healthy(3).leaseExpired(2).prevStatus(2, v1alpha1.MemberUnknown, v1alpha1.ReasonLeaseExpired, 30*time.Second).
				setCond(v1alpha1.ConditionAllMembersReady, false), CasePinkOfHealth,
			func(t *testing.T, d Decision) {
				if m := memberOf(d, "c-2"); m.Status != v1alpha1.MemberUnknown {
					t.Errorf("c-2 = %+v", m)
				}
			}},
		{"8 pod not Ready marks the member NotReady", healthy(3).podNotReady(2, time.Minute), CasePodNotReady, func(t *testing.T, d Decision) {
			if m := memberOf(d, "c-2"); m.Status != v1alpha1.MemberNotReady || m.Reason != v1alpha1.ReasonPodNotReady {
				t.Errorf("c-2 = %+v", m)
			}
		}},
		{"9 quorate with a minority NotReady past the grace: its pod is deleted",
			healthy(3).podNotReady(2, time.Hour).prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 6*time.Minute).
				setCond(v1alpha1.ConditionAllMembersReady, false), CaseMinorityNotReady,
			func(t *testing.T, d Decision) {
				if !slices.Equal(d.DeletePods, []string{"c-2"}) {
					t.Errorf("DeletePods = %v", d.DeletePods)
				}
			}},
		{"9 a minority NotReady past the grace, but asked directly no other member answers (the quorum is lost, the Leases behind): nothing restarted",
			healthy(3).podNotReady(2, time.Hour).prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 6*time.Minute).
				setCond(v1alpha1.ConditionAllMembersReady, false).answers(), CaseRestartUnproven,
			func(t *testing.T, d Decision) {
				if len(d.DeletePods) != 0 || slices.Contains(d.Cases, CaseMinorityNotReady) || !strings.Contains(d.RestartsHeld, "c-2 NotReady for more than") {
					t.Errorf("delete %v, cases %v, held %q: want nothing restarted, and why", d.DeletePods, d.Cases, d.RestartsHeld)
				}
			}},
		{"9 a pod NotReady past the grace whose etcd answers when asked directly: it serves, it is not restarted",
			healthy(3).podNotReady(2, time.Hour).prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 6*time.Minute).
				setCond(v1alpha1.ConditionAllMembersReady, false).answers("c-0", "c-1", "c-2"), CasePinkOfHealth,
			func(t *testing.T, d Decision) {
				if len(d.DeletePods) != 0 || slices.Contains(d.Cases, CaseMinorityNotReady) || d.RestartsHeld != "" {
					t.Errorf("delete %v, cases %v, held %q: want nothing restarted", d.DeletePods, d.Cases, d.RestartsHeld)
				}
			}},
		{"a member NotReady past the grace whose volume is lost with its node, the others answering: its claim and pod are replaced, it is not restarted",
			healthy(3).podNotReady(2, time.Hour).prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 6*time.Minute).
				setCond(v1alpha1.ConditionAllMembersReady, false).volumeLost(2).answers("c-0", "c-1"), CaseVolumeNodeLost,
			func(t *testing.T, d Decision) {
				if len(d.DeletePods) != 0 || len(d.ReplaceVolumes) != 1 || d.ReplaceVolumes[0].Member != "c-2" || d.ReplaceVolumes[0].UID != "uid-c-2" {
					t.Errorf("delete %v, replace %+v: want c-2's claim replaced, no restart", d.DeletePods, d.ReplaceVolumes)
				}
			}},
		{"a member whose volume is lost with its node, but no other member answering (the quorum lost): nothing replaced",
			healthy(3).podNotReady(2, time.Hour).prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 6*time.Minute).
				setCond(v1alpha1.ConditionAllMembersReady, false).volumeLost(2).answers(), CaseRestartUnproven,
			func(t *testing.T, d Decision) {
				if len(d.DeletePods) != 0 || len(d.ReplaceVolumes) != 0 {
					t.Errorf("delete %v, replace %+v: want nothing done while no other member answers", d.DeletePods, d.ReplaceVolumes)
				}
			}},
		{"a member NotReady past the grace on a node that is not Ready: not restarted (its deletion would wait for the node), the status says how to mark the node off",
			healthy(3).podNotReady(2, time.Hour).prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 6*time.Minute).
				setCond(v1alpha1.ConditionAllMembersReady, false).nodeDown(2).answers("c-0", "c-1"), CasePinkOfHealth,
			func(t *testing.T, d Decision) {
				c := apimeta.FindStatusCondition(d.Conditions, v1alpha1.ConditionDegraded)
				if len(d.DeletePods) != 0 || c == nil || !strings.Contains(c.Message, "c-2 waits for its node: node n2 is not Ready") ||
					!strings.Contains(c.Message, "kubectl taint node n2 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute") {
					t.Errorf("delete %v, Degraded %+v", d.DeletePods, c)
				}
			}},
		{"9 a pod younger than the grace is not deleted again",
			healthy(3).podNotReady(2, time.Minute).prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 6*time.Minute).
				setCond(v1alpha1.ConditionAllMembersReady, false), CasePinkOfHealth,
			func(t *testing.T, d Decision) {
				if len(d.DeletePods) != 0 {
					t.Errorf("DeletePods = %v: a recreated pod gets its own grace", d.DeletePods)
				}
			}},
		{"10 quorum lost with a majority NotReady past the grace",
			healthy(3).podNotReady(1, time.Hour).podNotReady(2, time.Hour).
				prevStatus(1, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 6*time.Minute).
				prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 6*time.Minute).
				setCond(v1alpha1.ConditionReady, false).setCond(v1alpha1.ConditionAllMembersReady, false), CaseQuorumLost,
			func(t *testing.T, d Decision) {
				if !d.QuorumLost || cond(d, v1alpha1.ConditionQuorumLost) != metav1.ConditionTrue || len(d.DeletePods) != 0 {
					t.Errorf("QuorumLost=%v pods=%v", d.QuorumLost, d.DeletePods)
				}
			}},
		{"11 scale up of a healthy cluster adds one member", func() *world { w := healthy(3); w.o.Desired = 5; return w }(), CaseScaleUp,
			func(t *testing.T, d Decision) {
				if d.StatefulSetReplicas != 4 {
					t.Errorf("replicas = %d, want 4: one learner at a time", d.StatefulSetReplicas)
				}
				if cond(d, v1alpha1.ConditionProgressing) != metav1.ConditionTrue {
					t.Error("Progressing not true while scaling")
				}
			}},
		{"11 scale up waits while a member is not Ready", func() *world {
			w := healthy(3).prevStatus(1, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, time.Minute).podNotReady(1, time.Minute)
			w.o.Desired = 5
			return w
		}(), CaseAllMembersReadyStaleTrue, func(t *testing.T, d Decision) {
			if d.StatefulSetReplicas != 3 || slices.Contains(d.Cases, CaseScaleUp) {
				t.Errorf("replicas = %d, cases %v: scaling must wait for every member", d.StatefulSetReplicas, d.Cases)
			}
		}},
		{"12 scale down of a healthy cluster drops the highest member from the spec first", func() *world { w := healthy(5); w.o.Desired = 3; return w }(), CaseScaleDown,
			func(t *testing.T, d Decision) {
				if d.ConfigMembers != 4 || d.StatefulSetReplicas != 5 || d.ClusterSize != 5 {
					t.Errorf("config %d replicas %d size %d, want 4, 5, 5: c-4 leaves etcd before its pod stops", d.ConfigMembers, d.StatefulSetReplicas, d.ClusterSize)
				}
			}},
		{"12 scale down waits while the leader still lists the leaving member", func() *world {
			w := healthy(5)
			w.o.Desired, w.o.ConfigMembers = 3, 4
			w.o.Reports = map[string]cluster.Report{"c-0": {Serving: true, Leader: true, Members: []cluster.LiveMember{
				{Name: "c-0"}, {Name: "c-1"}, {Name: "c-2"}, {Name: "c-3"}, {Name: "c-4"}}}}
			return w
		}(), CaseScaleDown, func(t *testing.T, d Decision) {
			if d.StatefulSetReplicas != 5 || d.ConfigMembers != 4 {
				t.Errorf("replicas %d config %d: the pod of c-4 must wait for its removal from etcd", d.StatefulSetReplicas, d.ConfigMembers)
			}
		}},
		{"12 scale down stops the pod once etcd no longer lists the member, even while it is NotReady", func() *world {
			w := healthy(5).podNotReady(4, time.Minute)
			w.o.Desired, w.o.ConfigMembers = 3, 4
			w.o.Reports = map[string]cluster.Report{"c-0": {Serving: true, Leader: true, Members: []cluster.LiveMember{
				{Name: "c-0"}, {Name: "c-1"}, {Name: "c-2"}, {Name: "c-3"}}}}
			return w
		}(), CaseScaleDown, func(t *testing.T, d Decision) {
			if d.StatefulSetReplicas != 4 || d.ConfigMembers != 4 {
				t.Errorf("replicas %d config %d, want 4 and 4", d.StatefulSetReplicas, d.ConfigMembers)
			}
		}},
		{"12 scale down trusts only the current leader's report: a former leader's, with a lower term, is stale", func() *world {
			w := healthy(5)
			w.o.Desired, w.o.ConfigMembers = 3, 4
			w.o.Reports = map[string]cluster.Report{
				"c-0": {Serving: true, Leader: true, Term: 7, Members: []cluster.LiveMember{{Name: "c-0"}, {Name: "c-1"}, {Name: "c-2"}, {Name: "c-3"}, {Name: "c-4"}}},
				"c-1": {Serving: true, Leader: true, Term: 6, Members: []cluster.LiveMember{{Name: "c-0"}, {Name: "c-1"}, {Name: "c-2"}, {Name: "c-3"}}},
			}
			return w
		}(), CaseScaleDown, func(t *testing.T, d Decision) {
			if d.StatefulSetReplicas != 5 {
				t.Errorf("replicas %d: c-4 is stopped on a former leader's report", d.StatefulSetReplicas)
			}
		}},
		{"12 scale down ignores a leader report of a member whose pod is not Ready", func() *world {
			w := healthy(5).podNotReady(0, time.Minute)
			w.o.Desired, w.o.ConfigMembers = 3, 4
			w.o.Reports = map[string]cluster.Report{"c-0": {Serving: true, Leader: true, Term: 7, Members: []cluster.LiveMember{
				{Name: "c-0"}, {Name: "c-1"}, {Name: "c-2"}, {Name: "c-3"}}}}
			return w
		}(), CaseScaleDown, func(t *testing.T, d Decision) {
			if d.StatefulSetReplicas != 5 {
				t.Errorf("replicas %d: c-4 is stopped on the report of a leader whose pod is not Ready", d.StatefulSetReplicas)
			}
		}},
		{"12 scale down trusts the sidecars' direct answers over a stale EtcdMember", func() *world {
			w := healthy(5)
			w.o.Desired, w.o.ConfigMembers = 3, 4
			w.o.Reports = map[string]cluster.Report{"c-0": {Serving: true, Leader: true, Term: 7, Members: []cluster.LiveMember{
				{Name: "c-0"}, {Name: "c-1"}, {Name: "c-2"}, {Name: "c-3"}}}}
			w.o.DirectReports = map[string]cluster.Report{"c-0": {Serving: true, Leader: true, Term: 7, Members: []cluster.LiveMember{
				{Name: "c-0"}, {Name: "c-1"}, {Name: "c-2"}, {Name: "c-3"}, {Name: "c-4"}}}}
			return w
		}(), CaseScaleDown, func(t *testing.T, d Decision) {
			if d.StatefulSetReplicas != 5 {
				t.Errorf("replicas %d: c-4 is stopped on a stale EtcdMember while its leader, asked directly, still lists it", d.StatefulSetReplicas)
			}
		}},
		{"12 scale down waits while the leaving member still serves", func() *world {
			w := healthy(5)
			w.o.Desired, w.o.ConfigMembers = 3, 4
			w.o.DirectReports = map[string]cluster.Report{"c-0": {Serving: true, Leader: true, Term: 7, Members: []cluster.LiveMember{
				{Name: "c-0"}, {Name: "c-1"}, {Name: "c-2"}, {Name: "c-3"}}}}
			return w
		}(), CaseScaleDown, func(t *testing.T, d Decision) {
			if d.StatefulSetReplicas != 5 {
				t.Errorf("replicas %d: c-4's pod is Ready and its Lease renewed: it still serves", d.StatefulSetReplicas)
			}
		}},
		{"12 scale down without a report from the leader stops nothing", func() *world {
			w := healthy(3)
			w.o.Desired, w.o.ConfigMembers = 1, 2
			return w
		}(), CaseScaleDown, func(t *testing.T, d Decision) {
			if d.StatefulSetReplicas != 3 {
				t.Errorf("replicas %d: no pod stops on a guess", d.StatefulSetReplicas)
			}
		}},
		{"12 scale down drops a leaving member that is not Ready", func() *world {
			w := healthy(4).podNotReady(3, time.Hour).prevStatus(3, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 5*time.Minute).
				setCond(v1alpha1.ConditionAllMembersReady, false)
			w.o.Desired = 3
			return w
		}(), CaseScaleDown, func(t *testing.T, d Decision) {
			if d.ConfigMembers != 3 || d.StatefulSetReplicas != 4 {
				t.Errorf("config %d replicas %d, want 3 and 4: c-3 leaves etcd, then its pod stops", d.ConfigMembers, d.StatefulSetReplicas)
			}
		}},
		{"12 scale down waits while a member that stays is not Ready", func() *world {
			w := healthy(4).prevStatus(1, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, time.Minute).podNotReady(1, time.Minute)
			w.o.Desired = 3
			return w
		}(), CaseAllMembersReadyStaleTrue, func(t *testing.T, d Decision) {
			if d.ConfigMembers != 4 || slices.Contains(d.Cases, CaseScaleDown) {
				t.Errorf("config %d, cases %v: c-1 is healed before anything is removed", d.ConfigMembers, d.Cases)
			}
		}},
		{"13 superfluous member entries are dropped", func() *world {
			w := healthy(3)
			w.o.Previous.Members = append(w.o.Previous.Members, v1alpha1.MemberStatus{Name: "c-3", Status: v1alpha1.MemberNotReady})
			return w
		}(), CaseSuperfluousEntries, func(t *testing.T, d Decision) {
			if len(d.Members) != 3 {
				t.Errorf("members = %v", d.Members)
			}
		}},
		{"bootstrap of a new cluster starts every member at once", func() *world {
			w := &world{o: Observation{Now: t0, Desired: 3, StatefulSetReplicas: -1, ConfigMembers: -1, Graces: graces}}
			return w
		}(), CaseBootstrap, func(t *testing.T, d Decision) {
			if d.StatefulSetReplicas != 3 || d.ConfigMembers != 3 || d.QuorumLost || len(d.DeletePods) != 0 {
				t.Errorf("bootstrap: %+v", d)
			}
			if cond(d, v1alpha1.ConditionBackupReady) != metav1.ConditionFalse {
				t.Error("BackupReady must be false without backups")
			}
		}},
		{"backups stale: PDB allows no eviction, and the leader's reason is named", func() *world {
			w := healthy(3)
			w.o.Backup.LastDelta = t0.Add(-time.Minute)
			w.o.Backup.Leader = &v1alpha1.MemberBackup{Reason: "the newest stored revision 9 was current 1m ago", LastError: "upload: connection refused"}
			return w
		}(), CasePinkOfHealth, func(t *testing.T, d Decision) {
			if cond(d, v1alpha1.ConditionBackupReady) != metav1.ConditionFalse || d.MinAvailable != 3 {
				t.Errorf("BackupReady=%v minAvailable=%d", cond(d, v1alpha1.ConditionBackupReady), d.MinAvailable)
			}
			if c := apimeta.FindStatusCondition(d.Conditions, v1alpha1.ConditionBackupReady); !strings.Contains(c.Message, "connection refused") {
				t.Errorf("BackupReady message %q does not say why", c.Message)
			}
		}},
		{"member fenced while it serves: fenced, its pod stopped once, leadership moved first", healthy(3).fence("c-0"), CaseMemberFenced, func(t *testing.T, d Decision) {
			if !slices.Equal(d.Fenced, []string{"c-0"}) || d.FenceRefused != "" {
				t.Errorf("fenced %v, refused %q; want c-0 fenced", d.Fenced, d.FenceRefused)
			}
			if !slices.Equal(d.StopFenced, []string{"c-0"}) || d.FenceMoveLeaderTo != "c-1" {
				t.Errorf("stop %v, move leadership to %q; want c-0's pod stopped after leadership moves to c-1", d.StopFenced, d.FenceMoveLeaderTo)
			}
		}},
		{"member fenced and held: NotReady/Fenced, never restarted, not degraded, no quorum lost",
			healthy(3).fence("c-2").fenced("c-2").podNotReady(2, time.Hour).prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonFenced, time.Hour),
			CaseMemberFenced, func(t *testing.T, d Decision) {
				if m := memberOf(d, "c-2"); m.Status != v1alpha1.MemberNotReady || m.Reason != v1alpha1.ReasonFenced {
					t.Errorf("c-2 = %+v, want NotReady/Fenced", m)
				}
				if len(d.DeletePods) != 0 || len(d.StopFenced) != 0 || slices.Contains(d.Cases, CaseMinorityNotReady) {
					t.Errorf("a held fenced member is restarted: delete %v, stop %v, cases %v", d.DeletePods, d.StopFenced, d.Cases)
				}
				if cond(d, v1alpha1.ConditionDegraded) != metav1.ConditionFalse || cond(d, v1alpha1.ConditionQuorumLost) != metav1.ConditionFalse {
					t.Errorf("Degraded %s, QuorumLost %s: a fenced member is no fault", cond(d, v1alpha1.ConditionDegraded), cond(d, v1alpha1.ConditionQuorumLost))
				}
			}},
		{"a fenced member held and another NotReady past the grace, no member answering: the quorum is lost (a fenced voter is down too)",
			healthy(3).fence("c-2").fenced("c-2").podNotReady(2, time.Hour).prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonFenced, time.Hour).
				podNotReady(1, time.Hour).prevStatus(1, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, time.Hour).answers(),
			CaseQuorumLost, func(t *testing.T, d Decision) {
				if !d.QuorumLost || cond(d, v1alpha1.ConditionQuorumLost) != metav1.ConditionTrue || len(d.DeletePods) != 0 {
					t.Errorf("quorum lost %v (condition %s), delete %v: want the quorum lost, nothing restarted", d.QuorumLost, cond(d, v1alpha1.ConditionQuorumLost), d.DeletePods)
				}
			}},
		{"fence that would break the quorum: refused, not applied", healthy(3).podNotReady(1, time.Minute).fence("c-2"), CaseFenceRefused, func(t *testing.T, d Decision) {
			if len(d.Fenced) != 0 || !strings.Contains(d.FenceRefused, "fencing c-2 would leave 1 Ready voters unfenced, fewer than the quorum of 2") {
				t.Errorf("fenced %v, refused %q", d.Fenced, d.FenceRefused)
			}
		}},
		{"fence while the Ready voters' etcd does not answer when asked directly: refused, not applied",
			healthy(3).fence("c-2").answers("c-2"), CaseFenceRefused, func(t *testing.T, d Decision) {
				if len(d.Fenced) != 0 || len(d.StopFenced) != 0 || !strings.Contains(d.FenceRefused, "fencing c-2 would leave 0 Ready voters unfenced") {
					t.Errorf("fenced %v, stop %v, refused %q", d.Fenced, d.StopFenced, d.FenceRefused)
				}
			}},
		{"a fenced member still serving, the others no longer answering: its fence stays, its etcd is not stopped",
			healthy(3).fence("c-2").fenced("c-2").answers("c-2"), CaseFenceRefused, func(t *testing.T, d Decision) {
				if !slices.Equal(d.Fenced, []string{"c-2"}) || len(d.StopFenced) != 0 || !strings.Contains(d.FenceRefused, "its etcd is not stopped yet") {
					t.Errorf("fenced %v, stop %v, refused %q", d.Fenced, d.StopFenced, d.FenceRefused)
				}
			}},
		{"fence of a name that is no member: refused, naming the members", healthy(3).fence("c-7"), CaseFenceRefused, func(t *testing.T, d Decision) {
			if len(d.Fenced) != 0 || !strings.Contains(d.FenceRefused, "c-7 is no member of c (its members: c-0, c-1, c-2)") {
				t.Errorf("fenced %v, refused %q", d.Fenced, d.FenceRefused)
			}
		}},
		{"unfenced: the member restarts, its NotReady grace starts afresh",
			healthy(3).fenced("c-2").podNotReady(2, time.Hour).prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonFenced, time.Hour),
			CasePodNotReady, func(t *testing.T, d Decision) {
				if m := memberOf(d, "c-2"); len(d.Fenced) != 0 || m.Reason != v1alpha1.ReasonPodNotReady || !m.LastTransitionTime.Time.Equal(t0) || len(d.DeletePods) != 0 {
					t.Errorf("fenced %v, c-2 = %+v, delete %v: want unfenced, PodNotReady since now, not restarted", d.Fenced, m, d.DeletePods)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := decideAsking(tc.world.o)
			if !slices.Contains(d.Cases, tc.want) {
				t.Fatalf("cases %v, want %s among them", d.Cases, tc.want)
			}
			tc.check(t, d)
		})
	}
}

// TestDecideCasesInTableOrder: Decision.Cases lists the rows by their number, then the
// unnumbered rows, never as strings sort ("10-…" before "2-…").
func TestDecideCasesInTableOrder(t *testing.T) {
	tests := []struct {
		name  string
		cases func() []Case
		want  []Case
	}{
		{"quorum lost beside stale conditions and a superfluous entry: 4, 6, 10, 13", func() []Case {
			w := healthy(3).podNotReady(1, time.Hour).podNotReady(2, time.Hour).
				prevStatus(1, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 6*time.Minute).
				prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 6*time.Minute)
			w.o.Previous.Members = append(w.o.Previous.Members, v1alpha1.MemberStatus{Name: "c-3", Status: v1alpha1.MemberNotReady})
			return decideAsking(w.o).Cases
		}, []Case{CaseAllMembersReadyStaleTrue, CaseReadyConditionStaleTrue, CaseQuorumLost, CaseSuperfluousEntries}},
		{"numbered rows by number, then the unnumbered by name", func() []Case {
			cs := []Case{CaseStatefulSetMismatch, CaseQuorumLost, CaseBootstrap, CaseLeasesOutOfSync, CaseSuperfluousEntries, CasePinkOfHealth}
			sortCases(cs)
			return cs
		}, []Case{CasePinkOfHealth, CaseLeasesOutOfSync, CaseQuorumLost, CaseSuperfluousEntries, CaseBootstrap, CaseStatefulSetMismatch}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cases(); !slices.Equal(got, tc.want) {
				t.Fatalf("cases %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDecideFromReports: the cluster ID is taken once from a serving member of a formed
// cluster and never changed; the voters come from the leader's member list; the revision is
// the newest a serving member of this cluster reports.
func TestDecideFromReports(t *testing.T) {
	w := healthy(3)
	w.o.Reports = map[string]cluster.Report{
		"c-0": {Serving: true, Formed: true, Leader: true, ClusterID: "cafe", Revision: 40,
			Members: []cluster.LiveMember{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "99", Name: "c-3", IsLearner: true}}},
		"c-1": {Serving: true, Formed: true, ClusterID: "cafe", Revision: 42},
		"c-2": {Serving: false, Formed: true, ClusterID: "cafe", Revision: 99},
	}
	d := decideAsking(w.o)
	if d.ClusterID != "cafe" || d.Revision != 42 || len(d.Voters) != 2 || d.Voters[1].Name != "c-1" {
		t.Errorf("from reports: cluster %q revision %d voters %v", d.ClusterID, d.Revision, d.Voters)
	}
	// A member serving another cluster (a recovery's seed) changes none of it.
	w.o.Previous.ClusterID = "cafe"
	w.o.Reports = map[string]cluster.Report{"c-0": {Serving: true, Formed: true, Leader: true, ClusterID: "beef", Revision: 7,
		Members: []cluster.LiveMember{{ID: "1", Name: "c-0"}}}}
	w.o.Previous.Revision = 42
	if d := decideAsking(w.o); d.ClusterID != "cafe" || d.Revision != 42 {
		t.Errorf("another cluster's report changed the status: cluster %q revision %d", d.ClusterID, d.Revision)
	}
}

// TestDecideRecovery: a quorum lost past the grace issues a fencing directive; pods older
// than the directive are deleted (their etcd may run), newer ones count as stopped; a pod
// that cannot be deleted keeps the recovery waiting; nothing is scaled meanwhile.
func TestDecideRecovery(t *testing.T) {
	w := healthy(3).podNotReady(0, time.Hour).podNotReady(1, time.Hour).podNotReady(2, time.Hour)
	for i := range w.o.Previous.Members {
		w.prevStatus(i, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 10*time.Minute)
	}
	w.o.Desired = 5
	w.o.Previous.ClusterID = "c1"
	w.o.Previous.Voters = []v1alpha1.Voter{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "66", Name: "c-2"}}
	rec := &Recovery{Timing: heal.Timing{Grace: time.Minute, ReportTimeout: time.Minute, SeedTimeout: time.Hour}}
	rec.Status.QuorumLostSince = t0.Add(-2 * time.Minute)
	w.o.Recovery = rec
	w.o.Reports = map[string]cluster.Report{"c-0": {Serving: false, Members: []cluster.LiveMember{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "66", Name: "c-2"}}}}
	d := decideAsking(w.o)
	dir := d.Recovery.Status.Directive
	if dir == nil || dir.Phase != cluster.PhaseFencing {
		t.Fatalf("directive %+v after the grace", dir)
	}
	if len(d.Recovery.FencePods) != 3 || d.StatefulSetReplicas != 3 || cond(d, v1alpha1.ConditionQuorumLost) != metav1.ConditionTrue {
		t.Errorf("fence %v replicas %d QuorumLost %v: every old pod is deleted, nothing scaled", d.Recovery.FencePods, d.StatefulSetReplicas, cond(d, v1alpha1.ConditionQuorumLost))
	}

	// Next pass: c-0 and c-1 were recreated after the directive; c-2's pod is stuck on a lost node.
	rec.Status = d.Recovery.Status
	w.o.Now = t0.Add(10 * time.Second)
	w.o.Members[0].Pod = &PodState{Created: t0.Add(time.Second)}
	w.o.Members[1].Pod = &PodState{Created: t0.Add(2 * time.Second)}
	w.o.Members[2].Pod = &PodState{Created: t0.Add(-time.Hour), Deleting: true}
	d = decideAsking(w.o)
	if got := d.Recovery.Status.Directive; got == nil || got.Phase != cluster.PhaseFencing || !strings.Contains(d.Recovery.Status.Waiting, "c-2 to stop") {
		t.Errorf("directive %+v, waiting %q: the recovery must wait for c-2 to stop", got, d.Recovery.Status.Waiting)
	}
	if len(d.Recovery.FencePods) != 0 {
		t.Errorf("fence %v: c-2's deletion is under way, the others are new", d.Recovery.FencePods)
	}
}

// TestDecideRecoveryLossProven: two members lost their data (their pods restarted on empty
// volumes), the third holds everything. The quorum-loss recovery starts at once, without
// the NotReady grace, on the reports the sidecars answered the operator directly; the same
// reports read from the EtcdMembers (the cache, dated by the sidecars' clocks) prove
// nothing, and the grace runs.
func TestDecideRecoveryLossProven(t *testing.T) {
	w := healthy(3).podNotReady(0, time.Hour).podNotReady(1, time.Minute).podNotReady(2, time.Minute)
	for i := range w.o.Previous.Members {
		w.prevStatus(i, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 30*time.Second)
	}
	w.o.Previous.ClusterID = "c1"
	w.o.Previous.Voters = []v1alpha1.Voter{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "66", Name: "c-2"}}
	rec := &Recovery{Timing: heal.Timing{Grace: 5 * time.Minute, ReportTimeout: time.Minute, SeedTimeout: time.Hour}}
	rec.Status.QuorumLostSince = t0.Add(-30 * time.Second)
	w.o.Recovery = rec
	list := []cluster.LiveMember{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "66", Name: "c-2"}}
	reports := map[string]cluster.Report{
		"c-0": {Name: "c-0", At: t0.Add(-time.Second), Source: cluster.ReportFromEtcd, Serving: true, DataValid: true, MemberID: "64", ClusterID: "c1", Owner: "c-0", Members: list},
		"c-1": {Name: "c-1", At: t0.Add(-time.Second), Source: cluster.ReportFromDisk, DataEmpty: true},
		"c-2": {Name: "c-2", At: t0.Add(-time.Second), Source: cluster.ReportFromDisk, DataEmpty: true},
	}
	w.o.Reports = reports
	d := decideAsking(w.o)
	if dir := d.Recovery.Status.Directive; dir != nil || !strings.Contains(d.Recovery.Status.Waiting, "recovery starts if it lasts") {
		t.Fatalf("directive %+v (waiting %q) from the EtcdMembers alone: they prove nothing, the grace runs", dir, d.Recovery.Status.Waiting)
	}
	w.o.DirectReports = map[string]cluster.Report{}
	for name, r := range reports {
		r.At = t0
		w.o.DirectReports[name] = r
	}
	d = decideAsking(w.o)
	dir := d.Recovery.Status.Directive
	if dir == nil || dir.Phase != cluster.PhaseFencing || dir.Case != string(heal.CaseQuorumLossProven) || len(d.Recovery.FencePods) != 3 {
		t.Fatalf("directive %+v, fence %v: the proven loss must start the recovery at once", dir, d.Recovery.FencePods)
	}
}

// TestDecideRecoveryIgnoresAPendingScaleUp: a scale-up asked for while a recovery is in force
// waits for it (the sizes stay as they are), so the member it would add is none of the
// recovery's members: the recovery completes once the members that exist serve (and only
// then is the new member added).
func TestDecideRecoveryIgnoresAPendingScaleUp(t *testing.T) {
	w := healthy(1)
	w.o.Desired = 2
	w.o.Previous.ClusterID = "c1"
	w.o.Previous.Voters = []v1alpha1.Voter{{ID: "64", Name: "c-0"}}
	dir := &cluster.Directive{Epoch: 1, Phase: cluster.PhaseRejoining, Mode: cluster.RecoverFromSurvivor, Seed: "c-0",
		IssuedAt: t0.Add(-2 * time.Hour), PhaseSince: t0.Add(-time.Minute)}
	w.o.Recovery = &Recovery{Status: heal.Status{Directive: dir, LastEpoch: 1}, Timing: heal.DefaultTiming}
	w.o.Reports = map[string]cluster.Report{"c-0": {Name: "c-0", Serving: true, Leader: true, MemberID: "64", ClusterID: "c1",
		Members: []cluster.LiveMember{{ID: "64", Name: "c-0"}}}}
	d := decideAsking(w.o)
	if st := d.Recovery.Status; st.Directive != nil || st.LastRecovery == nil || st.LastRecovery.Epoch != 1 {
		t.Fatalf("directive %+v (waiting %q): the recovery must complete with c-0 alone, c-1 being added only after it", st.Directive, st.Waiting)
	}
}

// TestDecideRecoveryDoesNotWaitForALeavingMember: a recovery that started while a member was
// leaving (the ConfigMap lists 2 of the StatefulSet's 3) completes once the two that stay
// serve as voters: the leaving member never rejoins (the leader's sidecar removes it), and
// waiting for it would hold the cluster, and the scale-down, for ever.
func TestDecideRecoveryDoesNotWaitForALeavingMember(t *testing.T) {
	w := healthy(3).podNotReady(2, time.Minute)
	w.o.Desired, w.o.ConfigMembers = 2, 2
	w.o.Previous.ClusterID = "c1"
	w.o.Previous.Voters = []v1alpha1.Voter{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}}
	dir := &cluster.Directive{Epoch: 1, Phase: cluster.PhaseRejoining, Mode: cluster.RecoverFromSurvivor, Seed: "c-0",
		IssuedAt: t0.Add(-2 * time.Hour), PhaseSince: t0.Add(-time.Minute)}
	w.o.Recovery = &Recovery{Status: heal.Status{Directive: dir, LastEpoch: 1}, Timing: heal.DefaultTiming}
	voters := []cluster.LiveMember{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}}
	w.o.Reports = map[string]cluster.Report{"c-0": {Name: "c-0", Serving: true, Leader: true, MemberID: "64", ClusterID: "c1", Members: voters},
		"c-1": {Name: "c-1", Serving: true, MemberID: "65", ClusterID: "c1", Members: voters}}
	d := decideAsking(w.o)
	if st := d.Recovery.Status; st.Directive != nil || st.LastRecovery == nil || st.LastRecovery.Epoch != 1 {
		t.Fatalf("directive %+v (waiting %q): the recovery must complete without the leaving c-2", st.Directive, st.Waiting)
	}
}

// TestDecideScaleUpHalfWritten: a scale-up's ConfigMap was written, its StatefulSet not; the
// new member may have joined etcd. Whatever is asked for now, the StatefulSet catches up with
// the ConfigMap first (a scale-down then removes the member from etcd in order), also while
// a recovery is in force (the member's sidecar must report).
func TestDecideScaleUpHalfWritten(t *testing.T) {
	w := healthy(2)
	w.o.ConfigMembers = 3
	if d := decideAsking(w.o); d.StatefulSetReplicas != 3 || d.ConfigMembers != 3 {
		t.Errorf("StatefulSet %d ConfigMap %d, want both at 3 before anything else", d.StatefulSetReplicas, d.ConfigMembers)
	}
	w.o.Previous.ClusterID = "c1"
	dir := &cluster.Directive{Epoch: 1, Phase: cluster.PhaseFencing, IssuedAt: t0.Add(-time.Minute), PhaseSince: t0.Add(-time.Minute)}
	w.o.Recovery = &Recovery{Status: heal.Status{Directive: dir, LastEpoch: 1}, Timing: heal.DefaultTiming}
	if d := decideAsking(w.o); d.StatefulSetReplicas != 3 || d.ConfigMembers != 3 {
		t.Errorf("during a recovery: StatefulSet %d ConfigMap %d, want both at 3", d.StatefulSetReplicas, d.ConfigMembers)
	}
}

// TestDecideQuorumAnswersWithdrawsTheFence: every pod NotReady past the grace says the quorum
// is lost, but a member asked directly answers a linearizable read: no directive is issued
// (a new one is withdrawn at once), a directive already fencing is withdrawn, nothing is
// fenced, and the grace starts again. A restore the user asked for is fenced regardless.
func TestDecideQuorumAnswersWithdrawsTheFence(t *testing.T) {
	w := healthy(3).podNotReady(0, time.Hour).podNotReady(1, time.Hour).podNotReady(2, time.Hour)
	for i := range w.o.Previous.Members {
		w.prevStatus(i, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 10*time.Minute)
	}
	w.o.Previous.ClusterID = "c1"
	w.o.Previous.Voters = []v1alpha1.Voter{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "66", Name: "c-2"}}
	rec := &Recovery{Timing: heal.Timing{Grace: time.Minute, ReportTimeout: time.Minute, SeedTimeout: time.Hour}}
	rec.Status.QuorumLostSince = t0.Add(-2 * time.Minute)
	w.o.Recovery = rec
	if unasked := Decide(w.o); !unasked.AskMembers || len(unasked.Recovery.FencePods) != 0 {
		t.Fatalf("before the members are asked: ask %v, fence %v; want them asked first, nothing fenced", unasked.AskMembers, unasked.Recovery.FencePods)
	}
	w.o.Answers = map[string]bool{"c-0": false, "c-1": false, "c-2": false}
	fencing := decideAsking(w.o)
	if !fencing.Recovery.FencesForQuorumLoss() || len(fencing.Recovery.FencePods) != 3 {
		t.Fatalf("no member answering: %+v, want a fencing directive", fencing.Recovery)
	}

	w.o.Answers["c-1"] = true
	d := decideAsking(w.o)
	if d.Recovery.Status.Directive != nil || len(d.Recovery.FencePods) != 0 || !d.Recovery.Withdrawn || d.QuorumLost ||
		!slices.Contains(d.Cases, CaseQuorumAnswers) || !strings.Contains(d.Recovery.Event, "c-1 answers a linearizable read") {
		t.Fatalf("a new directive while c-1 answers: %+v, cases %v", d.Recovery, d.Cases)
	}
	if st := d.Recovery.Status; st.Withdrawn != 1 || !st.QuorumLostSince.Equal(t0) {
		t.Errorf("withdrawn %d, quorum lost since %v: the grace starts again, longer", st.Withdrawn, st.QuorumLostSince)
	}

	// A directive already persisted and fencing (its pods not all stopped): withdrawn too.
	rec.Status = fencing.Recovery.Status
	w.o.Now = t0.Add(5 * time.Second)
	d = decideAsking(w.o)
	if d.Recovery.Status.Directive != nil || len(d.Recovery.FencePods) != 0 || !strings.Contains(d.Recovery.Event, "withdrawn") {
		t.Fatalf("a fencing directive while c-1 answers: %+v", d.Recovery)
	}

	// A restore in place fences whatever answers: the user asked for it.
	hd, err := heal.StartRestore(heal.Observation{Now: t0}, cluster.RestoreTarget{Revision: 400, Timeline: 2})
	if err != nil {
		t.Fatal(err)
	}
	h := healthy(3)
	h.o.Previous.ClusterID, h.o.Previous.Voters = "c1", w.o.Previous.Voters
	h.o.Recovery = &Recovery{Status: hd.Status, Timing: heal.DefaultTiming}
	h.o.Answers = map[string]bool{"c-0": true}
	if d := decideAsking(h.o); d.Recovery.Status.Directive == nil || len(d.Recovery.FencePods) != 3 || d.Recovery.Withdrawn {
		t.Errorf("restore in place while c-0 answers: %+v", d.Recovery)
	}
}

// TestDecideCancelRestore: the cancel annotation naming the restore directive in force
// withdraws it while every voter still holds its own data (a new epoch without the target);
// one naming another epoch changes nothing.
func TestDecideCancelRestore(t *testing.T) {
	w := healthy(3)
	w.o.Previous.ClusterID = "c1"
	w.o.Previous.Voters = []v1alpha1.Voter{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "66", Name: "c-2"}}
	w.o.Reports = map[string]cluster.Report{}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("c-%d", i)
		w.o.Reports[name] = cluster.Report{Name: name, At: t0, Source: cluster.ReportFromEtcd, Serving: true, DataValid: true,
			MemberID: fmt.Sprintf("%x", 100+i), ClusterID: "c1", Owner: name, Formed: true}
	}
	target := cluster.RestoreTarget{Revision: 40, Timeline: 1}
	restoring := heal.Status{ClusterID: "c1", LastEpoch: 4, Directive: &cluster.Directive{Epoch: 4, Phase: cluster.PhaseFencing,
		Restore: &target, IssuedAt: t0.Add(-time.Second), PhaseSince: t0.Add(-time.Second)}}
	rec := &Recovery{Status: restoring, CancelRestore: 3, Timing: heal.Timing{Grace: time.Minute, ReportTimeout: time.Minute, SeedTimeout: time.Hour}}
	w.o.Recovery = rec
	if dir := decideAsking(w.o).Recovery.Status.Directive; dir == nil || dir.Epoch != 4 || dir.Restore == nil {
		t.Fatalf("a cancel of epoch 3 changed directive 4: %+v", dir)
	}
	rec.CancelRestore = 4
	d := decideAsking(w.o)
	if dir := d.Recovery.Status.Directive; dir == nil || dir.Epoch != 5 || dir.Restore != nil || dir.Phase != cluster.PhaseFencing ||
		!strings.Contains(d.Recovery.Event, "cancelled") {
		t.Fatalf("cancel of directive 4: %+v (event %q), want epoch 5 fencing without the target", dir, d.Recovery.Event)
	}
}

// TestDecideBootstrapRestore: a new cluster with spec.bootstrap.restore starts as a recovery
// from that backup: epoch 1, Seeding, its first member the seed, the target carried in the
// directive; every pod starts (the others wait for the seed), none is fenced.
func TestDecideBootstrapRestore(t *testing.T) {
	o := Observation{Now: t0, Name: "n", Desired: 3, StatefulSetReplicas: -1, ConfigMembers: -1, Graces: graces,
		Recovery:         &Recovery{Timing: heal.DefaultTiming},
		BootstrapRestore: &cluster.RestoreTarget{Store: "s3://old/main", Revision: 4242}}
	d := decideAsking(o)
	dir := d.Recovery.Status.Directive
	if dir == nil || dir.Epoch != 1 || dir.Phase != cluster.PhaseSeeding || dir.Mode != cluster.RecoverFromBackup || dir.Seed != "n-0" ||
		dir.Restore == nil || dir.Restore.Revision != 4242 || dir.Restore.Store != "s3://old/main" {
		t.Fatalf("directive %+v", dir)
	}
	if d.StatefulSetReplicas != 3 || len(d.Recovery.FencePods) != 0 {
		t.Errorf("replicas %d fence %v", d.StatefulSetReplicas, d.Recovery.FencePods)
	}
	// Once recorded, it is not issued again: the next pass continues it.
	o.Recovery.Status = d.Recovery.Status
	o.Now = t0.Add(time.Second)
	if d := decideAsking(o); d.Recovery.Status.LastEpoch != 1 || d.Recovery.Status.Directive.IssuedAt != t0 {
		t.Errorf("directive reissued: %+v", d.Recovery.Status)
	}
}

// TestDecideRestoreInPlace: an EtcdRestore's request (RestoreRequested) issues the
// directive that carries its target, whose epoch moves past the request's: the next pass,
// from the persisted directive, issues none again. Every member is fenced, nothing scaled,
// Progressing says Restoring. A request another epoch overtook, or made while a directive is
// in force, issues nothing.
func TestDecideRestoreInPlace(t *testing.T) {
	w := healthy(3)
	w.o.Previous.ClusterID = "c1"
	w.o.Previous.Voters = []v1alpha1.Voter{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "66", Name: "c-2"}}
	w.o.Desired = 5 // a scale asked for meanwhile waits
	target := cluster.RestoreTarget{Revision: 400, Timeline: 2}
	req := &RestoreRequest{Name: "back", UID: "er-uid", Target: target, AfterEpoch: 2}
	rec := &Recovery{Status: heal.Status{LastEpoch: 2}, Timing: heal.DefaultTiming, RestoreRequest: req}
	w.o.Recovery = rec
	d := decideAsking(w.o)
	dir := d.Recovery.Status.Directive
	if dir == nil || dir.Phase != cluster.PhaseFencing || dir.Epoch != 3 || dir.Restore == nil || *dir.Restore != target {
		t.Fatalf("directive %+v", dir)
	}
	if !slices.Contains(d.Cases, CaseRestoreRequested) || d.Recovery.Started != req {
		t.Errorf("cases %v, started %+v: the request's directive is issued", d.Cases, d.Recovery.Started)
	}
	if len(d.Recovery.FencePods) != 3 || d.StatefulSetReplicas != 3 {
		t.Errorf("fence %v, replicas %d: every member is stopped, nothing scaled", d.Recovery.FencePods, d.StatefulSetReplicas)
	}
	c := apimeta.FindStatusCondition(d.Conditions, v1alpha1.ConditionProgressing)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Restoring" || !strings.Contains(c.Message, "restoring revision 400") {
		t.Errorf("Progressing %+v", c)
	}

	// The directive persisted, the request still there (its epoch not recorded yet): the
	// directive goes on, none is issued again.
	rec.Status = d.Recovery.Status
	w.o.Now = t0.Add(time.Second)
	d = decideAsking(w.o)
	if got := d.Recovery.Status.Directive; got == nil || got.Epoch != 3 || d.Recovery.Started != nil || slices.Contains(d.Cases, CaseRestoreRequested) {
		t.Errorf("directive %+v, started %+v, cases %v: the request was answered", got, d.Recovery.Started, d.Cases)
	}
	// Retired, the request still there: nothing is issued.
	rec.Status = heal.Status{LastEpoch: 3, LastRecovery: dir}
	if d := decideAsking(w.o); d.Recovery.Status.Directive != nil || d.Recovery.Started != nil {
		t.Errorf("directive %+v after the request's retired", d.Recovery.Status.Directive)
	}

	// Another epoch was issued after the request: the request is not the cluster's present.
	rec.Status = heal.Status{LastEpoch: 4}
	if d := decideAsking(w.o); d.Recovery.Status.Directive != nil || d.Recovery.Started != nil {
		t.Errorf("directive %+v from a request another epoch overtook", d.Recovery.Status.Directive)
	}
	// A directive in force at the request's epoch (a view behind the request's): it goes on.
	quorumLoss := &cluster.Directive{Epoch: 2, Phase: cluster.PhaseFencing, IssuedAt: t0, PhaseSince: t0}
	rec.Status = heal.Status{LastEpoch: 2, Directive: quorumLoss}
	w.o.Answers = map[string]bool{} // asked directly, no member answers: the quorum is lost
	if d := decideAsking(w.o); d.Recovery.Started != nil || d.Recovery.Status.Directive == nil || d.Recovery.Status.Directive.Restore != nil {
		t.Errorf("directive %+v, started %+v: a directive in force refuses the request", d.Recovery.Status.Directive, d.Recovery.Started)
	}
}

// TestDecideMaintenance: the alarms the leader's sidecar reports make AlarmsActive true; the
// newest defragmentation round of any sidecar becomes status.lastDefragmentation.
func TestDecideMaintenance(t *testing.T) {
	w := healthy(3)
	end := t0.Add(-time.Minute + 300*time.Millisecond) // fractions of a second are not stored
	w.o.Reports = map[string]cluster.Report{
		"c-0": {Serving: true, Leader: true, Maintenance: &cluster.MaintenanceReport{Alarms: []string{"NOSPACE on 64"}}},
		"c-1": {Serving: true, Maintenance: &cluster.MaintenanceReport{LastDefrag: &cluster.DefragReport{End: end, Trigger: "NOSPACE", Reclaimed: 3 << 20,
			Members: []cluster.MemberDefrag{{Name: "c-2", Before: 4 << 20, After: 1 << 20, Duration: units.Duration(time.Second)}}}}},
		"c-2": {Serving: true, Maintenance: &cluster.MaintenanceReport{Alarms: []string{"stale, not the leader"},
			LastDefrag: &cluster.DefragReport{End: end.Add(-time.Hour), Trigger: "schedule"}}},
	}
	d := decideAsking(w.o)
	c := apimeta.FindStatusCondition(d.Conditions, v1alpha1.ConditionAlarmsActive)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "NOSPACE on 64") || strings.Contains(c.Message, "stale") {
		t.Fatalf("AlarmsActive = %+v, want true with the leader's alarm only", c)
	}
	if l := d.LastDefrag; l == nil || l.Trigger != "NOSPACE" || l.ReclaimedBytes != 3<<20 || len(l.Members) != 1 || l.Members[0] != "c-2: 4.0 MiB -> 1.0 MiB in 1s" {
		t.Fatalf("lastDefragmentation = %+v, want the newest round (NOSPACE, 3 MiB, c-2's sizes)", l)
	}

	// The alarm gone, the same round reported again beside an older one: no alarm, the
	// recorded round stays as it was stored.
	w.o.Previous.LastDefragmentation = d.LastDefrag
	w.o.Reports = map[string]cluster.Report{"c-0": {Serving: true, Leader: true, Maintenance: &cluster.MaintenanceReport{
		LastDefrag: &cluster.DefragReport{End: end.Add(-time.Hour), Trigger: "schedule"}}}, "c-1": w.o.Reports["c-1"]}
	d = decideAsking(w.o)
	if c := apimeta.FindStatusCondition(d.Conditions, v1alpha1.ConditionAlarmsActive); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("AlarmsActive = %+v, want false", c)
	}
	if l := d.LastDefrag; l != w.o.Previous.LastDefragmentation {
		t.Fatalf("lastDefragmentation = %+v, want the recorded round kept as it was (%+v)", l, w.o.Previous.LastDefragmentation)
	}
}

// TestDecideLearnersNeverCount: scaling 1 to 2, the new member is a learner catching up (its
// pod not Ready: a learner serves no linearizable read; its sidecar renews the Lease). The
// single voter keeps the cluster Ready, no quorum is called lost, and the learner is not
// restarted however long it takes. A learner whose sidecar went silent is restarted as any
// member.
func TestDecideLearnersNeverCount(t *testing.T) {
	w := healthy(2).podNotReady(1, time.Hour)
	w.o.Members[1].Lease.Holder = "65:" + v1alpha1.RoleLearner
	w.prevStatus(1, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, time.Hour)
	w.o.Previous.Members[1].Role = v1alpha1.RoleLearner
	d := decideAsking(w.o)
	if cond(d, v1alpha1.ConditionReady) != metav1.ConditionTrue || cond(d, v1alpha1.ConditionQuorate) != metav1.ConditionTrue {
		t.Errorf("Ready %s Quorate %s: the one voter serves", cond(d, v1alpha1.ConditionReady), cond(d, v1alpha1.ConditionQuorate))
	}
	if d.QuorumLost || len(d.DeletePods) > 0 {
		t.Errorf("quorum lost %t, deleted %v: a learner catching up is neither", d.QuorumLost, d.DeletePods)
	}

	w.leaseExpired(1)
	if d := decideAsking(w.o); !slices.Contains(d.DeletePods, "c-1") || d.QuorumLost {
		t.Errorf("a silent learner NotReady past the grace: deleted %v, quorum lost %t; want it restarted, no quorum loss", d.DeletePods, d.QuorumLost)
	}
}

// TestDecideSingleMemberDrain: a single member may be evicted once its backups are current
// (a drain of its node must be able to finish), and not while they are stale.
func TestDecideSingleMemberDrain(t *testing.T) {
	w := healthy(1)
	if d := decideAsking(w.o); d.MinAvailable != 0 {
		t.Errorf("minAvailable %d with current backups, want 0", d.MinAvailable)
	}
	w.o.Backup.LastDelta = t0.Add(-time.Hour)
	if d := decideAsking(w.o); d.MinAvailable != 1 {
		t.Errorf("minAvailable %d with stale backups, want 1", d.MinAvailable)
	}
}

// TestDecideRestoreNotHeldUnderManual: under quorumLoss.policy Manual a quorum-loss recovery
// stops before its seed acts, for a confirmation; a restore the user asked for does not (the
// EtcdRestore is the confirmation), once every member is stopped and has reported from disk
// (its data dir recording that the restore supersedes its data).
func TestDecideRestoreNotHeldUnderManual(t *testing.T) {
	stoppedAndReported := func(st heal.Status) *world {
		w := healthy(3)
		w.o.Previous.ClusterID = "c1"
		w.o.Previous.Voters = []v1alpha1.Voter{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "66", Name: "c-2"}}
		w.o.Reports = map[string]cluster.Report{}
		for i := range w.o.Members {
			name := fmt.Sprintf("c-%d", i)
			w.o.Members[i].Pod = &PodState{Created: t0.Add(-30 * time.Second)} // recreated after the directive, held
			w.o.Members[i].Lease.Renewed = t0.Add(-time.Hour)
			w.prevStatus(i, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 30*time.Second)
			w.o.Reports[name] = cluster.Report{Name: name, At: t0, Source: cluster.ReportFromDisk, DataValid: true, Owner: name,
				MemberID: fmt.Sprintf("%x", 100+i), ClusterID: "c1", Formed: true, LastTerm: 3, LastIndex: uint64(100 + i)}
		}
		w.o.Recovery = &Recovery{Status: st, Policy: v1alpha1.QuorumLossManual, Timing: heal.DefaultTiming}
		return w
	}
	issued := t0.Add(-time.Minute)
	restore, err := heal.StartRestore(heal.Observation{Now: issued}, cluster.RestoreTarget{Revision: 90, Timeline: 1})
	if err != nil {
		t.Fatal(err)
	}
	restore.Status.ClusterID = "c1"
	rw := stoppedAndReported(restore.Status)
	for name, r := range rw.o.Reports { // each data dir records that the restore supersedes it
		r.SupersededBy = restore.Status.Directive.Epoch
		rw.o.Reports[name] = r
	}
	d := decideAsking(rw.o)
	if dir := d.Recovery.Status.Directive; dir == nil || dir.Phase != cluster.PhaseSeeding || d.Recovery.Held != "" {
		t.Fatalf("restore under Manual: directive %+v, held %q; want Seeding without a confirmation", dir, d.Recovery.Held)
	}

	lost := heal.Status{ClusterID: "c1", LastEpoch: 2, Directive: &cluster.Directive{Epoch: 2, Phase: cluster.PhaseFencing, IssuedAt: issued, PhaseSince: issued}}
	w := stoppedAndReported(lost)
	for _, name := range []string{"c-1", "c-2"} { // wiped: the quorum is lost for good
		w.o.Reports[name] = cluster.Report{Name: name, At: t0, Source: cluster.ReportFromDisk, DataEmpty: true}
	}
	d = decideAsking(w.o)
	if d.Recovery.Held == "" || d.Recovery.Status.Directive.Phase != cluster.PhaseFencing {
		t.Fatalf("quorum loss under Manual: directive %+v, held %q; want it held for the confirmation", d.Recovery.Status.Directive, d.Recovery.Held)
	}
}

// TestDecideUnschedulableNamed: a member pod the scheduler cannot place (members spread one
// per node) is named in Progressing with the scheduler's reason.
func TestDecideUnschedulableNamed(t *testing.T) {
	w := healthy(3).podNotReady(2, time.Minute)
	w.o.Unschedulable = []string{"c-2: 0/3 nodes are available: 1 node(s) didn't match pod topology spread constraints"}
	d := decideAsking(w.o)
	c := apimeta.FindStatusCondition(d.Conditions, v1alpha1.ConditionProgressing)
	if c == nil || c.Reason != "Unschedulable" || !strings.Contains(c.Message, "c-2: 0/3 nodes") {
		t.Errorf("Progressing %+v, want the unschedulable member named", c)
	}
}

// TestDecideInitFailureNamed: a member whose sidecar reports that its initialisation failed
// (a bootstrap restore refused, say) is named in Progressing with the sidecar's error, while
// the cluster bootstraps and while it waits for that member; a member that started is not.
func TestDecideInitFailureNamed(t *testing.T) {
	const why = "the store holds backups of several clusters: name one with --cluster-id"
	boot := Observation{Now: t0, Name: "n", Desired: 3, StatefulSetReplicas: 3, ConfigMembers: 3, Graces: graces,
		Reports: map[string]cluster.Report{"n-0": {Name: "n-0", InitError: why}, "n-1": {Name: "n-1"}}}
	waiting := healthy(3).podNotReady(2, time.Minute)
	waiting.o.Reports = map[string]cluster.Report{"c-2": {Name: "c-2", InitError: why}}
	for name, tc := range map[string]struct {
		o               Observation
		reason, failing string
	}{
		"bootstrapping":      {boot, ReasonBootstrapping, "n-0"},
		"waiting for member": {waiting.o, "WaitingForMembers", "c-2"},
	} {
		c := apimeta.FindStatusCondition(decideAsking(tc.o).Conditions, v1alpha1.ConditionProgressing)
		if c == nil || c.Reason != tc.reason || !strings.Contains(c.Message, tc.failing+" cannot start: "+why) {
			t.Errorf("%s: Progressing %+v, want %s named with its error", name, c, tc.failing)
		}
	}
	healthyReports := healthy(3)
	healthyReports.o.Reports = map[string]cluster.Report{"c-0": {Name: "c-0"}}
	if c := apimeta.FindStatusCondition(decideAsking(healthyReports.o).Conditions, v1alpha1.ConditionProgressing); c == nil || strings.Contains(c.Message, "cannot start") {
		t.Errorf("healthy cluster: Progressing %+v names a failure", c)
	}
}

// TestDecideRecoverability: status.recoverability is the window the backup leader reports for
// the cluster's own timeline, taken only from the member that leads now (its Lease current and
// naming it the leader, its own report serving and leading, of the cluster's ID) and only if
// the window is of the cluster's ID; otherwise the recorded window stays while it is of the
// cluster's ID.
func TestDecideRecoverability(t *testing.T) {
	window := func(clusterID string, first, last int64) *v1alpha1.Recoverability {
		ft, lt := metav1.NewTime(t0.Add(-time.Hour)), metav1.NewTime(t0.Add(-time.Second))
		return &v1alpha1.Recoverability{Timeline: 2, ClusterID: clusterID, FirstRevision: first, FirstTime: &ft, LastRevision: last, LastTime: &lt}
	}
	recorded := window("cafe", 10, 90)
	for _, tc := range []struct {
		name   string
		change func(w *world)
		want   *v1alpha1.Recoverability
	}{
		{"the leader's window", func(*world) {}, window("cafe", 100, 200)},
		{"the leader's Lease expired: the recorded window stays", func(w *world) { w.leaseExpired(0) }, recorded},
		{"the leader's Lease not renewed yet", func(w *world) { w.o.Members[0].Lease.Holder = "" }, recorded},
		{"the Lease names another leader", func(w *world) { w.o.Members[0].Lease.Holder = "64:" + v1alpha1.RoleMember }, recorded},
		{"its report says it does not lead", func(w *world) {
			r := w.o.Reports["c-0"]
			r.Leader = false
			w.o.Reports["c-0"] = r
		}, recorded},
		{"its report says it does not serve", func(w *world) {
			r := w.o.Reports["c-0"]
			r.Serving = false
			w.o.Reports["c-0"] = r
		}, recorded},
		{"a window of another cluster ID", func(w *world) { w.o.Backup.Accounts["c-0"].Recoverable = window("beef", 1, 5) }, recorded},
		{"a former leader's window is not taken", func(w *world) {
			w.o.Backup.Accounts["c-0"].Recoverable = nil
			w.o.Backup.Accounts["c-1"] = &v1alpha1.MemberBackup{Recoverable: window("cafe", 300, 400)}
		}, recorded},
		{"no window yet (a new leader): the recorded one stays", func(w *world) { w.o.Backup.Accounts["c-0"].Recoverable = nil }, recorded},
		{"the recorded window is of another cluster ID", func(w *world) {
			w.o.Backup.Accounts["c-0"].Recoverable = nil
			w.o.Previous.Recoverability = window("beef", 1, 5)
		}, nil},
		{"backups off", func(w *world) { w.o.Backup = nil }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := healthy(3)
			w.o.Previous.ClusterID, w.o.Previous.Recoverability = "cafe", recorded
			w.o.Reports = map[string]cluster.Report{
				"c-0": {Serving: true, Formed: true, Leader: true, ClusterID: "cafe"},
				"c-1": {Serving: true, Formed: true, ClusterID: "cafe"},
			}
			w.o.Backup.Accounts = map[string]*v1alpha1.MemberBackup{"c-0": {Ready: true, Recoverable: window("cafe", 100, 200)}}
			tc.change(w)
			if got := decideAsking(w.o).Recoverability; !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("recoverability = %+v; want %+v", got, tc.want)
			}
		})
	}
}

// TestDecideFenceDuringRecovery: a member is fenced when the other two lose their quorum, and
// their data. The recovery it needs starts as for any quorum loss; while its directive is in
// force the fence is suspended (no fence in the ConfigMap or the status, the condition says
// so), so the formerly fenced member, whose data is the only data left, is chosen as the seed
// and its sidecar follows the directive. Once the recovery is done the annotation, still
// there, fences it again by the ordinary rule: only while a quorum of Ready voters stays
// unfenced.
func TestDecideFenceDuringRecovery(t *testing.T) {
	w := healthy(3).podNotReady(0, time.Hour).podNotReady(1, time.Hour).podNotReady(2, time.Hour).fence("c-2").fenced("c-2")
	w.prevStatus(0, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 10*time.Minute)
	w.prevStatus(1, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 10*time.Minute)
	w.prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonFenced, time.Hour)
	w.o.Previous.ClusterID = "c1"
	w.o.Previous.Voters = []v1alpha1.Voter{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "66", Name: "c-2"}}
	rec := &Recovery{Timing: heal.Timing{Grace: time.Minute, ReportTimeout: time.Minute, SeedTimeout: time.Hour}}
	rec.Status.QuorumLostSince = t0.Add(-2 * time.Minute)
	w.o.Recovery = rec

	d := decideAsking(w.o)
	dir := d.Recovery.Status.Directive
	if dir == nil || dir.Phase != cluster.PhaseFencing || !slices.Contains(d.Recovery.FencePods, "c-2") {
		t.Fatalf("directive %+v, fence pods %v: the quorum lost beside a fenced member must start the recovery, which stops every member", dir, d.Recovery.FencePods)
	}

	// Next pass: every pod was recreated after the directive and its sidecar reported from
	// disk; c-0 and c-1 lost their data.
	rec.Status = d.Recovery.Status
	w.o.Previous.FencedMembers, w.o.Previous.Members = d.Fenced, d.Members
	w.o.Now = t0.Add(10 * time.Second)
	w.o.Reports = map[string]cluster.Report{}
	for i := range w.o.Members {
		name := fmt.Sprintf("c-%d", i)
		w.o.Members[i].Pod = &PodState{Created: t0.Add(time.Duration(i+1) * time.Second)}
		w.o.Reports[name] = cluster.Report{Name: name, At: t0.Add(5 * time.Second), Source: cluster.ReportFromDisk, DataEmpty: true}
	}
	w.o.Reports["c-2"] = cluster.Report{Name: "c-2", At: t0.Add(5 * time.Second), Source: cluster.ReportFromDisk, DataValid: true, MemberID: "66", ClusterID: "c1",
		Owner: "c-2", LastTerm: 3, LastIndex: 100, Applied: 100, Revision: 90}
	d = decideAsking(w.o)
	if dir := d.Recovery.Status.Directive; dir == nil || dir.Phase != cluster.PhaseSeeding || dir.Seed != "c-2" {
		t.Fatalf("directive %+v (waiting %q): c-2 holds the only data and must seed", dir, d.Recovery.Status.Waiting)
	}
	if !slices.Contains(d.Cases, CaseFenceSuspended) || len(d.Fenced) != 0 || len(d.StopFenced) != 0 || !strings.Contains(d.FenceSuspended, "suspended while recovery 1 runs") {
		t.Errorf("cases %v, fenced %v, stop %v, suspended %q: the fence must be suspended while the directive is in force", d.Cases, d.Fenced, d.StopFenced, d.FenceSuspended)
	}
	if m := memberOf(d, "c-2"); m.Reason == v1alpha1.ReasonFenced {
		t.Errorf("c-2 = %+v: a suspended fence is no reason", m)
	}
	if c := apimeta.FindStatusCondition(d.Conditions, v1alpha1.ConditionAllMembersReady); c == nil || !strings.Contains(c.Message, d.FenceSuspended) {
		t.Errorf("AllMembersReady %+v does not say the fence is suspended", c)
	}

	// Done: the members serve again, and the status records no fence (it was suspended).
	after := healthy(3).fence("c-2")
	after.o.Recovery = &Recovery{Status: heal.Status{LastEpoch: 1, LastRecovery: d.Recovery.Status.Directive}, Timing: rec.Timing}
	d = decideAsking(after.o)
	if !slices.Equal(d.Fenced, []string{"c-2"}) || !slices.Equal(d.StopFenced, []string{"c-2"}) || d.FenceSuspended != "" {
		t.Errorf("fenced %v, stop %v, suspended %q: once the recovery is done the fence applies again", d.Fenced, d.StopFenced, d.FenceSuspended)
	}
	d = decideAsking(after.podNotReady(1, time.Minute).o)
	if len(d.Fenced) != 0 || !strings.Contains(d.FenceRefused, "fencing c-2 would leave 1 Ready voters unfenced") {
		t.Errorf("fenced %v, refused %q: after the recovery the fence waits for a quorum of Ready voters beside it", d.Fenced, d.FenceRefused)
	}
}

// decideAsking is Decide as the reconciler runs it: when the decision needs the members asked
// directly (AskMembers) and the observation has no answers yet, each member answers while its
// pod is Ready (its readiness probe is that same linearizable read), and Decide runs again.
func decideAsking(o Observation) Decision {
	d := Decide(o)
	if !d.AskMembers || o.Answers != nil {
		return d
	}
	o.Answers = map[string]bool{}
	for _, m := range o.Members {
		o.Answers[m.Name] = m.Pod != nil && m.Pod.Ready && !m.Pod.Deleting
	}
	return Decide(o)
}

// TestDecideRestartGraceAfterWithdrawal: a member pod a quorum-loss directive held waiting
// could not be Ready; once the directive is withdrawn its etcd starts, and row 9 gives it the
// whole NotReady grace from the withdrawal, however old the pod.
func TestDecideRestartGraceAfterWithdrawal(t *testing.T) {
	w := healthy(3).podNotReady(2, time.Hour).prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 6*time.Minute).answers("c-0", "c-1")
	w.o.Recovery = &Recovery{Status: heal.Status{LastEpoch: 1, WithdrawnAt: t0.Add(-10 * time.Second)}, Timing: heal.DefaultTiming}
	if d := decideAsking(w.o); len(d.DeletePods) != 0 || slices.Contains(d.Cases, CaseMinorityNotReady) {
		t.Fatalf("10s after the withdrawal: delete %v, cases %v; want c-2 given its grace", d.DeletePods, d.Cases)
	}
	w.o.Recovery.Status.WithdrawnAt = t0.Add(-w.o.Graces.NotReady)
	if d := decideAsking(w.o); !slices.Equal(d.DeletePods, []string{"c-2"}) {
		t.Fatalf("a grace after the withdrawal: delete %v, cases %v; want c-2 restarted", d.DeletePods, d.Cases)
	}
}

// TestDecideRecoveryVolumesLostWithNodes: two nodes of a 3-member cluster are off for good,
// marked out of service, with the members' volumes pinned to them. The quorum-loss recovery
// fences and waits for the two voters' reports from disk, which their nodes took with them.
// With the Automatic policy, once asked directly no member answers, their claims are replaced
// (each comes back empty and reports so, and the recovery goes on from the survivor); a member
// answering withdraws the recovery instead; a voter whose node is only down keeps its volume;
// with the Manual policy nothing is replaced and the status says how to go on.
func TestDecideRecoveryVolumesLostWithNodes(t *testing.T) {
	world := func(policy string) *world {
		w := healthy(3)
		w.o.Previous.ClusterID = "c1"
		w.o.Previous.Voters = []v1alpha1.Voter{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "66", Name: "c-2"}}
		for i := range w.o.Members {
			// Every pod was made after the directive: stopped, held by its sidecar.
			w.o.Members[i].Pod = &PodState{Created: t0.Add(-50 * time.Second)}
			w.prevStatus(i, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 3*time.Minute)
		}
		w.volumeLost(1).volumeLost(2)
		dir := &cluster.Directive{Epoch: 1, Phase: cluster.PhaseFencing, Case: string(heal.CaseQuorumLossPastGrace), IssuedAt: t0.Add(-time.Minute), PhaseSince: t0.Add(-time.Minute)}
		w.o.Recovery = &Recovery{Status: heal.Status{ClusterID: "c1", Directive: dir, LastEpoch: 1, QuorumLostSince: t0.Add(-2 * time.Minute)},
			Policy: policy, Timing: heal.DefaultTiming}
		list := []cluster.LiveMember{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "66", Name: "c-2"}}
		w.o.Reports = map[string]cluster.Report{"c-0": {Name: "c-0", At: t0.Add(-time.Second), Source: cluster.ReportFromDisk, DataValid: true,
			MemberID: "64", ClusterID: "c1", Owner: "c-0", Formed: true, Members: list, Applied: 100, Revision: 90}}
		return w
	}
	waitsFor := func(t *testing.T, d Decision, names ...string) {
		t.Helper()
		if !slices.Equal(d.Recovery.Awaited, names) || !strings.Contains(d.Recovery.Status.Waiting, "waiting for the reports of voters "+strings.Join(names, ", ")) {
			t.Errorf("awaited %v, waiting %q: want the recovery waiting for %v", d.Recovery.Awaited, d.Recovery.Status.Waiting, names)
		}
	}

	w := world(v1alpha1.QuorumLossAutomatic)
	if d := Decide(w.o); !d.AskMembers || len(d.ReplaceVolumes) != 0 {
		t.Fatalf("unasked: ask %v, replace %+v; want the members asked before any claim is replaced", d.AskMembers, d.ReplaceVolumes)
	}
	d := Decide(w.answers().o)
	waitsFor(t, d, "c-1", "c-2")
	if got := d.ReplaceVolumes; len(got) != 2 || got[0].Member != "c-1" || got[1].Member != "c-2" || !got[0].Recovery || got[1].UID != "uid-c-2" ||
		!slices.Contains(d.Cases, CaseRecoveryVolumeNodeLost) {
		t.Errorf("replace %+v, cases %v: want c-1's and c-2's claims replaced for the recovery", got, d.Cases)
	}

	if d := Decide(world(v1alpha1.QuorumLossAutomatic).answers("c-0").o); len(d.ReplaceVolumes) != 0 || d.Recovery.Status.Directive != nil {
		t.Errorf("c-0 answering: replace %+v, directive %+v; want the recovery withdrawn and nothing replaced", d.ReplaceVolumes, d.Recovery.Status.Directive)
	}

	w = world(v1alpha1.QuorumLossAutomatic)
	w.o.Members[2].Volume.NodeLost = "" // c-2's node is down, not marked: it may come back with its data
	d = Decide(w.answers().o)
	waitsFor(t, d, "c-1", "c-2")
	if got := d.ReplaceVolumes; len(got) != 1 || got[0].Member != "c-1" {
		t.Errorf("replace %+v: want only c-1's claim replaced, c-2 awaited", got)
	}

	d = Decide(world(v1alpha1.QuorumLossManual).answers().o)
	waitsFor(t, d, "c-1", "c-2")
	c := apimeta.FindStatusCondition(d.Conditions, v1alpha1.ConditionDegraded)
	if len(d.ReplaceVolumes) != 0 || c == nil || !strings.Contains(c.Message, "kubectl steward destroy c-1 --yes") || !strings.Contains(c.Message, "marked out of service") {
		t.Errorf("Manual: replace %+v, Degraded %+v; want nothing replaced, and how to go on", d.ReplaceVolumes, c)
	}
}

// TestNextDeadlineAfterSuspendedFence: a pass that decided the fences suspended, by a directive
// it retired, comes back within seconds to apply them again; a cluster at rest waits for the
// longest requeue.
func TestNextDeadlineAfterSuspendedFence(t *testing.T) {
	now := time.Now()
	if got := nextDeadline(Observation{}, Decision{}, now); got != maxRequeue+time.Second {
		t.Fatalf("at rest: next pass in %s, want %s", got, maxRequeue+time.Second)
	}
	retired := Decision{FenceSuspended: "the fences of m-0 are suspended while recovery 1 runs", Recovery: &recoveryOutcome{}}
	if got := nextDeadline(Observation{}, retired, now); got > 2*time.Second {
		t.Fatalf("fences suspended: next pass in %s, want within 2s", got)
	}
}
