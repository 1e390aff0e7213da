package snapshotter

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Fuzz targets for the decoders of what etcd sends: the gRPC snapshot stream
// (Maintenance.Snapshot responses, decoded by chunkCodec), its SHA-256 trailer
// (trailerVerifier) and watch responses (watchCodec). Each is compared with etcd's own
// protobuf decoding where one exists, and must not depend on how gRPC cut the message into
// buffers. `make fuzz` runs them; `go test` replays the seeds and testdata/fuzz.

// cuts splits b at the positions seed picks, as gRPC hands a message over in pieces.
func cuts(b []byte, seed uint64) mem.BufferSlice {
	rnd := rand.New(rand.NewPCG(seed, seed>>32))
	var s mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 1+rnd.IntN(16))
		if seed%3 == 0 {
			n = len(b) // one piece
		}
		s = append(s, mem.SliceBuffer(append([]byte(nil), b[:n]...)))
		b = b[n:]
	}
	return s
}

func FuzzSnapshotChunk(f *testing.F) {
	for i, msg := range []*pb.SnapshotResponse{
		{Header: &pb.ResponseHeader{ClusterId: 7, Revision: 9}, RemainingBytes: 100, Blob: []byte("database bytes"), Version: "3.6.16"},
		{Blob: bytes.Repeat([]byte{0xab}, 300)},
		{RemainingBytes: 1},
	} {
		b, err := msg.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint64(i))
	}
	f.Add([]byte{0x1a, 0xff, 0xff, 0xff, 0xff, 0x0f}, uint64(1)) // a blob longer than the message
	f.Add([]byte{0x1a, 0x01, 'a', 0x1a, 0x01, 'b'}, uint64(2))   // two blobs
	f.Fuzz(func(t *testing.T, msg []byte, seed uint64) {
		var got bytes.Buffer
		err := (&chunkSink{w: &got}).unmarshal(cuts(msg, seed))
		var whole bytes.Buffer
		errWhole := (&chunkSink{w: &whole}).unmarshal(mem.BufferSlice{mem.SliceBuffer(msg)})
		if (err == nil) != (errWhole == nil) || !bytes.Equal(got.Bytes(), whole.Bytes()) {
			t.Fatalf("the decoding depends on how the message is cut: in pieces %v, %d bytes; whole %v, %d bytes", err, got.Len(), errWhole, whole.Len())
		}
		var ref pb.SnapshotResponse
		refErr := ref.Unmarshal(msg)
		if err == nil && refErr == nil && !bytes.Equal(got.Bytes(), ref.Blob) {
			t.Fatalf("wrote blob %x, etcd's decoding has %x", got.Bytes(), ref.Blob)
		}
		if err == nil && refErr != nil {
			// The header is not read (only the blob is): a header etcd cannot decode is no
			// reason to refuse the chunk. Anything else etcd refuses must be refused.
			var again pb.SnapshotResponse
			if again.Unmarshal(withoutField(t, msg, 1)) != nil {
				t.Fatalf("accepted a message etcd's decoding refuses (%v); wrote %x", refErr, got.Bytes())
			}
		}
	})
}

func FuzzSnapshotTrailer(f *testing.F) {
	db := bytes.Repeat([]byte("page"), 256)
	sum := sha256.Sum256(db)
	f.Add(append(append([]byte(nil), db...), sum[:]...), uint64(1))
	f.Add(sum[:], uint64(2))
	f.Add([]byte("short"), uint64(3))
	f.Fuzz(func(t *testing.T, stream []byte, seed uint64) {
		var out bytes.Buffer
		v := newTrailerVerifier(&out, nil)
		for _, p := range cuts(stream, seed) {
			if _, err := v.Write(p.ReadOnlyData()); err != nil {
				t.Fatal(err)
			}
		}
		err := v.verify()
		if !bytes.Equal(out.Bytes(), stream) {
			t.Fatalf("passed %d bytes through, got %d", len(stream), out.Len())
		}
		want := false
		if n := len(stream) - sha256.Size; n >= 0 {
			s := sha256.Sum256(stream[:n])
			want = bytes.Equal(s[:], stream[n:])
		}
		if (err == nil) != want {
			t.Fatalf("verify of a %d-byte stream: %v; its last 32 bytes are the SHA-256 of the rest: %v", len(stream), err, want)
		}
		if err == nil && v.n != int64(len(stream)-sha256.Size) {
			t.Fatalf("database size %d, want %d", v.n, len(stream)-sha256.Size)
		}
	})
}

