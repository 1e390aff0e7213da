package operator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/heal"
	"github.com/etcd-steward/steward/internal/maintenance"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rolling is a healthy cluster of n members on revision "old" whose StatefulSet moved to
// "new": every member reports serving, c-0 leads.
func rolling(n int) *world {
	w := healthy(n)
	w.o.Rollout = &RolloutObservation{Revision: "new", Leader: maintenance.LeaderMoveLeader}
	w.o.SnapshotBeforeStop = true
	w.o.Graces.Rollout = 10 * time.Minute
	w.o.Reports = map[string]cluster.Report{}
	for i := range w.o.Members {
		w.o.Members[i].Pod.Revision = "old"
		name := w.o.Members[i].Name
		w.o.Reports[name] = cluster.Report{Name: name, Serving: true, Formed: true, ClusterID: "c1", MemberID: fmt.Sprintf("%x", 100+i),
			Leader: i == 0, LeaderID: fmt.Sprintf("%x", 100), Applied: 5000}
	}
	return w
}

// started records a rollout that took its snapshot and restarted the given members.
func (w *world) started(updated ...string) *world {
	w.o.Previous.Rollout = &v1alpha1.RolloutStatus{Revision: "new", StartTime: metav1.NewTime(t0.Add(-time.Hour)),
		SnapshotKey: "v1/full/100.snap.zst", SnapshotRevision: 100, Updated: updated}
	if len(updated) > 0 {
		since := metav1.NewTime(t0.Add(-30 * time.Minute))
		w.o.Previous.Rollout.Current, w.o.Previous.Rollout.CurrentSince = updated[len(updated)-1], &since
	}
	return w
}

// restarted makes member i run the new revision, its pod created age ago, back and healthy.
func (w *world) restarted(i int, age time.Duration) *world {
	w.o.Members[i].Pod = &PodState{Ready: true, Created: t0.Add(-age), Revision: "new"}
	return w
}

// leads makes member i the leader (its Lease role, every report).
func (w *world) leads(i int) *world {
	for j := range w.o.Members {
		role := v1alpha1.RoleMember
		if j == i {
			role = v1alpha1.RoleLeader
		}
		w.o.Members[j].Lease.Holder = fmt.Sprintf("%x:%s", 100+j, role)
		w.o.Previous.Members[j].Role = role
		r := w.o.Reports[w.o.Members[j].Name]
		r.Leader, r.LeaderID = j == i, fmt.Sprintf("%x", 100+i)
		w.o.Reports[w.o.Members[j].Name] = r
	}
	return w
}

func progressing(d Decision) *metav1.Condition {
	return apimeta.FindStatusCondition(d.Conditions, v1alpha1.ConditionProgressing)
}

// restoring makes a restore directive own the members.
func (w *world) restoring(t *testing.T) *world {
	w.o.Previous.ClusterID = "c1"
	hd, err := heal.StartRestore(heal.Observation{Now: t0}, cluster.RestoreTarget{Revision: 400, Timeline: 2})
	if err != nil {
		t.Fatal(err)
	}
	w.o.Recovery = &Recovery{Status: hd.Status, Timing: heal.DefaultTiming}
	return w
}

