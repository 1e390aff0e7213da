package operator

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
)

// probeTimeout bounds each member's answer to the quorum probe.
const probeTimeout = 3 * time.Second

// answeringMember asks each member's etcd, directly and now, for /readyz on its health
// port, which answers 200 only when a linearizable read succeeds there: one member that
// answers proves the quorum serves. It is the operator's own fresh evidence before it fences
// for a lost quorum; Leases, pod readiness and reports are all second-hand and may be stale.
// It returns the first member that answered, or "" and why none did.
func (r *ClusterReconciler) answeringMember(ctx context.Context, ec *v1alpha1.EtcdCluster, members []MemberObservation) (string, string) {
	hc := r.Health
	if hc == nil {
		hc = &http.Client{Timeout: probeTimeout}
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var (
		mu       sync.Mutex
		answered string
		why      []string
		wg       sync.WaitGroup
	)
	for _, m := range members {
		wg.Go(func() {
			err := readyz(ctx, hc, fmt.Sprintf("http://%s:%d/readyz", memberDNS(ec, m.Ordinal), HealthPort))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && answered == "":
				answered = m.Name
			case err != nil:
				why = append(why, fmt.Sprintf("%s: %v", m.Name, err))
			}
		})
	}
	wg.Wait()
	return answered, strings.Join(why, "; ")
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
