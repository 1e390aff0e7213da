package member

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/testutil"
)

// reportingView is a view that never changes and keeps the reports it is given.
type reportingView struct {
	staticView
	mu      sync.Mutex
	reports []cluster.Report
}

func (v *reportingView) Report(_ context.Context, r cluster.Report) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.reports = append(v.reports, r)
	return nil
}

func (v *reportingView) newest() (cluster.Report, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.reports) == 0 {
		return cluster.Report{}, false
	}
	return v.reports[len(v.reports)-1], true
}

// TestFreshReport: GET /v1/report?fresh=1 answers with a report made after the request, and
// one the view has taken, where the plain GET answers with the last report made.
func TestFreshReport(t *testing.T) {
	token := "a-token-of-the-cluster-that-is-long-enough-0123"
	view := &reportingView{staticView: staticView{snap: cluster.Snapshot{Spec: oneMember(t, "tok")}}}
	sc, err := New(Config{Name: "test", DataDir: t.TempDir(), View: view,
		APITokens: sidecarapi.Static{List: []string{token}}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- sc.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-served })
	url := "http://" + ln.Addr().String() + "/v1/report"
	c := sidecarapi.NewClient(sidecarapi.Static{List: []string{token}}, nil)

	var last cluster.Report
	testutil.Eventually(t, 10*time.Second, "the first report", func() error {
		return c.GetJSON(ctx, url, &last)
	})
	asked := time.Now()
	var fresh cluster.Report
	if err := c.GetJSON(ctx, url+"?fresh=1", &fresh); err != nil {
		t.Fatal(err)
	}
	if fresh.Name != "test" || fresh.At.Before(asked) {
		t.Fatalf("fresh report of %q made at %s, asked at %s (the last one was made at %s)", fresh.Name, fresh.At, asked, last.At)
	}
	taken, ok := view.newest()
	if !ok || taken.At.Before(asked) {
		t.Fatalf("the view's newest report was made at %s (found %t), before the request at %s", taken.At, ok, asked)
	}
}
