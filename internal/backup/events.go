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
	ev := new(mvccpb.Event)
	if err := e.read(ev); err != nil {
		return nil, err
	}
	return ev, nil
}

// ReadEventInto is ReadEvent into ev, whose key-value and buffers it reuses: a reader that
// only checks the events allocates nothing per event. What ev holds is valid until the next
// call; it is the event ReadEvent would return, except that ev.Kv's key and value may be empty
// rather than nil when the record has none.
func (e *EventReader) ReadEventInto(ev *mvccpb.Event) error {
	kv := ev.Kv
	if kv == nil {
		kv = new(mvccpb.KeyValue)
	}
	// Unmarshal leaves the fields a record lacks as they were: start from zero.
	*kv = mvccpb.KeyValue{Key: kv.Key[:0], Value: kv.Value[:0]}
	*ev = mvccpb.Event{Kv: kv}
	return e.read(ev)
}

// ReadEventIn is ReadEvent into ev and its key-value (both overwritten), whose key and value
// are not copies but point into the record, which is read into alloc(size) (a slice of size
// bytes the caller keeps, e.g. from an arena): a reader that keeps many events makes one
// allocation per arena instead of two per event. Those bytes must not change while the event
// is used.
func (e *EventReader) ReadEventIn(ev *mvccpb.Event, alloc func(size int) []byte) error {
	if ev.Kv == nil {
		ev.Kv = new(mvccpb.KeyValue)
	}
	*ev = mvccpb.Event{Kv: ev.Kv}
	*ev.Kv = mvccpb.KeyValue{}
	return e.readEvent(ev, alloc)
}

func (e *EventReader) read(ev *mvccpb.Event) error { return e.readEvent(ev, nil) }

// readEvent reads the next record and decodes it into ev: with alloc, in place (ev's key and
// value point into the record, read into alloc's bytes); without, copying every byte field.
func (e *EventReader) readEvent(ev *mvccpb.Event, alloc func(int) []byte) error {
	size, n, err := readUvarint(e.r)
	if err == io.EOF && n == 0 {
		return io.EOF
	}
	if err != nil {
		return e.fail(err, "read the length of event %d", e.count+1)
	}
	if size > MaxEventSize {
		return fmt.Errorf("backup object %s: %w: event %d claims %d bytes, more than the %d-byte limit", e.key, ErrCorrupt, e.count+1, size, MaxEventSize)
	}
	var b []byte
	if alloc == nil {
		if cap(e.buf) < int(size) {
			e.buf = make([]byte, size)
		}
		b = e.buf[:size]
	} else {
		b = alloc(int(size))[:size:size]
	}
	if _, err := io.ReadFull(e.r, b); err != nil {
		return e.fail(err, "read event %d (%d bytes)", e.count+1, size)
	}
	if alloc == nil || !decodeEventInPlace(ev, b) {
		// Copies every byte field out of b. decodeEventInPlace leaves what it does not decode
		// exactly as Unmarshal would (anything but the fields a watch fills, once each) to
		// Unmarshal, from scratch.
		if alloc != nil {
			*ev = mvccpb.Event{}
		}
		if err := ev.Unmarshal(b); err != nil {
			return fmt.Errorf("backup object %s: %w: event %d does not decode: %v", e.key, ErrCorrupt, e.count+1, err)
		}
	}
	if ev.Kv == nil || ev.Kv.ModRevision < 1 {
		return fmt.Errorf("backup object %s: %w: event %d has no key-value or revision", e.key, ErrCorrupt, e.count+1)
	}
	if ev.Kv.ModRevision < e.last {
		return fmt.Errorf("backup object %s: %w: event %d at revision %d comes after revision %d", e.key, ErrCorrupt, e.count+1, ev.Kv.ModRevision, e.last)
	}
	e.last = ev.Kv.ModRevision
	e.count++
	return nil
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

// decodeEventInPlace decodes b, the protobuf encoding of an mvccpb.Event, into ev (an empty
// event with an empty key-value), with the key and value pointing into b. It decodes only the
// common form, which it decodes exactly as a new event's Unmarshal does: the type and the
// key-value, each at most once with the wire type of its field, and in the key-value only
// its six fields (key, create_revision, mod_revision, version, value, lease), each at most
// once. For anything else (a previous key-value, an unknown field, a field repeated or of
// another wire type, a damaged encoding) it returns false, and ev is to be decoded again by
// Unmarshal. FuzzDecodeEventInPlace holds it to that.
func decodeEventInPlace(ev *mvccpb.Event, b []byte) bool {
	var seen uint8
	for i := 0; i < len(b); {
		tag, ok := uvarintAt(b, &i)
		if !ok {
			return false
		}
		switch tag {
		case 1 << 3: // type (field 1, wire type varint)
			v, ok := uvarintAt(b, &i)
			if !ok || seen&1 != 0 {
				return false
			}
			ev.Type, seen = mvccpb.Event_EventType(v), seen|1
		case 2<<3 | 2: // kv (field 2, wire type bytes)
			m, ok := lengthAt(b, &i)
			if !ok || seen&2 != 0 || !decodeKVInPlace(ev.Kv, m) {
				return false
			}
			seen |= 2
		default:
			return false
		}
	}
	if seen&2 == 0 {
		ev.Kv = nil // as Unmarshal leaves a fresh event without one
	}
	return true
}

func decodeKVInPlace(kv *mvccpb.KeyValue, b []byte) bool {
	var seen uint8
	for i := 0; i < len(b); {
		tag, ok := uvarintAt(b, &i)
		if !ok {
			return false
		}
		field := tag >> 3
		if field < 1 || field > 6 || seen&(1<<field) != 0 {
			return false
		}
		seen |= 1 << field
		if field == 1 || field == 5 { // key, value: bytes
			if tag&7 != 2 {
				return false
			}
			v, ok := lengthAt(b, &i)
			if !ok {
				return false
			}
			if field == 1 {
				kv.Key = v
			} else {
				kv.Value = v
			}
			continue
		}
		if tag&7 != 0 {
			return false
		}
		v, ok := uvarintAt(b, &i)
		if !ok {
			return false
		}
		switch field {
		case 2:
			kv.CreateRevision = int64(v)
		case 3:
			kv.ModRevision = int64(v)
		case 4:
			kv.Version = int64(v)
		case 6:
			kv.Lease = int64(v)
		}
	}
	return true
}

// uvarintAt decodes the varint at b[*i:] as the generated protobuf code does (at most ten
// bytes, the bits past 64 dropped) and moves *i past it.
func uvarintAt(b []byte, i *int) (uint64, bool) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if *i >= len(b) {
			return 0, false
		}
		c := b[*i]
		*i++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, true
		}
	}
	return 0, false
}

// lengthAt decodes a length-delimited field's bytes at b[*i:] and moves *i past them.
func lengthAt(b []byte, i *int) ([]byte, bool) {
	n, ok := uvarintAt(b, i)
	if !ok || n > uint64(len(b)-*i) {
		return nil, false
	}
	v := b[*i : *i+int(n) : *i+int(n)]
	*i += int(n)
	return v, true
}
