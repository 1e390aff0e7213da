package kubeview

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/etcd-steward/steward/internal/cluster"
)

// TestMemberBackup: the EtcdMember's status.backup carries the last restore drill once one ran,
// and the same status gives an equal account (PublishBackup writes only changes).
func TestMemberBackup(t *testing.T) {
	s := cluster.BackupStatus{Ready: true, LastError: "drill: boom"}
	if mb := memberBackup(s); mb.LastDrill != nil || !mb.Ready || mb.LastError != s.LastError {
		t.Errorf("before any drill: %+v", mb)
	}
	at := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
	s.LastDrill = cluster.DrillStatus{Timeline: 2, Revision: 1234, Time: at, Duration: 3 * time.Second, OK: true, Result: "ok"}
	mb := memberBackup(s)
	d := mb.LastDrill
	if d == nil || d.Timeline != 2 || d.Revision != 1234 || !d.Time.Time.Equal(at) || d.Duration.Duration != 3*time.Second || !d.OK || d.Result != "ok" {
		t.Fatalf("after a drill: %+v", d)
	}
	if !equality.Semantic.DeepEqual(mb, memberBackup(s)) {
		t.Error("the same status gives two accounts: PublishBackup would write on every call")
	}
	s.LastDrill.Revision++
	if equality.Semantic.DeepEqual(mb, memberBackup(s)) {
		t.Error("a new drill gives the same account: PublishBackup would not write it")
	}

	// The recoverable window, in whole seconds as the API server keeps them; its end moves
	// with every delta and matters only at the refresh, its start at once.
	s.Recoverable = &cluster.Recoverable{Timeline: 3, ClusterID: "c1", FirstRevision: 100, FirstTime: at.Add(time.Second),
		LastRevision: 200, LastTime: at.Add(time.Minute + 300*time.Millisecond)}
	mb = memberBackup(s)
	w := mb.Recoverable
	if w == nil || w.Timeline != 3 || w.ClusterID != "c1" || w.FirstRevision != 100 || !w.FirstTime.Time.Equal(at.Add(time.Second)) ||
		w.LastRevision != 200 || !w.LastTime.Time.Equal(at.Add(time.Minute)) {
		t.Fatalf("recoverable: %+v", w)
	}
	s.Recoverable.LastRevision, s.Recoverable.LastTime = 250, at.Add(2*time.Minute)
	if later := memberBackup(s); !equality.Semantic.DeepEqual(backupKey(mb), backupKey(later)) || equality.Semantic.DeepEqual(mb, later) {
		t.Error("a window that only reaches further is written at once, or never")
	}
	s.Recoverable.FirstRevision = 150
	if equality.Semantic.DeepEqual(backupKey(mb), backupKey(memberBackup(s))) {
		t.Error("a window that starts later is not written at once")
	}
}
