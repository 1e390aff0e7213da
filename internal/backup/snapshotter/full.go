// Package snapshotter captures backups from a live etcd member: full snapshots streamed from
// Maintenance.Snapshot, and deltas from a watch. It writes objects in the backup format of
// package backup; deciding when to run (leadership, schedules) is the sidecar's job.
package snapshotter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is the etcd member a snapshotter reads from: a client and that member's endpoint.
// The client must talk to that one member (Snapshot goes to the client's endpoint).
type Member struct {
	Client   *clientv3.Client
	Endpoint string
}

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
	Chain     backup.Chain             // the store's objects
	Status    *clientv3.StatusResponse // the member's, read after the store's timelines
}

// Timeline is the timeline the member's objects go to.
func (p Placed) Timeline() Timeline {
	return Timeline{ID: p.Placement.Timeline, ClusterID: p.Status.Header.ClusterId}
}

// Place lists s, reads the headers backup.Place needs, then the member's status, and decides
// which timeline the member's backups go to and where it continues. The status is read last:
// a member's revision only grows, so the decision holds for the revision it reads.
func Place(ctx context.Context, m Member, s *store.Store) (Placed, error) {
	c, err := backup.ListChain(ctx, s)
	if err != nil {
		return Placed{}, err
	}
	tls, err := backup.ObserveTimelines(ctx, s, c)
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
		// timeline's newest revision has not passed it since: compare that revision's events.
		i := slices.IndexFunc(tls, func(tl backup.TimelineInfo) bool { return tl.Timeline == p.Timeline })
		if newest := tls[i].Newest; newest.Kind == backup.KindDelta {
			why, err := historyDiffers(ctx, m, s, newest)
			if err != nil {
				return Placed{}, err
			}
			if why != "" {
				tls[i].Disagrees = why
				p = backup.Place(tls, r.Header.ClusterId, r.Header.Revision)
			}
		}
	}
	return Placed{Placement: p, Chain: c, Status: st}, nil
}

// historyDiffers compares the events of revision o.LastRev stored in delta o with the member's
// own events of that revision, and says how they differ ("" if they do not). A member that
// compacted that revision away cannot show that it continues the timeline: that is a
// difference too.
func historyDiffers(ctx context.Context, m Member, s *store.Store, o backup.Object) (string, error) {
	rev := o.LastRev
	var stored [][]byte
	_, or, err := backup.OpenObject(ctx, s, o.Key)
	if err != nil {
		return "", err
	}
	defer or.Close()
	er := backup.NewEventReader(or, o.Key)
	for {
		ev, err := er.ReadEvent()
		if err == io.EOF {
			break
		}
		if errors.Is(err, backup.ErrCorrupt) {
			return err.Error(), nil
		}
		if err != nil {
			return "", err
		}
		if ev.Kv.ModRevision == rev {
			b, err := eventIdentity(ev)
			if err != nil {
				return "", err
			}
			stored = append(stored, b)
		}
	}

	wctx, cancel := context.WithTimeout(ctx, historyCheckTimeout)
	defer cancel()
	var own [][]byte
	for resp := range m.Client.Watch(clientv3.WithRequireLeader(wctx), "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev)) {
		if resp.CompactRevision != 0 {
			return fmt.Sprintf("the member compacted its history past revision %d, the newest of the timeline (%s): it cannot show that it continues it", rev, o.Key), nil
		}
		if err := resp.Err(); err != nil {
			return "", fmt.Errorf("watch %s from revision %d: %w", m.Endpoint, rev, err)
		}
		// The events of one revision come in one response.
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != rev {
				break
			}
			b, err := eventIdentity((*mvccpb.Event)(ev))
			if err != nil {
				return "", err
			}
			own = append(own, b)
		}
		if len(resp.Events) > 0 {
			break
		}
	}
	if len(own) == 0 {
		return "", fmt.Errorf("watch %s from revision %d: no events of that revision within %v", m.Endpoint, rev, historyCheckTimeout)
	}
	if !slices.EqualFunc(own, stored, bytes.Equal) {
		return fmt.Sprintf("the member's events of revision %d are not those stored in %s: its history restarted below it", rev, o.Key), nil
	}
	return "", nil
}

// eventIdentity is what must agree between two events of one history: the type and the key
// with its value and revisions (not prev_kv, which a watch sends only on request).
func eventIdentity(ev *mvccpb.Event) ([]byte, error) {
	kv, err := ev.Kv.Marshal()
	return append([]byte{byte(ev.Type)}, kv...), err
}

// historyCheckTimeout bounds the watch that reads one revision's events from the member.
const historyCheckTimeout = 30 * time.Second

