package operator

import (
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestHoldFigures(t *testing.T) {
	now := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(d)); return &t }
	status := func(rev int64, backup *metav1.Time, ready metav1.ConditionStatus) v1alpha1.EtcdClusterStatus {
		return v1alpha1.EtcdClusterStatus{ObservedGeneration: 1, Revision: rev, LastBackupTime: backup,
			LastDeltaSnapshot: &v1alpha1.SnapshotRef{Revision: rev, Time: *backup},
			Recoverability:    &v1alpha1.Recoverability{Timeline: 1, ClusterID: "c1", FirstRevision: 1, FirstTime: at(-time.Hour), LastRevision: rev, LastTime: backup},
			Conditions:        []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: ready, Reason: "Quorate"}}}
	}
	prev := status(100, at(-10*time.Minute), metav1.ConditionTrue)
	moved := status(180, at(-time.Second), metav1.ConditionTrue)
	for _, c := range []struct {
		name      string
		next      v1alpha1.EtcdClusterStatus
		written   time.Time
		wantWrite bool
	}{
		{"figures moved, written lately: held", moved, now.Add(-10 * time.Minute), false},
		{"figures moved, written past the bound: written", moved, now.Add(-figuresMaxAge), true},
		{"figures moved, never written by this process: written", moved, time.Time{}, true},
		{"a condition changed: written with the figures", status(180, at(-time.Second), metav1.ConditionFalse), now.Add(-time.Minute), true},
		{"the window's start moved (retention): written", func() v1alpha1.EtcdClusterStatus {
			s := moved
			w := *s.Recoverability
			w.FirstRevision = 50
			s.Recoverability = &w
			return s
		}(), now.Add(-time.Minute), true},
		{"the first backup: written", func() v1alpha1.EtcdClusterStatus {
			s := prev
			s.LastFullSnapshot = &v1alpha1.SnapshotRef{Revision: 1}
			return s
		}(), now.Add(-time.Minute), true},
		{"a new generation observed: written", func() v1alpha1.EtcdClusterStatus { s := moved; s.ObservedGeneration = 2; return s }(), now.Add(-time.Minute), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := holdFigures(prev, c.next, c.written, now)
			if write := !equality.Semantic.DeepEqual(got, prev); write != c.wantWrite {
				t.Fatalf("write %v, want %v: got %+v", write, c.wantWrite, got)
			}
			if c.wantWrite && !equality.Semantic.DeepEqual(got, c.next) {
				t.Errorf("a write holds figures back: got %+v, want %+v", got, c.next)
			}
		})
	}
}

func TestTenantSecretsDue(t *testing.T) {
	rest := func() *v1alpha1.EtcdCluster {
		ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Spec: v1alpha1.EtcdClusterSpec{Backup: &v1alpha1.BackupSpec{Store: "s3://b/c"}}}
		ec.Status.ObservedGeneration = 3
		ec.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAllMembersReady, Status: metav1.ConditionTrue}, {Type: v1alpha1.ConditionBackupReady, Status: metav1.ConditionTrue}}
		return ec
	}
	for _, c := range []struct {
		name   string
		change func(*v1alpha1.EtcdCluster)
		want   bool
	}{
		{"at rest", func(*v1alpha1.EtcdCluster) {}, false},
		{"a new generation", func(ec *v1alpha1.EtcdCluster) { ec.Generation++ }, true},
		{"errors recorded", func(ec *v1alpha1.EtcdCluster) {
			ec.Status.LastErrors = []v1alpha1.LastError{{Code: "ERR_BACKUP_SECRET"}}
		}, true},
		{"a member not Ready", func(ec *v1alpha1.EtcdCluster) { ec.Status.Conditions[0].Status = metav1.ConditionFalse }, true},
		{"backups not current", func(ec *v1alpha1.EtcdCluster) { ec.Status.Conditions[1].Status = metav1.ConditionFalse }, true},
		{"no backups", func(ec *v1alpha1.EtcdCluster) {
			ec.Spec.Backup = nil
			ec.Status.Conditions[1].Status = metav1.ConditionFalse
		}, false},
	} {
		ec := rest()
		c.change(ec)
		if got := tenantSecretsDue(ec); got != c.want {
			t.Errorf("%s: tenantSecretsDue %v, want %v", c.name, got, c.want)
		}
	}
}
