package operator

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/heal"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecideRestore(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	created := metav1.NewTime(now.Add(-time.Minute))
	deleted := metav1.NewTime(now)
	rev := int64(400)
	snapTime := metav1.NewTime(now.Add(-10 * time.Second))
	snap := &v1alpha1.RestoreSnapshot{Key: "v1/full/500", Revision: 500, Timeline: 2, Time: &snapTime}
	checked := &v1alpha1.RestoreTargetStatus{Revision: 400, Timeline: 2, Checked: "against the store"}
	target := cluster.RestoreTarget{Revision: 400, Timeline: 2}
	restoreObj := func(mut func(*v1alpha1.EtcdRestore)) *v1alpha1.EtcdRestore {
		er := &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", CreationTimestamp: created},
			Spec: v1alpha1.EtcdRestoreSpec{Cluster: "c", Revision: &rev}}
		if mut != nil {
			mut(er)
		}
		return er
	}
	requested := func(er *v1alpha1.EtcdRestore) {
		er.Status = v1alpha1.EtcdRestoreStatus{Phase: v1alpha1.RestoreFencing, Snapshot: snap, Target: checked, Request: &v1alpha1.RestoreRequest{AfterEpoch: 2}}
	}
	committed := func(er *v1alpha1.EtcdRestore) {
		er.Status = v1alpha1.EtcdRestoreStatus{Phase: v1alpha1.RestoreFencing, Epoch: 3, Snapshot: snap, Target: checked}
	}
	newEC := func(mut func(*v1alpha1.EtcdCluster)) *v1alpha1.EtcdCluster {
		ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
			Spec:   v1alpha1.EtcdClusterSpec{Replicas: 3, Backup: &v1alpha1.BackupSpec{Store: "s3://b/c"}},
			Status: v1alpha1.EtcdClusterStatus{ClusterID: "c1"}}
		if mut != nil {
			mut(ec)
		}
		return ec
	}
	directive := func(epoch int64, phase string, t *cluster.RestoreTarget) *cluster.Directive {
		return &cluster.Directive{Epoch: epoch, Phase: phase, Restore: t, Reason: "why"}
	}
	ack := &cluster.DirectiveResult{Member: "c-0", MemberID: "b0", ClusterID: "c2", Revision: 400}
	otherTime := target
	otherTime.Revision = 401

	for _, tc := range []struct {
		name      string
		o         restoreObservation
		step      restoreStep
		phase     string
		msg       string // a part of the message
		wantAck   bool
		wantPinTo uint32
		wantEpoch int64 // the epoch to record
	}{
		{name: "cluster missing: waits", o: restoreObservation{Restore: restoreObj(nil)},
			phase: v1alpha1.RestorePending, msg: "does not exist"},
		{name: "cluster missing too long: fails", o: restoreObservation{Restore: restoreObj(func(er *v1alpha1.EtcdRestore) {
			er.CreationTimestamp = metav1.NewTime(now.Add(-restoreWait - time.Second))
		})}, phase: v1alpha1.RestoreFailed, msg: "gave up after"},
		{name: "no spec.backup: fails", o: restoreObservation{Restore: restoreObj(nil), Cluster: newEC(func(ec *v1alpha1.EtcdCluster) { ec.Spec.Backup = nil })},
			phase: v1alpha1.RestoreFailed, msg: "has no spec.backup"},
		{name: "another restore goes first: fails", o: restoreObservation{Restore: restoreObj(nil), Cluster: newEC(nil), Rival: "first"},
			phase: v1alpha1.RestoreFailed, msg: "EtcdRestore first is restoring"},
		{name: "a recovery in progress: fails", o: restoreObservation{Restore: restoreObj(nil), Cluster: newEC(nil),
			Recovery: heal.Status{Directive: directive(2, cluster.PhaseSeeding, nil), LastEpoch: 2}},
			phase: v1alpha1.RestoreFailed, msg: "is recovering (directive 2"},
		{name: "paused: waits", o: restoreObservation{Restore: restoreObj(nil), Cluster: newEC(func(ec *v1alpha1.EtcdCluster) {
			ec.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"}
		})}, phase: v1alpha1.RestorePending, msg: "is paused"},
		{name: "not formed: waits", o: restoreObservation{Restore: restoreObj(nil), Cluster: newEC(func(ec *v1alpha1.EtcdCluster) { ec.Status.ClusterID = "" })},
			phase: v1alpha1.RestorePending, msg: "has not formed"},
		{name: "no serving member: waits", o: restoreObservation{Restore: restoreObj(nil), Cluster: newEC(nil), SidecarWait: "no member of c serves yet"},
			phase: v1alpha1.RestorePending, msg: "no member of c serves yet"},
		{name: "full snapshot first", o: restoreObservation{Restore: restoreObj(nil), Cluster: newEC(nil)},
			step: stepSnapshot, phase: v1alpha1.RestoreSnapshotting},
		{name: "then the deltas catch up with the snapshot", o: restoreObservation{Restore: restoreObj(func(er *v1alpha1.EtcdRestore) { er.Status.Snapshot = snap }),
			Cluster: newEC(nil), DeltaRevision: 480}, phase: v1alpha1.RestoreSnapshotting, msg: "waiting for the deltas to reach revision 500"},
		{name: "then the target is checked", o: restoreObservation{Restore: restoreObj(func(er *v1alpha1.EtcdRestore) { er.Status.Snapshot = snap }),
			Cluster: newEC(nil), DeltaRevision: 500}, step: stepCheck, phase: v1alpha1.RestoreSnapshotting},
		{name: "then the restore is requested of the cluster's reconciler, pinned to the checked timeline", o: restoreObservation{Restore: restoreObj(func(er *v1alpha1.EtcdRestore) {
			er.Status.Snapshot, er.Status.Target = snap, checked
		}), Cluster: newEC(nil)}, step: stepRequest, phase: v1alpha1.RestoreFencing, msg: "requested of EtcdCluster c", wantPinTo: 2},
		{name: "a revision beyond the snapshot fails before fencing", o: restoreObservation{Restore: restoreObj(func(er *v1alpha1.EtcdRestore) {
			r := int64(501)
			er.Spec.Revision = &r
			er.Status.Snapshot, er.Status.Target = snap, &v1alpha1.RestoreTargetStatus{Revision: 501, Timeline: 2}
		}), Cluster: newEC(nil)}, phase: v1alpha1.RestoreFailed, msg: "beyond the present"},
		{name: "deleted before anything was stopped: released", o: restoreObservation{Restore: restoreObj(func(er *v1alpha1.EtcdRestore) {
			er.DeletionTimestamp, er.Status.Snapshot = &deleted, snap
		}), Cluster: newEC(nil)}, step: stepRelease},
		{name: "requested: waits for the cluster's reconciler to issue the directive", o: restoreObservation{Restore: restoreObj(requested), Cluster: newEC(nil),
			Recovery: heal.Status{LastEpoch: 2}}, phase: v1alpha1.RestoreFencing, msg: "waiting for EtcdCluster c's reconciler to issue the directive"},
		{name: "requested, paused: says so, waits", o: restoreObservation{Restore: restoreObj(requested), Cluster: newEC(func(ec *v1alpha1.EtcdCluster) {
			ec.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"}
		}), Recovery: heal.Status{LastEpoch: 2}}, phase: v1alpha1.RestoreFencing, msg: "is paused"},
		{name: "requested, deleted: not released before the request is answered", o: restoreObservation{Restore: restoreObj(func(er *v1alpha1.EtcdRestore) {
			requested(er)
			er.DeletionTimestamp = &deleted
		}), Cluster: newEC(nil), Recovery: heal.Status{LastEpoch: 2}}, phase: v1alpha1.RestoreFencing, msg: "deleted: the directive is cancelled once issued"},
		{name: "requested, the directive issued: its epoch recorded and followed", o: restoreObservation{Restore: restoreObj(requested), Cluster: newEC(nil),
			Recovery: heal.Status{LastEpoch: 3, Directive: directive(3, cluster.PhaseFencing, &target)}},
			phase: v1alpha1.RestoreFencing, msg: "directive 3, Fencing", wantEpoch: 3},
		{name: "requested, deleted, the directive issued: its epoch recorded, cancelled", o: restoreObservation{Restore: restoreObj(func(er *v1alpha1.EtcdRestore) {
			requested(er)
			er.DeletionTimestamp = &deleted
		}), Cluster: newEC(nil), Recovery: heal.Status{LastEpoch: 3, Directive: directive(3, cluster.PhaseFencing, &target)}},
			step: stepCancel, phase: v1alpha1.RestoreFencing, msg: "cancelling directive 3", wantEpoch: 3},
		{name: "requested, the restore ran to its end unseen: its epoch recorded, Succeeded", o: restoreObservation{Restore: restoreObj(requested), Cluster: newEC(nil),
			Recovery: heal.Status{LastEpoch: 3, LastRecovery: func() *cluster.Directive {
				d := directive(3, cluster.PhaseRejoining, &target)
				d.Ack = ack
				return d
			}()}}, phase: v1alpha1.RestoreSucceeded, msg: "revision 400, new cluster c2", wantAck: true, wantEpoch: 3},
		{name: "requested, a quorum-loss recovery issued first: fails, nothing stopped", o: restoreObservation{Restore: restoreObj(requested), Cluster: newEC(nil),
			Recovery: heal.Status{LastEpoch: 3, Directive: directive(3, cluster.PhaseFencing, nil)}}, phase: v1alpha1.RestoreFailed, msg: "started recovery 3"},
		{name: "requested, another directive issued and retired first: fails, nothing stopped", o: restoreObservation{Restore: restoreObj(requested), Cluster: newEC(nil),
			Recovery: heal.Status{LastEpoch: 3, LastRecovery: directive(3, cluster.PhaseRejoining, nil)}}, phase: v1alpha1.RestoreFailed, msg: "issued directive 3 before the restore's"},
		{name: "requested, another target's directive is not this request's", o: restoreObservation{Restore: restoreObj(requested), Cluster: newEC(nil),
			Recovery: heal.Status{LastEpoch: 3, Directive: directive(3, cluster.PhaseFencing, &otherTime)}}, phase: v1alpha1.RestoreFailed, msg: "before the restore's directive was issued"},
		{name: "requested, cluster deleted: fails", o: restoreObservation{Restore: restoreObj(requested)}, phase: v1alpha1.RestoreFailed, msg: "was deleted before the restore's directive was issued"},
		{name: "epoch recorded, status.recovery behind it (lost or replaced): fails", o: restoreObservation{Restore: restoreObj(committed), Cluster: newEC(nil),
			Recovery: heal.Status{LastEpoch: 2}}, phase: v1alpha1.RestoreFailed, msg: "below the restore's directive 3"},
		{name: "fencing: followed", o: restoreObservation{Restore: restoreObj(committed), Cluster: newEC(nil),
			Recovery: heal.Status{LastEpoch: 3, Directive: directive(3, cluster.PhaseFencing, &target)}},
			phase: v1alpha1.RestoreFencing, msg: "directive 3, Fencing"},
		{name: "deleted while fencing: the cluster is asked to cancel the directive in force", o: restoreObservation{Restore: restoreObj(func(er *v1alpha1.EtcdRestore) {
			committed(er)
			er.DeletionTimestamp = &deleted
		}), Cluster: newEC(nil), Recovery: heal.Status{LastEpoch: 5, Directive: directive(5, cluster.PhaseSeeding, &target)}},
			step: stepCancel, phase: v1alpha1.RestoreRestoring, msg: "cancelling directive 5"},
		{name: "deleted once the restored member served: not cancelled, followed to the end", o: restoreObservation{Restore: restoreObj(func(er *v1alpha1.EtcdRestore) {
			committed(er)
			er.DeletionTimestamp = &deleted
		}), Cluster: newEC(nil), Recovery: heal.Status{LastEpoch: 3, Directive: func() *cluster.Directive {
			d := directive(3, cluster.PhaseRejoining, &target)
			d.Ack = ack
			return d
		}()}}, phase: v1alpha1.RestoreRejoining, wantAck: true},
		{name: "deleted, and the cancel withdrew the directive: Failed, cancelled", o: restoreObservation{Restore: restoreObj(func(er *v1alpha1.EtcdRestore) {
			committed(er)
			er.DeletionTimestamp = &deleted
		}), Cluster: newEC(nil), Recovery: heal.Status{LastEpoch: 4, Directive: directive(4, cluster.PhaseFencing, nil)}},
			phase: v1alpha1.RestoreFailed, msg: "cancelled"},
		{name: "seeding: Restoring", o: restoreObservation{Restore: restoreObj(committed), Cluster: newEC(nil),
			Recovery: heal.Status{LastEpoch: 3, Directive: directive(3, cluster.PhaseSeeding, &target)}}, phase: v1alpha1.RestoreRestoring},
		{name: "a restarted directive with the same target is still this restore", o: restoreObservation{Restore: restoreObj(committed), Cluster: newEC(nil),
			Recovery: heal.Status{LastEpoch: 5, Directive: directive(5, cluster.PhaseSeeding, &target)}}, phase: v1alpha1.RestoreRestoring, msg: "restarted"},
		{name: "paused while restoring: says so, goes on", o: restoreObservation{Restore: restoreObj(committed), Cluster: newEC(func(ec *v1alpha1.EtcdCluster) {
			ec.Annotations = map[string]string{v1alpha1.AnnotationPaused: "true"}
		}), Recovery: heal.Status{LastEpoch: 3, Directive: directive(3, cluster.PhaseSeeding, &target)}}, phase: v1alpha1.RestoreRestoring, msg: "is paused"},
		{name: "rejoining: the acknowledgement is recorded", o: restoreObservation{Restore: restoreObj(committed), Cluster: newEC(nil),
			Recovery: heal.Status{LastEpoch: 3, Directive: func() *cluster.Directive {
				d := directive(3, cluster.PhaseRejoining, &target)
				d.Ack = ack
				return d
			}()}}, phase: v1alpha1.RestoreRejoining, wantAck: true},
		{name: "retired: Succeeded", o: restoreObservation{Restore: restoreObj(committed), Cluster: newEC(nil),
			Recovery: heal.Status{LastEpoch: 3, LastRecovery: func() *cluster.Directive {
				d := directive(3, cluster.PhaseRejoining, &target)
				d.Ack = ack
				return d
			}()}}, phase: v1alpha1.RestoreSucceeded, msg: "revision 400, new cluster c2", wantAck: true},
		{name: "acknowledged, then a quorum loss took over: Succeeded", o: restoreObservation{Restore: restoreObj(func(er *v1alpha1.EtcdRestore) {
			committed(er)
			er.Status.RestoredRevision, er.Status.ClusterID = 400, "c2"
		}), Cluster: newEC(nil), Recovery: heal.Status{LastEpoch: 4, Directive: directive(4, cluster.PhaseFencing, nil)}},
			phase: v1alpha1.RestoreSucceeded, msg: "recovering since (directive 4"},
		{name: "another target's directive is not this restore's", o: restoreObservation{Restore: restoreObj(committed), Cluster: newEC(nil),
			Recovery: heal.Status{LastEpoch: 3, Directive: directive(3, cluster.PhaseFencing, &otherTime)}}, phase: v1alpha1.RestoreFailed, msg: "superseded"},
		{name: "cluster deleted during the restore: fails", o: restoreObservation{Restore: restoreObj(committed)},
			phase: v1alpha1.RestoreFailed, msg: "was deleted during the restore"},
		{name: "done and deleted: released", o: restoreObservation{Restore: restoreObj(func(er *v1alpha1.EtcdRestore) {
			er.Status.Phase, er.DeletionTimestamp = v1alpha1.RestoreSucceeded, &deleted
		})}, step: stepRelease, phase: v1alpha1.RestoreSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Now = now
			d := decideRestore(tc.o)
			if d.Step != tc.step || d.Phase != tc.phase || !strings.Contains(d.Message, tc.msg) {
				t.Fatalf("got step %d phase %q message %q; want step %d phase %q message with %q", d.Step, d.Phase, d.Message, tc.step, tc.phase, tc.msg)
			}
			if (d.Ack != nil) != tc.wantAck {
				t.Errorf("ack %+v, want one: %v", d.Ack, tc.wantAck)
			}
			if tc.step == stepCancel && d.Cancel != tc.o.Recovery.Directive.Epoch {
				t.Errorf("cancel epoch %d, want the directive in force, %d", d.Cancel, tc.o.Recovery.Directive.Epoch)
			}
			if d.Epoch != tc.wantEpoch {
				t.Errorf("epoch to record %d, want %d", d.Epoch, tc.wantEpoch)
			}
			if tc.step == stepRequest && (d.Target.Timeline != tc.wantPinTo || d.Target.Revision != 400 || d.Target.Store != "") {
				t.Errorf("target %+v: want revision 400 of timeline %d from the cluster's own store", d.Target, tc.wantPinTo)
			}
		})
	}
}

