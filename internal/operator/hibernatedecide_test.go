package operator

import (
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

// formed3 is a healthy, formed three-member cluster with backups and a quorum-loss recovery
// that is not under way.
func formed3() *world {
	w := healthy(3)
	w.o.Previous.ClusterID = "c1"
	w.o.Previous.ClusterSize = 3
	w.o.Previous.Voters = []v1alpha1.Voter{{ID: "64", Name: "c-0"}, {ID: "65", Name: "c-1"}, {ID: "66", Name: "c-2"}}
	w.o.SnapshotBeforeStop = true
	w.o.Recovery = &Recovery{Timing: heal.Timing{Grace: time.Minute, ReportTimeout: time.Minute, SeedTimeout: time.Hour}}
	return w
}

// after is the next pass: the status as d wrote it, the StatefulSet and ConfigMap at the sizes
// d wrote, the clock later by dt.
func (w *world) after(d Decision, dt time.Duration) *world {
	w.o.Now = w.o.Now.Add(dt)
	w.o.Previous.Members, w.o.Previous.Conditions, w.o.Previous.ClusterSize = d.Members, d.Conditions, d.ClusterSize
	w.o.Previous.Hibernation = d.Hibernation.Status
	w.o.StatefulSetReplicas, w.o.ConfigMembers = d.StatefulSetReplicas, d.ConfigMembers
	if d.Recovery != nil {
		w.o.Recovery.Status = d.Recovery.Status
	}
	return w
}

// podsGone plays the StatefulSet scaled to 0: no member has a pod; the Leases stay as the
// sidecars last renewed them.
func (w *world) podsGone() *world {
	for i := range w.o.Members {
		w.o.Members[i].Pod = nil
		w.o.Members[i].Lease.Renewed = w.o.Now.Add(-time.Hour)
	}
	return w
}

func condReason(d Decision, t string) string {
	if c := apimeta.FindStatusCondition(d.Conditions, t); c != nil {
		return c.Reason
	}
	return ""
}

// hibernated3 is formed3 hibernated an hour ago at three members: the StatefulSet at 0, no
// pod, every member NotReady (Hibernated) since then, and the quorum-loss clock that an
// earlier operator left running.
func hibernated3() *world {
	w := formed3().podsGone()
	w.o.StatefulSetReplicas = 0
	w.o.Previous.Hibernation = &v1alpha1.HibernationStatus{Phase: v1alpha1.HibernationStopped, Replicas: 3,
		Since: metav1.NewTime(t0.Add(-time.Hour)), SnapshotKey: "v1/full/42.snap.zst", SnapshotRevision: 42}
	for i := range w.o.Previous.Members {
		w.prevStatus(i, v1alpha1.MemberNotReady, v1alpha1.ReasonHibernated, time.Hour)
	}
	for _, c := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionQuorate, v1alpha1.ConditionAllMembersReady, v1alpha1.ConditionBackupReady} {
		w.setCond(c, false)
	}
	w.o.Recovery.Status.QuorumLostSince = t0.Add(-time.Hour)
	return w
}

