package backup

import (
	"bytes"
	"io"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Decoders of what a store returns must reject anything malformed with an error, never panic
// or loop, and what they accept must be what was written. `make fuzz` runs each target for a
// bounded time; `go test` runs the seeds.

func FuzzParseKey(f *testing.F) {
	at := time.Unix(1_700_000_000, 123_000_000).UTC()
	for _, k := range []string{FullKey(1, 100, at), DeltaKey(7, 101, 200), "v1/full/README", "v1/delta/1-2.ev.zst", "", "v1/full/", "v1/delta/00000000000000000002-00000000000000000001.ev.zst",
		"v1/full/00000000000000000100-1700000000.snap.zst", "v1/delta/00000000000000000101-00000000000000000200.ev.zst", "v1/timeline/", "v1/timeline/0000000000/full/", "v1/timeline/0000000003/delta/README"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		o, err := ParseKey(key)
		if err != nil {
			return
		}
		if o.Key != key || o.Timeline < 1 || o.FirstRev < 0 || o.LastRev < o.FirstRev {
			t.Fatalf("ParseKey(%q) = %+v", key, o)
		}
		var again string
		switch o.Kind {
		case KindFull:
			again = FullKey(o.Timeline, o.FirstRev, o.Created)
		case KindDelta:
			again = DeltaKey(o.Timeline, o.FirstRev, o.LastRev)
		default:
			t.Fatalf("ParseKey(%q): kind %v", key, o.Kind)
		}
		if p, err := ParseKey(again); err != nil || p.Kind != o.Kind || p.Timeline != o.Timeline || p.FirstRev != o.FirstRev || p.LastRev != o.LastRev || !p.Created.Equal(o.Created) {
			t.Fatalf("ParseKey(%q) = %+v, but its canonical name %q parses as %+v, %v", key, o, again, p, err)
		}
	})
}

func FuzzObjectReader(f *testing.F) {
	for _, c := range []Compression{CompressionZstd, CompressionNone} {
		var buf bytes.Buffer
		ow, err := NewObjectWriter(&buf, testHeader(c), nil)
		if err != nil {
			f.Fatal(err)
		}
		ow.Write(payload(3000, 1))
		ow.SetLastRev(250)
		if err := ow.Close(); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
		f.Add(buf.Bytes()[:buf.Len()-10])
	}
	f.Add([]byte("not a backup"))
	f.Fuzz(func(t *testing.T, obj []byte) {
		hdr, or, err := NewObjectReader(bytes.NewReader(obj), testKey, nil)
		if err != nil {
			return
		}
		defer or.Close()
		// Small objects suffice: a forged one cannot carry a payload's SHA-256.
		data, err := io.ReadAll(io.LimitReader(or, 1<<20))
		if err != nil || len(data) == 1<<20 {
			return
		}
		// Read to the end without an error: the trailer vouches for what was read.
		tr, ok := or.Trailer()
		if !ok || tr.RawSize != int64(len(data)) {
			t.Fatalf("object read to its end (header %+v) without a matching trailer: %+v, %v; %d bytes", hdr, tr, ok, len(data))
		}
	})
}

func FuzzEventReader(f *testing.F) {
	var buf bytes.Buffer
	ew := NewEventWriter(&buf)
	for _, ev := range []*mvccpb.Event{put("/a", "1", 10, 10, 1), put("/b", "x", 11, 11, 1), del("/a", 12, nil)} {
		if err := ew.WriteEvent(ev); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:buf.Len()-3])
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, stream []byte) {
		er := NewEventReader(bytes.NewReader(stream), deltaTestKey)
		var evs []*mvccpb.Event
		for {
			ev, err := er.ReadEvent()
			if err != nil {
				break
			}
			evs = append(evs, ev)
		}
		// What was accepted encodes and decodes to the same events.
		var again bytes.Buffer
		w := NewEventWriter(&again)
		for _, ev := range evs {
			if err := w.WriteEvent(ev); err != nil {
				return // the writer is stricter than the reader: nothing to compare
			}
		}
		r := NewEventReader(&again, deltaTestKey)
		for i, want := range evs {
			got, err := r.ReadEvent()
			if err != nil || !sameEvent(got, want) {
				t.Fatalf("event %d: %v after a round trip (%v), want %v", i, got, err, want)
			}
		}
	})
}

func sameEvent(a, b *mvccpb.Event) bool {
	ab, errA := a.Marshal()
	bb, errB := b.Marshal()
	return errA == nil && errB == nil && bytes.Equal(ab, bb)
}
