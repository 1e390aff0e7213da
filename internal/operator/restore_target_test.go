package operator

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/restore/restoretest"
	"github.com/etcd-steward/steward/internal/testutil"
)

// TestCheckTargetOfTwoClustersSharingAStore: two clusters back up into one store prefix; the
// check of an EtcdRestore's target against the store resolves a time-based and a
// revision-based restore of each to its own timeline and revision, though the other
// cluster's timeline is the store's newest and holds the time.
func TestCheckTargetOfTwoClustersSharingAStore(t *testing.T) {
	steward, err := testutil.BuildSteward()
	if err != nil {
		t.Fatal(err)
	}
	url, cs := restoretest.TwoClusters(t)
	r := &RestoreReconciler{Steward: steward}
	for i, c := range cs {
		ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i), Namespace: "ns", UID: "uid"},
			Spec:   v1alpha1.EtcdClusterSpec{Replicas: 1, Backup: &v1alpha1.BackupSpec{Store: url}},
			Status: v1alpha1.EtcdClusterStatus{ClusterID: strconv.FormatUint(c.ID, 16)}}
		// The full snapshot taken first: the present of the cluster's own timeline.
		snap := v1alpha1.RestoreSnapshot{Key: "present", Timeline: int64(c.Timeline), Revision: c.Newest}
		tm := metav1.NewTime(c.Time)
		rev := c.Revision
		for _, spec := range []v1alpha1.EtcdRestoreSpec{{Cluster: ec.Name, Time: &tm}, {Cluster: ec.Name, Revision: &rev}} {
			got, err := r.checkTarget(context.Background(), ec, spec, snap)
			if err != nil {
				t.Fatalf("cluster %d, target %+v: %v", i, spec, err)
			}
			want := fmt.Sprintf("timeline %d gives revision %d ", c.Timeline, c.Revision)
			if got.Timeline != int64(c.Timeline) || !strings.Contains(got.Checked, want) {
				t.Fatalf("cluster %d, target %+v: checked %+v; want %q", i, spec, got, want)
			}
		}
	}
}