// TestDecideHibernate: spec.replicas: 0 (or the annotation) on a formed cluster records the
// size first, takes the full snapshot, then scales the StatefulSet to 0 while the ConfigMap
// keeps every member: no member is removed, as a scale-down would.
func TestDecideHibernate(t *testing.T) {
	for _, tc := range []struct {
		name string
		ask  func(w *world)
	}{
		{"replicas 0", func(w *world) { w.o.Desired = 0 }},
		{"annotation", func(w *world) { w.o.Hibernate = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := formed3()
			tc.ask(w)
			d := Decide(w.o)
			h := d.Hibernation
			if !slices.Contains(d.Cases, CaseHibernate) || slices.Contains(d.Cases, CaseScaleDown) {
				t.Fatalf("cases %v: want Hibernate, never ScaleDown", d.Cases)
			}
			if h.Status == nil || h.Status.Phase != v1alpha1.HibernationStopping || h.Status.Replicas != 3 || !h.Snapshot {
				t.Fatalf("first pass: %+v; want the record (Stopping at 3) and the snapshot", h)
			}
			if d.StatefulSetReplicas != 3 || d.ConfigMembers != 3 {
				t.Fatalf("first pass writes StatefulSet %d ConfigMap %d: nothing stops before the record is stored", d.StatefulSetReplicas, d.ConfigMembers)
			}
			if condReason(d, v1alpha1.ConditionHibernated) != ReasonHibernating || cond(d, v1alpha1.ConditionProgressing) != metav1.ConditionTrue {
				t.Errorf("Hibernated %q Progressing %v", condReason(d, v1alpha1.ConditionHibernated), cond(d, v1alpha1.ConditionProgressing))
			}

			// The snapshot was stored and recorded (by the reconciler): the members stop.
			d.Hibernation.Status.SnapshotKey, d.Hibernation.Status.SnapshotRevision = "v1/full/42.snap.zst", 42
			d = Decide(w.after(d, time.Second).o)
			h = d.Hibernation
			if h.Status.Phase != v1alpha1.HibernationStopped || h.Snapshot || d.StatefulSetReplicas != 0 || d.ConfigMembers != 3 || d.ClusterSize != 3 {
				t.Fatalf("second pass: %+v, StatefulSet %d ConfigMap %d size %d; want Stopped, StatefulSet 0, ConfigMap and size 3",
					h.Status, d.StatefulSetReplicas, d.ConfigMembers, d.ClusterSize)
			}
			if !strings.Contains(h.Status.Message, "v1/full/42.snap.zst") {
				t.Errorf("message %q does not name the snapshot", h.Status.Message)
			}
			if cond(d, v1alpha1.ConditionHibernated) != metav1.ConditionTrue || condReason(d, v1alpha1.ConditionReady) != ReasonHibernated {
				t.Errorf("Hibernated %v, Ready's reason %q: want True and Hibernated", cond(d, v1alpha1.ConditionHibernated), condReason(d, v1alpha1.ConditionReady))
			}
			if len(d.Members) != 3 {
				t.Errorf("members %v: every member stays in the status", d.Members)
			}

			// The pods are gone: the members are stopped on purpose, and only that is news.
			d = Decide(w.after(d, time.Second).podsGone().o)
			if !slices.Equal(d.Cases, []Case{CaseHibernated}) || d.StatefulSetReplicas != 0 {
				t.Errorf("pods gone: cases %v StatefulSet %d; want only Hibernated, at 0", d.Cases, d.StatefulSetReplicas)
			}
			for _, m := range d.Members {
				if m.Status != v1alpha1.MemberNotReady || m.Reason != v1alpha1.ReasonHibernated {
					t.Errorf("member %+v, want NotReady/Hibernated", m)
				}
			}
		})
	}
}

