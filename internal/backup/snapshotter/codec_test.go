package snapshotter

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// split cuts b into a BufferSlice of pieces of random sizes, as gRPC hands a message over
// in the HTTP/2 frames it arrived in.
func split(rnd *rand.Rand, b []byte) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 1+rnd.IntN(20000))
		if rnd.IntN(4) == 0 {
			n = min(len(b), 1+rnd.IntN(8)) // tiny pieces split varints and tags
		}
		s = append(s, mem.SliceBuffer(append([]byte(nil), b[:n]...)))
		b = b[n:]
	}
	return s
}

func TestChunkCodecWritesTheBlob(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		blob := make([]byte, rnd.IntN(70000))
		for j := range blob {
			blob[j] = byte(rnd.Uint32())
		}
		msg := &pb.SnapshotResponse{Header: &pb.ResponseHeader{ClusterId: 7, MemberId: 8, Revision: int64(i + 1), RaftTerm: 3},
			RemainingBytes: uint64(rnd.IntN(1 << 30)), Blob: blob, Version: "3.6.16"}
		b, err := msg.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		sink := &chunkSink{w: &got}
		if err := (chunkCodec{}).Unmarshal(split(rnd, b), sink); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !bytes.Equal(got.Bytes(), blob) {
			t.Fatalf("message %d: wrote %d bytes, the blob has %d (or they differ)", i, got.Len(), len(blob))
		}
		// The same sink decodes the next message from scratch; one cut inside the blob is
		// an error (the version field, 2+6 bytes, follows the blob).
		if len(blob) > 0 {
			blobEnd := len(b) - 2 - len(msg.Version)
			cut := blobEnd - 1 - rnd.IntN(len(blob))
			got.Reset()
			if err := (chunkCodec{}).Unmarshal(split(rnd, b[:cut]), sink); err == nil {
				t.Fatalf("message %d cut at %d of %d bytes, inside the blob: no error", i, cut, len(b))
			}
		}
	}
}

type failingWriter struct{ after int }

var errDiskFull = errors.New("disk full")

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.after < len(p) {
		return 0, errDiskFull
	}
	f.after -= len(p)
	return len(p), nil
}

func TestChunkCodecKeepsTheWritersError(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	b, err := (&pb.SnapshotResponse{Blob: make([]byte, 40000)}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	sink := &chunkSink{w: &failingWriter{after: 50000}}
	if err := (chunkCodec{}).Unmarshal(split(rnd, b), sink); err != nil {
		t.Fatal(err)
	}
	if err := (chunkCodec{}).Unmarshal(split(rnd, b), sink); !errors.Is(err, errSinkWrite) || !errors.Is(sink.err, errDiskFull) {
		t.Fatalf("write past the writer's space: %v, sink error %v", err, sink.err)
	}
	if err := (chunkCodec{}).Unmarshal(split(rnd, b), sink); !errors.Is(err, errSinkWrite) {
		t.Fatalf("after a failed write: %v", err)
	}
}

func TestWatchCodecTakesEventsAsEncoded(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	var events []*mvccpb.Event
	for i := 0; i < 50; i++ {
		ev := &mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte("/k/" + string(rune('a'+i%26))), CreateRevision: 5, ModRevision: int64(100 + i/3),
			Version: int64(i), Value: bytes.Repeat([]byte{'v'}, rnd.IntN(3000)), Lease: int64(i % 2)}}
		if i%7 == 0 {
			ev.Type = mvccpb.DELETE
			ev.Kv.Value = nil
		}
		if i%11 == 0 {
			ev.PrevKv = &mvccpb.KeyValue{Key: ev.Kv.Key, ModRevision: 3, Value: []byte("old")}
		}
		events = append(events, ev)
	}
	resp := &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 200}, WatchId: 3, Events: events}
	b, err := resp.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var msg watchMsg
	type got struct {
		rev  int64
		data []byte
	}
	var evs []got
	msg.onEvent = func(rev int64, data []byte) error {
		evs = append(evs, got{rev, append([]byte(nil), data...)})
		return nil
	}
	for round := 0; round < 3; round++ {
		evs = nil
		if err := (watchCodec{}).Unmarshal(split(rnd, b), &msg); err != nil {
			t.Fatal(err)
		}
		if msg.created || msg.canceled || msg.compactRev != 0 || msg.rev != 200 || msg.events != len(events) || len(evs) != len(events) {
			t.Fatalf("decoded %+v, %d events", msg, len(evs))
		}
		for i, ev := range events {
			want, err := ev.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if evs[i].rev != ev.Kv.ModRevision || !bytes.Equal(evs[i].data, want) {
				t.Fatalf("event %d: revision %d, %d bytes; want %d, %d bytes", i, evs[i].rev, len(evs[i].data), ev.Kv.ModRevision, len(want))
			}
		}
	}

	// The first error of onEvent ends the decoding and is kept.
	errStop := errors.New("stop")
	n := 0
	msg.onEvent = func(int64, []byte) error {
		if n++; n == 3 {
			return errStop
		}
		return nil
	}
	if err := (watchCodec{}).Unmarshal(split(rnd, b), &msg); !errors.Is(err, errEventSink) || !errors.Is(msg.err, errStop) || n != 3 {
		t.Fatalf("onEvent failing at the third event: %v, kept %v, %d calls", err, msg.err, n)
	}
	msg.onEvent, msg.err = nil, nil

	b, err = (&pb.WatchResponse{Created: true, Canceled: true, CompactRevision: 42, CancelReason: "compacted"}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := (watchCodec{}).Unmarshal(split(rnd, b), &msg); err != nil {
		t.Fatal(err)
	}
	if !msg.created || !msg.canceled || msg.compactRev != 42 || msg.cancelReason != "compacted" || msg.events != 0 {
		t.Fatalf("decoded %+v", msg)
	}

	for _, bad := range []*mvccpb.Event{{Type: mvccpb.PUT}, {Kv: &mvccpb.KeyValue{Key: []byte("k")}}} {
		b, err := (&pb.WatchResponse{Events: []*mvccpb.Event{bad}}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := (watchCodec{}).Unmarshal(split(rnd, b), &msg); err == nil {
			t.Fatalf("event %v decoded without error", bad)
		}
	}
}

func TestResumable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{io.EOF, true},
		{status.Error(codes.Unavailable, "connection reset"), true},
		{rpctypes.ErrNoLeader, false},
		{rpctypes.Error(rpctypes.ErrGRPCNoLeader), false},
		{ErrCompacted, false},
		{ErrHole, false},
		{fmt.Errorf("delta capture: %w", errRoundStalled{time.Second}), true},
		{status.Error(codes.Internal, "grpc: failed to unmarshal the received message"), false},
		{status.Error(codes.PermissionDenied, "denied"), false},
	} {
		if got := resumable(c.err); got != c.want {
			t.Errorf("resumable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
