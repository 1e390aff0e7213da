package backup

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// MaxEventSize bounds one framed event. etcd's request limit is far lower
// (1.5 MiB by default); the bound keeps a damaged length prefix from
// making a reader allocate gigabytes before the checksum catches it.
const MaxEventSize = 64 << 20

// EventWriter frames events for a delta payload: each record is a uvarint
// length followed by the protobuf-marshalled mvccpb.Event. Events must
// come in revision order (Kv.ModRevision, also for DELETE events); several
// events may share a revision (one transaction).
type EventWriter struct {
	w     io.Writer
	buf   []byte
	count int64
	first int64
	last  int64
}

// NewEventWriter returns a writer of framed events to w (usually an
// ObjectWriter).
func NewEventWriter(w io.Writer) *EventWriter { return &EventWriter{w: w} }

// WriteEvent appends one event.
func (e *EventWriter) WriteEvent(ev *mvccpb.Event) error {
	if ev == nil || ev.Kv == nil {
		return errors.New("write event: event has no key-value")
	}
	rev := ev.Kv.ModRevision
	if rev < 1 {
		return fmt.Errorf("write event for key %q: mod revision %d is not a revision", ev.Kv.Key, rev)
	}
	if rev < e.last {
		return fmt.Errorf("write event for key %q: revision %d comes after revision %d: events must be in revision order", ev.Kv.Key, rev, e.last)
	}
	size := ev.Size()
	if size > MaxEventSize {
		return fmt.Errorf("write event for key %q at revision %d: %d bytes is more than the %d-byte limit", ev.Kv.Key, rev, size, MaxEventSize)
	}
	need := binary.MaxVarintLen64 + size
	if cap(e.buf) < need {
		e.buf = make([]byte, need)
	}
	b := e.buf[:need]
	n := binary.PutUvarint(b, uint64(size))
	if _, err := ev.MarshalToSizedBuffer(b[n : n+size]); err != nil {
		return fmt.Errorf("marshal event for key %q at revision %d: %w", ev.Kv.Key, rev, err)
	}
	if _, err := e.w.Write(b[:n+size]); err != nil {
		return fmt.Errorf("write event at revision %d: %w", rev, err)
	}
	if e.count == 0 {
		e.first = rev
	}
	e.count++
	e.last = rev
	return nil
}

// Count is the number of events written.
func (e *EventWriter) Count() int64 { return e.count }

// Revisions returns the revisions of the first and last event written
// (0, 0 before the first): the range to name the delta by.
func (e *EventWriter) Revisions() (first, last int64) { return e.first, e.last }

// EventReader reads events framed by EventWriter.
type EventReader struct {
	r     *bufio.Reader
	key   string
	buf   []byte
	last  int64
	count int64
}

// NewEventReader reads framed events from r (usually an ObjectReader);
// key names the object in errors.
func NewEventReader(r io.Reader, key string) *EventReader {
	return &EventReader{r: bufio.NewReaderSize(r, 64<<10), key: key}
}

// ReadEvent returns the next event, io.EOF after the last one, or an error
// naming the object (wrapping ErrCorrupt for a torn or damaged record).
func (e *EventReader) ReadEvent() (*mvccpb.Event, error) {
	size, n, err := readUvarint(e.r)
	if err == io.EOF && n == 0 {
		return nil, io.EOF
	}
	if err != nil {
		return nil, e.fail(err, "read the length of event %d", e.count+1)
	}
	if size > MaxEventSize {
		return nil, fmt.Errorf("backup object %s: %w: event %d claims %d bytes, more than the %d-byte limit", e.key, ErrCorrupt, e.count+1, size, MaxEventSize)
	}
	if cap(e.buf) < int(size) {
		e.buf = make([]byte, size)
	}
	b := e.buf[:size]
	if _, err := io.ReadFull(e.r, b); err != nil {
		return nil, e.fail(err, "read event %d (%d bytes)", e.count+1, size)
	}
	ev := new(mvccpb.Event)
	if err := ev.Unmarshal(b); err != nil { // copies every byte field out of b
		return nil, fmt.Errorf("backup object %s: %w: event %d does not decode: %v", e.key, ErrCorrupt, e.count+1, err)
	}
	if ev.Kv == nil || ev.Kv.ModRevision < 1 {
		return nil, fmt.Errorf("backup object %s: %w: event %d has no key-value or revision", e.key, ErrCorrupt, e.count+1)
	}
	if ev.Kv.ModRevision < e.last {
		return nil, fmt.Errorf("backup object %s: %w: event %d at revision %d comes after revision %d", e.key, ErrCorrupt, e.count+1, ev.Kv.ModRevision, e.last)
	}
	e.last = ev.Kv.ModRevision
	e.count++
	return ev, nil
}

// Count is the number of events read.
func (e *EventReader) Count() int64 { return e.count }

func (e *EventReader) fail(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("backup object %s: %w: torn record: the payload ends inside event %d", e.key, ErrCorrupt, e.count+1)
	}
	if errors.Is(err, ErrCorrupt) && !strings.Contains(err.Error(), e.key) {
		return fmt.Errorf("backup object %s: %w", e.key, err)
	}
	if errors.Is(err, ErrCorrupt) || strings.Contains(err.Error(), e.key) {
		return err // already names the object
	}
	return fmt.Errorf("backup object %s: %s: %w", e.key, what, err)
}

// readUvarint is binary.ReadUvarint that also says how many bytes it read
// and calls an overlong varint damage.
func readUvarint(r io.ByteReader) (uint64, int, error) {
	var x uint64
	var s uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		b, err := r.ReadByte()
		if err != nil {
			if err == io.EOF && i > 0 {
				err = io.ErrUnexpectedEOF
			}
			return 0, i, err
		}
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				break
			}
			return x | uint64(b)<<s, i + 1, nil
		}
		x |= uint64(b&0x7f) << s
		s += 7
	}
	return 0, binary.MaxVarintLen64, fmt.Errorf("%w: event length is not a valid varint", ErrCorrupt)
}
