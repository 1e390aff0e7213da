package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/kubeview"
	"github.com/etcd-steward/steward/internal/testutil/kubemembers"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// reportInterval is how often a member's sidecar reports (and publishes backups, the
// leader's): its View decides what of it reaches the API server, and when.
const reportInterval = time.Second

// deltaPeriod is the clusters' spec.backup.deltaPeriod, the backup leader's publishing period.
const deltaPeriod = 5 * time.Second

// members plays, for every cluster, what runs in its three member pods towards the API
// server: the StatefulSet controller and the kubelet (kubemembers: pods Running and Ready),
// and each member's sidecar (kubeview's writes: its report and its Lease renewals, and the
// backup leader's snapshot Leases and backup account). Each cluster's etcd takes a write per
// report: its revision moves, as a serving cluster's does.
type members struct {
	c     client.Client // reads from the benchmark's cache, writes to the API server
	ns    string
	start time.Time

	mu      sync.Mutex
	stopped map[string]bool // members whose etcd stopped: pod NotReady, no report, no renewal
	silent  map[string]bool // members whose sidecar stopped: pod Ready, no report, no renewal

	reports atomic.Int64 // the sidecars' reports, each written or not as a View decides
	errors  atomic.Int64
	lastErr atomic.Pointer[string]
}

func newMembers(c client.Client, ns string) *members {
	return &members{c: c, ns: ns, start: time.Now(), stopped: map[string]bool{}, silent: map[string]bool{}}
}

// stop stops member name's etcd: its pod turns NotReady and its sidecar stops reporting.
func (m *members) stop(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped[name] = true
}

// silence stops member name's sidecar alone: its pod stays Ready, its Lease lapses.
func (m *members) silence(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.silent[name] = true
}

func (m *members) state(name string) (ready, reporting bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.stopped[name], !m.stopped[name] && !m.silent[name]
}

// run plays cluster idx (named name) until ctx ends.
func (m *members) run(ctx context.Context, idx int, name string) {
	clusterID := fmt.Sprintf("%x", 0xc1000+idx)
	names := []string{name + "-0", name + "-1", name + "-2"}
	views := make([]*kubeview.View, len(names))
	live := make([]cluster.LiveMember, len(names))
	for i, n := range names {
		views[i] = kubeview.NewReporter(m.c, m.ns, name, n)
		live[i] = cluster.LiveMember{ID: memberID(idx, i), Name: n, PeerURL: fmt.Sprintf("https://%s.%s-peer.%s.svc:2380", n, name, m.ns)}
	}
	tick := time.NewTicker(reportInterval)
	defer tick.Stop()
	for rev := int64(1); ; rev++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var sts appsv1.StatefulSet
		if err := m.c.Get(ctx, types.NamespacedName{Namespace: m.ns, Name: name}, &sts); err != nil {
			m.note(client.IgnoreNotFound(err)) // not made yet
			continue
		}
		if _, err := kubemembers.Pods(ctx, m.c, &sts, func(i int) bool { ready, _ := m.state(names[i]); return ready }); err != nil {
			m.note(err)
			continue
		}
		now := time.Now()
		for i, n := range names {
			if _, reporting := m.state(n); !reporting {
				continue
			}
			m.reports.Add(1)
			r := cluster.Report{Name: n, At: now, Source: cluster.ReportFromEtcd, Serving: true, Leader: i == 0, LeaderID: memberID(idx, 0),
				MemberID: memberID(idx, i), ClusterID: clusterID, DataValid: true, Term: 2, LastTerm: 2,
				LastIndex: uint64(rev + 10), Commit: uint64(rev + 10), Applied: uint64(rev + 10), Revision: rev, Members: live, Formed: true}
			m.note(views[i].Report(ctx, r)) // the operator makes the EtcdMember and the Lease: NotFound until then
			if i == 0 {
				m.note(views[i].PublishBackup(ctx, m.backup(clusterID, rev, now)))
			}
		}
	}
}

// backup is the backup leader's status: a full snapshot at the start, deltas up to the
// revision of the previous report.
func (m *members) backup(clusterID string, rev int64, now time.Time) cluster.BackupStatus {
	return cluster.BackupStatus{Leader: true, Ready: true, Store: "s3://bench", Timeline: 1, DeltaPeriod: deltaPeriod,
		LatestFullRevision: 1, LatestFullTime: m.start, LatestDeltaRevision: rev - 1, LatestDeltaTime: now,
		CurrentRevision: rev - 1, CurrentAt: now,
		Recoverable: &cluster.Recoverable{Timeline: 1, ClusterID: clusterID, FirstRevision: 1, FirstTime: m.start, LastRevision: rev - 1, LastTime: now}}
}

// note counts an error other than a missing object (the operator has not made it yet).
func (m *members) note(err error) {
	if err == nil || apierrors.IsNotFound(err) {
		return
	}
	m.errors.Add(1)
	msg := err.Error()
	m.lastErr.Store(&msg)
}

func memberID(idx, i int) string { return fmt.Sprintf("%x", (idx+1)<<4|(i+1)) }