// TestDecideHibernateWithoutSnapshot: without spec.backup (or with skipBackup) the members
// stop without a snapshot, the record stored first; a cluster without quorum cannot take one
// and stops without it; a snapshot that is not stored keeps a quorate cluster running.
func TestDecideHibernateWithoutSnapshot(t *testing.T) {
	w := formed3()
	w.o.Desired, w.o.SnapshotBeforeStop = 0, false
	d := Decide(w.o)
	if d.Hibernation.Snapshot || d.StatefulSetReplicas != 3 {
		t.Fatalf("no backup, first pass: snapshot %v StatefulSet %d; want the record only", d.Hibernation.Snapshot, d.StatefulSetReplicas)
	}
	d = Decide(w.after(d, time.Second).o)
	if d.StatefulSetReplicas != 0 || !strings.Contains(d.Hibernation.Status.Message, "no full snapshot") {
		t.Fatalf("no backup, second pass: StatefulSet %d, %q", d.StatefulSetReplicas, d.Hibernation.Status.Message)
	}

	// With backups, the snapshot not stored (it failed): asked again, nothing stops.
	w = formed3()
	w.o.Desired = 0
	d = Decide(w.o)
	d = Decide(w.after(d, time.Second).o)
	if !d.Hibernation.Snapshot || d.StatefulSetReplicas != 3 || d.Hibernation.Status.Phase != v1alpha1.HibernationStopping {
		t.Fatalf("snapshot not stored: %+v StatefulSet %d; want it asked again, the members running", d.Hibernation, d.StatefulSetReplicas)
	}

	// No quorum: no snapshot can be taken; the members stop without it.
	w.podNotReady(1, time.Hour).podNotReady(2, time.Hour)
	d = Decide(w.after(d, time.Second).o)
	if d.Hibernation.Snapshot || d.StatefulSetReplicas != 0 || !strings.Contains(d.Hibernation.Status.Message, "without a quorum") {
		t.Fatalf("no quorum: %+v StatefulSet %d", d.Hibernation, d.StatefulSetReplicas)
	}
}

// TestDecideHibernateWaitsForRecovery: the members do not stop while a recovery directive is
// in force: they carry it out first.
func TestDecideHibernateWaitsForRecovery(t *testing.T) {
	w := formed3()
	w.o.Desired = 0
	w.o.Previous.Hibernation = &v1alpha1.HibernationStatus{Phase: v1alpha1.HibernationStopping, Replicas: 3, Since: metav1.NewTime(t0.Add(-time.Minute)),
		SnapshotKey: "v1/full/42.snap.zst", SnapshotRevision: 42}
	w.o.Recovery.Status.Directive = &cluster.Directive{Epoch: 4, Phase: cluster.PhaseRejoining, IssuedAt: t0.Add(-time.Minute)}
	d := Decide(w.o)
	if h := d.Hibernation; h.Snapshot || h.Status.Phase != v1alpha1.HibernationStopping || d.StatefulSetReplicas != 3 ||
		!strings.Contains(h.Status.Message, "recovery 4") {
		t.Fatalf("%+v StatefulSet %d: want Stopping, the members running until recovery 4 is over", h.Status, d.StatefulSetReplicas)
	}
}

// TestDecideWhileHibernated: members down on purpose are nobody's fault: no pod is deleted, no
// quorum is lost, no recovery starts, and no member, Lease or EtcdMember goes.
func TestDecideWhileHibernated(t *testing.T) {
	w := hibernated3()
	w.o.Desired = 0
	w.o.Now = t0.Add(time.Hour) // long past every grace
	d := Decide(w.o)
	if !slices.Equal(d.Cases, []Case{CaseHibernated}) {
		t.Errorf("cases %v, want only Hibernated", d.Cases)
	}
	if d.StatefulSetReplicas != 0 || d.ConfigMembers != 3 || d.ClusterSize != 3 || len(d.DeletePods) != 0 || d.QuorumLost {
		t.Errorf("StatefulSet %d ConfigMap %d size %d delete %v quorum lost %v", d.StatefulSetReplicas, d.ConfigMembers, d.ClusterSize, d.DeletePods, d.QuorumLost)
	}
	if r := d.Recovery; r == nil || r.Status.Directive != nil || !r.Status.QuorumLostSince.IsZero() || len(r.FencePods) != 0 {
		t.Errorf("recovery %+v: want no directive, no fence, and no quorum-loss clock running", r)
	}
	for _, m := range d.Members {
		if m.Status != v1alpha1.MemberNotReady || m.Reason != v1alpha1.ReasonHibernated {
			t.Errorf("member %+v, want NotReady/Hibernated", m)
		}
	}
	if len(d.Members) != 3 {
		t.Errorf("members %v: all three stay", d.Members)
	}
	for _, c := range []string{v1alpha1.ConditionQuorumLost, v1alpha1.ConditionReady, v1alpha1.ConditionBackupReady} {
		if cond(d, c) != metav1.ConditionFalse || condReason(d, c) != ReasonHibernated {
			t.Errorf("%s %v (%s), want False, reason Hibernated", c, cond(d, c), condReason(d, c))
		}
	}
	if cond(d, v1alpha1.ConditionHibernated) != metav1.ConditionTrue {
		t.Errorf("Hibernated %v", cond(d, v1alpha1.ConditionHibernated))
	}
}

