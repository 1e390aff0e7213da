package operator

import (
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// leaseClock judges a member Lease's freshness by when the operator saw it change, never by
// its renewTime: that is the sidecar's clock, and comparing it with the operator's would
// take a node whose clock lags (or an operator whose clock runs ahead) for a silent member.
// client-go's leader election and the node lifecycle controller judge their Leases the same
// way. A Lease first seen (the operator started, or the Lease is new) counts as renewed then:
// it gets a whole duration before it can expire.
type leaseClock struct {
	mu   sync.Mutex
	seen map[types.UID]leaseSighting
}

type leaseSighting struct {
	holder, renewTime string
	at                time.Time
}

// observe records what the Lease holds now and returns when the operator last saw it renewed.
func (c *leaseClock) observe(l *coordinationv1.Lease, now time.Time) time.Time {
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
		c.seen = map[types.UID]leaseSighting{}
	}
	if prev, ok := c.seen[l.UID]; ok && prev.holder == s.holder && prev.renewTime == s.renewTime {
		return prev.at
	}
	c.seen[l.UID] = s
	return now
}

// forget drops a deleted Lease.
func (c *leaseClock) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, uid)
}
