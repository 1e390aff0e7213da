package local

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/heal"
)

// TestAnswerRestoreRequest: the supervisor's answer to `steward local restore`: a restore
// starts only with a backup store and no directive in force, a request found after it
// expired is refused, a cancel follows heal.CancelRestore; a refusal changes nothing.
func TestAnswerRestoreRequest(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	target := cluster.RestoreTarget{Timeline: 1, Revision: 40}
	voters := []cluster.Voter{{ID: "a", Name: "m0"}, {ID: "b", Name: "m1"}, {ID: "c", Name: "m2"}}
	healthy := heal.Status{ClusterID: "cid", Voters: voters, LastEpoch: 2}
	var serving []heal.Member
	for _, v := range voters {
		serving = append(serving, heal.Member{Name: v.Name, ID: v.ID, Ready: true, Report: &cluster.Report{Name: v.Name, At: now,
			Source: cluster.ReportFromEtcd, Serving: true, DataValid: true, MemberID: v.ID, ClusterID: "cid", Owner: v.Name, Formed: true}})
	}
	restoring := healthy
	restoring.Directive = &cluster.Directive{Epoch: 3, Phase: cluster.PhaseFencing, Restore: &target, IssuedAt: now, PhaseSince: now}
	recovering := healthy
	recovering.Directive = &cluster.Directive{Epoch: 3, Phase: cluster.PhaseFencing, IssuedAt: now, PhaseSince: now}
	req := func(target *cluster.RestoreTarget, cancel bool, age time.Duration) RestoreRequest {
		at := now.Add(-age)
		return RestoreRequest{ID: "r1", Target: target, Cancel: cancel, RequestedAt: at, Expires: at.Add(restoreRequestTTL)}
	}
	tests := []struct {
		name      string
		status    heal.Status
		req       RestoreRequest
		noBackup  bool
		wantEpoch int64  // accepted: the directive issued
		wantErr   string // refused
	}{
		{name: "restore of a healthy cluster", status: healthy, req: req(&target, false, time.Second), wantEpoch: 3},
		{name: "no backup store", status: healthy, req: req(&target, false, time.Second), noBackup: true, wantErr: "no backup store"},
		{name: "a restore in progress", status: restoring, req: req(&target, false, time.Second), wantErr: "directive 3 is in progress"},
		{name: "a quorum-loss recovery in progress", status: recovering, req: req(&target, false, time.Second), wantErr: "directive 3 is in progress"},
		{name: "expired: the supervisor was not running", status: healthy, req: req(&target, false, time.Minute), wantErr: "expired"},
		{name: "neither a target nor a cancel", status: healthy, req: req(nil, false, time.Second), wantErr: "malformed"},
		{name: "cancel of a restore still fencing", status: restoring, req: req(nil, true, time.Second), wantEpoch: 4},
		{name: "cancel without a restore", status: healthy, req: req(nil, true, time.Second), wantErr: "no restore is in progress"},
		{name: "cancel of a quorum-loss recovery", status: recovering, req: req(nil, true, time.Second), wantErr: "not a restore"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := heal.Observation{Now: now, Status: tt.status, Members: serving, Timing: heal.DefaultTiming}
			dec, ans := answerRestoreRequest(o, tt.req, !tt.noBackup)
			if ans.ID != tt.req.ID || !ans.At.Equal(now) {
				t.Fatalf("answer %+v does not answer request %s", ans, tt.req.ID)
			}
			if tt.wantErr != "" {
				if ans.Accepted || !strings.Contains(ans.Error, tt.wantErr) {
					t.Fatalf("answer %+v, want a refusal saying %q", ans, tt.wantErr)
				}
				if dec.Status.Directive != tt.status.Directive || dec.Status.LastEpoch != tt.status.LastEpoch {
					t.Fatalf("a refused request changed the status: %+v", dec.Status)
				}
				return
			}
			d := dec.Status.Directive
			if !ans.Accepted || ans.Epoch != tt.wantEpoch || d == nil || d.Epoch != tt.wantEpoch || d.Phase != cluster.PhaseFencing {
				t.Fatalf("answer %+v, directive %+v; want directive %d accepted and fencing", ans, d, tt.wantEpoch)
			}
			if wantTarget := !tt.req.Cancel; (d.Restore != nil) != wantTarget || (wantTarget && *d.Restore != target) {
				t.Fatalf("directive target %+v; want the request's target: %t", d.Restore, wantTarget)
			}
		})
	}
}
