package snapshotter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrCompacted means the revision the deltas should continue from is compacted away: only
// a full snapshot can continue the chain.
var ErrCompacted = errors.New("delta capture: the next revision is compacted")

// ErrHole means the watch skipped revisions: the chain cannot continue without a full snapshot.
var ErrHole = errors.New("delta capture: revisions are missing from the watch")

// DefaultDeltaPeriod is the delta period where none is configured: how long, at most, a
// write waits before a delta stores it.
const DefaultDeltaPeriod = 5 * time.Second

// DeltaOptions configure RunDeltas.
type DeltaOptions struct {
	// Period bounds how long an event waits before it is stored (default
	// DefaultDeltaPeriod): the history is read at least this often, and what is read is
	// stored within about a Period.
	Period time.Duration
	// MaxBytes writes the buffer early once it holds this many bytes of events (default
	// 16 MiB; counted before compression, and held compressed). It bounds the memory delta
	// capture uses, whatever the event rate.
	MaxBytes int
	// Timeline is where the objects go; its cluster ID and EtcdVersion go into each object's
	// header. A member whose cluster ID differs, or whose revision is below the revision the
	// capture continues from, ends the capture with ErrHistoryRestarted.
	Timeline    Timeline
	EtcdVersion string
	// OnFlush is called after each delta object is stored.
	OnFlush func(Delta)
	// OnCurrent is called when everything up to rev is stored, and the member's own revision
	// was at most rev at time at: after a round of reading the history (that began at at)
	// left nothing to store.
	OnCurrent func(rev int64, at time.Time)
	// OnError is called when storing fails; RunDeltas keeps retrying with backoff.
	OnError func(error)
	// OnRead is called after each round of reading the history with the newest revision
	// read (stored or held).
	OnRead func(rev int64)
}

// Delta describes one stored delta object.
type Delta struct {
	Key       string
	FirstRev  int64
	LastRev   int64
	Events    int64
	Size      int64
	Created   time.Time
	FlushTook time.Duration
}

// RunDeltas captures the member's history from revision from and stores delta objects until
// ctx ends (returns nil) or the chain cannot continue (ErrCompacted, ErrHole,
// ErrHistoryRestarted) or the watch fails. Each object holds whole revisions; revisions are
// contiguous from from. The callbacks in opts are called from RunDeltas' goroutine.
//
// The history is read in rounds: each round watches from the next revision to store up to
// the member's revision when the watch starts, then ends the watch. etcd answers such a
// watch from its store in batches of up to a thousand revisions, where a watch kept open
// gets every revision in a response of its own as it is written: on a busy member that was
// a message, a send and a receive per write, on both sides, for as long as backups run (perf:
// most of the sidecar's CPU was waking up for them). Rounds come every second (or Period, if
// shorter), or more often when that would make a round larger than a batch (see
// roundInterval); what rounds read is stored once the next round would come a Period or more
// after the oldest event held, so that events reach the store within about a Period, as
// before.
func RunDeltas(ctx context.Context, m Member, s *store.Store, from int64, opts DeltaOptions) error {
	if opts.Period <= 0 {
		opts.Period = DefaultDeltaPeriod
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 16 << 20
	}
	payload, err := backup.NewPayloadBuffer(backup.KindDelta)
	if err != nil {
		return err
	}
	conn, own, err := memberConn(m, watchWindow, watchReadBuffer)
	if err != nil {
		return fmt.Errorf("delta capture: %w", err)
	}
	if own {
		defer conn.(io.Closer).Close()
	}
	d := &deltaBuffer{opts: opts, next: from, payload: payload}
	timer := time.NewTimer(0) // the first round at once
	defer timer.Stop()
	backoff := watchRetryMin
	var heldSince time.Time // when the round that read the oldest event held began
	prev := time.Now()      // when the previous round began
	for {
		select {
		case <-ctx.Done():
			d.finalFlush(ctx, s)
			return nil
		case <-timer.C:
		}
		start := time.Now()
		rev0, raw0 := d.next, d.payload.Raw()
		target, complete, err := d.round(ctx, conn, s, max(opts.Period, roundTimeout))
		if ctx.Err() != nil {
			d.finalFlush(ctx, s)
			return nil
		}
		if err != nil {
			if !resumable(err) {
				if (errors.Is(err, ErrCompacted) || errors.Is(err, ErrHole) || errors.Is(err, ErrHistoryRestarted)) && d.pending() {
					// What was read before the history broke off is whole, contiguous
					// revisions: stored, it narrows the gap before the next full snapshot.
					if d.flush(ctx, s) != nil {
						return nil // ctx ended while retrying
					}
				}
				return err
			}
			// The connection failed (the member restarted, say): try again, from where the
			// store is, as clientv3's watcher resumes.
			timer.Reset(backoff)
			backoff = min(2*backoff, watchRetryMax)
			continue
		}
		backoff = watchRetryMin
		if opts.OnRead != nil {
			opts.OnRead(d.next - 1)
		}
		if d.pending() && heldSince.IsZero() {
			heldSince = start
		}
		interval := roundInterval(opts.Period, start.Sub(prev), d.next-rev0, d.payload.Raw()-raw0)
		prev = start
		if !complete {
			interval = 0 // a long catch-up: go on at once
		}
		if d.pending() && time.Since(heldSince)+interval >= opts.Period {
			if err := d.flush(ctx, s); err != nil {
				return nil // ctx ended while retrying
			}
		}
		if !d.pending() {
			heldSince = time.Time{}
			if complete && opts.OnCurrent != nil {
				// Everything up to the member's revision when the round began is stored.
				opts.OnCurrent(max(target, d.next-1), start)
			}
		}
		timer.Reset(max(interval-time.Since(start), 0))
	}
}

