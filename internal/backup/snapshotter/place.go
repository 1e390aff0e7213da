package snapshotter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Timeline is where a writer's objects go: timeline ID, which holds the history of the
// cluster ClusterID. A member of another cluster is refused with ErrHistoryRestarted.
type Timeline struct {
	ID        uint32
	ClusterID uint64
}

// ErrHistoryRestarted means the member's history is not the timeline's any more: its cluster
// ID changed, or its revision went below what the timeline holds. A new timeline must start
// (see backup.Place).
var ErrHistoryRestarted = errors.New("the member's history restarted")

// Placed is where a member's backups go in a store (backup.Place), with what it was decided
// on.
type Placed struct {
	Placement backup.Placement
	// Index summarises the store (every timeline, bounded: no delta names).
	Index backup.Index
	// Chain is the placed timeline as far as continuing it needs: every full snapshot and
	// the deltas that reach past the newest one (empty for a new timeline). The older
	// deltas, up to a month of them, are not read into memory.
	Chain  backup.Chain
	Status *clientv3.StatusResponse // the member's, read after the store's timelines
}

// Timeline is the timeline the member's objects go to.
func (p Placed) Timeline() Timeline {
	return Timeline{ID: p.Placement.Timeline, ClusterID: p.Status.Header.ClusterId}
}

// Place lists s (streaming: backup.ReadIndex), reads the headers backup.Place needs, then the
// member's status, and decides which timeline the member's backups go to and where it
// continues. The status is read last: a member's revision only grows, so the decision holds
// for the revision it reads.
func Place(ctx context.Context, m Member, s *store.Store) (Placed, error) {
	ix, err := backup.ReadIndex(ctx, s)
	if err != nil {
		return Placed{}, err
	}
	tls, err := backup.ObserveIndex(ctx, s, ix)
	if err != nil {
		return Placed{}, err
	}
	st, err := m.Client.Status(ctx, m.Endpoint)
	if err != nil {
		return Placed{}, fmt.Errorf("status of %s: %w", m.Endpoint, err)
	}
	// The revision of a linearizable read: everything committed before it is applied. A new
	// leader may not have applied all that its predecessor stored when it takes over; what it
	// has after this read is every committed revision, so one below the store's newest is a
	// history restart, not a member catching up.
	r, err := m.Client.Get(ctx, "\x00", clientv3.WithCountOnly())
	if err != nil {
		return Placed{}, fmt.Errorf("linearizable read from %s: %w", m.Endpoint, err)
	}
	if r.Header.ClusterId != st.Header.ClusterId {
		return Placed{}, fmt.Errorf("%w: %s answered for cluster %x, then for cluster %x", ErrHistoryRestarted, m.Endpoint, st.Header.ClusterId, r.Header.ClusterId)
	}
	p := backup.Place(tls, r.Header.ClusterId, r.Header.Revision)
	if !p.New {
		// The revisions alone do not show that a member whose history restarted below the
		// timeline's newest revision has not passed it since: compare the events of the
		// revisions the newest delta holds.
		i := slices.IndexFunc(tls, func(tl backup.TimelineInfo) bool { return tl.Timeline == p.Timeline })
		if ti, _ := ix.Timeline(p.Timeline); ti.Deltas > 0 {
			d := ti.FurthestDelta
			why, compacted, err := historyDiffers(ctx, m, s, d)
			if err != nil {
				return Placed{}, err
			}
			if compacted && d.LastRev < tls[i].Newest.LastRev {
				// A full snapshot after the delta holds the compacted revisions: a member
				// compacts its history, so this is no sign of another one.
				why = ""
			}
			if why != "" {
				tls[i].Disagrees = why
				p = backup.Place(tls, r.Header.ClusterId, r.Header.Revision)
			}
		}
	}
	placed := Placed{Placement: p, Index: ix, Status: st}
	if !p.New {
		var fullRev int64
		if ti, _ := ix.Timeline(p.Timeline); len(ti.Fulls) > 0 {
			fullRev = ti.Fulls[len(ti.Fulls)-1].FirstRev
		}
		placed.Chain, err = backup.LoadTimeline(ctx, s, p.Timeline, backup.DeltasAfter(fullRev))
		if err != nil {
			return Placed{}, err
		}
	}
	return placed, nil
}

