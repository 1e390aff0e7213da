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
// decompressed and decoded twice. The batches are used again once Replay has applied their
// events (Release), so decoding allocates next to nothing.
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
	batch   *batchBuf   // the batch whose events Next returns
	next    int         // index into batch.events
	given   []*batchBuf // batches whose events were all returned, oldest first
	free    chan *batchBuf
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
	buf     *batchBuf
	trimmed int64
	err     error
}

// batchBuf holds a batch of decoded events: the events, their key-values, and their records
// (which the keys and values point into), all used again for a later batch.
type batchBuf struct {
	events []*mvccpb.Event
	evs    []mvccpb.Event
	kvs    []mvccpb.KeyValue
	arena  [][]byte
	cur    int   // arena chunk being filled
	bytes  int   // of the arena in use
	newest int64 // the newest revision of events

	undoChunk, undoLen int // the arena before the last alloc
}

const batchArenaChunk = 64 << 10

func newBatchBuf() *batchBuf {
	return &batchBuf{events: make([]*mvccpb.Event, 0, decodeBatch), evs: make([]mvccpb.Event, decodeBatch), kvs: make([]mvccpb.KeyValue, decodeBatch)}
}

// reset empties the batch for use again; chunks made for an event larger than a chunk go.
func (b *batchBuf) reset() {
	clear(b.events)
	b.events, b.cur, b.bytes, b.newest = b.events[:0], 0, 0, 0
	kept := b.arena[:0]
	for _, c := range b.arena {
		if cap(c) == batchArenaChunk {
			kept = append(kept, c[:0])
		}
	}
	clear(b.arena[len(kept):])
	b.arena = kept
}

// alloc returns n bytes of the batch's arena.
func (b *batchBuf) alloc(n int) []byte {
	b.bytes += n
	for ; b.cur < len(b.arena); b.cur++ {
		if c := b.arena[b.cur]; cap(c)-len(c) >= n {
			b.undoChunk, b.undoLen = b.cur, len(c)
			b.arena[b.cur] = c[:len(c)+n]
			return c[len(c) : len(c)+n]
		}
	}
	b.arena = append(b.arena, make([]byte, n, max(n, batchArenaChunk)))
	b.undoChunk, b.undoLen = b.cur, 0
	return b.arena[b.cur][:n]
}

// poisonReleased makes Release overwrite the events it releases (tests): an event used after
// its release is then seen at once, not only when its batch happens to be decoded into again.
var poisonReleased bool

func (b *batchBuf) poison() {
	for _, ev := range b.events {
		*ev.Kv = mvccpb.KeyValue{Key: []byte("released"), ModRevision: -1}
	}
	for _, c := range b.arena {
		for i := range c {
			c[i] = 0xa5
		}
	}
}

// undo gives back the bytes of the last alloc (an event not kept).
func (b *batchBuf) undo() {
	c := b.arena[b.undoChunk]
	b.bytes -= len(c) - b.undoLen
	b.arena[b.undoChunk], b.cur = c[:b.undoLen], b.undoChunk
}

// The decoder sends decodeBatch events at a time, or fewer holding decodeBatchBytes;
// decodeAhead batches may wait for the replay; keepBatches batches are kept for use again.
const (
	decodeBatch      = 256
	decodeBatchBytes = 256 << 10
	decodeAhead      = 4
	keepBatches      = 8
)

func newDeltaSource(ctx context.Context, s *store.Store, objs []backup.Object, after, memLimit int64) *deltaSource {
	ctx, cancel := context.WithCancel(ctx)
	d := &deltaSource{ctx: ctx, cancel: cancel, s: s, limit: memLimit, chunks: newChunkPool(), after: after,
		fetched: make(chan fetchedDelta), free: make(chan *batchBuf, keepBatches)}
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
	// point into the records, kept in the batch's arena; batches Replay is done with come back.
	var b eventBatch
	newBatch := func() {
		select {
		case buf := <-d.free:
			buf.reset()
			b = eventBatch{buf: buf}
		default:
			b = eventBatch{buf: newBatchBuf()}
		}
	}
	newBatch()
	for {
		buf := b.buf
		i := len(buf.events)
		ev := &buf.evs[i]
		ev.Kv = &buf.kvs[i]
		if err := ce.checkIn(ev, buf.alloc); err != nil {
			b.err = err
			send(b)
			return
		}
		if ev.Kv.ModRevision <= after {
			b.trimmed++
			buf.undo()
			continue
		}
		buf.events = append(buf.events, ev)
		buf.newest = ev.Kv.ModRevision
		if len(buf.events) == decodeBatch || buf.bytes >= decodeBatchBytes {
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
		if d.batch != nil && d.next < len(d.batch.events) {
			ev := d.batch.events[d.next]
			d.next++
			if d.next == len(d.batch.events) {
				// Used again once Replay has applied these events (Release).
				d.given, d.batch = append(d.given, d.batch), nil
			}
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
		d.batch, d.next, d.end = b.buf, 0, b.err
		if d.batch != nil && len(d.batch.events) == 0 {
			d.given, d.batch = append(d.given, d.batch), nil
		}
	}
}

// Release implements Replay's release of the events it has applied: the batches whose events
// are all at or below rev are used again.
func (d *deltaSource) Release(rev int64) {
	for len(d.given) > 0 && d.given[0].newest <= rev {
		if poisonReleased {
			d.given[0].poison()
		}
		select {
		case d.free <- d.given[0]:
		default:
		}
		d.given[0] = nil
		d.given = d.given[1:]
	}
}

// Close stops the prefetch and the decoder and releases their readers.
func (d *deltaSource) Close() {
	d.cancel()
	d.wg.Wait()
	d.cur, d.batch, d.given = nil, nil, nil
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

// checkIn reads the next event into ev, its key and value in place in alloc's bytes (see
// backup.EventReader.ReadEventIn), and checks it.
func (c *checkedEvents) checkIn(ev *mvccpb.Event, alloc func(int) []byte) error {
	return c.checked(c.er.ReadEventIn(ev, alloc), ev)
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

func newChunkPool() *chunkPool { return &chunkPool{c: make(chan []byte, 4)} }

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