// Round sizes: etcd answers a watch behind its revision from its store, a batch of up to
// 1000 revisions (mvcc's watchBatchMaxRevs) per sync of its slow watchers, every 100 ms,
// reading the whole range to its revision for each batch. A round of at most one batch keeps
// that to one read; one of about a MiB keeps the response small (etcd reads it whole, the
// sidecar receives and decodes it whole). Rounds come at least every second, whatever the
// Period, so that a burst after a quiet spell makes a round of a second's writes at most.
const (
	roundRevisions = 800
	roundBytes     = 1 << 20
	roundMin       = 100 * time.Millisecond
	roundMax       = time.Second
)

// roundInterval is the time to the next round, given that the last one, span after the one
// before, read revs revisions and raw bytes of events: a Period or a second, or less to keep
// rounds within one batch of etcd's and about a MiB at the rate the history grows.
func roundInterval(period, span time.Duration, revs, raw int64) time.Duration {
	interval := min(period, roundMax)
	if revs > 0 {
		interval = min(interval, time.Duration(float64(span)*roundRevisions/float64(revs)))
	}
	if raw > 0 {
		interval = min(interval, time.Duration(float64(span)*roundBytes/float64(raw)))
	}
	return max(interval, roundMin)
}

// readBack reads the object just written at key to its end and checks it (backup.VerifyObject):
// nothing counts as stored until it does.
func readBack(ctx context.Context, s *store.Store, key string) error {
	o, err := backup.ParseKey(key)
	if err == nil {
		err = backup.VerifyObject(ctx, s, o)
	}
	if err != nil {
		return fmt.Errorf("%s was written but does not read back (written again): %w", key, err)
	}
	return nil
}

// Recapture writes delta object o again, from the member's history: the same revisions,
// read anew, under the same key (a damaged object is replaced). ErrCompacted: the member no
// longer has them.
func Recapture(ctx context.Context, m Member, s *store.Store, o backup.Object, tl Timeline, etcdVersion string) error {
	payload, err := backup.NewPayloadBuffer(backup.KindDelta)
	if err != nil {
		return err
	}
	conn, own, err := memberConn(m, watchWindow, watchReadBuffer)
	if err != nil {
		return fmt.Errorf("recapture %s: %w", o.Key, err)
	}
	if own {
		defer conn.(io.Closer).Close()
	}
	d := &deltaBuffer{opts: DeltaOptions{Timeline: tl, EtcdVersion: etcdVersion, MaxBytes: math.MaxInt}, next: o.FirstRev, until: o.LastRev, payload: payload}
	if _, _, err := d.round(ctx, conn, s, roundTimeout); err != nil {
		return fmt.Errorf("recapture %s: %w", o.Key, err)
	}
	if d.first != o.FirstRev || d.last != o.LastRev {
		return fmt.Errorf("recapture %s: the member gave revisions %d-%d", o.Key, d.first, d.last)
	}
	return d.flush(ctx, s)
}