// TestDecideResume: scaling back resumes at the size the cluster hibernated at, on the same
// data (the ConfigMap kept every member); the record goes once the StatefulSet is back, and
// the members' NotReady grace starts then, not when they stopped.
func TestDecideResume(t *testing.T) {
	w := hibernated3()
	d := Decide(w.o) // Desired is 3 again
	if !slices.Contains(d.Cases, CaseResume) || slices.Contains(d.Cases, CaseScaleUp) || slices.Contains(d.Cases, CaseBootstrap) {
		t.Fatalf("cases %v: want Resume, neither ScaleUp nor Bootstrap", d.Cases)
	}
	if d.StatefulSetReplicas != 3 || d.ConfigMembers != 3 || d.Hibernation.Status.Phase != v1alpha1.HibernationResuming {
		t.Fatalf("StatefulSet %d ConfigMap %d %+v; want both 3 and Resuming", d.StatefulSetReplicas, d.ConfigMembers, d.Hibernation.Status)
	}
	if r := d.Recovery; r == nil || !r.Status.QuorumLostSince.IsZero() {
		t.Errorf("recovery %+v: the quorum-loss clock must not run while the members come back", r)
	}

	// The StatefulSet is back at 3; the pods start (not Ready yet). Past every grace since
	// the members stopped, but not since they resumed.
	w.after(d, time.Second)
	for i := range w.o.Members {
		w.o.Members[i].Pod = &PodState{Created: w.o.Now.Add(-time.Second)}
	}
	d = Decide(w.o)
	if d.Hibernation.Status != nil || d.StatefulSetReplicas != 3 || d.QuorumLost || len(d.DeletePods) != 0 {
		t.Fatalf("resumed: %+v StatefulSet %d quorum lost %v delete %v", d.Hibernation.Status, d.StatefulSetReplicas, d.QuorumLost, d.DeletePods)
	}
	if r := d.Recovery; r == nil || r.Status.Directive != nil {
		t.Errorf("recovery %+v: no directive for members that just restarted", r)
	}
	for _, m := range d.Members {
		if m.Reason != v1alpha1.ReasonPodNotReady || !m.LastTransitionTime.Time.Equal(w.o.Now) {
			t.Errorf("member %+v: want PodNotReady since the resume", m)
		}
	}
	if cond(d, v1alpha1.ConditionHibernated) != metav1.ConditionFalse {
		t.Errorf("Hibernated %v", cond(d, v1alpha1.ConditionHibernated))
	}
}