// historyDiffers compares the events of every revision stored in delta o with the member's
// own events of those revisions, and says where they first differ ("" if they do not). Every
// revision, not only the last: two histories can agree at one revision and not before it (a
// request retried after a failover lands at the same revision in both). Revisions the member
// compacted away are not compared; a member that compacted the delta's newest revision away
// cannot show that it continues the timeline (compacted is true): that is a difference too.
func historyDiffers(ctx context.Context, m Member, s *store.Store, o backup.Object) (why string, compacted bool, err error) {
	stored := map[int64][][]byte{}
	_, or, err := backup.OpenObject(ctx, s, o.Key)
	if errors.Is(err, backup.ErrCorrupt) || errors.Is(err, backup.ErrNoKey) {
		// Damaged, not encrypted while backups are, or encrypted with a key no longer held:
		// the timeline cannot be continued, or restored, from here.
		return err.Error(), false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer or.Close()
	er := backup.NewEventReader(or, o.Key)
	for {
		ev, err := er.ReadEvent()
		if err == io.EOF {
			break
		}
		if errors.Is(err, backup.ErrCorrupt) {
			return err.Error(), false, nil
		}
		if err != nil {
			return "", false, err
		}
		b, err := eventIdentity(ev)
		if err != nil {
			return "", false, err
		}
		stored[ev.Kv.ModRevision] = append(stored[ev.Kv.ModRevision], b)
	}

	wctx, cancel := context.WithTimeout(ctx, historyCheckTimeout)
	defer cancel()
	// A member compacts its history: the revisions it still holds are compared, and only one
	// that compacted the delta's newest revision away cannot show anything.
	from := o.FirstRev
	var own map[int64][][]byte
	for {
		var compactRev int64
		own, compactRev, err = memberEvents(wctx, m, from, o.LastRev)
		if err != nil {
			return "", false, err
		}
		if compactRev == 0 {
			break
		}
		if compactRev > o.LastRev {
			return fmt.Sprintf("the member compacted its history past revision %d (%s): it cannot show that it continues the timeline", o.LastRev, o.Key), true, nil
		}
		from = compactRev
	}
	for rev := from; rev <= o.LastRev; rev++ {
		if !slices.EqualFunc(own[rev], stored[rev], bytes.Equal) {
			return fmt.Sprintf("the member's events of revision %d are not those stored in %s: its history restarted below it", rev, o.Key), false, nil
		}
	}
	return "", false, nil
}

// memberEvents reads the member's events of revisions from..to, by revision. If the member
// compacted revision from away, it returns its compact revision instead.
func memberEvents(ctx context.Context, m Member, from, to int64) (map[int64][][]byte, int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	own := map[int64][][]byte{}
	var seen int64 // the newest revision whose events were read
	for resp := range m.Client.Watch(clientv3.WithRequireLeader(ctx), "\x00", clientv3.WithFromKey(), clientv3.WithRev(from)) {
		if resp.CompactRevision != 0 {
			return nil, resp.CompactRevision, nil
		}
		if err := resp.Err(); err != nil {
			return nil, 0, fmt.Errorf("watch %s from revision %d: %w", m.Endpoint, from, err)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision > to {
				break
			}
			b, err := eventIdentity((*mvccpb.Event)(ev))
			if err != nil {
				return nil, 0, err
			}
			own[ev.Kv.ModRevision] = append(own[ev.Kv.ModRevision], b)
			seen = ev.Kv.ModRevision
		}
		// The events of one revision come in one response.
		if n := len(resp.Events); n > 0 && (seen >= to || resp.Events[n-1].Kv.ModRevision > to) {
			return own, 0, nil
		}
	}
	return nil, 0, fmt.Errorf("watch %s from revision %d: its events up to revision %d not read within %v", m.Endpoint, from, to, historyCheckTimeout)
}

// eventIdentity is what must agree between two events of one history: the type and the key
// with its value and revisions (not prev_kv, which a watch sends only on request).
func eventIdentity(ev *mvccpb.Event) ([]byte, error) {
	kv, err := ev.Kv.Marshal()
	return append([]byte{byte(ev.Type)}, kv...), err
}

// historyCheckTimeout bounds the watch that reads one revision's events from the member.
const historyCheckTimeout = 30 * time.Second
