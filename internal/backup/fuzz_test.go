package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
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

// FuzzVouch: whatever is done to an encrypted full snapshot's bytes, header included (its
// checksum made to match), it vouches for itself only with the header its writer wrote.
func FuzzVouch(f *testing.F) {
	keys := testKeyring(f, "k1", "k1")
	o := fullObject(f)
	hdr := testHeader(CompressionZstd)
	var buf bytes.Buffer
	ow, err := NewObjectWriter(&buf, hdr, keys)
	if err != nil {
		f.Fatal(err)
	}
	ow.Write(payload(3000, 1))
	ow.SetLastRev(250)
	if err := ow.Close(); err != nil {
		f.Fatal(err)
	}
	genuine := buf.Bytes()
	f.Add(genuine, uint16(0), byte(0), false)
	f.Add(genuine, uint16(16), byte(0xee), true) // cluster ID
	f.Add(genuine, uint16(24), byte(0x01), true) // first revision
	f.Add(genuine, uint16(48), byte(0x02), true) // timeline
	f.Add(genuine[:len(genuine)-10], uint16(0), byte(0), false)
	f.Add([]byte("not a backup"), uint16(0), byte(0), false)
	f.Fuzz(func(t *testing.T, obj []byte, pos uint16, b byte, rewrite bool) {
		if rewrite && len(obj) >= 12 {
			if n := int(binary.BigEndian.Uint16(obj[10:])); n > 4 && n <= len(obj) {
				obj = rewriteHeader(obj, int(pos), b)
			}
		}
		got, err := vouch(bytes.NewReader(obj), o, keys)
		if err != nil {
			if !NotVouched(err) {
				t.Fatalf("vouch: %v, neither damage nor a missing key", err)
			}
			return
		}
		// The seeds may come from another process, with another salt: every header the keys
		// wrote is hdr's, each with its own salt.
		want := hdr
		if got.Kind != want.Kind || got.Compression != want.Compression || got.EtcdVersion != want.EtcdVersion || got.ClusterID != want.ClusterID ||
			got.Timeline != want.Timeline || got.FirstRev != want.FirstRev || got.LastRev != want.LastRev || !got.Created.Equal(want.Created) ||
			got.KeyID != "k1" {
			t.Fatalf("vouched for header %+v, the writer wrote %+v", got, want)
		}
	})
}

// FuzzRestorable: of any timelines, a restore chooses only among those whose newest full
// snapshot vouches for itself, of the cluster asked for; without one, of a single cluster,
// else it refuses; every timeline left out for not vouching is named.
func FuzzRestorable(f *testing.F) {
	f.Add([]byte{0x11, 0x11, 0x21}, byte(0))
	f.Add([]byte{0x11, 0x10, 0x11}, byte(1))
	f.Add([]byte{0x13, 0x10, 0x21, 0x31}, byte(3))
	f.Fuzz(func(t *testing.T, spec []byte, ask byte) {
		// Each byte is a timeline: bits 4-5 its cluster (1-4), bit 0 vouched.
		var tls []TimelineInfo
		for i, b := range spec {
			tl := TimelineInfo{Timeline: uint32(i + 1), Vouched: b&1 != 0}
			if tl.Vouched {
				tl.ClusterID = uint64(b>>4&3 + 1)
			} else {
				tl.Unvouched = errors.New("planted")
			}
			tls = append(tls, tl)
		}
		var own []uint64
		for id := uint64(1); id <= 4; id++ {
			if ask>>(id-1)&1 != 0 {
				own = append(own, id)
			}
		}
		cands, skipped, err := Restorable(tls, own)
		ids := map[uint64]bool{}
		wantSkipped := 0
		for _, tl := range tls {
			switch {
			case !tl.Vouched:
				wantSkipped++
			case own == nil || tl.Of(own):
				ids[tl.ClusterID] = true
			}
		}
		if len(skipped) != wantSkipped {
			t.Fatalf("skipped %q, want %d named", skipped, wantSkipped)
		}
		if (err != nil) != (own == nil && len(ids) > 1) {
			t.Fatalf("Restorable(%+v, %v): err %v with candidates of clusters %v", tls, own, err, ids)
		}
		if err == nil && len(cands) != func() int {
			n := 0
			for _, tl := range tls {
				if tl.Vouched && ids[tl.ClusterID] {
					n++
				}
			}
			return n
		}() {
			t.Fatalf("Restorable(%+v, %v) chose %+v: not every candidate", tls, own, cands)
		}
		for _, c := range cands {
			if !c.Vouched || (own != nil && !c.Of(own)) || (own == nil && c.ClusterID != cands[0].ClusterID) {
				t.Fatalf("Restorable(%+v, %v) chose %+v", tls, own, c)
			}
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

// FuzzDecodeEventInPlace: what decodeEventInPlace decodes, Unmarshal decodes the same; and an
// EventReader reading events in place (ReadEventIn) returns what ReadEvent returns, errors
// included.
func FuzzDecodeEventInPlace(f *testing.F) {
	var buf bytes.Buffer
	ew := NewEventWriter(&buf)
	prev := put("/a", "0", 9, 9, 1)
	withPrev := del("/a", 12, nil)
	withPrev.PrevKv = prev.Kv
	for _, ev := range []*mvccpb.Event{put("/a", "1", 10, 10, 1), put("/b", "", 11, 11, 1), withPrev,
		{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("/l"), Value: []byte("v"), CreateRevision: 5, ModRevision: 13, Version: 3, Lease: -7}}} {
		b, err := ev.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		if err := ew.WriteEvent(ev); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(buf.Bytes())
	f.Add([]byte{0x12, 0x04, 0x0a, 0x02, 0x2f, 0x61, 0x12, 0x02, 0x18, 0x05}) // kv twice: merged
	f.Add([]byte{0x08, 0x01, 0x08, 0x00, 0x12, 0x00})                         // type twice
	f.Add([]byte{0x12, 0x03, 0x38, 0x01, 0x00})                               // unknown field in kv
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(mvccpb.Event)
		wantErr := want.Unmarshal(b)
		got := &mvccpb.Event{Kv: new(mvccpb.KeyValue)}
		if decodeEventInPlace(got, b) {
			if wantErr != nil {
				t.Fatalf("decoded in place %v, Unmarshal fails: %v", got, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoded in place %v, Unmarshal %v", got, want)
			}
		}

		// The same bytes as a stream of framed events.
		plain := NewEventReader(bytes.NewReader(b), deltaTestKey)
		inPlace := NewEventReader(bytes.NewReader(b), deltaTestKey)
		alloc := func(n int) []byte { return make([]byte, n) }
		for i := 0; ; i++ {
			want, wantErr := plain.ReadEvent()
			got := new(mvccpb.Event)
			gotErr := inPlace.ReadEventIn(got, alloc)
			if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
				t.Fatalf("event %d: ReadEventIn: %v, ReadEvent: %v", i, gotErr, wantErr)
			}
			if wantErr != nil {
				return
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("event %d: ReadEventIn %v, ReadEvent %v", i, got, want)
			}
		}
	})
}
