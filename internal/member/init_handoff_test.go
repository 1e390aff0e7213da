package member

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/testutil"
)

// TestJoinConfigHandedToNextStart: a join made for an etcd start that stopped before taking
// its configuration (the supervisor held it) is handed to the next start, once and only while
// fresh; anything else, or a configuration already taken, is decided again. Deciding a fresh
// join again removed the learner it had just added and added it once more.
func TestJoinConfigHandedToNextStart(t *testing.T) {
	token := "a-token-of-the-cluster-that-is-long-enough-0123"
	spec := cluster.Spec{Name: "c", Token: "t", Members: []cluster.MemberSpec{{Name: "m1", ClientURL: "http://127.0.0.1:1", PeerURL: "http://127.0.0.1:2"}}}
	c := sidecarapi.NewClient(sidecarapi.Static{List: []string{token}}, nil)
	for _, tc := range []struct {
		name     string
		action   Action
		age      time.Duration
		taken    bool
		handedOn bool
	}{
		{"a fresh join nobody took", ActionJoinAsLearner, time.Second, false, true},
		{"a join already taken by a start", ActionJoinAsLearner, time.Second, true, false},
		{"a join older than joinConfigFresh", ActionJoinAsLearner, joinConfigFresh + time.Second, false, false},
		{"a restart nobody took (made for data that may have gone)", ActionRestart, time.Second, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := New(Config{Name: "m1", DataDir: t.TempDir(), View: staticView{cluster.Snapshot{Spec: spec}},
				APITokens: sidecarapi.Static{List: []string{token}}, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			sc.mu.Lock()
			sc.status = etcdproc.InitStatus{State: etcdproc.InitSucceeded, Case: "QuorumLossFollowerRejoin"}
			sc.plan = &Plan{Case: "QuorumLossFollowerRejoin", Action: tc.action}
			sc.config, sc.configTaken, sc.succeededAt = []byte("name: m1\n"), tc.taken, time.Now().Add(-tc.age)
			sc.mu.Unlock()
			srv := httptest.NewServer(sc.Handler())
			defer srv.Close()
			// An initialisation a POST starts (a bootstrap here) writes into the data dir:
			// it ends before the dir is removed.
			t.Cleanup(func() {
				err := testutil.Poll(10*time.Second, 50*time.Millisecond, func() error {
					sc.mu.Lock()
					defer sc.mu.Unlock()
					if sc.status.State == etcdproc.InitRunning {
						return errors.New("the initialisation still runs")
					}
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			})

			// The answer is the state the POST left: running for a new initialisation.
			st := postInit(t, c, srv.URL)
			if handedOn := st.State == etcdproc.InitSucceeded; handedOn != tc.handedOn {
				t.Fatalf("POST /v1/init answered %+v; handed on: %t, want %t", st, handedOn, tc.handedOn)
			}
			if !tc.handedOn {
				return
			}
			cfg, err := c.Call(context.Background(), http.MethodGet, srv.URL+"/v1/config")
			if err != nil || string(cfg) != "name: m1\n" {
				t.Fatalf("GET /v1/config: %q %v", cfg, err)
			}
			// Taken once: the start after it decides again.
			if st := postInit(t, c, srv.URL); st.State != etcdproc.InitRunning {
				t.Fatalf("a second start was answered %+v; want a new initialisation (running)", st)
			}
		})
	}
}

// postInit asks for an initialisation, again while the route's one-a-second limit refuses it,
// and returns the state the answer reports.
func postInit(t *testing.T, c *sidecarapi.Client, url string) etcdproc.InitStatus {
	t.Helper()
	var b []byte
	var err error
	limited := testutil.Poll(10*time.Second, 100*time.Millisecond, func() error {
		b, err = c.Call(context.Background(), http.MethodPost, url+"/v1/init")
		if sidecarapi.StatusCode(err) == http.StatusTooManyRequests {
			return err
		}
		return nil
	})
	if limited != nil || err != nil {
		t.Fatal(cmp.Or(limited, err))
	}
	var st etcdproc.InitStatus
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("POST /v1/init answered %q: %v", b, err)
	}
	return st
}