// TestDecideRollout has one named row per step of a rolling update.
func TestDecideRollout(t *testing.T) {
	tests := []struct {
		name string
		w    *world
		// want: the action ("snapshot", "delete c-1", "move c-0 -> c-1", or "" for a wait),
		// the Progressing reason and a part of its message.
		want, reason, msg string
		check             func(t *testing.T, d Decision)
	}{
		{name: "NotAllReadyWaits", w: rolling(3).podNotReady(2, time.Minute),
			reason: "RollingUpdate", msg: "3 of 3 left: waiting for every member to be Ready before the first pod is deleted (2 of 3 Ready)"},
		{name: "NotAllReadyAtStartWaits", w: func() *world {
			w := rolling(3)
			w.o.Members[2].Lease.Renewed = t0.Add(-40 * time.Second) // Unknown: no pod deleted yet
			return w
		}(), reason: "RollingUpdate", msg: "waiting for every member to be Ready before the first pod is deleted (2 of 3 Ready)"},
		{name: "SnapshotFirst", w: rolling(3), want: "snapshot", reason: "RollingUpdate", msg: "taking a full snapshot",
			check: func(t *testing.T, d Decision) {
				if st := d.Rollout.Status; st.Revision != "new" || !st.StartTime.Equal(&metav1.Time{Time: t0}) {
					t.Errorf("status.rollout %+v: the rollout to revision new starts now", st)
				}
			}},
		{name: "SkipBackupFollowersFirstByName", w: func() *world { w := rolling(3); w.o.SnapshotBeforeStop = false; return w }(),
			want: "delete c-1", reason: "RollingUpdate", msg: "updating c-1 (3 of 3 left)"},
		{name: "AfterSnapshotFollowersFirstByName", w: rolling(3).leads(1).started(),
			want: "delete c-0", reason: "RollingUpdate", msg: "updating c-0 (3 of 3 left)",
			check: func(t *testing.T, d Decision) {
				if st := d.Rollout.Status; !slices.Equal(st.Updated, []string{"c-0"}) || st.Current != "c-0" || !st.CurrentSince.Equal(&metav1.Time{Time: t0}) || st.SnapshotKey == "" {
					t.Errorf("status.rollout %+v", st)
				}
			}},
		{name: "WaitForUpdatedPodReady", w: func() *world {
			w := rolling(3).started("c-1")
			w.o.Members[1].Pod = &PodState{Created: t0.Add(-10 * time.Second), Revision: "new"}
			w.o.Previous.Rollout.CurrentSince = &metav1.Time{Time: t0.Add(-15 * time.Second)}
			return w
		}(), reason: "RollingUpdate", msg: "waiting for the updated members to be healthy before the next: c-1 does not answer"},
		{name: "OldReportOfRestartedMemberDoesNotCount", w: func() *world {
			// The pod is Ready and the Lease current, but renewed before the pod was created:
			// the new sidecar has not reported yet.
			w := rolling(3).started("c-1").restarted(1, 2*time.Second)
			w.o.Previous.Rollout.CurrentSince = &metav1.Time{Time: t0.Add(-3 * time.Second)}
			return w
		}(), reason: "RollingUpdate", msg: "c-1 does not answer"},
		{name: "UpdatedMemberBehindWaits", w: func() *world {
			w := rolling(3).started("c-1").restarted(1, time.Minute)
			r := w.o.Reports["c-1"]
			r.Applied = 100
			w.o.Reports["c-1"] = r
			return w
		}(), reason: "RollingUpdate", msg: "c-1 is catching up (4900 entries behind)"},
		{name: "NextFollowerOnceTheUpdatedIsHealthy", w: rolling(3).started("c-1").restarted(1, time.Minute),
			want: "delete c-2", reason: "RollingUpdate", msg: "updating c-2 (2 of 3 left)"},
		{name: "DownOutdatedMemberFirst", w: func() *world {
			w := rolling(3).started("c-2").restarted(2, time.Minute).podNotReady(1, time.Minute)
			w.o.Members[1].Pod.Revision = "old"
			return w
		}(), want: "delete c-1", reason: "RollingUpdate", msg: "updating c-1 (2 of 3 left): c-1 does not answer: it is down already"},
		{name: "LeaderLastAfterMove", w: rolling(3).started("c-1", "c-2").restarted(1, 2*time.Minute).restarted(2, time.Minute),
			want: "move c-0 -> c-1", reason: "RollingUpdate", msg: "moving leadership from c-0 to c-1 (1 of 3 left)",
			check: func(t *testing.T, d Decision) {
				if st := d.Rollout.Status; st.LeaderMoves != 1 || st.LeaderMovedFrom != "c-0" || st.LeaderMovedAt == nil {
					t.Errorf("status.rollout %+v: the move is recorded", st)
				}
			}},
		{name: "LeaderMoveNotReportedYetWaits", w: func() *world {
			w := rolling(3).started("c-1", "c-2").restarted(1, 2*time.Minute).restarted(2, time.Minute)
			at := metav1.NewTime(t0.Add(-2 * time.Second))
			w.o.Previous.Rollout.LeaderMoves, w.o.Previous.Rollout.LeaderMovedFrom, w.o.Previous.Rollout.LeaderMovedAt = 1, "c-0", &at
			return w
		}(), reason: "RollingUpdate", msg: "waiting for the members to report the leadership move away from c-0"},
		{name: "OldLeaderRestartedOnceLeadershipMoved", w: func() *world {
			w := rolling(3).started("c-1", "c-2").restarted(1, 2*time.Minute).restarted(2, time.Minute).leads(1)
			at := metav1.NewTime(t0.Add(-2 * time.Second))
			w.o.Previous.Rollout.LeaderMoves, w.o.Previous.Rollout.LeaderMovedFrom, w.o.Previous.Rollout.LeaderMovedAt = 1, "c-0", &at
			return w
		}(), want: "delete c-0", reason: "RollingUpdate", msg: "updating c-0 (1 of 3 left)"},
		{name: "LeaderRestartMethod", w: func() *world {
			w := rolling(3).started("c-1", "c-2").restarted(1, 2*time.Minute).restarted(2, time.Minute)
			w.o.Rollout.Leader = maintenance.LeaderRestart
			return w
		}(), want: "delete c-0", reason: "RollingUpdate", msg: "restarted as it leads"},
		{name: "Stalled", w: func() *world {
			w := rolling(3).started("c-1")
			w.o.Members[1].Pod = &PodState{Created: t0.Add(-11 * time.Minute), Revision: "new"}
			w.o.Previous.Members[1].Status, w.o.Previous.Members[1].LastTransitionTime = v1alpha1.MemberNotReady, metav1.NewTime(t0.Add(-time.Minute))
			w.o.Previous.Rollout.CurrentSince = &metav1.Time{Time: t0.Add(-11 * time.Minute)}
			return w
		}(), reason: "RollingUpdateStalled", msg: "c-1 has not come back healthy in the 11m0s since its pod was deleted",
			check: func(t *testing.T, d Decision) {
				if !d.Rollout.Stalled || !d.Rollout.Status.Stalled {
					t.Errorf("stalled %v, status %+v: the stall is new and recorded", d.Rollout.Stalled, d.Rollout.Status)
				}
			}},
		{name: "DirectiveActiveNoDeletion", w: rolling(3).started().restoring(t), reason: "Restoring",
			check: func(t *testing.T, d Decision) {
				if !strings.Contains(d.Rollout.Status.Message, "a recovery or restore owns the members") {
					t.Errorf("status.rollout.message %q", d.Rollout.Status.Message)
				}
			}},
		{name: "ScalingNoDeletion", w: func() *world { w := rolling(3).started(); w.o.Desired = 5; return w }(),
			reason: "ScalingUp", check: func(t *testing.T, d Decision) {
				if !strings.Contains(d.Rollout.Status.Message, "the cluster scales to 5 members first") {
					t.Errorf("status.rollout.message %q", d.Rollout.Status.Message)
				}
			}},
		{name: "NothingOutdatedDoneAndConditionCleared", w: func() *world {
			w := rolling(3).started("c-1", "c-2", "c-0").restarted(0, time.Minute).restarted(1, 3*time.Minute).restarted(2, 2*time.Minute)
			apimeta.SetStatusCondition(&w.o.Previous.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: ReasonRollingUpdate})
			return w
		}(), reason: "Reconciled", check: func(t *testing.T, d Decision) {
			if !d.Rollout.Done || d.Rollout.Status != nil || progressing(d).Status != metav1.ConditionFalse {
				t.Errorf("done %v, status %+v, Progressing %+v", d.Rollout.Done, d.Rollout.Status, progressing(d))
			}
		}},
		{name: "RevisionNotObservedYetKeepsTheRecord", w: func() *world { w := rolling(3).started("c-1"); w.o.Rollout.Revision = ""; return w }(),
			reason: "RollingUpdate", check: func(t *testing.T, d Decision) {
				if d.Rollout.Status == nil || !slices.Equal(d.Rollout.Status.Updated, []string{"c-1"}) {
					t.Errorf("status.rollout %+v: kept", d.Rollout.Status)
				}
			}},
		{name: "NoRollout", w: healthy(3), reason: "Reconciled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.w.o)
			r := d.Rollout
			got := ""
			switch {
			case r.Snapshot:
				got = "snapshot"
			case r.Delete != "":
				got = "delete " + r.Delete
			case r.MoveFrom != "":
				got = "move " + r.MoveFrom + " -> " + r.MoveTo
			}
			if len(d.DeletePods) > 0 {
				got += fmt.Sprintf(" (case 9: %v)", d.DeletePods)
			}
			if got != tc.want {
				t.Errorf("action %q, want %q (rollout %+v)", got, tc.want, r.Status)
			}
			c := progressing(d)
			if c == nil || c.Reason != tc.reason || !strings.Contains(c.Message, tc.msg) {
				t.Errorf("Progressing %+v, want reason %s and a message with %q", c, tc.reason, tc.msg)
			}
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

// templateChanged is a healthy cluster of n members, every pod on the StatefulSet's revision
// "r1" (template "t1"), with a new pod template "t2" waiting to be applied.
func templateChanged(n int) *world {
	w := rolling(n)
	w.o.Rollout.Revision, w.o.Rollout.Template, w.o.Rollout.Pending = "r1", "t1", "t2"
	for i := range w.o.Members {
		w.o.Members[i].Pod.Revision = "r1"
	}
	return w
}

// onRevision puts every pod on revision r (after podNotReady, which makes a new pod).
func (w *world) onRevision(r string) *world {
	for i := range w.o.Members {
		w.o.Members[i].Pod.Revision = r
	}
	return w
}

// TestDecideTemplateWaits has one named row per way a new pod template reaches the
// StatefulSet: while the members serve it waits for the rolling update to own it (so a pod
// restarted for any other reason runs the template its members ran); where nothing serves
// that it could harm, it is applied at once.
func TestDecideTemplateWaits(t *testing.T) {
	snapshotted := func(w *world) *world {
		w.o.Previous.Rollout = &v1alpha1.RolloutStatus{Template: "t2", StartTime: metav1.NewTime(t0.Add(-time.Minute)),
			SnapshotKey: "v1/full/100.snap.zst", SnapshotRevision: 100}
		return w
	}
	majorityDown := func(w *world, age time.Duration) *world {
		return w.podNotReady(1, age).podNotReady(2, age).onRevision("r1").
			prevStatus(1, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, age).
			prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, age)
	}
	tests := []struct {
		name string
		w    *world
		// applies: the templates the StatefulSet takes now ("any", "t2" or ""); snapshot: a
		// full snapshot is taken now; msg: a part of status.rollout.message.
		applies  string
		snapshot bool
		msg      string
	}{
		{name: "ServingSnapshotFirst", w: templateChanged(3), snapshot: true,
			msg: "the pod template changed: taking a full snapshot before the new template is applied"},
		{name: "SnapshotStoredApplied", w: snapshotted(templateChanged(3)), applies: "t2",
			msg: "applying it to the StatefulSet"},
		{name: "BackupsNotCurrentAppliedWithoutSnapshot", w: func() *world {
			w := templateChanged(3)
			w.o.Backup.LastDelta = time.Time{} // backups just turned on: the members have no store yet
			return w
		}(), applies: "t2", msg: "no full snapshot first: no snapshot stored yet"},
		{name: "SkipBackupApplied", w: func() *world { w := templateChanged(3); w.o.SnapshotBeforeStop = false; return w }(), applies: "t2"},
		{name: "MemberDownStillApplied", w: snapshotted(templateChanged(3)).podNotReady(2, time.Hour).onRevision("r1").
			prevStatus(2, v1alpha1.MemberNotReady, v1alpha1.ReasonPodNotReady, 6*time.Minute), applies: "t2"},
		{name: "NoQuorumWaits", w: snapshotted(majorityDown(templateChanged(3), time.Minute)), msg: "no quorum (1 of 3 members Ready); the new template waits"},
		{name: "QuorumLostAppliedAtOnce", w: majorityDown(templateChanged(3), time.Hour), applies: "any"},
		{name: "RestoreOwnsTheMembers", w: snapshotted(templateChanged(3)).restoring(t), msg: "a recovery or restore owns the members"},
		{name: "NotFormedAppliedAtOnce", w: func() *world { w := templateChanged(3); w.o.Formed = false; return w }(), applies: "any"},
		{name: "NoStatefulSetAppliedAtOnce", w: func() *world { w := healthy(3); w.o.Rollout = nil; return w }(), applies: "any"},
		{name: "RolloutUnderWayTakesANewerTemplate", w: rolling(3).started("c-1"), applies: "any"},
		{name: "NothingWaits", w: func() *world { w := templateChanged(3); w.o.Rollout.Pending = ""; return w }()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.w.o)
			r := d.Rollout
			applies := ""
			switch {
			case r.mayApply("any template"):
				applies = "any"
			case r.mayApply("t2"):
				applies = "t2"
			}
			if applies != tc.applies || r.Snapshot != tc.snapshot {
				t.Errorf("applies %q, snapshot %v; want %q, %v (rollout %+v)", applies, r.Snapshot, tc.applies, tc.snapshot, r.Status)
			}
			if tc.msg != "" && (r.Status == nil || !strings.Contains(r.Status.Message, tc.msg)) {
				t.Errorf("status.rollout %+v, want a message with %q", r.Status, tc.msg)
			}
			if st := r.Status; tc.w.o.Rollout != nil && tc.w.o.Rollout.Pending != "" && st != nil && (st.Template != "t2" || st.Revision != "") {
				t.Errorf("status.rollout %+v: records the waiting template t2, no revision yet", st)
			}
		})
	}
}

// TestDecideAppliedTemplateKeepsItsSnapshot: once the waiting template is applied and the
// StatefulSet has its revision, the rolling update goes on from the snapshot taken for it.
func TestDecideAppliedTemplateKeepsItsSnapshot(t *testing.T) {
	w := templateChanged(3)
	w.o.Rollout.Revision, w.o.Rollout.Template, w.o.Rollout.Pending = "r2", "t2", ""
	w.o.Previous.Rollout = &v1alpha1.RolloutStatus{Template: "t2", StartTime: metav1.NewTime(t0.Add(-time.Minute)),
		SnapshotKey: "v1/full/100.snap.zst", SnapshotRevision: 100}
	d := Decide(w.o)
	st := d.Rollout.Status
	if d.Rollout.Snapshot || d.Rollout.Delete != "c-1" || st == nil || st.Revision != "r2" || st.SnapshotKey != "v1/full/100.snap.zst" ||
		!st.StartTime.Equal(&metav1.Time{Time: t0.Add(-time.Minute)}) {
		t.Errorf("snapshot %v, delete %q, status.rollout %+v: want c-1 restarted on r2, the snapshot and start kept", d.Rollout.Snapshot, d.Rollout.Delete, st)
	}
}
