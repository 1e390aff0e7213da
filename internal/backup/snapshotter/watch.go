package snapshotter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// watchStream is one etcd Watch stream of every key from a revision, received without
// clientv3's watcher (which passes each response through four goroutines, each hand-over a
// possible thread wake-up): the caller's goroutine receives each response from gRPC's reader,
// and a codec takes the events out of it as etcd encoded them. They are stored as they are
// (a delta record is an mvccpb.Event exactly as etcd's watch sends it), with nothing decoded
// but each event's revision and nothing allocated per event.
type watchStream struct {
	cs  grpc.ClientStream
	msg watchMsg
}

const watchMethod = "/etcdserverpb.Watch/Watch"

// Transport settings of delta capture's own connection. A response holds a round (see
// roundBytes); the window bounds what the transport buffers beyond it.
const (
	watchWindow     = 1 << 20
	watchReadBuffer = 64 << 10
)

// openWatch starts a watch of every key from revision from on conn. etcd ends it when its
// member loses the leader (clientv3.WithRequireLeader); cancelling ctx ends it too.
func openWatch(ctx context.Context, conn grpc.ClientConnInterface, from int64) (*watchStream, error) {
	cs, err := conn.NewStream(clientv3.WithRequireLeader(ctx),
		&grpc.StreamDesc{StreamName: "Watch", ServerStreams: true, ClientStreams: true}, watchMethod,
		grpc.ForceCodecV2(watchCodec{}),
		// As clientv3 (its default call options): one response holds whole revisions.
		grpc.MaxCallRecvMsgSize(math.MaxInt32))
	if err == nil {
		// Every key: from "\x00" with range end "\x00" (clientv3.WithFromKey).
		err = cs.SendMsg(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
			Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: from}}})
	}
	if err != nil {
		return nil, rpcError(err)
	}
	// The request side stays open, as clientv3 keeps it: etcd's watch serves until the
	// stream ends.
	return &watchStream{cs: cs}, nil
}

// recv returns the next response, whose events went to onEvent while it was decoded (the
// first error onEvent returned is recv's). It is valid until the next call.
func (w *watchStream) recv(onEvent func(rev int64, event []byte) error) (*watchMsg, error) {
	w.msg.onEvent, w.msg.err = onEvent, nil
	err := w.cs.RecvMsg(&w.msg)
	if w.msg.err != nil {
		return nil, w.msg.err
	}
	if err != nil {
		return nil, rpcError(err)
	}
	return &w.msg, nil
}

// watchMsg is one pb.WatchResponse. Its events are not kept: each goes to onEvent, as etcd
// encoded it, while the message is decoded from gRPC's receive buffers (no copy of the
// message; an event is copied only if it spans two of them).
type watchMsg struct {
	rev          int64  // the header's revision: the member's when it sent the response
	clusterID    uint64 // the header's cluster ID
	created      bool
	canceled     bool
	compactRev   int64
	cancelReason string
	events       int

	onEvent func(rev int64, event []byte) error
	err     error // onEvent's

	r       mem.Reader
	parts   [][]byte
	scratch []byte
}

// watchScratchKeep is the largest scratch buffer (an event spanning receive buffers) kept
// from one event to the next.
const watchScratchKeep = 1 << 20

// Field numbers of pb.WatchResponse, pb.ResponseHeader, mvccpb.Event and mvccpb.KeyValue
// (api/etcdserverpb/rpc.proto, api/mvccpb/kv.proto).
const (
	watchHeaderField         = 1
	headerClusterIDField     = 1
	headerRevisionField      = 3
	watchCreatedField        = 3
	watchCanceledField       = 4
	watchCompactRevField     = 5
	watchCancelReasonField   = 6
	watchEventsField         = 11
	eventKVField             = 2
	keyValueModRevisionField = 3
)

// watchFieldTypes are the wire types of pb.WatchResponse's fields.
var watchFieldTypes = map[protowire.Number]protowire.Type{
	watchHeaderField:       protowire.BytesType,
	2:                      protowire.VarintType, // watch_id
	watchCreatedField:      protowire.VarintType,
	watchCanceledField:     protowire.VarintType,
	watchCompactRevField:   protowire.VarintType,
	watchCancelReasonField: protowire.BytesType,
	7:                      protowire.VarintType, // fragment
	watchEventsField:       protowire.BytesType,
}

