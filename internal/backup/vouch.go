package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/etcd-steward/steward/internal/seal"
	"github.com/etcd-steward/steward/internal/store"
)

// VouchFull checks that the full snapshot o is what its name and header say, without
// reading its whole payload: its header agrees with its name, its trailer is whole, and with
// encryption its first sealed segment opens under the store's keys. The header is the
// associated data of every sealed segment, so under encryption this proves that a holder of
// the keys wrote that header (cluster ID, timeline, kind, revisions); without encryption it
// proves only that the object is whole, as anyone who may write to the store can make one.
// The rest of the payload is authenticated as a restore reads it.
//
// An object that does not vouch for itself is an error wrapping ErrCorrupt, ErrNoKey or
// ErrNewerFormat; an error of the store is returned as it is.
func VouchFull(ctx context.Context, s *store.Store, o Object) (Header, error) {
	if _, err := ReadTrailer(ctx, s, o); err != nil {
		return Header{}, err
	}
	sr, err := s.NewReader(ctx, o.Key)
	if err != nil {
		return Header{}, err
	}
	defer sr.Close()
	return vouch(sr, o, s.Keys())
}

// vouch is VouchFull of the object's bytes in r; its errors name the object.
func vouch(r io.Reader, o Object, keys *seal.Keyring) (Header, error) {
	hdr, or, err := NewObjectReader(r, o.Key, keys)
	if err != nil {
		return Header{}, err
	}
	defer or.Close()
	if err := CheckHeader(o, hdr); err != nil {
		return Header{}, err
	}
	if hdr.Encrypted() {
		var one [1]byte
		if _, err := or.plain.Read(one[:]); err != nil && err != io.EOF {
			if errors.Is(err, ErrCorrupt) {
				return Header{}, fmt.Errorf("backup object %s: %w", o.Key, err)
			}
			return Header{}, fmt.Errorf("backup object %s: %w: it does not decrypt with key %q: the key is not the one it was written with, or its header or payload was altered, or it was planted (%v)", o.Key, ErrCorrupt, hdr.KeyID, err)
		}
	}
	return hdr, nil
}

// NotVouched says whether err is an object's failure to vouch for itself (VouchFull), rather
// than the store's.
func NotVouched(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNoKey) || errors.Is(err, ErrNewerFormat)
}

// VouchTimelines reads, for each timeline of ix, whether its newest full snapshot vouches for
// itself (VouchFull; Unvouched says why not) and, if it does, the cluster its header names:
// what a restore chooses by, and nothing the store's names or unauthenticated headers say.
// A store that cannot be read is an error.
func VouchTimelines(ctx context.Context, s *store.Store, ix Index) ([]TimelineInfo, error) {
	var out []TimelineInfo
	for _, ti := range ix.Timelines {
		tl := TimelineInfo{Timeline: ti.Timeline, Newest: ti.Newest}
		full, ok := ti.NewestFull()
		if !ok {
			tl.Unvouched = fmt.Errorf("%w: it holds no full snapshot", ErrCorrupt)
			out = append(out, tl)
			continue
		}
		hdr, err := VouchFull(ctx, s, full)
		switch {
		case NotVouched(err):
			tl.Unvouched = err
		case err != nil:
			return nil, fmt.Errorf("read the newest full snapshot of timeline %d: %w", ti.Timeline, err)
		default:
			tl.ClusterID, tl.Vouched = hdr.ClusterID, true
		}
		out = append(out, tl)
	}
	return out, nil
}

// ErrSeveralClusters is wrapped by Restorable's error when the store holds the timelines of
// more than one cluster and the restore did not say whose to read.
var ErrSeveralClusters = errors.New("the backup store holds the timelines of several clusters")

// Restorable is the timelines a restore chooses from, of those VouchTimelines read: the ones
// whose newest full snapshot vouches for itself, of the cluster known by the IDs own. Without own, they must all be of one cluster: timelines
// of several clusters (another cluster's copied into the store, or this cluster's history
// before and after a restore gave it a new ID) are an error wrapping ErrSeveralClusters that
// names them, for the restore to name the cluster or the timeline. skipped says, for each
// timeline left out because it does not vouch for itself, why.
func Restorable(tls []TimelineInfo, own []uint64) (cands []TimelineInfo, skipped []string, err error) {
	var ids []uint64
	for _, tl := range tls {
		switch {
		case !tl.Vouched:
			skipped = append(skipped, fmt.Sprintf("timeline %d: %v", tl.Timeline, tl.Unvouched))
		case own != nil && !slices.Contains(own, tl.ClusterID):
		default:
			cands = append(cands, tl)
			if !slices.Contains(ids, tl.ClusterID) {
				ids = append(ids, tl.ClusterID)
			}
		}
	}
	if own == nil && len(ids) > 1 {
		var parts []string
		for _, id := range slices.Sorted(slices.Values(ids)) {
			var of []string
			for _, tl := range cands {
				if tl.ClusterID == id {
					of = append(of, fmt.Sprint(tl.Timeline))
				}
			}
			parts = append(parts, fmt.Sprintf("cluster %x (timelines %s)", id, strings.Join(of, ", ")))
		}
		return nil, skipped, fmt.Errorf("%w: %s; a restore does not guess whose history to read", ErrSeveralClusters, strings.Join(parts, ", "))
	}
	return cands, skipped, nil
}
