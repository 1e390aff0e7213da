package etcdproc_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/member"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

type staticView struct {
	spec   cluster.Spec
	status cluster.Status
}

// staticView is a cluster view that never changes: a fixed spec and status, no directive.
func (v staticView) Snapshot(context.Context) (cluster.Snapshot, error) {
	return cluster.Snapshot{Version: "1", Spec: v.spec, Status: v.status}, nil
}
func (v staticView) Watch(ctx context.Context) (<-chan struct{}, error) {
	return make(chan struct{}), nil // nothing ever changes
}
func (v staticView) Report(context.Context, cluster.Report) error { return nil }
func (v staticView) AckDirective(context.Context, int64, cluster.DirectiveResult) error {
	return nil
}

func httpStatus(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func httpBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// apiTokens is the sidecar API token of these tests' clusters.
var apiTokens = sidecarapi.Static{List: []string{strings.Repeat("k", sidecarapi.MinTokenLen)}, From: "the test's token"}

// apiStatus is the status of an authenticated request to the sidecar API.
func apiStatus(method, url string) int {
	_, err := sidecarapi.NewClient(apiTokens, nil).Call(context.Background(), method, url)
	if err != nil {
		return sidecarapi.StatusCode(err)
	}
	return http.StatusOK
}

// TestMemberStartsThroughSidecar runs the handshake steward etcd does with its sidecar:
// POST /v1/init, wait, GET /v1/config, start; then /readyz, etcd's /metrics beside it, a clean
// stop and its marker, and a restart on the same data that the sidecar recognises as a restart.
func TestMemberStartsThroughSidecar(t *testing.T) {
	dataDir := t.TempDir()
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t))
	view := staticView{spec: cluster.Spec{Name: "t", Token: "t-token",
		Members: []cluster.MemberSpec{{Name: "m0", ClientURL: clientURL, PeerURL: fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t))}}}}
	sc, err := member.New(member.Config{Name: "m0", DataDir: dataDir, View: view, Etcd: etcdproc.Config{LogLevel: "error"}, APITokens: apiTokens})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(sc.Handler())
	defer api.Close()

	if code := apiStatus("GET", api.URL+"/v1/config"); code != http.StatusConflict {
		t.Fatalf("GET /v1/config before init: %d, want 409", code)
	}

	start := func(wantCase string) (stop func()) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		b, err := etcdproc.ConfigFromSidecar(ctx, zap.NewNop(), api.URL, sidecarapi.NewClient(apiTokens, &http.Client{Timeout: 5 * time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		body, err := sidecarapi.NewClient(apiTokens, nil).Call(ctx, "GET", api.URL+"/v1/init")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), `"case":"`+wantCase+`"`) {
			t.Fatalf("init status %s; want case %s", body, wantCase)
		}
		cfg, err := etcdproc.LoadConfigBytes(b)
		if err != nil {
			t.Fatal(err)
		}
		cfg.LogLevel = "error"
		health := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
		done := make(chan error, 1)
		go func() { done <- etcdproc.Run(ctx, etcdproc.Options{Config: cfg, HealthListen: health}) }()
		testutil.Eventually(t, 30*time.Second, "/readyz", func() error {
			if code := httpStatus("http://" + health + "/readyz"); code != http.StatusOK {
				return fmt.Errorf("readyz %d", code)
			}
			return nil
		})
		if code := httpStatus("http://" + health + "/livez"); code != http.StatusOK {
			t.Fatalf("livez %d", code)
		}
		// etcd's own metrics, in plain HTTP on the same port.
		if m := httpBody(t, "http://"+health+"/metrics"); !strings.Contains(m, "\netcd_server_has_leader 1\n") {
			t.Fatalf("/metrics of the health port has no etcd_server_has_leader 1:\n%.2000s", m)
		}
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("run: %v", err)
			}
		}
	}

	stop := start("Bootstrap")
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/a", "1"); err != nil {
		t.Fatal(err)
	}
	stop()

	s, clean, err := datadir.ReadShutdown(dataDir)
	if err != nil || !clean || s.Revision != 2 {
		t.Fatalf("clean-shutdown marker: %+v clean=%t err=%v; want revision 2", s, clean, err)
	}
	state, err := datadir.Inspect(dataDir)
	if err != nil || !state.Valid() || state.Revision != 2 || state.MemberID == 0 {
		t.Fatalf("inspect after stop: %+v %v", state, err)
	}

	stop = start("RestartNonQuorate") // the static view lists no ready member
	if _, clean, _ := datadir.ReadShutdown(dataDir); clean {
		t.Fatal("clean-shutdown marker still present while etcd runs")
	}
	resp, err := c.Get(ctx, "/a")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("data after restart: %v %v", resp, err)
	}
	stop()
}

// TestSidecarWaitsOnDamagedDataWithoutQuorum checks that a damaged data dir of a formed
// cluster with no quorum to rejoin keeps the initialisation waiting, reports what was found,
// and changes nothing.
func TestSidecarWaitsOnDamagedDataWithoutQuorum(t *testing.T) {
	dataDir := t.TempDir()
	if err := os.MkdirAll(dataDir+"/member/snap", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(datadir.DBPath(dataDir), []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	view := staticView{spec: cluster.Spec{Name: "t", Token: "x", Members: []cluster.MemberSpec{
		{Name: "m0", ClientURL: "http://127.0.0.1:1", PeerURL: "http://127.0.0.1:2"},
		{Name: "m1", ClientURL: fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)), PeerURL: "http://127.0.0.1:4"}}},
		status: cluster.Status{ClusterID: "c1", Voters: []cluster.Voter{{ID: "1", Name: "m0"}, {ID: "2", Name: "m1"}},
			Members: []cluster.StatusMember{{Name: "m0", ID: "1"}, {Name: "m1", ID: "2"}}}}
	sc, err := member.New(member.Config{Name: "m0", DataDir: dataDir, View: view, APITokens: apiTokens})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(sc.Handler())
	defer api.Close()
	if code := apiStatus("POST", api.URL+"/v1/init"); code != http.StatusOK {
		t.Fatalf("POST /v1/init: %d", code)
	}
	testutil.Eventually(t, 20*time.Second, "init waits and says why", func() error {
		var st struct {
			State, Message, Case string
		}
		if err := sidecarapi.NewClient(apiTokens, nil).GetJSON(context.Background(), api.URL+"/v1/init", &st); err != nil {
			return err
		}
		if st.State != etcdproc.InitRunning || st.Case != "InvalidDataWaitForQuorum" || !strings.Contains(st.Message, "damaged") {
			return fmt.Errorf("init status %+v", st)
		}
		return nil
	})
	if code := apiStatus("GET", api.URL+"/v1/config"); code != http.StatusConflict {
		t.Fatalf("config served while waiting: %d", code)
	}
	if b, _ := os.ReadFile(datadir.DBPath(dataDir)); string(b) != "not a database" {
		t.Fatal("data dir was modified")
	}
}

func TestLoadConfigRejectsBadFile(t *testing.T) {
	_, err := etcdproc.LoadConfigBytes([]byte("name: [unclosed"))
	if err == nil {
		t.Fatal("bad YAML accepted")
	}
}
