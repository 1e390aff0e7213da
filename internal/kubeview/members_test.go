package kubeview

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestChangedAtOnce: what a serving backup leader refreshes as it goes (its report's figures,
// the end of its recoverable window) is not news; what it writes at once is.
func TestChangedAtOnce(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	member := func(rev int64, change func(*v1alpha1.EtcdMember)) *v1alpha1.EtcdMember {
		raw, err := json.Marshal(cluster.Report{Name: "m-0", At: at.Add(time.Duration(rev) * time.Second), Serving: true, Leader: true, MemberID: "a0", ClusterID: "c1", Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		first, last := metav1.NewTime(at), metav1.NewTime(at.Add(time.Duration(rev)*time.Second))
		em := &v1alpha1.EtcdMember{Status: v1alpha1.EtcdMemberStatus{Report: &runtime.RawExtension{Raw: raw},
			Backup: &v1alpha1.MemberBackup{Ready: true, Recoverable: &v1alpha1.Recoverability{Timeline: 1, ClusterID: "c1", FirstRevision: 1, FirstTime: &first,
				LastRevision: rev, LastTime: &last}}}}
		if change != nil {
			change(em)
		}
		return em
	}
	for _, c := range []struct {
		name string
		cur  *v1alpha1.EtcdMember
		want bool
	}{
		{"the report's figures and the recoverable window's end moved", member(20, nil), false},
		{"backups no longer ready", member(20, func(em *v1alpha1.EtcdMember) { em.Status.Backup.Ready = false }), true},
		{"the recoverable window's start moved", member(20, func(em *v1alpha1.EtcdMember) { em.Status.Backup.Recoverable.FirstRevision = 5 }), true},
		{"another timeline", member(20, func(em *v1alpha1.EtcdMember) { em.Status.Backup.Recoverable.Timeline = 2 }), true},
		{"a backup account appeared", member(10, nil), true},
	} {
		old := member(10, nil)
		if c.name == "a backup account appeared" {
			old.Status.Backup = nil
		}
		if got := ChangedAtOnce(old, c.cur); got != c.want {
			t.Errorf("%s: ChangedAtOnce = %v, want %v", c.name, got, c.want)
		}
	}
}
