package operator

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/api/v1alpha1"
)

// TestClusterConfigBackup: the sidecars' configuration carries spec.backup, the restore drill
// schedule included (empty: the sidecar's default).
func TestClusterConfigBackup(t *testing.T) {
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	if c := clusterConfig(ec, 3); c.Backup != nil {
		t.Errorf("no spec.backup: config %+v", c.Backup)
	}
	for _, drill := range []string{"", "off", "0 3 * * *"} {
		ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://b/c", FullSchedule: "@hourly", Retention: "keep", DrillSchedule: drill}
		want := v1alpha1.BackupConfig{Store: "s3://b/c", FullSchedule: "@hourly", DeltaPeriod: "5s", Retention: "keep", DrillSchedule: drill}
		if c := clusterConfig(ec, 3); c.Backup == nil || *c.Backup != want {
			t.Errorf("drill schedule %q: config %+v, want %+v", drill, c.Backup, want)
		}
	}
}
