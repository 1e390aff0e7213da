package cluster_test

import (
	"slices"
	"testing"

	"github.com/etcd-steward/steward/internal/cluster"
)

func TestClusterIDs(t *testing.T) {
	three := cluster.Spec{Token: "tok", Members: []cluster.MemberSpec{{Name: "m0", PeerURL: "http://m0:2380"}, {Name: "m1", PeerURL: "http://m1:2380"}, {Name: "m2", PeerURL: "http://m2:2380"}}}
	other := three
	other.Token = "other"
	ids := cluster.IDs(three, "")
	// Bootstrapped with 1, 2 or 3 members; restored onto m1 or m2 (onto m0 is the
	// one-member bootstrap).
	if len(ids) != 5 {
		t.Fatalf("ClusterIDs = %x; want 5 distinct IDs", ids)
	}
	for _, id := range cluster.IDs(other, "") {
		if slices.Contains(ids, id) {
			t.Fatalf("cluster ID %x of token %q is also one of token %q's", id, other.Token, three.Token)
		}
	}
	if got := cluster.IDs(three, "abc"); got[0] != 0xabc || len(got) != 6 {
		t.Fatalf("ClusterIDs with status ID abc = %x; want abc first, then the 5", got)
	}
	if got := cluster.IDs(cluster.Spec{Token: "tok", Members: []cluster.MemberSpec{{Name: "bad", PeerURL: "::"}}}, "not hex"); len(got) != 0 {
		t.Fatalf("ClusterIDs of a spec without usable URLs or status ID = %x; want none", got)
	}
}