// FullResult describes a stored full snapshot.
type FullResult struct {
	Key      string `json:"key"`
	Timeline uint32 `json:"timeline"`
	// Revision is the member's revision when the snapshot started: a lower bound of the
	// revision inside it (restore reads the true one from the database).
	Revision  int64  `json:"revision"`
	ClusterID uint64 `json:"clusterID"`
	// Size is the stored (compressed) size; DBSize the size of the database stream.
	Size     int64         `json:"size"`
	DBSize   int64         `json:"dbSize"`
	Duration time.Duration `json:"duration"`
	Created  time.Time     `json:"created"`
}

// Full streams a snapshot of the member into s as one full-snapshot object of timeline tl: no
// temporary file, memory independent of the database size. It checks the SHA-256 that etcd
// appends to the stream and discards the object if it does not match. A member of another
// cluster than tl's is refused (ErrHistoryRestarted). progress, if set, gets the number of
// database bytes read so far.
func Full(ctx context.Context, m Member, s *store.Store, tl Timeline, progress func(read int64)) (FullResult, error) {
	start := time.Now()
	status, err := m.Client.Status(ctx, m.Endpoint)
	if err != nil {
		return FullResult{}, fmt.Errorf("full snapshot: status of %s: %w", m.Endpoint, err)
	}
	if status.Header.ClusterId != tl.ClusterID {
		return FullResult{}, fmt.Errorf("full snapshot: %w: %s is a member of cluster %x, timeline %d holds cluster %x's history",
			ErrHistoryRestarted, m.Endpoint, status.Header.ClusterId, tl.ID, tl.ClusterID)
	}
	res := FullResult{Timeline: tl.ID, Revision: status.Header.Revision, ClusterID: status.Header.ClusterId, Created: start.UTC()}
	res.Key = backup.FullKey(tl.ID, res.Revision, res.Created)
	hdr := backup.Header{Kind: backup.KindFull, Timeline: tl.ID, Compression: backup.CompressionZstd, EtcdVersion: status.Version,
		ClusterID: res.ClusterID, FirstRev: res.Revision, LastRev: res.Revision, Created: res.Created}

	snapCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := openSnapshotStream(snapCtx, m)
	if err != nil {
		return FullResult{}, fmt.Errorf("full snapshot of %s: %w", m.Endpoint, err)
	}
	defer stream.close()

	trailer, err := backup.WriteObject(ctx, s, res.Key, hdr, func(w *backup.ObjectWriter) error {
		v := newTrailerVerifier(w, progress)
		if err := stream.copyTo(v); err != nil {
			return fmt.Errorf("read snapshot stream from %s: %w", m.Endpoint, err)
		}
		if err := v.verify(); err != nil {
			return err
		}
		res.DBSize = v.n
		return nil
	})
	if err != nil {
		return FullResult{}, err
	}
	res.Size = trailer.PayloadSize
	res.Duration = time.Since(start)
	return res, nil
}

// trailerVerifier passes the snapshot stream through while hashing all but its last 32
// bytes, which are etcd's SHA-256 of the database.
type trailerVerifier struct {
	w        io.Writer
	h        hash.Hash
	tail     []byte // last up-to-32 bytes seen, not hashed yet
	n        int64
	progress func(int64)
}

func newTrailerVerifier(w io.Writer, progress func(int64)) *trailerVerifier {
	return &trailerVerifier{w: w, h: sha256.New(), tail: make([]byte, 0, sha256.Size), progress: progress}
}

func (v *trailerVerifier) Write(p []byte) (int, error) {
	if _, err := v.w.Write(p); err != nil {
		return 0, err
	}
	v.n += int64(len(p))
	if len(p) >= sha256.Size {
		// The held-back tail and all of p but its last 32 bytes are database bytes.
		v.h.Write(v.tail)
		v.h.Write(p[:len(p)-sha256.Size])
		v.tail = append(v.tail[:0], p[len(p)-sha256.Size:]...)
	} else {
		// Short write: keep the last 32 bytes of tail+p, hash what falls out in front.
		buf := append(v.tail, p...)
		cut := max(len(buf)-sha256.Size, 0)
		v.h.Write(buf[:cut])
		v.tail = append(v.tail[:0], buf[cut:]...)
	}
	if v.progress != nil {
		v.progress(v.n)
	}
	return len(p), nil
}

var errSnapshotHash = errors.New("snapshot stream does not end with a matching SHA-256")

func (v *trailerVerifier) verify() error {
	if len(v.tail) != sha256.Size {
		return fmt.Errorf("%w: stream of %d bytes is too short", errSnapshotHash, v.n)
	}
	if !bytes.Equal(v.h.Sum(nil), v.tail) {
		return fmt.Errorf("%w: the database is damaged in transit; retry", errSnapshotHash)
	}
	v.n -= sha256.Size
	return nil
}
