package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// TestRecoverabilityFromTheBackupLeader: status.recoverability is the window the backup
// leader's sidecar reports in its EtcdMember; a window of another cluster ID, or one of a
// member that does not lead, is never taken.
func TestRecoverabilityFromTheBackupLeader(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	ec := newCluster(ns, "rec", 3)
	ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://backups/rec"}
	if err := k8s.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	waitStatefulSet(t, ns, "rec")
	waitReady(t, ns, "rec", 3) // rec-0 leads, and its report says cluster c1
	at := time.Now().Truncate(time.Second)
	window := func(clusterID string, first, last int64) *v1alpha1.Recoverability {
		ft, lt := metav1.NewTime(at.Add(-time.Hour)), metav1.NewTime(at)
		return &v1alpha1.Recoverability{Timeline: 1, ClusterID: clusterID, FirstRevision: first, FirstTime: &ft, LastRevision: last, LastTime: &lt}
	}
	// account writes a member's account of its backups, as its sidecar does.
	account := func(member string, w *v1alpha1.Recoverability) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var em v1alpha1.EtcdMember
			if err := get(t, ns, member, &em); err != nil {
				return err
			}
			em.Status.Backup = &v1alpha1.MemberBackup{Ready: true, Recoverable: w}
			return k8s.Status().Update(ctx, &em)
		}); err != nil {
			t.Fatal(err)
		}
	}
	is := func(want *v1alpha1.Recoverability) func() error {
		return func() error {
			members(t, ns, "rec", all)
			if got := getCluster(t, ns, "rec").Status.Recoverability; !equality.Semantic.DeepEqual(got, want) {
				return fmt.Errorf("status.recoverability %+v; want %+v", got, want)
			}
			return nil
		}
	}

	account("rec-0", window("c1", 100, 200))
	testutil.Eventually(t, 30*time.Second, "the backup leader's window in the status", is(window("c1", 100, 200)))
	out, err := kubectl(t, "-n", ns, "get", "ec", "rec")
	lines := strings.Split(out, "\n")
	if col := strings.Index(lines[0], "RECOVERABLE SINCE"); err != nil || col < 0 || len(lines) < 2 || len(lines[1]) <= col ||
		!slices.Contains([]string{"59m", "60m", "61m"}, strings.Fields(lines[1][col:])[0]) {
		t.Fatalf("kubectl get ec: want RECOVERABLE SINCE an hour ago (%v):\n%s", err, out)
	}

	account("rec-0", window("beef", 1, 5))
	account("rec-1", window("c1", 300, 400))
	testutil.Throughout(t, 5*time.Second, "the window kept: the leader's new one is of another cluster ID, and rec-1 does not lead",
		is(window("c1", 100, 200)))

	account("rec-0", window("c1", 150, 250))
	testutil.Eventually(t, 30*time.Second, "the backup leader's next window in the status", is(window("c1", 150, 250)))
}
