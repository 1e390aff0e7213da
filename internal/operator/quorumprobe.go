package operator

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
)

// probeTimeout bounds each member's answer to the quorum probe.
const probeTimeout = 3 * time.Second

// askMembers asks each member's etcd, directly and now, for /readyz on its health port, which
// answers 200 only when a linearizable read succeeds there: a member that answers proves the
// quorum serves, and a quorum that does not proves it is lost. It is the operator's own fresh
// evidence before it stops a member (Observation.Answers); Leases, pod readiness and reports
// are all second-hand and may be stale. why says what those that did not answer said.
func (r *ClusterReconciler) askMembers(ctx context.Context, ec *v1alpha1.EtcdCluster, members []MemberObservation) (answers map[string]bool, why string) {
	hc := r.Health
	if hc == nil {
		hc = &http.Client{Timeout: probeTimeout}
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var (
		mu      sync.Mutex
		reasons []string
		wg      sync.WaitGroup
	)
	answers = map[string]bool{}
	for _, m := range members {
		wg.Go(func() {
			err := readyz(ctx, hc, fmt.Sprintf("http://%s:%d/readyz", memberDNS(ec, m.Ordinal), HealthPort))
			mu.Lock()
			defer mu.Unlock()
			answers[m.Name] = err == nil
			if err != nil {
				reasons = append(reasons, fmt.Sprintf("%s: %v", m.Name, err))
			}
		})
	}
	wg.Wait()
	slices.Sort(reasons)
	return answers, strings.Join(reasons, "; ")
}

func readyz(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}
