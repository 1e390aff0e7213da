package operator

import (
	"sync"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// leaseClock judges a Lease's freshness by when the operator saw it change, never by its
// renewTime: that is the sidecar's clock, and comparing it with the operator's would take a
// node whose clock lags (or an operator whose clock runs ahead) for a silent member.
// client-go's leader election and the node lifecycle controller judge their Leases the same
// way. A Lease first seen (the operator started, or the Lease is new) counts as renewed then:
// it gets a whole duration before it can expire.
//
// It also wakes the cluster's reconciliation when a Lease with a duration (a member's; the
// delta-snapshot Lease, whose duration is three delta periods) goes that long without a
// renewal: renewals themselves wake nothing, so a cluster at rest is reconciled only when
// something lapses, not at every renewal.
type leaseClock struct {
	mu     sync.Mutex
	seen   map[types.UID]leaseSighting
	timers map[types.UID]*time.Timer
	// expired receives the cluster of a Lease that lapsed (nil: nothing is woken).
	expired chan event.GenericEvent
}

type leaseSighting struct {
	holder, renewTime string
	at                time.Time
}

// observe records what the Lease holds now and returns when the operator last saw it renewed.
func (c *leaseClock) observe(l *coordinationv1.Lease, now time.Time) time.Time {
	at, _ := c.renewal(l, now)
	return at
}

// renewal is observe, and also says whether this is a renewal of a Lease that had lapsed (as
// the operator saw it): that is news, which wakes the cluster's reconciliation.
func (c *leaseClock) renewal(l *coordinationv1.Lease, now time.Time) (at time.Time, revived bool) {
	s := leaseSighting{at: now}
	if h := l.Spec.HolderIdentity; h != nil {
		s.holder = *h
	}
	if t := l.Spec.RenewTime; t != nil {
		s.renewTime = t.UTC().Format(time.RFC3339Nano)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen, c.timers = map[types.UID]leaseSighting{}, map[types.UID]*time.Timer{}
	}
	prev, ok := c.seen[l.UID]
	if ok && prev.holder == s.holder && prev.renewTime == s.renewTime {
		return prev.at, false
	}
	c.seen[l.UID] = s
	c.arm(l)
	d := l.Spec.LeaseDurationSeconds
	return now, ok && d != nil && now.Sub(prev.at) >= time.Duration(*d)*time.Second
}

// arm (re)starts the timer that wakes the Lease's cluster once the Lease lapses, a second
// after its duration so that the reconciliation finds it lapsed. c.mu is held.
func (c *leaseClock) arm(l *coordinationv1.Lease) {
	cluster := l.Labels[v1alpha1.LabelCluster]
	if c.expired == nil || cluster == "" || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return
	}
	after := time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second + time.Second
	if t, ok := c.timers[l.UID]; ok {
		t.Reset(after)
		return
	}
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: cluster}}
	expired := c.expired
	c.timers[l.UID] = time.AfterFunc(after, func() { expired <- event.GenericEvent{Object: ec} })
}

// forget drops a deleted Lease.
func (c *leaseClock) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, uid)
	if t, ok := c.timers[uid]; ok {
		t.Stop()
		delete(c.timers, uid)
	}
}
