package member

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/testutil"
)

// TestInitRefusedWhileEtcdRuns: POST /v1/init to the sidecar of a member whose etcd runs is
// refused with 409 and decides nothing: the member keeps its ID, its data and its
// initialisation state. Its etcd is seen running by either sign alone: the database's lock
// (the spec names an address where nothing listens), or an answer at the member's client URL
// (the data dir is another, as after a wipe under a running etcd).
func TestInitRefusedWhileEtcdRuns(t *testing.T) {
	e, cli, ep := testutil.EmbeddedEtcd(t)
	dir := e.Config().Dir
	before, err := cli.Status(context.Background(), ep)
	if err != nil {
		t.Fatal(err)
	}
	idBefore, err := datadir.Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !idBefore.InUse {
		t.Fatalf("the data dir of a running etcd does not read as in use: %+v", idBefore)
	}
	token := "a-token-of-the-cluster-that-is-long-enough-0123"
	for _, tc := range []struct {
		name, dataDir, clientURL, why string
	}{
		{"its database lock held", dir, "http://127.0.0.1:1", "holds the database"},
		{"its client URL answering", filepath.Join(t.TempDir(), "wiped"), ep, "serves at " + ep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := cluster.Spec{Name: "c", Token: "t", Members: []cluster.MemberSpec{{Name: "test", ClientURL: tc.clientURL, PeerURL: "http://127.0.0.1:2"}}}
			sc, err := New(Config{Name: "test", DataDir: tc.dataDir, View: staticView{cluster.Snapshot{Spec: spec}},
				APITokens: sidecarapi.Static{List: []string{token}}, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(sc.Handler())
			defer srv.Close()
			c := sidecarapi.NewClient(sidecarapi.Static{List: []string{token}}, nil)
			_, err = c.Call(context.Background(), http.MethodPost, srv.URL+"/v1/init")
			if code := sidecarapi.StatusCode(err); code != http.StatusConflict || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("POST /v1/init while etcd runs: %d %v; want 409 saying it %s", code, err, tc.why)
			}
			var st struct{ State string }
			if err := c.GetJSON(context.Background(), srv.URL+"/v1/init", &st); err != nil || st.State != "new" {
				t.Fatalf("initialisation state after the refusals: %q %v; want new (nothing started)", st.State, err)
			}
		})
	}
	after, err := cli.Status(context.Background(), ep)
	if err != nil {
		t.Fatalf("etcd after the refused initialisations: %v", err)
	}
	if after.Header.MemberId != before.Header.MemberId || after.Header.ClusterId != before.Header.ClusterId {
		t.Fatalf("member %x of cluster %x became %x of %x", before.Header.MemberId, before.Header.ClusterId, after.Header.MemberId, after.Header.ClusterId)
	}
	if got, err := datadir.Inspect(dir); err != nil || !got.HasWAL || !got.HasDB || got.MemberID != idBefore.MemberID {
		t.Fatalf("the data dir changed: %+v %v", got, err)
	}
}
