package operator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/agent"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/restore/restoretest"
	"github.com/etcd-steward/steward/internal/sidecarapi"
)

// TestCheckTargetOfTwoClustersSharingAStore: two clusters back up into one store prefix; the
// check of an EtcdRestore's target, asked of a member's sidecar as the operator asks it (the
// sidecar's own handler, its view of the cluster as the operator's ConfigMap and status give
// it), resolves a time-based and a revision-based restore of each to its own timeline and
// revision, though the other cluster's timeline is the store's newest and holds the time.
func TestCheckTargetOfTwoClustersSharingAStore(t *testing.T) {
	url, cs := restoretest.TwoClusters(t)
	for i, c := range cs {
		ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i), Namespace: "ns", UID: "uid"},
			Spec:   v1alpha1.EtcdClusterSpec{Replicas: 1, Backup: &v1alpha1.BackupSpec{Store: url}},
			Status: v1alpha1.EtcdClusterStatus{ClusterID: strconv.FormatUint(c.ID, 16)}}
		sidecar := httptest.NewServer(http.HandlerFunc(agent.NewService(agent.Config{StoreURL: url},
			agent.Member{Name: ec.Name + "-0", View: memberView(ec)}, zap.NewNop(), nil).HandleResolveTarget))
		defer sidecar.Close()
		tm := metav1.NewTime(c.Time)
		rev := c.Revision
		for _, spec := range []v1alpha1.EtcdRestoreSpec{{Cluster: ec.Name, Time: &tm}, {Cluster: ec.Name, Revision: &rev}} {
			want := cluster.RestoreTarget{Revision: ptrValue(spec.Revision)}
			if spec.Time != nil {
				want.Time = spec.Time.Time
			}
			res, why, err := askTarget(context.Background(), sidecarapi.NewClient(sidecarapi.Static{List: []string{"a-token-of-the-cluster-that-is-long-enough-0123"}}, nil), sidecar.URL, want)
			got, err := checkedTarget(v1alpha1.RestoreTargetStatus{Time: spec.Time, Revision: want.Revision}, url, res, why, err)
			if err != nil {
				t.Fatalf("cluster %d, target %+v: %v", i, spec, err)
			}
			wantChecked := fmt.Sprintf("timeline %d gives revision %d ", c.Timeline, c.Revision)
			if got.Timeline != int64(c.Timeline) || !strings.Contains(got.Checked, wantChecked) {
				t.Fatalf("cluster %d, target %+v: checked %+v; want %q", i, spec, got, wantChecked)
			}
		}
	}
}

func ptrValue(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// staticView is a cluster view that never changes.
type staticView struct{ snap cluster.Snapshot }

// memberView is a member's view of ec as the operator writes it: the ConfigMap's members and
// the status's cluster ID.

func memberView(ec *v1alpha1.EtcdCluster) staticView {
	c := clusterConfig(ec, int(ec.Spec.Replicas))
	spec := cluster.Spec{Name: c.Name, Token: c.Token}
	for _, m := range c.Members {
		spec.Members = append(spec.Members, cluster.MemberSpec{Name: m.Name, PeerURL: m.PeerURL, ClientURL: m.ClientURL, SidecarURL: m.SidecarURL})
	}
	return staticView{cluster.Snapshot{Spec: spec, Status: cluster.Status{ClusterID: ec.Status.ClusterID}}}
}

func (v staticView) Snapshot(context.Context) (cluster.Snapshot, error) { return v.snap, nil }
func (staticView) Watch(ctx context.Context) (<-chan struct{}, error) {
	return make(chan struct{}), nil
}
func (staticView) Report(context.Context, cluster.Report) error                       { return nil }
func (staticView) AckDirective(context.Context, int64, cluster.DirectiveResult) error { return nil }