// payloadKeep is how much of the compressed buffer's memory is kept between objects.
const payloadKeep = 8 << 20

// Backoff between attempts to watch again after the connection failed.
const (
	watchRetryMin = 100 * time.Millisecond
	watchRetryMax = 5 * time.Second
)

// resumable reports whether a watch that ended with err can be started again: the transport
// failed. Not if etcd ended it because its member lost the leader (WithRequireLeader), as
// clientv3's watcher does not either.
func resumable(err error) bool {
	if err == nil || errors.Is(err, ErrCompacted) || errors.Is(err, ErrHole) || errors.Is(err, ErrHistoryRestarted) || errors.Is(err, rpctypes.ErrNoLeader) {
		return false
	}
	return errors.Is(err, io.EOF) || errors.As(err, new(errRoundStalled)) || status.Code(err) == codes.Unavailable
}

// round watches from the next revision to store until it has every revision up to the
// member's revision when the watch began (target, which it returns), buffering the events
// and storing the buffer whenever it holds MaxBytes (of whole revisions), then ends the watch.
// A round that takes longer than limit ends where it is (complete is false), so that what it
// read is stored in time whatever the backlog; if it read nothing, that is an error.
func (d *deltaBuffer) round(ctx context.Context, conn grpc.ClientConnInterface, s *store.Store, limit time.Duration) (target int64, complete bool, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream: etcd drops the watch
	var late atomic.Bool
	t := time.AfterFunc(limit, func() { late.Store(true); cancel() })
	defer t.Stop()
	from := d.next
	failed := func(err error) (int64, bool, error) {
		if late.Load() && ctx.Err() == nil {
			if d.next > from {
				return target, false, nil
			}
			err = errRoundStalled{limit}
		}
		return 0, false, fmt.Errorf("delta capture: watch from revision %d: %w", d.next, err)
	}
	target = -1
	w, err := openWatch(wctx, conn, from)
	if err != nil {
		return failed(err)
	}
	onEvent := func(rev int64, event []byte) error {
		// The header comes before the events: none of another cluster is buffered.
		if err := d.sameCluster(w.msg.clusterID); err != nil {
			return err
		}
		if d.until > 0 && rev > d.until {
			return nil
		}
		// A response holds many revisions: store the buffer once it holds MaxBytes, at the
		// first revision that does not fit.
		if rev != d.last && d.payload.Raw() >= int64(d.opts.MaxBytes) {
			if err := d.flush(ctx, s); err != nil {
				return err // ctx ended
			}
		}
		return d.add(rev, event)
	}
	for {
		msg, err := w.recv(onEvent)
		if err != nil {
			if errors.Is(err, ErrHole) || errors.Is(err, ErrHistoryRestarted) || ctx.Err() != nil {
				return 0, false, err
			}
			return failed(err)
		}
		if err := d.sameCluster(msg.clusterID); err != nil {
			return 0, false, err
		}
		if msg.compactRev != 0 {
			return 0, false, fmt.Errorf("%w: revision %d is below the compaction at %d", ErrCompacted, d.next, msg.compactRev)
		}
		if msg.canceled {
			return 0, false, fmt.Errorf("delta capture: etcd cancelled the watch from revision %d: %s", d.next, msg.cancelReason)
		}
		if msg.created {
			target = msg.rev
			if d.until > 0 {
				target = min(target, d.until)
			}
			if target < from-1 {
				// Revisions the member does not have would never come: the store holds
				// another history above the member's.
				return 0, false, fmt.Errorf("delta capture: %w: the member's revision %d is below revision %d, the newest stored on timeline %d",
					ErrHistoryRestarted, target, from-1, d.opts.Timeline.ID)
			}
		}
		if target >= 0 && d.next > target {
			return target, true, nil
		}
	}
}

// sameCluster fails with ErrHistoryRestarted if a response's cluster ID (0: none) is not the
// timeline's.
func (d *deltaBuffer) sameCluster(id uint64) error {
	if id != 0 && id != d.opts.Timeline.ClusterID {
		return fmt.Errorf("delta capture: %w: the member is of cluster %x, timeline %d holds cluster %x's history",
			ErrHistoryRestarted, id, d.opts.Timeline.ID, d.opts.Timeline.ClusterID)
	}
	return nil
}

