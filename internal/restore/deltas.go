package restore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
)

// deltaSource is the EventSource of a restore: the events of delta objects in order, with
// revisions at or below what is already applied skipped (the snapshot's own, and overlaps
// between deltas written around a leader hand-off).
//
// A delta is applied only after all of it was read and its checksum verified, so a damaged
// object is never applied: a goroutine fetches the next object (download, checksum, decode)
// while the current one is applied. Objects whose events fit in memLimit are held decoded;
// a larger one is verified in a first pass and streamed again in a second, so memory stays
// bounded by about two objects of memLimit.
//
// When an object cannot be fetched (missing, damaged), the events end there (io.EOF) after
// everything before it, so Replay finishes on a revision boundary; StopErr says why.
type deltaSource struct {
	ctx    context.Context
	cancel context.CancelFunc
	s      *store.Store
	limit  int64

	fetched chan fetchedDelta
	wg      sync.WaitGroup
	bytes   atomic.Int64

	after   int64 // events at or below this revision are skipped
	cur     *fetchedDelta
	next    int // index into cur.events
	curMax  int64
	stream  *checkedEvents // cur is streamed
	closer  io.Closer
	trimmed int64
	stopErr error
	lastHdr *backup.Header
}

type fetchedDelta struct {
	obj    backup.Object
	hdr    backup.Header
	events []*mvccpb.Event // nil when streamed
	stream bool
	err    error
}

func newDeltaSource(ctx context.Context, s *store.Store, objs []backup.Object, after, memLimit int64) *deltaSource {
	ctx, cancel := context.WithCancel(ctx)
	d := &deltaSource{ctx: ctx, cancel: cancel, s: s, limit: memLimit, after: after, fetched: make(chan fetchedDelta)}
	d.wg.Add(1)
	go d.prefetch(objs)
	return d
}

// prefetch fetches objects in order; the unbuffered channel lets it work on one object ahead
// of the one being applied.
func (d *deltaSource) prefetch(objs []backup.Object) {
	defer d.wg.Done()
	defer close(d.fetched)
	for _, o := range objs {
		fd := d.fetch(o)
		select {
		case d.fetched <- fd:
		case <-d.ctx.Done():
			return
		}
		if fd.err != nil {
			return
		}
	}
}

// fetch reads one object to its end, verifying everything, and keeps its events if they fit.
func (d *deltaSource) fetch(o backup.Object) fetchedDelta {
	fd := fetchedDelta{obj: o}
	ce, closer, err := d.open(o)
	if err != nil {
		fd.err = err
		return fd
	}
	defer closer.Close()
	fd.hdr = ce.hdr
	var size int64
	for {
		ev, err := ce.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fd.err, fd.events = err, nil
			return fd
		}
		if fd.stream {
			continue
		}
		size += int64(ev.Size())
		if size > d.limit {
			fd.stream, fd.events = true, nil
			continue
		}
		fd.events = append(fd.events, ev)
	}
	return fd
}

func (d *deltaSource) open(o backup.Object) (*checkedEvents, io.Closer, error) {
	sr, err := d.s.NewReader(d.ctx, o.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("delta %s: %w", o.Key, err)
	}
	hdr, or, err := backup.NewObjectReader(&byteCounter{r: sr, n: &d.bytes}, o.Key, d.s.Keys())
	if err != nil {
		sr.Close()
		return nil, nil, err
	}
	closer := closers{or, sr}
	if err := backup.CheckHeader(o, hdr); err != nil {
		closer.Close()
		return nil, nil, err
	}
	ce := &checkedEvents{o: o, hdr: hdr, er: backup.NewEventReader(or, o.Key), check: backup.NewDeltaCheck(o)}
	return ce, closer, nil
}

// Next implements EventSource.
func (d *deltaSource) Next() (*mvccpb.Event, error) {
	for {
		if d.cur == nil {
			if d.stopErr != nil {
				return nil, io.EOF
			}
			var fd fetchedDelta
			var ok bool
			select {
			case fd, ok = <-d.fetched:
			case <-d.ctx.Done():
				return nil, d.ctx.Err()
			}
			// A cancelled restore must not pass for the end of the events (or a partial one).
			if err := d.ctx.Err(); err != nil {
				return nil, err
			}
			if !ok {
				return nil, io.EOF
			}
			if fd.err != nil {
				d.stopErr = fd.err
				return nil, io.EOF
			}
			if fd.stream {
				ce, closer, err := d.open(fd.obj)
				if err != nil {
					return nil, fmt.Errorf("second read of %s: %w", fd.obj.Key, err)
				}
				d.stream, d.closer = ce, closer
			}
			d.cur, d.next, d.curMax = &fd, 0, 0
		}
		ev, err := d.nextOfCurrent()
		if err == io.EOF {
			h := d.cur.hdr
			d.lastHdr = &h
			d.after = max(d.after, d.curMax)
			d.endCurrent()
			continue
		}
		if err != nil {
			return nil, err
		}
		if rev := ev.Kv.ModRevision; rev <= d.after {
			d.trimmed++
			continue
		} else {
			d.curMax = rev
		}
		return ev, nil
	}
}

func (d *deltaSource) nextOfCurrent() (*mvccpb.Event, error) {
	if d.stream != nil {
		ev, err := d.stream.next()
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("second read of %s: %w", d.cur.obj.Key, err)
		}
		return ev, err
	}
	if d.next >= len(d.cur.events) {
		return nil, io.EOF
	}
	ev := d.cur.events[d.next]
	d.cur.events[d.next] = nil // let the applied event go
	d.next++
	return ev, nil
}

func (d *deltaSource) endCurrent() {
	if d.closer != nil {
		d.closer.Close()
	}
	d.cur, d.stream, d.closer = nil, nil, nil
}

// Close stops the prefetch and releases its readers.
func (d *deltaSource) Close() {
	d.cancel()
	d.wg.Wait()
	if d.cur != nil {
		d.endCurrent()
	}
}

// StopErr is why the events ended before the last object, if they did.
func (d *deltaSource) StopErr() error { return d.stopErr }

// Trimmed counts events skipped as already applied.
func (d *deltaSource) Trimmed() int64 { return d.trimmed }

// Bytes counts the bytes read from the store, second reads included.
func (d *deltaSource) Bytes() int64 { return d.bytes.Load() }

// LastHeader is the header of the last object read to its end.
func (d *deltaSource) LastHeader() (backup.Header, bool) {
	if d.lastHdr == nil {
		return backup.Header{}, false
	}
	return *d.lastHdr, true
}

// checkedEvents reads a delta's events and checks them against the object's name (see
// backup.DeltaCheck).
type checkedEvents struct {
	o     backup.Object
	hdr   backup.Header
	er    *backup.EventReader
	check *backup.DeltaCheck
}

func (c *checkedEvents) next() (*mvccpb.Event, error) {
	ev, err := c.er.ReadEvent()
	if err == io.EOF {
		if err := c.check.Done(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}
	if err != nil {
		return nil, err
	}
	if err := c.check.Next(ev.Kv.ModRevision); err != nil {
		return nil, err
	}
	return ev, nil
}

// byteCounter counts bytes read into a shared counter.
type byteCounter struct {
	r io.Reader
	n *atomic.Int64
}

func (b *byteCounter) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	return n, err
}

type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
