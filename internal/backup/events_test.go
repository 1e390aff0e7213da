package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

const deltaTestKey = "v1/delta/00000000000000000010-00000000000000000013.ev.zst"

func put(key, val string, create, mod, ver int64) *mvccpb.Event {
	return &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{
		Key: []byte(key), Value: []byte(val), CreateRevision: create, ModRevision: mod, Version: ver, Lease: 7,
	}}
}

func del(key string, mod int64, prev *mvccpb.KeyValue) *mvccpb.Event {
	return &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: mod}, PrevKv: prev}
}

// testEvents covers revisions 10-13, with a two-event transaction at 12
// and a delete carrying its previous value.
func testEvents() []*mvccpb.Event {
	return []*mvccpb.Event{
		put("/a", "1", 10, 10, 1),
		put("/b", strings.Repeat("v", 300), 11, 11, 1),
		put("/a", "2", 10, 12, 2),
		del("/b", 12, &mvccpb.KeyValue{Key: []byte("/b"), Value: []byte("old"), CreateRevision: 11, ModRevision: 11, Version: 1}),
		put("/empty", "", 13, 13, 1),
	}
}

func encodeEvents(t *testing.T, evs []*mvccpb.Event) []byte {
	t.Helper()
	var buf bytes.Buffer
	ew := NewEventWriter(&buf)
	for _, ev := range evs {
		if err := ew.WriteEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestEventsRoundTrip(t *testing.T) {
	evs := testEvents()
	var buf bytes.Buffer
	ew := NewEventWriter(&buf)
	for _, ev := range evs {
		if err := ew.WriteEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	if first, last := ew.Revisions(); first != 10 || last != 13 || ew.Count() != 5 {
		t.Fatalf("Revisions() = %d-%d, Count() = %d", first, last, ew.Count())
	}
	// The framing is exactly uvarint length + Marshal().
	want0, _ := evs[0].Marshal()
	if n, k := binary.Uvarint(buf.Bytes()); int(n) != len(want0) || !bytes.Equal(buf.Bytes()[k:k+int(n)], want0) {
		t.Fatal("first record is not uvarint(len) + Event.Marshal()")
	}

	er := NewEventReader(&buf, deltaTestKey)
	for i, want := range evs {
		got, err := er.ReadEvent()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		gb, _ := got.Marshal()
		wb, _ := want.Marshal()
		if !bytes.Equal(gb, wb) || string(got.Kv.Key) != string(want.Kv.Key) || got.Kv.ModRevision != want.Kv.ModRevision {
			t.Fatalf("event %d = %v, want %v", i, got, want)
		}
	}
	if _, err := er.ReadEvent(); err != io.EOF {
		t.Fatalf("after the last event: %v, want io.EOF", err)
	}
	if er.Count() != int64(len(evs)) {
		t.Fatalf("Count() = %d", er.Count())
	}
}

func TestEventsEmptyStream(t *testing.T) {
	if _, err := NewEventReader(bytes.NewReader(nil), deltaTestKey).ReadEvent(); err != io.EOF {
		t.Fatalf("empty stream: %v, want io.EOF", err)
	}
}

func TestEventsTornRecord(t *testing.T) {
	enc := encodeEvents(t, testEvents())
	// Every cut that is not on a record boundary is a torn record.
	boundaries := map[int]bool{0: true, len(enc): true}
	for rest := enc; len(rest) > 0; {
		n, k := binary.Uvarint(rest)
		rest = rest[k+int(n):]
		boundaries[len(enc)-len(rest)] = true
	}
	for cut := 0; cut <= len(enc); cut++ {
		er := NewEventReader(bytes.NewReader(enc[:cut]), deltaTestKey)
		var err error
		for err == nil {
			_, err = er.ReadEvent()
		}
		if boundaries[cut] {
			if err != io.EOF {
				t.Fatalf("cut at boundary %d: %v, want io.EOF", cut, err)
			}
			continue
		}
		if err == io.EOF || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), deltaTestKey) || !strings.Contains(err.Error(), "torn record") {
			t.Fatalf("cut at %d: %v, want a torn-record error naming the object", cut, err)
		}
	}
}

func TestEventsDamage(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"huge length", binary.AppendUvarint(nil, MaxEventSize+1), "more than the"},
		{"overlong varint", bytes.Repeat([]byte{0xff}, 11), "not a valid varint"},
		{"garbage body", append(binary.AppendUvarint(nil, 3), 0xff, 0xff, 0xff), "does not decode"},
		{"no key-value", binary.AppendUvarint(nil, 0), "no key-value"},
		{"out of order", encodeEventsUnchecked(put("/a", "x", 5, 5, 1), put("/a", "y", 5, 4, 2)), "comes after revision 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			er := NewEventReader(bytes.NewReader(tc.data), deltaTestKey)
			var err error
			for err == nil {
				_, err = er.ReadEvent()
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), deltaTestKey) {
				t.Fatalf("got %v, want an error naming the object and saying %q", err, tc.want)
			}
		})
	}
}

// encodeEventsUnchecked frames events without the writer's order check.
func encodeEventsUnchecked(evs ...*mvccpb.Event) []byte {
	var out []byte
	for _, ev := range evs {
		b, _ := ev.Marshal()
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out
}

func TestEventWriterRejects(t *testing.T) {
	ew := NewEventWriter(io.Discard)
	if err := ew.WriteEvent(&mvccpb.Event{}); err == nil {
		t.Error("accepted an event without a key-value")
	}
	if err := ew.WriteEvent(put("/a", "", 0, 0, 1)); err == nil {
		t.Error("accepted revision 0")
	}
	if err := ew.WriteEvent(put("/a", "", 5, 5, 1)); err != nil {
		t.Fatal(err)
	}
	if err := ew.WriteEvent(put("/b", "", 5, 5, 1)); err != nil {
		t.Errorf("rejected a second event of the same revision: %v", err)
	}
	if err := ew.WriteEvent(put("/c", "", 4, 4, 1)); err == nil || !strings.Contains(err.Error(), "revision order") {
		t.Errorf("accepted an event out of order: %v", err)
	}
}

// Through an object: a checksum failure surfaces from ReadEvent, never as
// a clean io.EOF.
func TestEventsThroughObject(t *testing.T) {
	hdr := Header{Kind: KindDelta, Timeline: 1, Compression: CompressionZstd, FirstRev: 10, LastRev: 13, EtcdVersion: "3.6.4"}
	obj := writeObject(t, hdr, encodeEvents(t, testEvents()), 0)

	read := func(b []byte) (int, error) {
		_, or, err := NewObjectReader(bytes.NewReader(b), deltaTestKey, nil)
		if err != nil {
			return 0, err
		}
		defer or.Close()
		er := NewEventReader(or, deltaTestKey)
		n := 0
		for {
			_, err := er.ReadEvent()
			if err == io.EOF {
				return n, nil
			}
			if err != nil {
				return n, err
			}
			n++
		}
	}
	if n, err := read(obj); err != nil || n != 5 {
		t.Fatalf("read %d events, %v", n, err)
	}
	bad := bytes.Clone(obj)
	bad[len(bad)-TrailerSize-3] ^= 1 // inside the compressed payload
	if _, err := read(bad); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), deltaTestKey) {
		t.Fatalf("damaged payload: %v", err)
	}
	if _, err := read(obj[:len(obj)-TrailerSize]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("missing trailer: %v", err)
	}
}
