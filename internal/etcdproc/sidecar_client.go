package etcdproc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

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
// unreachable (it may still be starting) until ctx ends.
func ConfigFromSidecar(ctx context.Context, lg *zap.Logger, base string) ([]byte, error) {
	base = strings.TrimRight(base, "/")
	hc := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()

	requested := false
	var last string
	for {
		if !requested {
			resp, err := hc.Post(base+"/v1/init", "application/json", nil)
			if err == nil {
				drain(resp)
				requested = resp.StatusCode < 300
				if !requested {
					last = fmt.Sprintf("POST /v1/init answered %s", resp.Status)
				}
			} else {
				last = err.Error()
			}
		} else {
			var st InitStatus
			if err := getJSON(ctx, hc, base+"/v1/init", &st); err != nil {
				last = err.Error()
			} else {
				switch st.State {
				case InitSucceeded:
					return getBody(ctx, hc, base+"/v1/config")
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

func getJSON(ctx context.Context, hc *http.Client, url string, v any) error {
	b, err := getBody(ctx, hc, url)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func getBody(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
}
