package snapshotter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrCompacted means the revision the deltas should continue from is compacted away: only
// a full snapshot can continue the chain.
var ErrCompacted = errors.New("delta capture: the next revision is compacted")

// ErrHole means the watch skipped revisions: the chain cannot continue without a full snapshot.
var ErrHole = errors.New("delta capture: revisions are missing from the watch")

// DeltaOptions configure RunDeltas.
type DeltaOptions struct {
	// Period is how often buffered events are written (default 5s).
	Period time.Duration
	// MaxBytes writes the buffer early once it holds this many bytes (default 16 MiB). It
	// bounds the memory delta capture uses, whatever the event rate.
	MaxBytes int
	// ClusterID and EtcdVersion go into each object's header.
	ClusterID   uint64
	EtcdVersion string
	// OnFlush is called after each delta object is stored.
	OnFlush func(Delta)
	// OnCurrent is called when everything up to rev is stored (after a flush, or when the
	// watch reports progress with nothing pending).
	OnCurrent func(rev int64, at time.Time)
	// OnError is called when storing fails; RunDeltas keeps retrying with backoff.
	OnError func(error)
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

// RunDeltas watches the member from revision from and stores delta objects until ctx ends
// (returns nil) or the chain cannot continue (ErrCompacted, ErrHole) or the watch fails.
// Each object holds whole revisions; revisions are contiguous from from.
func RunDeltas(ctx context.Context, m Member, s *store.Store, from int64, opts DeltaOptions) error {
	if opts.Period <= 0 {
		opts.Period = 5 * time.Second
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 16 << 20
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := m.Client.Watch(wctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(from))

	d := &deltaBuffer{opts: opts, next: from}
	tick := time.NewTicker(opts.Period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if d.pending() {
				if err := d.flush(ctx, s); err != nil {
					return nil // ctx ended while retrying
				}
			} else if opts.OnCurrent != nil {
				// Idle: if the member's revision is the last one stored, nothing is missing. (etcd
				// sends no progress notification to a watcher that starts past its revision.)
				sctx, cancel := context.WithTimeout(ctx, opts.Period)
				st, err := m.Client.Status(sctx, m.Endpoint)
				cancel()
				if err == nil && st.Header.Revision == d.next-1 {
					opts.OnCurrent(d.next-1, time.Now())
				}
			}
		case resp, ok := <-wch:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("delta capture: the watch closed")
			}
			if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
				return fmt.Errorf("%w: revision %d is below the compaction at %d", ErrCompacted, d.next, resp.CompactRevision)
			}
			if err := resp.Err(); err != nil {
				return fmt.Errorf("delta capture: watch from revision %d: %w", d.next, err)
			}
			if resp.IsProgressNotify() {
				continue
			}
			for _, ev := range resp.Events {
				if err := d.add(ev); err != nil {
					return err
				}
			}
			if d.buf.Len() >= opts.MaxBytes {
				if err := d.flush(ctx, s); err != nil {
					return nil
				}
			}
		}
	}
}

// deltaBuffer holds the encoded events of whole revisions not stored yet.
type deltaBuffer struct {
	opts     DeltaOptions
	buf      bytes.Buffer
	ew       *backup.EventWriter
	first    int64
	last     int64
	events   int64
	next     int64 // the next revision expected from the watch
	failures int
}

func (d *deltaBuffer) pending() bool { return d.events > 0 }

func (d *deltaBuffer) add(ev *clientv3.Event) error {
	rev := ev.Kv.ModRevision
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
	if d.ew == nil {
		d.ew = backup.NewEventWriter(&d.buf)
		d.first = rev
	}
	d.last = rev
	d.events++
	return d.ew.WriteEvent((*mvccpb.Event)(ev))
}

// flush stores the buffer as one delta object, retrying with backoff until it succeeds or
// ctx ends (then it returns ctx's error and the buffer is dropped: the next backup leader
// resumes from the store).
func (d *deltaBuffer) flush(ctx context.Context, s *store.Store) error {
	backoff := 500 * time.Millisecond
	for {
		start := time.Now()
		key := backup.DeltaKey(d.first, d.last)
		hdr := backup.Header{Kind: backup.KindDelta, Compression: backup.CompressionZstd, EtcdVersion: d.opts.EtcdVersion,
			ClusterID: d.opts.ClusterID, FirstRev: d.first, LastRev: d.last, Created: start.UTC()}
		tr, err := backup.WriteObject(ctx, s, key, hdr, func(w *backup.ObjectWriter) error {
			_, err := w.Write(d.buf.Bytes())
			return err
		})
		if err == nil {
			if d.opts.OnFlush != nil {
				d.opts.OnFlush(Delta{Key: key, FirstRev: d.first, LastRev: d.last, Events: d.events, Size: tr.PayloadSize,
					Created: start.UTC(), FlushTook: time.Since(start)})
			}
			if d.opts.OnCurrent != nil {
				d.opts.OnCurrent(d.last, time.Now())
			}
			if d.buf.Cap() > d.opts.MaxBytes {
				d.buf = bytes.Buffer{} // a burst grew it past the limit: give the memory back
			} else {
				d.buf.Reset()
			}
			d.ew, d.events, d.failures = nil, 0, 0
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