var errEventSink = errors.New("watch event not taken")

func (w *watchMsg) unmarshal(data mem.BufferSlice) error {
	w.rev, w.clusterID, w.created, w.canceled, w.compactRev, w.cancelReason, w.events = 0, 0, false, false, 0, "", 0
	r := &w.r
	r.Reset(data) // takes a reference; released as it is read, or by the next Reset
	defer r.Close()
	for r.Remaining() > 0 {
		tag, err := binary.ReadUvarint(r)
		if err != nil {
			return fmt.Errorf("watch response: bad field tag: %w", err)
		}
		num, typ := protowire.DecodeTag(tag)
		if tag>>3 < uint64(protowire.MinValidNumber) || tag>>3 > uint64(protowire.MaxValidNumber) {
			return fmt.Errorf("watch response: field number %d is not a protobuf field: the message is damaged", tag>>3)
		}
		// The fields etcd defines have one wire type each; another is a damaged message, as
		// etcd's own decoding says (found by FuzzWatchResponse: canceled sent as bytes).
		if want, known := watchFieldTypes[num]; known && typ != want {
			return fmt.Errorf("watch response field %d: wire type %d, want %d: the message is damaged", num, typ, want)
		}
		switch typ {
		case protowire.VarintType:
			v, err := binary.ReadUvarint(r)
			if err != nil {
				return fmt.Errorf("watch response field %d: %w", num, err)
			}
			switch num {
			case watchCreatedField:
				w.created = v != 0
			case watchCanceledField:
				w.canceled = v != 0
			case watchCompactRevField:
				w.compactRev = int64(v)
			}
			continue
		case protowire.Fixed32Type, protowire.Fixed64Type:
			n := 8
			if typ == protowire.Fixed32Type {
				n = 4
			}
			if _, err := r.Discard(n); err != nil {
				return fmt.Errorf("watch response field %d: %w", num, err)
			}
			continue
		case protowire.BytesType:
		default:
			return fmt.Errorf("watch response field %d: unexpected wire type %d", num, typ)
		}
		size, err := binary.ReadUvarint(r)
		if err != nil {
			return fmt.Errorf("watch response field %d: bad length: %w", num, err)
		}
		if size > uint64(r.Remaining()) {
			return fmt.Errorf("watch response field %d: %d bytes, only %d left in the message", num, size, r.Remaining())
		}
		n := int(size)
		switch num {
		case watchHeaderField, watchCancelReasonField, watchEventsField:
			b, err := w.flat(n)
			if err != nil {
				return fmt.Errorf("watch response field %d: %w", num, err)
			}
			switch num {
			case watchHeaderField:
				err = eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
					if err := checkType("response header", headerFieldTypes, num, typ); err != nil {
						return err
					}
					if typ == protowire.VarintType {
						switch num {
						case headerRevisionField:
							w.rev = int64(v)
						case headerClusterIDField:
							w.clusterID = v
						}
					}
					return nil
				})
			case watchCancelReasonField:
				w.cancelReason = string(b)
			case watchEventsField:
				var rev int64
				if rev, err = eventRevision(b); err != nil {
					err = fmt.Errorf("event %d: %w", w.events+1, err)
					break
				}
				w.events++
				if w.onEvent != nil && w.err == nil {
					if w.err = w.onEvent(rev, b); w.err != nil {
						return errEventSink
					}
				}
			}
			if err != nil {
				return fmt.Errorf("watch response: %w", err)
			}
		}
		if _, err := r.Discard(n); err != nil {
			return fmt.Errorf("watch response field %d: %w", num, err)
		}
	}
	return nil
}

