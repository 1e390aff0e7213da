package operator

import (
	"strings"
	"testing"

	"github.com/etcd-steward/steward/api/v1alpha1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Conditions say which spec they were computed for: the generation of this pass, not the one
// the previous status was written for.
func TestConditionsCarryTheirGeneration(t *testing.T) {
	w := healthy(3)
	w.o.Previous.ObservedGeneration, w.o.Generation = 4, 5
	d := Decide(w.o)
	if len(d.Conditions) == 0 {
		t.Fatal("no conditions")
	}
	for _, c := range d.Conditions {
		if c.ObservedGeneration != 5 {
			t.Errorf("%s: observedGeneration %d, want 5 (the generation decided for)", c.Type, c.ObservedGeneration)
		}
	}
}

// A cluster that has not formed has lost no quorum: Ready says it is bootstrapping. A formed
// cluster without a majority has lost its quorum.
func TestReadyWhileBootstrapping(t *testing.T) {
	w := healthy(3)
	w.o.Formed, w.o.Previous = false, v1alpha1.EtcdClusterStatus{}
	for i := range w.o.Members {
		w.o.Members[i].Pod, w.o.Members[i].Lease = &PodState{Created: t0}, nil
	}
	d := Decide(w.o)
	for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionProgressing} {
		c := apimeta.FindStatusCondition(d.Conditions, typ)
		if c == nil || c.Reason != ReasonBootstrapping {
			t.Errorf("bootstrapping: %s is %+v, want reason %s", typ, c, ReasonBootstrapping)
		}
	}
	if cond(d, v1alpha1.ConditionReady) != metav1.ConditionFalse {
		t.Errorf("bootstrapping: Ready %s, want False", cond(d, v1alpha1.ConditionReady))
	}

	w = healthy(3).podNotReady(1, 0).podNotReady(2, 0)
	if c := apimeta.FindStatusCondition(Decide(w.o).Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "QuorumLost" {
		t.Errorf("formed, 1 of 3 Ready: Ready is %+v, want False, reason QuorumLost", c)
	}
}

// A pass whose sync failed is still progressing, and says which step failed.
func TestSyncFailedCondition(t *testing.T) {
	errs := []v1alpha1.LastError{
		{Code: "ERR_SYNC_STATEFULSET", Description: "the member pods are not created before the cluster's certificates"},
		{Code: "ERR_SYNC_PDB", Description: "forbidden"},
	}
	c := syncFailedCondition(errs, 7, t0)
	if c.Type != v1alpha1.ConditionProgressing || c.Status != metav1.ConditionTrue || c.Reason != ReasonSyncFailed || c.ObservedGeneration != 7 {
		t.Errorf("condition %+v, want Progressing True, reason %s, generation 7", c, ReasonSyncFailed)
	}
	for _, part := range []string{"ERR_SYNC_STATEFULSET: the member pods are not created", "1 more in status.lastErrors"} {
		if !strings.Contains(c.Message, part) {
			t.Errorf("message %q lacks %q", c.Message, part)
		}
	}
}

// What only the operator can check: schedules (no CEL function parses cron) and the quota
// against the volume. Each problem names its field.
func TestSpecProblem(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	base := func() v1alpha1.EtcdClusterSpec {
		return v1alpha1.EtcdClusterSpec{Replicas: 3, Storage: v1alpha1.StorageSpec{Size: q("8Gi")},
			Backup:      &v1alpha1.BackupSpec{Store: "s3://b/p", FullSchedule: "@hourly", DrillSchedule: "0 3 * * *"},
			Maintenance: &v1alpha1.MaintenanceSpec{DefragSchedule: "@every 30m"}}
	}
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.EtcdClusterSpec)
		want   string // "" = valid
	}{
		{"valid", func(*v1alpha1.EtcdClusterSpec) {}, ""},
		{"nothing set", func(s *v1alpha1.EtcdClusterSpec) { *s = v1alpha1.EtcdClusterSpec{Replicas: 1} }, ""},
		{"drills and defragmentation off", func(s *v1alpha1.EtcdClusterSpec) { s.Backup.DrillSchedule, s.Maintenance.DefragSchedule = "off", "off" }, ""},
		{"full schedule of 4 fields", func(s *v1alpha1.EtcdClusterSpec) { s.Backup.FullSchedule = "0 * * *" }, "spec.backup.fullSchedule \"0 * * *\" is not a cron schedule"},
		{"full snapshots cannot be off", func(s *v1alpha1.EtcdClusterSpec) { s.Backup.FullSchedule = "off" }, "spec.backup.fullSchedule"},
		{"drill schedule unreadable", func(s *v1alpha1.EtcdClusterSpec) { s.Backup.DrillSchedule = "daily" }, "spec.backup.drillSchedule \"daily\""},
		{"defragmentation schedule out of range", func(s *v1alpha1.EtcdClusterSpec) { s.Maintenance.DefragSchedule = "61 * * * *" }, "spec.maintenance.defragSchedule"},
		{"quota within the volume", func(s *v1alpha1.EtcdClusterSpec) { s.Etcd.QuotaBackendBytes = q("6Gi") }, ""},
		{"quota larger than the volume", func(s *v1alpha1.EtcdClusterSpec) { s.Etcd.QuotaBackendBytes = q("16Gi") },
			"spec.etcd.quotaBackendBytes 16Gi is larger than each member's volume (spec.storage.size 8Gi)"},
		{"negative quota", func(s *v1alpha1.EtcdClusterSpec) { s.Etcd.QuotaBackendBytes = q("-1") }, "spec.etcd.quotaBackendBytes -1: give a positive size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := base()
			tc.change(&spec)
			err := specProblem(spec)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestOwnStatusWriteWakesNothing: a change of the EtcdCluster's status alone (the operator's
// own write) does not wake its reconciliation; any change of its spec or metadata does.
func TestOwnStatusWriteWakesNothing(t *testing.T) {
	old := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "main", ResourceVersion: "10", Generation: 2,
		Annotations: map[string]string{"a": "1"}, Finalizers: []string{Finalizer}}, Spec: v1alpha1.EtcdClusterSpec{Replicas: 3}}
	for _, c := range []struct {
		name   string
		change func(*v1alpha1.EtcdCluster)
		wakes  bool
	}{
		{"status written", func(ec *v1alpha1.EtcdCluster) {
			ec.Status.Revision, ec.Status.ReadyMembers = 1234, "3/3"
			ec.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "steward", Subresource: "status"}}
		}, false},
		{"spec changed", func(ec *v1alpha1.EtcdCluster) { ec.Spec.Replicas, ec.Generation = 5, 3 }, true},
		{"annotation set", func(ec *v1alpha1.EtcdCluster) { ec.Annotations[v1alpha1.AnnotationPaused] = "true" }, true},
		{"label set", func(ec *v1alpha1.EtcdCluster) { ec.Labels = map[string]string{"team": "a"} }, true},
		{"being deleted", func(ec *v1alpha1.EtcdCluster) { now := metav1.Now(); ec.DeletionTimestamp = &now }, true},
		{"finalizer removed", func(ec *v1alpha1.EtcdCluster) { ec.Finalizers = nil }, true},
	} {
		cur := old.DeepCopy()
		cur.ResourceVersion = "11"
		c.change(cur)
		if got := clusterChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != c.wakes {
			t.Errorf("%s: wakes the reconciliation = %v, want %v", c.name, got, c.wakes)
		}
	}
}
