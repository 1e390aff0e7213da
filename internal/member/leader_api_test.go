package member

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	stewardtest "github.com/etcd-steward/steward/internal/testutil"
	"go.uber.org/zap"
)

// TestAPIMoveLeader: POST /v1/leader/move on a real three-member cluster hands leadership to
// the member named (through any member's sidecar), answers who leads now, and refuses with
// 409 and why a target that is not a member.
func TestAPIMoveLeader(t *testing.T) {
	ctx := context.Background()
	ms := stewardtest.Cluster(t, 3)
	spec := cluster.Spec{Name: "c", Token: "t"}
	for i, m := range ms {
		spec.Members = append(spec.Members, cluster.MemberSpec{Name: fmt.Sprintf("m%d", i), ClientURL: m.Endpoint})
	}
	tokPath := filepath.Join(t.TempDir(), "api-token")
	if _, err := sidecarapi.EnsureTokenFile(tokPath); err != nil {
		t.Fatal(err)
	}
	leaderName := func() string {
		for i, m := range ms {
			st, err := m.Client.Status(ctx, m.Endpoint)
			if err == nil && st.Leader == st.Header.MemberId {
				return fmt.Sprintf("m%d", i)
			}
		}
		return ""
	}
	from := leaderName()
	sc, err := New(Config{Name: from, DataDir: filepath.Join(t.TempDir(), "data"), View: staticView{cluster.Snapshot{Spec: spec}},
		APITokens: sidecarapi.NewFile(tokPath), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sc.Handler())
	defer srv.Close()
	cli := sidecarapi.FileClient(tokPath, nil)

	to := "m0"
	if from == "m0" {
		to = "m2"
	}
	var res cluster.MoveLeaderResponse
	if err := cli.PostJSON(ctx, srv.URL+"/v1/leader/move", cluster.MoveLeaderRequest{To: to}, &res); err != nil {
		t.Fatal(err)
	}
	if res.From != from || res.Leader != to || leaderName() != to {
		t.Errorf("answer %+v, leader now %s: want %s -> %s", res, leaderName(), from, to)
	}
	// One request a second: the second is refused with 429 until then.
	stewardtest.Eventually(t, 10*time.Second, "409 for a target that is no member", func() error {
		err := cli.PostJSON(ctx, srv.URL+"/v1/leader/move", cluster.MoveLeaderRequest{To: "nobody"}, &res)
		switch sidecarapi.StatusCode(err) {
		case http.StatusConflict:
			return nil
		case http.StatusTooManyRequests:
			return err
		}
		t.Fatalf("a target that is no member: %v, want 409", err)
		return nil
	})
}
