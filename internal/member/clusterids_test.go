package member

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/testutil"
)

func clusterIDOf(t *testing.T, cli *clientv3.Client, ep string) uint64 {
	t.Helper()
	st, err := cli.Status(context.Background(), ep)
	if err != nil {
		t.Fatal(err)
	}
	return st.Header.ClusterId
}

// TestClusterIDsAreEtcds: the IDs ClusterIDs derives are those etcd gives a cluster it
// bootstraps, and a cluster restored onto one member.
func TestClusterIDsAreEtcds(t *testing.T) {
	e, cli, ep := testutil.EmbeddedEtcd(t)
	peer := e.Config().AdvertisePeerUrls[0].String()
	spec := ClusterSpec{Token: "etcd-cluster", Members: []MemberSpec{{Name: "test", PeerURL: peer}}}
	if id := clusterIDOf(t, cli, ep); !slices.Contains(ClusterIDs(spec, ""), id) {
		t.Fatalf("bootstrapped cluster %x is not among ClusterIDs %x", id, ClusterIDs(spec, ""))
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
	three := ClusterSpec{Token: "tok", Members: []MemberSpec{{Name: "m0", PeerURL: "http://m0:2380"}, {Name: "m1", PeerURL: "http://m1:2380"}, {Name: "m2", PeerURL: restoredPeer}}}
	if id := clusterIDOf(t, rcli, rep); !slices.Contains(ClusterIDs(three, ""), id) {
		t.Fatalf("cluster %x restored onto m2 is not among ClusterIDs %x", id, ClusterIDs(three, ""))
	}
}

func TestClusterIDs(t *testing.T) {
	three := ClusterSpec{Token: "tok", Members: []MemberSpec{{Name: "m0", PeerURL: "http://m0:2380"}, {Name: "m1", PeerURL: "http://m1:2380"}, {Name: "m2", PeerURL: "http://m2:2380"}}}
	other := three
	other.Token = "other"
	ids := ClusterIDs(three, "")
	// Bootstrapped with 1, 2 or 3 members; restored onto m1 or m2 (onto m0 is the
	// one-member bootstrap).
	if len(ids) != 5 {
		t.Fatalf("ClusterIDs = %x; want 5 distinct IDs", ids)
	}
	for _, id := range ClusterIDs(other, "") {
		if slices.Contains(ids, id) {
			t.Fatalf("cluster ID %x of token %q is also one of token %q's", id, other.Token, three.Token)
		}
	}
	if got := ClusterIDs(three, "abc"); got[0] != 0xabc || len(got) != 6 {
		t.Fatalf("ClusterIDs with status ID abc = %x; want abc first, then the 5", got)
	}
	if got := ClusterIDs(ClusterSpec{Token: "tok", Members: []MemberSpec{{Name: "bad", PeerURL: "::"}}}, "not hex"); len(got) != 0 {
		t.Fatalf("ClusterIDs of a spec without usable URLs or status ID = %x; want none", got)
	}
}