func FuzzWatchResponse(f *testing.F) {
	ev := func(rev int64, del bool) *mvccpb.Event {
		e := &mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte("/k"), CreateRevision: 2, ModRevision: rev, Version: 1, Value: []byte("v")}}
		if del {
			e.Type = mvccpb.DELETE
			e.PrevKv = &mvccpb.KeyValue{Key: []byte("/k"), ModRevision: rev - 1}
		}
		return e
	}
	for i, resp := range []*pb.WatchResponse{
		{Header: &pb.ResponseHeader{ClusterId: 0xcafe, Revision: 12}, WatchId: 1, Events: []*mvccpb.Event{ev(10, false), ev(11, true)}},
		{Header: &pb.ResponseHeader{Revision: 3}, Created: true},
		{Canceled: true, CompactRevision: 40, CancelReason: "mvcc: required revision has been compacted"},
	} {
		b, err := resp.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint64(i))
	}
	f.Fuzz(func(t *testing.T, msg []byte, seed uint64) {
		var revs []int64
		var datas [][]byte
		var w watchMsg
		w.onEvent = func(rev int64, data []byte) error {
			revs, datas = append(revs, rev), append(datas, append([]byte(nil), data...))
			return nil
		}
		err := w.unmarshal(cuts(msg, seed))
		var ref pb.WatchResponse
		refErr := ref.Unmarshal(msg)
		if err != nil || refErr != nil {
			if err == nil && len(revs) > 0 {
				t.Fatalf("accepted events of a response etcd's decoding refuses (%v)", refErr)
			}
			return
		}
		var refRev int64
		var refCluster uint64
		if ref.Header != nil {
			refRev, refCluster = ref.Header.Revision, ref.Header.ClusterId
		}
		if w.rev != refRev || w.clusterID != refCluster || w.created != ref.Created || w.canceled != ref.Canceled ||
			w.compactRev != ref.CompactRevision || w.cancelReason != ref.CancelReason || w.events != len(ref.Events) {
			t.Fatalf("decoded rev %d cluster %x created %v canceled %v compact %d reason %q events %d; etcd's decoding: %+v",
				w.rev, w.clusterID, w.created, w.canceled, w.compactRev, w.cancelReason, w.events, &ref)
		}
		for i, e := range ref.Events {
			if e.Kv == nil || revs[i] != e.Kv.ModRevision {
				t.Fatalf("event %d: revision %d, etcd's decoding %+v", i, revs[i], e)
			}
			var again mvccpb.Event
			if err := again.Unmarshal(datas[i]); err != nil || !bytes.Equal(mustMarshal(t, &again), mustMarshal(t, e)) {
				t.Fatalf("event %d as taken (%x) is not etcd's event %+v: %v", i, datas[i], e, err)
			}
		}
	})
}

// withoutField re-encodes a protobuf message without the (top-level) fields numbered num.
func withoutField(t *testing.T, msg []byte, num protowire.Number) []byte {
	var out []byte
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			t.Fatalf("a message our decoder accepted has a bad tag: %x", msg)
		}
		v := protowire.ConsumeFieldValue(n, typ, msg[l:])
		if v < 0 {
			t.Fatalf("a message our decoder accepted has a bad field %d: %x", n, msg)
		}
		if n != num {
			out = append(out, msg[:l+v]...)
		}
		msg = msg[l+v:]
	}
	return out
}

func mustMarshal(t *testing.T, e *mvccpb.Event) []byte {
	b, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
