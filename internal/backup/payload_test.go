package backup

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// A buffered payload stores the same object a streamed one does, survives a retried store
// write unchanged and is reused for the next object after Reset.
func TestPayloadBufferStoresDeltas(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "file://"+t.TempDir())
	p, err := NewPayloadBuffer(KindDelta)
	if err != nil {
		t.Fatal(err)
	}
	rev := int64(10)
	for obj := 0; obj < 3; obj++ {
		var want []*mvccpb.Event
		ew := NewEventWriter(p)
		first := rev
		for i := 0; i < 500*(obj+1); i++ {
			ev := &mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte("/k/" + string(rune('a'+i%26))), ModRevision: rev, Value: payload(200, int64(i))}}
			if err := ew.WriteEvent(ev); err != nil {
				t.Fatal(err)
			}
			want = append(want, ev)
			rev++
		}
		last := rev - 1
		if p.Raw() == 0 {
			t.Fatal("Raw is 0 after writes")
		}
		hdr := Header{Kind: KindDelta, Timeline: 1, Compression: CompressionZstd, EtcdVersion: "3.6.16", ClusterID: 1, FirstRev: first, LastRev: last,
			Created: time.Unix(1700000000, 0)}
		key := DeltaKey(1, first, last)
		var trs []Trailer
		for _, k := range []string{key + ".try", key} { // a retry writes the same payload again
			tr, err := WriteBufferedObject(ctx, s, k, hdr, p)
			if err != nil {
				t.Fatal(err)
			}
			trs = append(trs, tr)
		}
		if trs[0] != trs[1] || trs[1].RawSize != p.Raw() {
			t.Fatalf("trailers of the two writes: %+v, %+v (raw %d)", trs[0], trs[1], p.Raw())
		}
		if _, err := p.Write([]byte("x")); err == nil {
			t.Fatal("write after the payload was stored, before Reset: no error")
		}
		_, or, err := OpenObject(ctx, s, key)
		if err != nil {
			t.Fatal(err)
		}
		er := NewEventReader(or, key)
		for i := 0; ; i++ {
			ev, err := er.ReadEvent()
			if err == io.EOF {
				if i != len(want) {
					t.Fatalf("object %d: %d events, want %d", obj, i, len(want))
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kv.ModRevision != want[i].Kv.ModRevision || !bytes.Equal(ev.Kv.Value, want[i].Kv.Value) {
				t.Fatalf("object %d event %d: %v, want %v", obj, i, ev, want[i])
			}
		}
		or.Close()
		if err := VerifyObject(ctx, s, Object{Key: key, Kind: KindDelta, Timeline: 1, FirstRev: first, LastRev: last}); err != nil {
			t.Fatal(err)
		}
		p.Reset(1 << 20)
		if p.Raw() != 0 {
			t.Fatalf("Raw after Reset: %d", p.Raw())
		}
	}
	if _, err := WriteBufferedObject(ctx, s, "v1/x", Header{Kind: KindDelta, Timeline: 1, Compression: CompressionNone, FirstRev: 1, LastRev: 1}, p); err == nil {
		t.Fatal("a buffered payload stored under a header without compression")
	}
}
