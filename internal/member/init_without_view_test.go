package member

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/testutil"
	"go.uber.org/zap"
	"sigs.k8s.io/yaml"
)

// unreadableView is a cluster view that has not read the cluster (the API server is down).
type unreadableView struct{ staticView }

func (unreadableView) Snapshot(context.Context) (cluster.Snapshot, error) {
	return cluster.Snapshot{}, fmt.Errorf("%w: waiting for the API server (connection refused)", cluster.ErrViewNotReady)
}

// initWithoutView starts the initialisation of member "test" on dataDir through the API of a
// sidecar whose view cannot read the cluster, and returns the client and the API's URL.
func initWithoutView(t *testing.T, dataDir string) (*sidecarapi.Client, string) {
	c, url, _ := initWith(t, dataDir, unreadableView{})
	return c, url
}

// initWith starts the initialisation of member "test" on dataDir through the API of a sidecar
// with view, and returns the client, the API's URL and what stops the sidecar.
func initWith(t *testing.T, dataDir string, view cluster.View) (*sidecarapi.Client, string, func()) {
	t.Helper()
	token := "a-token-of-the-cluster-that-is-long-enough-0123"
	sc, err := New(Config{Name: "test", DataDir: dataDir, View: view,
		APITokens: sidecarapi.Static{List: []string{token}}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sc.life = ctx
	srv := httptest.NewServer(sc.Handler())
	t.Cleanup(srv.Close)
	c := sidecarapi.NewClient(sidecarapi.Static{List: []string{token}}, nil)
	if _, err := c.Call(ctx, http.MethodPost, srv.URL+"/v1/init"); err != nil {
		t.Fatal(err)
	}
	return c, srv.URL, cancel
}

// stoppedMember leaves in dir the valid data of a stopped one-member cluster with what the
// sidecar recorded when member "test" last started on it (its identity, token "tok", and
// the configuration of that start, a quorum-loss seed's with force-new-cluster), and returns
// that configuration.
func stoppedMember(t *testing.T, dir string) etcdproc.Config {
	t.Helper()
	_, cli, ep, stop := testutil.EtcdOn(t, dir)
	st, err := cli.Status(context.Background(), ep)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if err := datadir.WriteIdentity(dir, datadir.Identity{ClusterName: "c", ClusterToken: "tok", MemberName: "test",
		MemberID: fmt.Sprintf("%x", st.Header.MemberId), ClusterID: fmt.Sprintf("%x", st.Header.ClusterId)}); err != nil {
		t.Fatal(err)
	}
	last := etcdproc.Config{Name: "test", DataDir: dir, ListenClientURLs: ep, AdvertiseClientURLs: ep, InitialCluster: "test=http://127.0.0.1:1",
		InitialClusterState: "new", InitialClusterToken: "tok", ForceNewCluster: true, QuotaBackendBytes: 8 << 30}
	b, err := last.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := datadir.WriteLastStart(dir, b); err != nil {
		t.Fatal(err)
	}
	return last
}

// waitInit polls the initialisation at url until it is in state with case c.
func waitInit(t *testing.T, c *sidecarapi.Client, url, state, wantCase string) initResponse {
	t.Helper()
	var init initResponse
	testutil.Eventually(t, 20*time.Second, "initialisation "+state+" in case "+wantCase, func() error {
		if err := c.GetJSON(context.Background(), url+"/v1/init", &init); err != nil {
			return err
		}
		if init.State != state || init.Case != wantCase {
			return fmt.Errorf("initialisation %s, case %s: %s", init.State, init.Case, init.Message)
		}
		return nil
	})
	return init
}

// TestFenceHeldWithoutView: a member its view fences holds etcd and records the fence in its
// data dir; restarted while the view cannot be read, it still holds etcd on that record alone
// (its own valid data, started before, would restart without it: TestRestartWithoutView);
// once the view no longer fences it, the record is gone.
func TestFenceHeldWithoutView(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	stoppedMember(t, dir)
	spec := oneMember(t, "tok")
	spec.Fenced = []string{"test"}
	c, url, stopFenced := initWith(t, dir, staticView{cluster.Snapshot{Spec: spec}})
	waitInit(t, c, url, etcdproc.InitRunning, CaseFenced)
	if fenced, err := datadir.Fenced(dir); err != nil || !fenced {
		t.Fatalf("the data dir does not record the fence (%v)", err)
	}
	stopFenced()

	c, url, stopBlind := initWith(t, dir, unreadableView{})
	waitInit(t, c, url, etcdproc.InitRunning, CaseFenced)
	stopBlind() // one sidecar per data dir: the next one starts on it

	spec.Fenced = nil
	c, url, _ = initWith(t, dir, staticView{cluster.Snapshot{Spec: spec}})
	testutil.Eventually(t, 20*time.Second, "the fence record cleared", func() error {
		if fenced, err := datadir.Fenced(dir); err != nil || fenced {
			return fmt.Errorf("the data dir still records the fence (%v)", err)
		}
		return nil
	})
	// The unfenced initialisation goes on to write its start into the data dir: wait for its
	// end, so that nothing writes there while the test's directory is removed.
	testutil.Eventually(t, 20*time.Second, "the unfenced initialisation ended", func() error {
		var init initResponse
		if err := c.GetJSON(context.Background(), url+"/v1/init", &init); err != nil {
			return err
		}
		if init.State == etcdproc.InitRunning {
			return fmt.Errorf("initialisation %s, case %s: %s", init.State, init.Case, init.Message)
		}
		return nil
	})
}

// TestRestartWithoutView: a member whose cluster view cannot be read restarts on its own valid
// data as it last started, never as a new cluster nor with force-new-cluster again; a member
// with an empty data dir (a join) waits for the view, says so, and touches nothing.
func TestRestartWithoutView(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	last := stoppedMember(t, dir)

	c, url := initWithoutView(t, dir)
	var init initResponse
	testutil.Eventually(t, 20*time.Second, "the restart decided without the view", func() error {
		if err := c.GetJSON(context.Background(), url+"/v1/init", &init); err != nil {
			return err
		}
		if init.State != etcdproc.InitSucceeded {
			return fmt.Errorf("initialisation %s, case %s: %s", init.State, init.Case, init.Message)
		}
		return nil
	})
	if init.Case != "RestartWithoutView" {
		t.Fatalf("case %s (%s), want RestartWithoutView", init.Case, init.Message)
	}
	raw, err := c.Call(context.Background(), http.MethodGet, url+"/v1/config")
	if err != nil {
		t.Fatal(err)
	}
	var got etcdproc.Config
	if err := yaml.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := last
	want.InitialClusterState, want.ForceNewCluster = "existing", false
	if got != want {
		t.Fatalf("configuration without the view:\n%+v\nwant the last start's as a restart:\n%+v", got, want)
	}

	// An empty data dir: a join (or a lost disk) needs the cluster's spec and status.
	empty := filepath.Join(t.TempDir(), "data")
	c, url = initWithoutView(t, empty)
	testutil.Eventually(t, 20*time.Second, "the empty member waiting for the view", func() error {
		if err := c.GetJSON(context.Background(), url+"/v1/init", &init); err != nil {
			return err
		}
		if init.State != etcdproc.InitRunning || init.Case != "ViewUnavailableWait" || !strings.Contains(init.Message, "connection refused") {
			return fmt.Errorf("initialisation %s, case %s: %s", init.State, init.Case, init.Message)
		}
		return nil
	})
	if entries, err := os.ReadDir(empty); err == nil && len(entries) > 0 {
		t.Fatalf("the waiting member wrote into its data dir: %v", entries)
	}
}
