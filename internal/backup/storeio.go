package backup

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/etcd-steward/steward/internal/store"
)

// WriteObject streams one object into s under key: it writes hdr, lets
// fill write the payload, then writes the trailer and commits. If fill or
// anything else fails, or ctx is cancelled, the object is discarded and
// nothing appears under key.
func WriteObject(ctx context.Context, s *store.Store, key string, hdr Header, fill func(w *ObjectWriter) error) (Trailer, error) {
	return storeObject(ctx, s, key, hdr, true, fill)
}

// WriteBufferedObject stores p, a payload compressed ahead of its header, as one object
// under key, as WriteObject does. hdr must be of p's kind, with zstd. p is kept as it is: after a
// failure the same payload can be written again.
func WriteBufferedObject(ctx context.Context, s *store.Store, key string, hdr Header, p *PayloadBuffer) (Trailer, error) {
	if hdr.Compression != CompressionZstd || hdr.Kind != p.kind {
		return Trailer{}, fmt.Errorf("backup object %s: the payload was buffered for a %s object with zstd, the header says %s with %s", key, p.kind, hdr.Kind, hdr.Compression)
	}
	if err := p.finish(); err != nil {
		return Trailer{}, fmt.Errorf("backup object %s: %w", key, err)
	}
	return storeObject(ctx, s, key, hdr, false, func(w *ObjectWriter) error {
		return w.writeEncoded(&p.chunks, p.raw)
	})
}

func storeObject(ctx context.Context, s *store.Store, key string, hdr Header, encode bool, fill func(w *ObjectWriter) error) (Trailer, error) {
	sw, err := s.NewWriter(ctx, key)
	if err != nil {
		return Trailer{}, err
	}
	ow, err := newObjectWriter(sw, hdr, s.Keys(), encode)
	if err != nil {
		sw.Abort()
		return Trailer{}, fmt.Errorf("backup object %s: %w", key, err)
	}
	if err := fill(ow); err != nil {
		ow.Close()
		sw.Abort()
		return Trailer{}, fmt.Errorf("backup object %s: %w", key, err)
	}
	if err := ow.Close(); err != nil {
		sw.Abort()
		return Trailer{}, fmt.Errorf("backup object %s: %w", key, err)
	}
	if err := sw.Close(); err != nil {
		return Trailer{}, fmt.Errorf("backup object %s: commit: %w", key, err)
	}
	return ow.Trailer(), nil
}

// OpenObject opens the object at key in s and reads its header. Closing
// the returned reader closes the store reader too.
func OpenObject(ctx context.Context, s *store.Store, key string) (Header, *ObjectReader, error) {
	sr, err := s.NewReader(ctx, key)
	if err != nil {
		return Header{}, nil, err
	}
	hdr, or, err := NewObjectReader(sr, key, s.Keys())
	if err != nil {
		sr.Close()
		return Header{}, nil, err
	}
	or.closer = sr
	return hdr, or, nil
}

// ReadHeader reads the header of the object at key in s, and nothing more: no key is needed
// to read an encrypted object's header (list, timelines and times are read without one). Only
// a read of the payload authenticates the header; but with keys, an object that is not
// encrypted is refused here too (see NewObjectReader).
func ReadHeader(ctx context.Context, s *store.Store, key string) (Header, error) {
	sr, err := s.NewReader(ctx, key)
	if err != nil {
		return Header{}, err
	}
	defer sr.Close()
	hdr, _, err := readHeader(sr)
	if err == nil && s.Keys() != nil && !hdr.Encrypted() {
		err = notEncrypted(s.Keys())
	}
	if err != nil {
		return Header{}, fmt.Errorf("backup object %s: %w", key, err)
	}
	return hdr, nil
}

// maxExpansion bounds how many bytes one stored payload byte can decompress to: zstd's
// densest block (RLE: a 3-byte header and 1 byte) makes at most 128 KiB; an uncompressed
// payload is its own raw bytes.
const maxExpansion = 128 << 10 / 4

// ReadTrailer reads the trailer of o, its last TrailerSize bytes (o.Size from the listing),
// without the payload, and checks that its sizes fit the object's. Nothing else in it is proven
// until the payload is read (ObjectReader): use it to bound what a read may write (LimitRaw),
// never to trust.
func ReadTrailer(ctx context.Context, s *store.Store, o Object) (Trailer, error) {
	if o.Size < TrailerSize {
		return Trailer{}, fmt.Errorf("backup object %s: %w: truncated: %d bytes, fewer than a trailer", o.Key, ErrCorrupt, o.Size)
	}
	sr, err := s.NewRangeReader(ctx, o.Key, o.Size-TrailerSize, TrailerSize)
	if err != nil {
		return Trailer{}, err
	}
	defer sr.Close()
	b, err := io.ReadAll(io.LimitReader(sr, TrailerSize))
	if err != nil {
		return Trailer{}, err
	}
	t, err := parseTrailer(b)
	switch {
	case err != nil:
		return Trailer{}, fmt.Errorf("backup object %s: %w", o.Key, err)
	case t.PayloadSize > o.Size-TrailerSize:
		return Trailer{}, fmt.Errorf("backup object %s: %w: the trailer says the payload is %d bytes, in an object of %d", o.Key, ErrCorrupt, t.PayloadSize, o.Size)
	case t.RawSize/maxExpansion > t.PayloadSize:
		return Trailer{}, fmt.Errorf("backup object %s: %w: the trailer says %d bytes decompress to %d, more than zstd can make of them", o.Key, ErrCorrupt, t.PayloadSize, t.RawSize)
	}
	return t, nil
}

// CheckHeader checks that an object's header agrees with its name.
func CheckHeader(o Object, h Header) error {
	var probs []string
	if h.Timeline != o.Timeline {
		probs = append(probs, fmt.Sprintf("the header says timeline %d, the name says %d", h.Timeline, o.Timeline))
	}
	if h.Kind != o.Kind {
		probs = append(probs, fmt.Sprintf("the header says %s, the name says %s", h.Kind, o.Kind))
	}
	switch o.Kind {
	case KindFull:
		if h.FirstRev != o.FirstRev {
			probs = append(probs, fmt.Sprintf("the header says revision %d, the name says %d", h.FirstRev, o.FirstRev))
		}
	case KindDelta:
		if h.FirstRev != o.FirstRev || h.LastRev != o.LastRev {
			probs = append(probs, fmt.Sprintf("the header says revisions %d-%d, the name says %d-%d", h.FirstRev, h.LastRev, o.FirstRev, o.LastRev))
		}
	}
	if len(probs) > 0 {
		return fmt.Errorf("backup object %s: %w: %s", o.Key, ErrCorrupt, strings.Join(probs, "; "))
	}
	return nil
}
