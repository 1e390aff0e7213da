package backup

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/etcd-steward/steward/internal/store"
)

// TimelineInfo is what a writer needs to know about one timeline in a store.
type TimelineInfo struct {
	Timeline uint32
	// ClusterID is the etcd cluster whose history the timeline holds: the cluster ID in the
	// header of its newest object.
	ClusterID uint64
	// Newest is the object that holds its newest revision (Newest.LastRev): the delta, if a
	// delta and a full snapshot end there.
	Newest Object
	// Disagrees, when set, says how the headers disagree with the chain (the newest object's
	// header with its name, or with the cluster ID of the timeline's oldest full snapshot):
	// such a timeline is not continued.
	Disagrees string
	// Vouched: the timeline's newest full snapshot vouches for itself, and ClusterID is the
	// cluster its header names (VouchTimelines); else Unvouched says why not. ObserveIndex
	// leaves both unset.
	Vouched   bool
	Unvouched error
}

// Placement says where a writer's objects go: which timeline, and whether it starts there.
type Placement struct {
	Timeline uint32
	// New: the timeline starts now, with a full snapshot; nothing of it is stored yet.
	New bool
	// Resume is the newest revision stored on a continued timeline: deltas continue at
	// Resume+1.
	Resume int64
	// Reason says why a new timeline starts, or which one continues.
	Reason string
}

// Place decides where the backups of a member of cluster clusterID, at revision rev,
// continue, given the store's timelines. A writer continues only the newest timeline of its
// own cluster, and only if that timeline's history can be its own: every restart of history
// starts a new timeline, numbered above every timeline in the store:
//
//   - no timeline of this cluster ID (a new cluster: after a restore or a forced new
//     cluster that changed the ID, or another cluster given the same prefix);
//   - its newest timeline's headers disagree with the chain;
//   - the member's revision is below the newest revision of that timeline (its history
//     restarted below what is stored: a recovery from a survivor that was behind, a member
//     restored to an older revision).
//
// Timelines of other clusters are never written to, whatever their number.
func Place(tls []TimelineInfo, clusterID uint64, rev int64) Placement {
	next := uint32(1)
	var own *TimelineInfo
	for i := range tls {
		tl := &tls[i]
		next = max(next, tl.Timeline+1)
		if tl.ClusterID == clusterID && (own == nil || tl.Timeline > own.Timeline) {
			own = tl
		}
	}
	start := func(why string, args ...any) Placement {
		return Placement{Timeline: next, New: true, Reason: fmt.Sprintf("timeline %d starts: ", next) + fmt.Sprintf(why, args...)}
	}
	switch {
	case len(tls) == 0:
		return start("the store holds no backups")
	case own == nil:
		why := ""
		if i := slices.IndexFunc(tls, func(tl TimelineInfo) bool { return tl.Disagrees != "" }); i >= 0 {
			why = fmt.Sprintf(", or cannot say whose they are: timeline %d: %s", tls[i].Timeline, tls[i].Disagrees)
		}
		return start("the store holds no timeline of cluster %x (its %d timelines are of other clusters%s)", clusterID, len(tls), why)
	case own.Disagrees != "":
		return start("timeline %d cannot be continued: %s", own.Timeline, own.Disagrees)
	case rev < own.Newest.LastRev:
		return start("the member's revision %d is below revision %d, the newest of timeline %d: its history restarted", rev, own.Newest.LastRev, own.Timeline)
	}
	return Placement{Timeline: own.Timeline, Resume: own.Newest.LastRev,
		Reason: fmt.Sprintf("timeline %d of cluster %x continues after revision %d", own.Timeline, clusterID, own.Newest.LastRev)}
}

// OwnTimeline is the newest timeline of a cluster known by any of the cluster IDs ids (a
// cluster's ID changes when it is restored from backup): the one a recovery of that cluster
// restores, and whose newest revision is what the backups hold of it. Timelines of other
// clusters never count, whatever their number, and neither do timelines whose headers
// disagree with the chain (they cannot say whose they are). ok=false: the store holds no
// timeline of the cluster.
func OwnTimeline(tls []TimelineInfo, ids []uint64) (own TimelineInfo, ok bool) {
	for _, tl := range tls {
		if tl.Of(ids) && (!ok || tl.Timeline > own.Timeline) {
			own, ok = tl, true
		}
	}
	return own, ok
}

// Of reports whether the timeline is of a cluster known by one of the IDs ids: its headers
// agree with the chain and carry one of them.
func (tl TimelineInfo) Of(ids []uint64) bool {
	return tl.Disagrees == "" && slices.Contains(ids, tl.ClusterID)
}

// ObserveTimelines is ObserveIndex of a chain held in memory.
func ObserveTimelines(ctx context.Context, s *store.Store, c Chain) ([]TimelineInfo, error) {
	return ObserveIndex(ctx, s, IndexOf(c))
}

// ObserveIndex reads what Place needs from the store: for each timeline of ix, the header of
// its newest object (the one holding its newest revision) and of its oldest full snapshot. A
// damaged header, or one of a newer format, makes the timeline disagree; a store that cannot
// be read is an error.
func ObserveIndex(ctx context.Context, s *store.Store, ix Index) ([]TimelineInfo, error) {
	var out []TimelineInfo
	for _, t := range ix.Timelines {
		tl := t.Timeline
		newest := t.Newest
		info := TimelineInfo{Timeline: tl, Newest: newest}
		hdr, err := readObjectHeader(ctx, s, newest)
		switch {
		case errors.Is(err, ErrCorrupt), errors.Is(err, ErrNewerFormat):
			info.Disagrees = err.Error()
		case err != nil:
			return nil, fmt.Errorf("read the newest object of timeline %d: %w", tl, err)
		default:
			info.ClusterID = hdr.ClusterID
		}
		if len(t.Fulls) > 0 && t.Fulls[0].Key != newest.Key && info.Disagrees == "" {
			first, err := readObjectHeader(ctx, s, t.Fulls[0])
			switch {
			case errors.Is(err, ErrCorrupt), errors.Is(err, ErrNewerFormat):
				info.Disagrees = err.Error()
			case err != nil:
				return nil, fmt.Errorf("read the oldest full snapshot of timeline %d: %w", tl, err)
			case first.ClusterID != hdr.ClusterID:
				info.Disagrees = fmt.Sprintf("its oldest full snapshot %s is of cluster %x, its newest object %s of cluster %x",
					t.Fulls[0].Key, first.ClusterID, newest.Key, hdr.ClusterID)
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// readObjectHeader reads o's header and checks it against o's name.
func readObjectHeader(ctx context.Context, s *store.Store, o Object) (Header, error) {
	hdr, err := ReadHeader(ctx, s, o.Key)
	if err != nil {
		return Header{}, err
	}
	if err := CheckHeader(o, hdr); err != nil {
		return Header{}, err
	}
	return hdr, nil
}
