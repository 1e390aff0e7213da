package operator

import (
	"fmt"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/testutil"
	dto "github.com/prometheus/client_model/go"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// clusterSeries are the values of the operator's series of one cluster, by metric name (and
// code, for the error counter).
func clusterSeries(t *testing.T, ns, name string) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] != ns || labels["cluster"] != name {
				continue
			}
			key := f.GetName()
			if code := labels["code"]; code != "" {
				key += "/" + code
			}
			out[key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return 0
}

// TestOperatorMetrics: a cluster's series follow its status (members, voters, formed, quorum,
// leader, hibernation), its error counters exist at 0 from the first pass, a cluster without backups
// has no backup readiness, and its series go with the cluster.
func TestOperatorMetrics(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	if err := k8s.Create(t.Context(), newCluster(ns, "m", 3)); err != nil {
		t.Fatal(err)
	}
	waitStatefulSet(t, ns, "m")
	waitReady(t, ns, "m", 3)
	testutil.Eventually(t, 30*time.Second, "the cluster's series", func() error {
		members(t, ns, "m", all)
		s := clusterSeries(t, ns, "m")
		for name, want := range map[string]float64{
			"steward_cluster_replicas": 3, "steward_cluster_ready_members": 3, "steward_cluster_has_leader": 1,
			"steward_cluster_leader_changes_total": 0, "steward_cluster_reconcile_errors_total/ERR_SYNC_STATEFULSET": 0,
			"steward_cluster_hibernating": 0, "steward_cluster_formed": 1,
		} {
			if got, ok := s[name]; !ok || got != want {
				return fmt.Errorf("%s = %v (exported: %v), want %v; all: %v", name, got, ok, want, s)
			}
		}
		if got, ok := s["steward_cluster_backup_ready"]; ok {
			return fmt.Errorf("steward_cluster_backup_ready = %v for a cluster without backups, want no series", got)
		}
		return nil
	})
	deleteCluster(t, ns, "m", 30*time.Second)
	if s := clusterSeries(t, ns, "m"); len(s) != 0 {
		t.Errorf("series of the deleted cluster left: %v", s)
	}
}
