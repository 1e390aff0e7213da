package local

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
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

// TestChooseTimeline: a restore in place reads the cluster's own timelines only: the newest
// of them, the one asked for, or the one of a time; another cluster's timeline on the same
// store is refused by name, even when it is the store's newest or holds the time.
func TestChooseTimeline(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	full := func(tl uint32, rev int64, at time.Time) backup.Object {
		return backup.Object{Key: backup.FullKey(tl, rev, at), Kind: backup.KindFull, Timeline: tl, FirstRev: rev, LastRev: rev, Created: at}
	}
	delta := func(tl uint32, first, last int64, at time.Time) backup.Object {
		return backup.Object{Key: backup.DeltaKey(tl, first, last), Kind: backup.KindDelta, Timeline: tl, FirstRev: first, LastRev: last, Created: at}
	}
	// Timelines 1 and 2 are this cluster's (IDs 0xa, then 0xc after a restore); 3 is another
	// cluster's on the same prefix, and the newest.
	chain := backup.NewChain([]backup.Object{
		full(1, 10, t0), delta(1, 11, 90, t0.Add(10*time.Minute)),
		full(2, 40, t0.Add(20*time.Minute)), delta(2, 41, 60, t0.Add(30*time.Minute)),
		full(3, 5, t0.Add(40*time.Minute)), delta(3, 6, 500, t0.Add(50*time.Minute)),
	})
	tls := []backup.TimelineInfo{{Timeline: 1, ClusterID: 0xa}, {Timeline: 2, ClusterID: 0xc}, {Timeline: 3, ClusterID: 0xb}}
	own := []uint64{0xa, 0xc}
	tests := []struct {
		name    string
		ids     []uint64
		want    uint32
		at      time.Time
		wantTL  uint32
		wantErr string
	}{
		{name: "the newest of its own, not the store's newest", ids: own, wantTL: 2},
		{name: "an older one of its own", ids: own, want: 1, wantTL: 1},
		{name: "another cluster's timeline", ids: own, want: 3, wantErr: "timeline 3 of file:///s is not this cluster's (of cluster b); this cluster's timelines: [1 2]"},
		{name: "a timeline the store does not hold", ids: own, want: 9, wantErr: "holds no timeline 9; this cluster's timelines: [1 2]"},
		{name: "no timeline of its own", ids: []uint64{0xd}, wantErr: "holds no backups of this cluster (3 timelines of other clusters)"},
		{name: "a time in the old history", ids: own, at: t0.Add(15 * time.Minute), wantTL: 1},
		{name: "a time after the restore", ids: own, at: t0.Add(25 * time.Minute), wantTL: 2},
		{name: "a time only another cluster's timeline holds", ids: own, at: t0.Add(55 * time.Minute), wantTL: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl, err := chooseTimeline(backup.IndexOf(chain), tls, tt.ids, tt.want, tt.at, "file:///s")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("timeline %d, err %v; want an error saying %q", tl, err, tt.wantErr)
				}
				return
			}
			if err != nil || tl != tt.wantTL {
				t.Fatalf("timeline %d (%v), want %d", tl, err, tt.wantTL)
			}
		})
	}
}
