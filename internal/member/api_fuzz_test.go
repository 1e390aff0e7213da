package member

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/sidecarapi"
	"go.uber.org/zap"
)

// FuzzSidecarAPI sends arbitrary requests (method, path, Authorization header, body) to the
// sidecar's handler. It never panics; whatever route the request reaches, an answer in the
// 2xx range without the cluster's token comes only from an open route; no answer holds the
// token; a POST body beyond the limit is never accepted.
func FuzzSidecarAPI(f *testing.F) {
	token := strings.Repeat("T", sidecarapi.MinTokenLen)
	sc, err := New(Config{Name: "test", DataDir: filepath.Join(f.TempDir(), "data"), View: staticView{},
		APITokens: sidecarapi.Static{List: []string{token}}, FullSnapshotInterval: time.Hour, Logger: zap.NewNop()})
	if err != nil {
		f.Fatal(err)
	}
	h := sc.Handler()
	mux := h.(*http.ServeMux)
	access := map[string]sidecarapi.Access{}
	for _, rt := range sc.Routes() {
		access[rt.Pattern()] = rt.Access
	}
	for _, rt := range sc.Routes() {
		f.Add(rt.Method, rt.Path, "", []byte(nil))
		f.Add(rt.Method, rt.Path, "Bearer "+token, []byte("{}"))
		f.Add(rt.Method, rt.Path+"/", "Bearer x", []byte(`{"a":1}`))
	}
	f.Add("POST", "/v1/snapshots/full", "Bearer "+token, bytes.Repeat([]byte("{"), sidecarapi.MaxBody+1))
	f.Add("GET", "//v1/../v1/report", "", []byte(nil))
	f.Fuzz(func(t *testing.T, method, path, auth string, body []byte) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\t#?%") || len(method) == 0 || strings.ContainsAny(method, " \r\n\t") {
			return // not a request line a client can send
		}
		req, err := http.NewRequest(method, "http://sidecar"+path, bytes.NewReader(body))
		if err != nil {
			return
		}
		if auth != "" {
			if strings.ContainsAny(auth, "\r\n") {
				return
			}
			req.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		_, pattern := mux.Handler(req)
		// The scheme is case-insensitive (RFC 9110): "bearer" and "BeArer" carry the token too.
		scheme, cred, _ := strings.Cut(auth, " ")
		valid := strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(cred) == token
		if w.Code/100 == 2 && !valid {
			if a, ok := access[pattern]; !ok || a != sidecarapi.Open {
				t.Fatalf("%s %s without the token: %d through route %q", method, path, w.Code, pattern)
			}
		}
		if strings.Contains(w.Body.String(), token) {
			t.Fatalf("%s %s: the answer holds the token", method, path)
		}
		if len(body) > sidecarapi.MaxBody && method == "POST" && w.Code/100 == 2 {
			t.Fatalf("%s %s: a body of %d bytes was accepted", method, path, len(body))
		}
	})
}