// flat returns the next n bytes of the message, not consumed: a view into gRPC's receive
// buffer, or a copy if they span two.
func (w *watchMsg) flat(n int) ([]byte, error) {
	parts, err := w.r.Peek(n, w.parts[:0])
	if err != nil {
		return nil, err
	}
	defer clear(parts) // drop the references to gRPC's buffers
	w.parts = parts
	if len(parts) == 1 {
		return parts[0], nil
	}
	if cap(w.scratch) > watchScratchKeep {
		w.scratch = nil
	}
	w.scratch = w.scratch[:0]
	for _, p := range parts {
		w.scratch = append(w.scratch, p...)
	}
	return w.scratch, nil
}

// Wire types of mvccpb.Event's and mvccpb.KeyValue's fields. An event is stored as etcd sent
// it, and restores decode it with etcd's own decoding: one that decoding refuses must not be
// stored (found by FuzzWatchResponse: a lease sent as bytes).
var (
	// pb.ResponseHeader: cluster_id, member_id, revision, raft_term (found by
	// FuzzWatchResponse: a raft term sent as bytes).
	headerFieldTypes = map[protowire.Number]protowire.Type{1: protowire.VarintType, 2: protowire.VarintType, 3: protowire.VarintType, 4: protowire.VarintType}
	eventFieldTypes  = map[protowire.Number]protowire.Type{1: protowire.VarintType, eventKVField: protowire.BytesType, 3: protowire.BytesType}
	kvFieldTypes     = map[protowire.Number]protowire.Type{1: protowire.BytesType, 2: protowire.VarintType, keyValueModRevisionField: protowire.VarintType,
		4: protowire.VarintType, 5: protowire.BytesType, 6: protowire.VarintType}
)

func checkType(what string, types map[protowire.Number]protowire.Type, num protowire.Number, typ protowire.Type) error {
	if want, known := types[num]; known && typ != want {
		return fmt.Errorf("%s field %d: wire type %d, want %d: the message is damaged", what, num, typ, want)
	}
	return nil
}

// checkKV checks the wire types of an encoded mvccpb.KeyValue's fields.
func checkKV(kv []byte) error {
	return eachField(kv, func(num protowire.Number, typ protowire.Type, _ uint64, _ []byte) error {
		return checkType("key-value", kvFieldTypes, num, typ)
	})
}

// eventRevision returns the mod revision of an encoded mvccpb.Event's kv.
func eventRevision(ev []byte) (int64, error) {
	var kv []byte
	hasKV := false
	err := eachField(ev, func(num protowire.Number, typ protowire.Type, _ uint64, b []byte) error {
		if err := checkType("event", eventFieldTypes, num, typ); err != nil {
			return err
		}
		switch {
		case num == eventKVField:
			kv, hasKV = b, true
		case num == 3: // prev_kv
			return checkKV(b)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if !hasKV {
		return 0, errors.New("event has no key-value")
	}
	var rev int64
	err = eachField(kv, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
		if err := checkType("key-value", kvFieldTypes, num, typ); err != nil {
			return err
		}
		if num == keyValueModRevisionField {
			rev = int64(v)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if rev < 1 {
		return 0, fmt.Errorf("event's mod revision %d is not a revision", rev)
	}
	return rev, nil
}

// eachField calls fn for each field of an encoded protobuf message: its number and type,
// and its value (varints) or bytes (length-delimited; a view into b). Fixed-size fields are
// skipped; groups are an error.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v uint64
		var bs []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			bs, n = protowire.ConsumeBytes(b)
		case protowire.Fixed32Type, protowire.Fixed64Type:
			n = protowire.ConsumeFieldValue(num, typ, b)
		default:
			return fmt.Errorf("field %d: unexpected wire type %d", num, typ)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, typ, v, bs); err != nil {
			return err
		}
	}
	return nil
}

// watchCodec is gRPC's proto codec, except that it decodes watch responses itself. It keeps
// the name "proto", so the request's content type is the one etcd always gets.
type watchCodec struct{}

func (watchCodec) Name() string { return "proto" }

func (watchCodec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec.Marshal(v) }

func (watchCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if w, ok := v.(*watchMsg); ok {
		return w.unmarshal(data)
	}
	return protoCodec.Unmarshal(data, v)
}
