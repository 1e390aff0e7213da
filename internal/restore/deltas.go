package restore

import (
	"context"
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
// A delta is applied only after all of it was read and verified (checksum, decryption,
// decompression, every event and the revisions its name gives), so a damaged object is never
// applied. Three goroutines share the work:
//   - the prefetch reads the next object from the store and verifies it, without keeping its
//     events, while the current one is applied; it keeps the object's bytes as stored
//     (compressed, and encrypted if it is), if they fit in memLimit;
//   - a decoder decodes the current object again, from those bytes (or, for an object too
//     large to keep, from the store: a second read), a few hundred events ahead of the replay;
//   - Next hands the events to the replay.
//
// What is held is about two objects as stored (the next one, and what is left of the current
// one) plus the events of a few batches, whatever the objects' sizes once decoded; each byte is
// decompressed and decoded twice.
//
// When an object cannot be fetched (missing, damaged), the events end there (io.EOF) after
// everything before it, so Replay finishes on a revision boundary; StopErr says why.
type deltaSource struct {
	ctx    context.Context
	cancel context.CancelFunc
	s      *store.Store
	limit  int64
	chunks *chunkPool // of held objects

	fetched chan fetchedDelta
	wg      sync.WaitGroup
	bytes   atomic.Int64

	after   int64         // events at or below this revision are skipped
	cur     *fetchedDelta // the object whose events Next returns
	batches chan eventBatch
	batch   []*mvccpb.Event
	next    int   // index into batch
	end     error // after batch, the current object ends: io.EOF, or why its second read failed
	curMax  int64 // the newest revision of cur returned
	trimmed int64
	stopErr error
	lastHdr *backup.Header
}

type fetchedDelta struct {
	obj  backup.Object
	hdr  backup.Header
	held *heldObject // the object as stored, verified; nil: too large to keep, read it again
	err  error
}

// eventBatch is a run of the current object's events, decoded; err is io.EOF after the last.
type eventBatch struct {
	events  []*mvccpb.Event
	trimmed int64
	err     error
}

// decodeBatch is the number of events the decoder sends at a time; decodeAhead batches may
// wait for the replay.
const (
	decodeBatch = 256
	decodeAhead = 4
)

func newDeltaSource(ctx context.Context, s *store.Store, objs []backup.Object, after, memLimit int64) *deltaSource {
	ctx, cancel := context.WithCancel(ctx)
	d := &deltaSource{ctx: ctx, cancel: cancel, s: s, limit: memLimit, chunks: newChunkPool(), after: after, fetched: make(chan fetchedDelta)}
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

// fetch reads one object to its end and verifies everything, keeping its bytes as stored if
// they fit; its events are checked, not kept.
func (d *deltaSource) fetch(o backup.Object) fetchedDelta {
	fd := fetchedDelta{obj: o}
	sr, err := d.s.NewReader(d.ctx, o.Key)
	if err != nil {
		fd.err = fmt.Errorf("delta %s: %w", o.Key, err)
		return fd
	}
	defer sr.Close()
	held := &heldObject{limit: d.limit, free: d.chunks}
	ce, closer, err := d.open(io.TeeReader(&byteCounter{r: sr, n: &d.bytes}, held), o)
	if err != nil {
		fd.err = err
		return fd
	}
	defer closer.Close()
	fd.hdr = ce.hdr
	var ev mvccpb.Event
	for {
		err := ce.check(&ev)
		if err == io.EOF {
			break
		}
		if err != nil {
			fd.err = err
			return fd
		}
	}
	if !held.over {
		fd.held = held
	}
	return fd
}

// open starts reading the object o from r (the store's reader, or the bytes kept).
func (d *deltaSource) open(r io.Reader, o backup.Object) (*checkedEvents, io.Closer, error) {
	hdr, or, err := backup.NewObjectReader(r, o.Key, d.s.Keys())
	if err != nil {
		return nil, nil, err
	}
	if err := backup.CheckHeader(o, hdr); err != nil {
		or.Close()
		return nil, nil, err
	}
	ce := &checkedEvents{o: o, hdr: hdr, er: backup.NewEventReader(or, o.Key), dc: backup.NewDeltaCheck(o)}
	return ce, or, nil
}

// decode reads the events of the verified object fd again and sends those above after to
// out, in batches, then io.EOF (or the error of a second read that failed).
func (d *deltaSource) decode(fd fetchedDelta, after int64, out chan<- eventBatch) {
	defer d.wg.Done()
	send := func(b eventBatch) bool {
		select {
		case out <- b:
			return true
		case <-d.ctx.Done():
			return false
		}
	}
	var r io.Reader
	if fd.held != nil {
		r = fd.held.reader()
	} else {
		sr, err := d.s.NewReader(d.ctx, fd.obj.Key)
		if err != nil {
			send(eventBatch{err: fmt.Errorf("delta %s: %w", fd.obj.Key, err)})
			return
		}
		defer sr.Close()
		r = &byteCounter{r: sr, n: &d.bytes}
	}
	ce, closer, err := d.open(r, fd.obj)
	if err != nil {
		send(eventBatch{err: err})
		return
	}
	defer closer.Close()
	// A batch's events and key-values are allocated together, and their keys and values
	// point into the records, kept in an arena.
	var b eventBatch
	var evs []mvccpb.Event
	var kvs []mvccpb.KeyValue
	var arena []byte
	newBatch := func() {
		b = eventBatch{events: make([]*mvccpb.Event, 0, decodeBatch)}
		evs, kvs = make([]mvccpb.Event, decodeBatch), make([]mvccpb.KeyValue, decodeBatch)
	}
	newBatch()
	for {
		i := len(b.events)
		ev := &evs[i]
		ev.Kv = &kvs[i]
		if err := ce.checkIn(ev, &arena); err != nil {
			b.err = err
			send(b)
			return
		}
		if ev.Kv.ModRevision <= after {
			b.trimmed++
			continue
		}
		b.events = append(b.events, ev)
		if len(b.events) == decodeBatch {
			if !send(b) {
				return
			}
			newBatch()
		}
	}
}

// Next implements EventSource.
func (d *deltaSource) Next() (*mvccpb.Event, error) {
	for {
		if d.next < len(d.batch) {
			ev := d.batch[d.next]
			d.batch[d.next] = nil // let the applied event go
			d.next++
			if rev := ev.Kv.ModRevision; rev <= d.after {
				d.trimmed++ // the decoder skips these already
				continue
			} else {
				d.curMax = rev
			}
			return ev, nil
		}
		if d.cur != nil && d.end != nil {
			// The current object's events are all out.
			if d.end != io.EOF {
				return nil, fmt.Errorf("second read of %s: %w", d.cur.obj.Key, d.end)
			}
			h := d.cur.hdr
			d.lastHdr = &h
			d.after = max(d.after, d.curMax)
			d.cur, d.batches, d.end = nil, nil, nil
			continue
		}
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
			d.cur, d.curMax = &fd, 0
			d.batches = make(chan eventBatch, decodeAhead)
			d.wg.Add(1)
			go d.decode(fd, d.after, d.batches)
		}
		var b eventBatch
		select {
		case b = <-d.batches:
		case <-d.ctx.Done():
			return nil, d.ctx.Err()
		}
		if err := d.ctx.Err(); err != nil {
			return nil, err
		}
		d.trimmed += b.trimmed
		d.batch, d.next, d.end = b.events, 0, b.err
	}
}

// Close stops the prefetch and the decoder and releases their readers.
func (d *deltaSource) Close() {
	d.cancel()
	d.wg.Wait()
	d.cur, d.batch = nil, nil
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
	o   backup.Object
	hdr backup.Header
	er  *backup.EventReader
	dc  *backup.DeltaCheck
}

// check reads the next event into ev (reusing it) and checks it.
func (c *checkedEvents) check(ev *mvccpb.Event) error {
	return c.checked(c.er.ReadEventInto(ev), ev)
}

// checkIn reads the next event into ev, its key and value in arena (see
// backup.EventReader.ReadEventIn), and checks it.
func (c *checkedEvents) checkIn(ev *mvccpb.Event, arena *[]byte) error {
	return c.checked(c.er.ReadEventIn(ev, arena), ev)
}

func (c *checkedEvents) checked(err error, ev *mvccpb.Event) error {
	if err == io.EOF {
		if err := c.dc.Done(); err != nil {
			return err
		}
		return io.EOF
	}
	if err != nil {
		return err
	}
	return c.dc.Next(ev.Kv.ModRevision)
}

// heldObject keeps an object's bytes as they are read, in chunks, up to limit bytes; past it
// it keeps nothing (over). Its reader hands each chunk back to free once read.
type heldObject struct {
	limit  int64
	free   *chunkPool
	n      int64
	over   bool
	chunks [][]byte
}

const heldChunk = 256 << 10

func (h *heldObject) Write(p []byte) (int, error) {
	if h.over {
		return len(p), nil
	}
	if h.n += int64(len(p)); h.n > h.limit {
		h.over = true
		for _, c := range h.chunks {
			h.free.put(c)
		}
		h.chunks = nil
		return len(p), nil
	}
	for rest := p; len(rest) > 0; {
		if len(h.chunks) == 0 || len(h.chunks[len(h.chunks)-1]) == heldChunk {
			h.chunks = append(h.chunks, h.free.get())
		}
		c := &h.chunks[len(h.chunks)-1]
		k := copy((*c)[len(*c):heldChunk], rest)
		*c, rest = (*c)[:len(*c)+k], rest[k:]
	}
	return len(p), nil
}

// reader returns a reader of the bytes kept, which frees each chunk once read: h must not be
// read again.
func (h *heldObject) reader() io.Reader {
	chunks := h.chunks
	h.chunks = nil
	return &chunkReader{chunks: chunks, free: h.free}
}

type chunkReader struct {
	chunks [][]byte
	free   *chunkPool
	off    int // into chunks[0]
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.chunks) > 0 && r.off == len(r.chunks[0]) {
		r.free.put(r.chunks[0])
		r.chunks[0], r.chunks, r.off = nil, r.chunks[1:], 0
	}
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0][r.off:])
	r.off += n
	return n, nil
}

// chunkPool keeps a few chunks that were read for the next object: the prefetch fills chunks
// about as fast as the decoder frees them.
type chunkPool struct{ c chan []byte }

func newChunkPool() *chunkPool { return &chunkPool{c: make(chan []byte, 8)} }

func (p *chunkPool) get() []byte {
	select {
	case c := <-p.c:
		return c[:0]
	default:
		return make([]byte, 0, heldChunk)
	}
}

func (p *chunkPool) put(c []byte) {
	select {
	case p.c <- c:
	default:
	}
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