// TestDecideResumeAtAnotherSize: resuming at another size is resuming at the size the
// cluster had, then the ordinary scaling, one member at a time, once every member is Ready.
func TestDecideResumeAtAnotherSize(t *testing.T) {
	for _, tc := range []struct {
		desired     int32
		next        Case
		sts, config int32
	}{
		{desired: 5, next: CaseScaleUp, sts: 4, config: 4},
		{desired: 1, next: CaseScaleDown, sts: 3, config: 2},
	} {
		t.Run(string(tc.next), func(t *testing.T) {
			w := hibernated3()
			w.o.Desired = tc.desired
			d := Decide(w.o)
			if d.StatefulSetReplicas != 3 || d.ConfigMembers != 3 || !slices.Contains(d.Cases, CaseResume) {
				t.Fatalf("StatefulSet %d ConfigMap %d cases %v: resume at 3 first", d.StatefulSetReplicas, d.ConfigMembers, d.Cases)
			}
			// Back at 3, the members starting: no scaling yet.
			w.after(d, time.Second)
			for i := range w.o.Members {
				w.o.Members[i].Pod = &PodState{Created: w.o.Now.Add(-time.Second)}
			}
			d = Decide(w.o)
			if d.StatefulSetReplicas != 3 || d.ConfigMembers != 3 || slices.Contains(d.Cases, tc.next) {
				t.Fatalf("members starting: StatefulSet %d ConfigMap %d cases %v: no scaling before they are Ready", d.StatefulSetReplicas, d.ConfigMembers, d.Cases)
			}
			// Every member Ready again: the ordinary scaling.
			w.after(d, 10*time.Second)
			for i := range w.o.Members {
				w.o.Members[i].Pod = &PodState{Ready: true, Created: w.o.Now.Add(-10 * time.Second)}
				w.o.Members[i].Lease.Renewed = w.o.Now.Add(-time.Second)
			}
			d = Decide(w.o) // the members turn Ready in the status
			d = Decide(w.after(d, time.Second).o)
			if !slices.Contains(d.Cases, tc.next) || d.StatefulSetReplicas != tc.sts || d.ConfigMembers != tc.config {
				t.Fatalf("members Ready: cases %v StatefulSet %d ConfigMap %d; want %s to %d/%d", d.Cases, d.StatefulSetReplicas, d.ConfigMembers, tc.next, tc.sts, tc.config)
			}
		})
	}
}

// TestDecideHibernateWithdrawn: asked no more before any member stopped, the record goes and
// nothing happened; a cluster that never formed has nothing to hibernate.
func TestDecideHibernateWithdrawn(t *testing.T) {
	w := formed3()
	w.o.Desired = 0
	d := Decide(w.o)
	w.after(d, time.Second).o.Desired = 3
	d = Decide(w.o)
	if d.Hibernation.Status != nil || d.StatefulSetReplicas != 3 || !slices.Contains(d.Cases, CasePinkOfHealth) {
		t.Errorf("withdrawn: %+v StatefulSet %d cases %v", d.Hibernation.Status, d.StatefulSetReplicas, d.Cases)
	}

	w = healthy(3)
	w.o.Formed, w.o.Desired = false, 0
	if d := Decide(w.o); d.Hibernation.Status != nil || d.StatefulSetReplicas != 0 || !slices.Contains(d.Cases, CaseBootstrap) {
		t.Errorf("never formed: %+v StatefulSet %d cases %v", d.Hibernation.Status, d.StatefulSetReplicas, d.Cases)
	}
}

// TestDecideHibernateStopNotRecorded: the pass that stopped the members (StatefulSet at 0) could
// not write the status, which still says Stopping; then hibernation is asked for no more, at
// another size. The members stopped: they resume at the size they hibernated at (the ConfigMap
// keeps them all), and only then does the cluster scale, one member at a time.
func TestDecideHibernateStopNotRecorded(t *testing.T) {
	w := formed3()
	w.o.Desired, w.o.SnapshotBeforeStop = 0, false
	d := Decide(w.o)
	stopping := d.Hibernation.Status
	d = Decide(w.after(d, time.Second).o)
	if d.StatefulSetReplicas != 0 {
		t.Fatalf("second pass: StatefulSet %d, want 0", d.StatefulSetReplicas)
	}
	w.after(d, time.Second).podsGone()
	w.o.Previous.Hibernation = stopping // the status write of the stop failed
	w.o.Desired = 1
	d = Decide(w.o)
	if h := d.Hibernation; h.Status == nil || h.Status.Phase != v1alpha1.HibernationResuming || d.StatefulSetReplicas != 3 || d.ConfigMembers != 3 {
		t.Fatalf("hibernation %+v, StatefulSet %d ConfigMap %d: want Resuming at 3, every member kept in the ConfigMap",
			h.Status, d.StatefulSetReplicas, d.ConfigMembers)
	}
}