// TestPinTarget: what the members are told to restore, and what is refused against the full
// snapshot taken first.
func TestPinTarget(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	snapTime := metav1.NewTime(now)
	snap := v1alpha1.RestoreSnapshot{Revision: 500, Timeline: 3, Time: &snapTime}
	r := func(v int64) *int64 { return &v }
	past, future := metav1.NewTime(now.Add(-time.Hour)), metav1.NewTime(now.Add(time.Hour))
	for _, tc := range []struct {
		name    string
		spec    v1alpha1.EtcdRestoreSpec
		checked v1alpha1.RestoreTargetStatus
		want    cluster.RestoreTarget
		err     string
	}{
		{name: "newest: the present timeline", want: cluster.RestoreTarget{Timeline: 3}},
		{name: "revision: the present timeline", spec: v1alpha1.EtcdRestoreSpec{Revision: r(400)}, want: cluster.RestoreTarget{Revision: 400, Timeline: 3}},
		{name: "revision: the timeline the store check found", spec: v1alpha1.EtcdRestoreSpec{Revision: r(400)},
			checked: v1alpha1.RestoreTargetStatus{Timeline: 3}, want: cluster.RestoreTarget{Revision: 400, Timeline: 3}},
		{name: "revision of an older timeline: not bounded by the present", spec: v1alpha1.EtcdRestoreSpec{Revision: r(900), Timeline: r(1)},
			want: cluster.RestoreTarget{Revision: 900, Timeline: 1}},
		{name: "revision beyond the present", spec: v1alpha1.EtcdRestoreSpec{Revision: r(501)}, err: "beyond the present"},
		{name: "time: unpinned unless the store check found its timeline", spec: v1alpha1.EtcdRestoreSpec{Time: &past}, want: cluster.RestoreTarget{Time: past.Time}},
		{name: "time: pinned to the timeline the store check found", spec: v1alpha1.EtcdRestoreSpec{Time: &past},
			checked: v1alpha1.RestoreTargetStatus{Timeline: 2}, want: cluster.RestoreTarget{Time: past.Time, Timeline: 2}},
		{name: "time in the future", spec: v1alpha1.EtcdRestoreSpec{Time: &future}, err: "after the present"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pinTarget(tc.spec, tc.checked, snap)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