// roundTimeout is the least time a round may take before it ends where it is.
const roundTimeout = 10 * time.Second

// errRoundStalled: a round read nothing in its time. Tried again, like a broken connection.
type errRoundStalled struct{ limit time.Duration }

func (e errRoundStalled) Error() string {
	return fmt.Sprintf("etcd sent no revision within %v", e.limit)
}

// deltaBuffer holds the events of whole revisions not stored yet, framed as delta records
// and compressed as they arrive.
type deltaBuffer struct {
	opts     DeltaOptions
	payload  *backup.PayloadBuffer
	frame    [binary.MaxVarintLen64]byte
	first    int64
	last     int64
	events   int64
	next     int64 // the next revision expected from the watch
	until    int64 // the last revision to read (0: up to the member's revision)
	failures int
}

func (d *deltaBuffer) pending() bool { return d.events > 0 }

// add buffers one event: an mvccpb.Event as etcd encodes it, whose kv has mod revision rev.
func (d *deltaBuffer) add(rev int64, event []byte) error {
	switch {
	case rev == d.last && d.events > 0:
		// Another event of the revision being buffered.
	case rev == d.next:
		d.next = rev + 1
	case rev < d.next:
		return fmt.Errorf("%w: revision %d arrived after %d", ErrHole, rev, d.next-1)
	default:
		return fmt.Errorf("%w: expected revision %d, got %d (revisions %d-%d missing)", ErrHole, d.next, rev, d.next, rev-1)
	}
	if len(event) > backup.MaxEventSize {
		return fmt.Errorf("delta capture: event at revision %d is %d bytes, more than the %d-byte limit", rev, len(event), backup.MaxEventSize)
	}
	if d.events == 0 {
		d.first = rev
	}
	d.last = rev
	d.events++
	// The record: a uvarint length, then the event (backup.EventWriter's framing).
	n := binary.PutUvarint(d.frame[:], uint64(len(event)))
	if _, err := d.payload.Write(d.frame[:n]); err != nil {
		return err
	}
	_, err := d.payload.Write(event)
	return err
}

// finalFlushTimeout bounds the flush of what is held when the capture is told to stop.
const finalFlushTimeout = 10 * time.Second

// finalFlush stores what the buffer holds once the capture's ctx has ended: a sidecar told to
// stop (its pod deleted, leadership moved) stores the revisions it has read instead of
// leaving them to a Period's worth of loss should the cluster never come back. They are whole
// revisions of the member's committed history, contiguous after the store's; within the
// timeout, or they are dropped as before (the next backup leader resumes from the store).
func (d *deltaBuffer) finalFlush(ctx context.Context, s *store.Store) {
	if !d.pending() {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalFlushTimeout)
	defer cancel()
	_ = d.flush(fctx, s)
}

// flush stores the buffer as one delta object and reads it back, retrying with backoff until
// it succeeds or ctx ends (then it returns ctx's error and the buffer is dropped: the next
// backup leader resumes from the store). An object that does not read back is written again
// from the buffer.
func (d *deltaBuffer) flush(ctx context.Context, s *store.Store) error {
	backoff := 500 * time.Millisecond
	for {
		start := time.Now()
		key := backup.DeltaKey(d.opts.Timeline.ID, d.first, d.last)
		hdr := backup.Header{Kind: backup.KindDelta, Timeline: d.opts.Timeline.ID, Compression: backup.CompressionZstd, EtcdVersion: d.opts.EtcdVersion,
			ClusterID: d.opts.Timeline.ClusterID, FirstRev: d.first, LastRev: d.last, Created: start.UTC()}
		tr, err := backup.WriteBufferedObject(ctx, s, key, hdr, d.payload)
		if err == nil {
			err = readBack(ctx, s, key)
		}
		if err == nil {
			if d.opts.OnFlush != nil {
				d.opts.OnFlush(Delta{Key: key, FirstRev: d.first, LastRev: d.last, Events: d.events, Size: tr.PayloadSize,
					Created: start.UTC(), FlushTook: time.Since(start)})
			}
			d.payload.Reset(min(d.opts.MaxBytes, payloadKeep)) // what a burst needed beyond that goes back
			d.events, d.failures = 0, 0
			return nil
		}
		d.failures++
		if d.opts.OnError != nil {
			d.opts.OnError(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}
