package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/cluster"
)

// TestResolveTargetRefusals: the sidecar resolves restore targets in its own store only, says
// so without backups, and answers 422 with why for a target its store cannot give.
func TestResolveTargetRefusals(t *testing.T) {
	own := "file://" + t.TempDir()
	for _, tc := range []struct {
		name, storeURL string
		target         cluster.RestoreTarget
		code           int
		says           string
	}{
		{"backups off", "", cluster.RestoreTarget{}, http.StatusNotFound, "backups are off"},
		{"another store", own, cluster.RestoreTarget{Store: "s3://other/x?secret_key=hunter2-secret"}, http.StatusBadRequest, "its own backup store only"},
		{"empty store", own, cluster.RestoreTarget{Revision: 10}, http.StatusUnprocessableEntity, "restore"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := NewService(Config{StoreURL: tc.storeURL}, Member{Name: "m0", View: nilView{}}, zap.NewNop(), nil)
			body, _ := json.Marshal(tc.target)
			rec := httptest.NewRecorder()
			svc.HandleResolveTarget(rec, httptest.NewRequest(http.MethodPost, ResolveTargetPath, bytes.NewReader(body)))
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.says) {
				t.Fatalf("%d %q; want %d saying %q", rec.Code, rec.Body.String(), tc.code, tc.says)
			}
			if strings.Contains(rec.Body.String(), "hunter2") {
				t.Fatalf("the answer echoes a secret of the store URL asked for: %s", rec.Body.String())
			}
		})
	}
}

// nilView is the view of a cluster that has recorded nothing yet.
type nilView struct{}

func (nilView) Snapshot(context.Context) (cluster.Snapshot, error)                 { return cluster.Snapshot{}, nil }
func (nilView) Watch(context.Context) (<-chan struct{}, error)                     { return make(chan struct{}), nil }
func (nilView) Report(context.Context, cluster.Report) error                       { return nil }
func (nilView) AckDirective(context.Context, int64, cluster.DirectiveResult) error { return nil }
