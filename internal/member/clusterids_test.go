package member

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/testutil"
)

// TestClusterIDsAreEtcds: the IDs ClusterIDs derives are those etcd gives a cluster it
// bootstraps, and a cluster restored onto one member.
func TestClusterIDsAreEtcds(t *testing.T) {
	e, cli, ep := testutil.EmbeddedEtcd(t)
	peer := e.Config().AdvertisePeerUrls[0].String()
	spec := cluster.Spec{Token: "etcd-cluster", Members: []cluster.MemberSpec{{Name: "test", PeerURL: peer}}}
	if id := testutil.ClusterIDOf(t, cli, ep); !slices.Contains(cluster.IDs(spec, ""), id) {
		t.Fatalf("bootstrapped cluster %x is not among ClusterIDs %x", id, cluster.IDs(spec, ""))
	}

	s := openTestStore(t)
	a, stop := startBackups(t, s, ep)
	waitStored(t, a, cli, ep, 1)
	stop()
	dir := filepath.Join(t.TempDir(), "restored")
	restoredPeer := fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t))
	if _, err := restore.Restore(context.Background(), restore.Options{Store: s, DataDir: dir, Name: "m2",
		InitialCluster: "m2=" + restoredPeer, InitialClusterToken: "tok", PeerURLs: []string{restoredPeer}}); err != nil {
		t.Fatal(err)
	}
	_, rcli, rep, _ := testutil.EtcdOn(t, dir)
	three := cluster.Spec{Token: "tok", Members: []cluster.MemberSpec{{Name: "m0", PeerURL: "http://m0:2380"}, {Name: "m1", PeerURL: "http://m1:2380"}, {Name: "m2", PeerURL: restoredPeer}}}
	if id := testutil.ClusterIDOf(t, rcli, rep); !slices.Contains(cluster.IDs(three, ""), id) {
		t.Fatalf("cluster %x restored onto m2 is not among ClusterIDs %x", id, cluster.IDs(three, ""))
	}
}
