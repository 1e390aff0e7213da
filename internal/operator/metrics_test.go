package operator

import (
	"maps"
	"testing"

	"github.com/etcd-steward/steward/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRecordMetricsHibernationAndBackups: a cluster's series say whether it hibernates (its
// members are meant to be down: the alerts on quorum and readiness leave it out), and, with
// spec.backup only, whether its backups are current (condition BackupReady); a cluster whose
// spec.backup goes loses that series.
func TestRecordMetricsHibernationAndBackups(t *testing.T) {
	ec := newDefaultCluster("metrics-unit", "c", 3)
	ec.Spec.Backup = &v1alpha1.BackupSpec{}
	t.Cleanup(func() { forgetMetrics(ec.Namespace, ec.Name) })
	series := func() map[string]float64 {
		s := clusterSeries(t, ec.Namespace, ec.Name)
		return map[string]float64{"hibernating": s["steward_cluster_hibernating"], "backup_ready": s["steward_cluster_backup_ready"]}
	}
	status := &v1alpha1.EtcdClusterStatus{Conditions: []metav1.Condition{{Type: v1alpha1.ConditionBackupReady, Status: metav1.ConditionTrue}}}
	recordMetrics(ec, status, status, nil)
	if got, want := series(), map[string]float64{"hibernating": 0, "backup_ready": 1}; !maps.Equal(got, want) {
		t.Errorf("running, backups current: %v, want %v", got, want)
	}

	hibernating := &v1alpha1.EtcdClusterStatus{Hibernation: &v1alpha1.HibernationStatus{Phase: v1alpha1.HibernationStopped},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionBackupReady, Status: metav1.ConditionFalse}}}
	recordMetrics(ec, status, hibernating, nil)
	if got, want := series(), map[string]float64{"hibernating": 1, "backup_ready": 0}; !maps.Equal(got, want) {
		t.Errorf("hibernating, backups stale: %v, want %v", got, want)
	}

	ec.Spec.Backup = nil
	recordMetrics(ec, hibernating, status, nil)
	if _, ok := clusterSeries(t, ec.Namespace, ec.Name)["steward_cluster_backup_ready"]; ok {
		t.Error("steward_cluster_backup_ready still exported once spec.backup is gone")
	}
}

// TestRecordMetricsFormed: a cluster says it has formed once its status holds an etcd cluster
// ID, so that the quorum alert tells a cluster still forming (no quorum yet) from one that lost
// its quorum.
func TestRecordMetricsFormed(t *testing.T) {
	ec := newDefaultCluster("metrics-unit", "formed", 3)
	t.Cleanup(func() { forgetMetrics(ec.Namespace, ec.Name) })
	series := func() map[string]float64 {
		s := clusterSeries(t, ec.Namespace, ec.Name)
		return map[string]float64{"formed": s["steward_cluster_formed"], "quorate": s["steward_cluster_quorate"]}
	}
	forming := &v1alpha1.EtcdClusterStatus{}
	recordMetrics(ec, forming, forming, nil)
	if _, ok := clusterSeries(t, ec.Namespace, ec.Name)["steward_cluster_formed"]; !ok {
		t.Fatal("no steward_cluster_formed for a cluster still forming, want 0")
	}
	if got, want := series(), map[string]float64{"formed": 0, "quorate": 0}; !maps.Equal(got, want) {
		t.Errorf("forming: %v, want %v", got, want)
	}
	formed := &v1alpha1.EtcdClusterStatus{ClusterID: "c0ffee", Conditions: []metav1.Condition{{Type: v1alpha1.ConditionQuorate, Status: metav1.ConditionTrue}}}
	recordMetrics(ec, forming, formed, nil)
	if got, want := series(), map[string]float64{"formed": 1, "quorate": 1}; !maps.Equal(got, want) {
		t.Errorf("formed: %v, want %v", got, want)
	}
	lost := &v1alpha1.EtcdClusterStatus{ClusterID: "c0ffee", Conditions: []metav1.Condition{{Type: v1alpha1.ConditionQuorate, Status: metav1.ConditionFalse}}}
	recordMetrics(ec, formed, lost, nil)
	if got, want := series(), map[string]float64{"formed": 1, "quorate": 0}; !maps.Equal(got, want) {
		t.Errorf("formed, quorum lost: %v, want %v", got, want)
	}
}
