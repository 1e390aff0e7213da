package member

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/testutil"
	"go.uber.org/zap"
)

// apiCluster is a sidecar of cluster A serving its API, with A's token file, and the token of
// another cluster B.
type apiCluster struct {
	sc           *Sidecar
	url          string
	token, other string
}

func newAPICluster(t *testing.T, fullInterval time.Duration) apiCluster {
	t.Helper()
	tokens := map[string]string{}
	for _, c := range []string{"a", "b"} {
		path := filepath.Join(t.TempDir(), "api-token")
		if _, err := sidecarapi.EnsureTokenFile(path); err != nil {
			t.Fatal(err)
		}
		toks, err := sidecarapi.ReadTokenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		tokens[c] = toks[0]
		tokens[c+"-path"] = path
	}
	sc, err := New(Config{Name: "test", DataDir: filepath.Join(t.TempDir(), "data"), View: staticView{cluster.Snapshot{Spec: oneMember(t, "a-token")}},
		APITokens: sidecarapi.NewFile(tokens["a-path"]), FullSnapshotInterval: fullInterval, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sc.Handler())
	t.Cleanup(srv.Close)
	return apiCluster{sc: sc, url: srv.URL, token: tokens["a"], other: tokens["b"]}
}

func (c apiCluster) do(t *testing.T, method, path, auth string, body []byte) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, c.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestAPIEveryRouteNeedsTheClusterToken walks the sidecar's own route list (the one the server
// is built from): every route but the open three refuses a request without a token, with a
// malformed one, with a wrong one and with another cluster's, and says what is missing without
// echoing a token; the right token gets through; the open routes answer anyone.
func TestAPIEveryRouteNeedsTheClusterToken(t *testing.T) {
	c := newAPICluster(t, time.Nanosecond)
	open := map[string]bool{}
	for _, rt := range c.sc.Routes() {
		if rt.Access == sidecarapi.Open {
			open[rt.Pattern()] = true
		}
	}
	if want := map[string]bool{"GET /healthz": true, "GET /readyz": true, "GET /metrics": true}; fmt.Sprint(open) != fmt.Sprint(want) {
		t.Fatalf("open routes %v, want exactly %v", open, want)
	}
	wrong := []struct{ name, auth, want string }{
		{"no credentials", "", "missing credentials"},
		{"not a bearer token", "Basic " + c.token, "not a bearer token"},
		{"empty bearer token", "Bearer ", "bearer token"},
		{"wrong token", "Bearer " + strings.Repeat("x", len(c.token)), "not this cluster's"},
		{"another cluster's token", "Bearer " + c.other, "not this cluster's"},
		{"the token with a suffix", "Bearer " + c.token + "x", "not this cluster's"},
		{"a prefix of the token", "Bearer " + c.token[:len(c.token)-1], "not this cluster's"},
	}
	for _, rt := range c.sc.Routes() {
		if rt.Access == sidecarapi.Open {
			if code, _, _ := c.do(t, rt.Method, rt.Path, "", nil); code != http.StatusOK {
				t.Errorf("%s without credentials: %d, want 200 (open)", rt.Pattern(), code)
			}
			continue
		}
		for _, w := range wrong {
			code, hdr, body := c.do(t, rt.Method, rt.Path, w.auth, nil)
			if code != http.StatusUnauthorized || !strings.Contains(body, w.want) || hdr.Get("WWW-Authenticate") == "" {
				t.Errorf("%s with %s: %d %q (WWW-Authenticate %q), want 401 saying %q", rt.Pattern(), w.name, code, body, hdr.Get("WWW-Authenticate"), w.want)
			}
			if strings.Contains(body, c.token) || strings.Contains(body, c.other) {
				t.Errorf("%s with %s: the answer %q holds a token", rt.Pattern(), w.name, body)
			}
		}
		code, _, body := c.do(t, rt.Method, rt.Path, "Bearer "+c.token, nil)
		if code == http.StatusUnauthorized || code == http.StatusForbidden {
			t.Errorf("%s with the cluster's token: %d %q", rt.Pattern(), code, body)
		}
	}
	// The initialisation just started works in the data dir: let it finish before the test
	// directory goes.
	testutil.Eventually(t, 30*time.Second, "initialisation settles", func() error {
		var st etcdproc.InitStatus
		if err := sidecarapi.NewClient(sidecarapi.Static{List: []string{c.token}}, nil).GetJSON(context.Background(), c.url+"/v1/init", &st); err != nil {
			return err
		}
		if st.State == etcdproc.InitRunning {
			return fmt.Errorf("init %s", st.State)
		}
		return nil
	})
}

// TestAPIBodyLimits: the POST endpoints take no body or an empty JSON object; a large body is
// refused with 413 and anything else with 400, before anything happens.
func TestAPIBodyLimits(t *testing.T) {
	c := newAPICluster(t, time.Nanosecond)
	auth := "Bearer " + c.token
	for _, tc := range []struct {
		name string
		body []byte
		want int
	}{
		{"too large", bytes.Repeat([]byte(" "), sidecarapi.MaxBody+1), http.StatusRequestEntityTooLarge},
		{"unknown field", []byte(`{"retention":"limit:1"}`), http.StatusBadRequest},
		{"two values", []byte(`{} {}`), http.StatusBadRequest},
		{"not JSON", []byte(`full please`), http.StatusBadRequest},
		{"not an object", []byte(`[1,2]`), http.StatusBadRequest},
		// Accepted: backups are off on this member, so the answer is 503.
		{"empty object", []byte(`{}`), http.StatusServiceUnavailable},
		{"no body", nil, http.StatusServiceUnavailable},
	} {
		if code, _, body := c.do(t, "POST", "/v1/snapshots/full", auth, tc.body); code != tc.want {
			t.Errorf("POST /v1/snapshots/full with %s: %d %q, want %d", tc.name, code, body, tc.want)
		}
	}
}

// TestAPIFullSnapshotRateLimited: one full snapshot per interval; the next is refused with
// 429 and a Retry-After; unauthenticated requests do not use up the allowance.
func TestAPIFullSnapshotRateLimited(t *testing.T) {
	c := newAPICluster(t, time.Hour)
	for i := 0; i < 3; i++ {
		if code, _, _ := c.do(t, "POST", "/v1/snapshots/full", "Bearer "+c.other, nil); code != http.StatusUnauthorized {
			t.Fatalf("another cluster's token: %d", code)
		}
	}
	if code, _, body := c.do(t, "POST", "/v1/snapshots/full", "Bearer "+c.token, nil); code != http.StatusServiceUnavailable {
		t.Fatalf("first request: %d %q, want 503 (admitted; backups are off)", code, body)
	}
	code, hdr, body := c.do(t, "POST", "/v1/snapshots/full", "Bearer "+c.token, nil)
	secs, _ := strconv.Atoi(hdr.Get("Retry-After"))
	if code != http.StatusTooManyRequests || secs < 3500 || secs > 3600 || !strings.Contains(body, "one request every 1h0m0s") {
		t.Fatalf("second request: %d %q Retry-After %q, want 429 with about an hour", code, body, hdr.Get("Retry-After"))
	}
	// The client turns it into an error that carries the wait.
	_, err := sidecarapi.NewClient(sidecarapi.Static{List: []string{c.token}}, nil).Call(context.Background(), "POST", c.url+"/v1/snapshots/full")
	if d, ok := sidecarapi.RetryAfter(err); !ok || d < 3500*time.Second {
		t.Fatalf("client error %v: Retry-After %v", err, d)
	}
	// Reads are not limited.
	for i := 0; i < 5; i++ {
		if code, _, _ := c.do(t, "GET", "/v1/backup", "Bearer "+c.token, nil); code != http.StatusOK {
			t.Fatalf("GET /v1/backup: %d", code)
		}
	}
}

// TestAPIMalformedBodySpendsNoTurn: a rate-limited route checks the body before it counts
// the request, so malformed requests are refused with 400 and the next well-formed one is
// still let through; only then is the route's limit in force.
func TestAPIMalformedBodySpendsNoTurn(t *testing.T) {
	c := newAPICluster(t, time.Hour)
	auth := "Bearer " + c.token
	for _, rt := range c.sc.Routes() {
		if rt.Method == http.MethodPost && rt.Body == nil {
			t.Errorf("%s takes a body but does not say which (Route.Body)", rt.Pattern())
		}
		if rt.MinInterval == 0 {
			continue
		}
		for range 3 {
			if code, _, body := c.do(t, rt.Method, rt.Path, auth, []byte(`{"no-such-field":1}`)); code != http.StatusBadRequest {
				t.Errorf("%s with a malformed body: %d %q, want 400", rt.Pattern(), code, body)
			}
		}
		if code, _, body := c.do(t, rt.Method, rt.Path, auth, nil); code == http.StatusTooManyRequests || code == http.StatusBadRequest {
			t.Errorf("%s well-formed after malformed ones: %d %q, want it let through", rt.Pattern(), code, body)
		}
		// A limit of a second may have passed while the request ran.
		if code, _, body := c.do(t, rt.Method, rt.Path, auth, nil); rt.MinInterval == time.Hour && code != http.StatusTooManyRequests {
			t.Errorf("%s again within its interval: %d %q, want 429", rt.Pattern(), code, body)
		}
	}
}

// TestAPIWithoutTokensRefusesAll: a sidecar given no tokens is closed, not open.
func TestAPIWithoutTokensRefusesAll(t *testing.T) {
	sc, err := New(Config{Name: "test", DataDir: t.TempDir(), View: staticView{}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sc.Handler())
	defer srv.Close()
	c := apiCluster{sc: sc, url: srv.URL}
	for _, rt := range sc.Routes() {
		code, _, _ := c.do(t, rt.Method, rt.Path, "Bearer "+strings.Repeat("a", 43), nil)
		if open := rt.Access == sidecarapi.Open; open != (code == http.StatusOK) || (!open && code != http.StatusServiceUnavailable) {
			t.Errorf("%s on a sidecar without tokens: %d", rt.Pattern(), code)
		}
	}
}
