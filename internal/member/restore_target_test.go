package member

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/restore/restoretest"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/testutil"
)

// TestRestoreInPlaceToATimeReadsTheClustersOwnTimeline: two clusters share a store; the seed
// of a restore in place to a time (a target no store check pinned to a timeline) restores
// its own cluster's revision at that time, though the other cluster's timeline is the
// store's newest and holds the time.
func TestRestoreInPlaceToATimeReadsTheClustersOwnTimeline(t *testing.T) {
	url, cs := restoretest.TwoClusters(t)
	s, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, c := range cs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			sc := testSidecar(t, s, cluster.Snapshot{Spec: oneMember(t, "tok"),
				Status: cluster.Status{ClusterID: strconv.FormatUint(c.ID, 16), Voters: []cluster.Voter{{ID: "1", Name: "test"}}},
				Directive: &cluster.Directive{Epoch: 2, Phase: cluster.PhaseSeeding, Mode: cluster.RecoverFromBackup, Seed: "test",
					Restore: &cluster.RestoreTarget{Time: c.Time}}})
			spec, obs, plan := decideOnce(t, sc)
			if plan.Case != "RestoreInPlace" {
				t.Fatalf("plan %+v; want RestoreInPlace", plan)
			}
			cfg, err := sc.act(context.Background(), spec, obs, plan)
			if err != nil {
				t.Fatal(err)
			}
			cli, _ := startFromConfig(t, cfg)
			got, rev := testutil.State(t, cli)
			if rev != c.Revision || !strings.HasPrefix(got["/k/0"].Value, fmt.Sprintf("c%d-", i)) {
				t.Fatalf("restored revision %d (/k/0 = %q), want cluster %d's revision %d", rev, got["/k/0"].Value, i, c.Revision)
			}
		})
	}
}
