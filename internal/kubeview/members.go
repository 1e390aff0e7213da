package kubeview

import (
	"encoding/json"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// MemberReport reads the report in an EtcdMember's status (ok=false: none, or one this
// version cannot read). A serving member's report is written only when it changes; its
// Lease renewals (renewed, zero if unknown) say it still holds, so its time moves up to them.
func MemberReport(em *v1alpha1.EtcdMember, renewed time.Time) (cluster.Report, bool) {
	var r cluster.Report
	if em.Status.Report == nil || json.Unmarshal(em.Status.Report.Raw, &r) != nil {
		return r, false
	}
	if r.Serving && renewed.After(r.At) {
		r.At = renewed
	}
	return r, true
}

// MemberAck reads the directive acknowledgement in an EtcdMember's status.
func MemberAck(em *v1alpha1.EtcdMember) (cluster.DirectiveAck, bool) {
	var a cluster.DirectiveAck
	return a, em.Status.Ack != nil && json.Unmarshal(em.Status.Ack.Raw, &a) == nil
}

// LeaseRenewed is when a member Lease was last renewed by its sidecar (zero: never).
func LeaseRenewed(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// ChangedAtOnce says whether an EtcdMember's status changed in what its sidecar writes at
// once: everything but a report's figures (revision, term, indexes, time) and the end of the
// backup leader's recoverable window (the newest revision stored, and when), which a serving
// member refreshes every reportRefresh. The operator wakes for the former only.
func ChangedAtOnce(old, cur *v1alpha1.EtcdMember) bool {
	key := func(em *v1alpha1.EtcdMember) (string, v1alpha1.EtcdMemberStatus) {
		st := *em.Status.DeepCopy()
		st.Report = nil
		if st.Backup != nil {
			b := backupKey(*st.Backup)
			st.Backup = &b
		}
		r, ok := MemberReport(em, time.Time{})
		if !ok {
			return "", st
		}
		return reportKey(r), st
	}
	ko, so := key(old)
	kc, sc := key(cur)
	return ko != kc || !equality.Semantic.DeepEqual(so, sc)
}
