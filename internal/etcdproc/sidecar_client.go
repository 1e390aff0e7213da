package etcdproc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"go.uber.org/zap"
)

// InitStatus is the body of the sidecar's `GET /v1/init`.
type InitStatus struct {
	State   string `json:"state"` // new | running | succeeded | failed
	Message string `json:"message,omitempty"`
	Case    string `json:"case,omitempty"`
}

// Initialisation states reported by the sidecar.
const (
	InitNew       = "new"
	InitRunning   = "running"
	InitSucceeded = "succeeded"
	InitFailed    = "failed"
)

// ConfigFromSidecar asks the sidecar at base to initialise this member, waits until it has,
// and returns the etcd configuration it generated. It keeps retrying while the sidecar is
// unreachable (it may still be starting) until ctx ends. hc calls it with the cluster's
// sidecar API token (and, with TLS, its CAs); a refused token is reported at once, then
// retried (a rotation may be under way).
func ConfigFromSidecar(ctx context.Context, lg *zap.Logger, base string, hc *sidecarapi.Client) ([]byte, error) {
	base = strings.TrimRight(base, "/")
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()

	requested := false
	var last string
	for {
		if !requested {
			_, err := hc.Call(ctx, http.MethodPost, base+"/v1/init")
			requested = err == nil
			if err != nil {
				if code := sidecarapi.StatusCode(err); (code == http.StatusUnauthorized || code == http.StatusForbidden) && err.Error() != last {
					lg.Error("the sidecar refused this member's API token; retrying", zap.Error(err))
				}
				last = err.Error()
			}
		} else {
			var st InitStatus
			if err := hc.GetJSON(ctx, base+"/v1/init", &st); err != nil {
				last = err.Error()
			} else {
				switch st.State {
				case InitSucceeded:
					return hc.Call(ctx, http.MethodGet, base+"/v1/config")
				case InitFailed:
					return nil, fmt.Errorf("sidecar %s failed to initialise this member: %s", base, st.Message)
				case InitNew:
					requested = false // the sidecar restarted and forgot the request
				default:
					if st.Message != last && st.Message != "" {
						lg.Info("waiting for sidecar initialisation", zap.String("message", st.Message))
					}
					last = st.Message
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for sidecar %s to initialise this member (last: %s): %w", base, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// FullSnapshot asks the sidecar at base for a full snapshot now (POST /v1/snapshots/full; a
// sidecar that is not the backup leader forwards it to the leader's) and returns once the
// snapshot is stored, or ctx ends.
func FullSnapshot(ctx context.Context, c *sidecarapi.Client, base string) (snapshotter.FullResult, error) {
	var res snapshotter.FullResult
	b, err := c.Call(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/v1/snapshots/full")
	if err != nil {
		return res, fmt.Errorf("full snapshot through sidecar %s: %w", base, err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return res, fmt.Errorf("full snapshot through sidecar %s: unreadable answer: %w", base, err)
	}
	return res, nil
}
