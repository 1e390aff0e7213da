package localdir

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

type testRequest struct {
	Header
	Member string `json:"member"`
}

// TestAskTake: a request left by Ask is what Take reads; Ask returns once its answer is
// seen, a second request of the kind is refused while one waits, and an unreadable request
// is removed by Take.
func TestAskTake(t *testing.T) {
	d := Dir(t.TempDir())
	if err := os.MkdirAll(d.Run(), 0o700); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	answer := ""
	go func() { // the supervisor's poll, with a deadline
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); <-tick.C {
			req, ok, err := Take[testRequest](d, RestartKind)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				if req.Member != "m1" || req.Expired(time.Now()) {
					t.Errorf("request %+v", req)
				}
				if err := Ask(context.Background(), d, RestartKind, func(h Header) testRequest { return testRequest{Header: h} }, nil); err == nil || !strings.Contains(err.Error(), "another restart request") {
					t.Errorf("a second request while one waits: %v", err)
				}
				mu.Lock()
				answer = req.ID
				mu.Unlock()
				d.Done(RestartKind)
				return
			}
		}
		t.Error("no request to take within a minute")
	}()
	err := Ask(context.Background(), d, RestartKind, func(h Header) testRequest { return testRequest{Header: h, Member: "m1"} }, func(id string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return answer == id, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if d.Pending(RestartKind) {
		t.Fatal("the answered request is still there")
	}

	if err := os.WriteFile(d.Request(RestoreKind), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := Take[Header](d, RestoreKind); ok || err == nil || d.Pending(RestoreKind) {
		t.Fatalf("an unreadable request: ok %t, err %v, still there %t", ok, err, d.Pending(RestoreKind))
	}
}
