package backup

import (
	"context"
	"fmt"
	"strings"

	"github.com/etcd-steward/steward/internal/store"
)

// WriteObject streams one object into s under key: it writes hdr, lets
// fill write the payload, then writes the trailer and commits. If fill or
// anything else fails, or ctx is cancelled, the object is discarded and
// nothing appears under key.
func WriteObject(ctx context.Context, s *store.Store, key string, hdr Header, fill func(w *ObjectWriter) error) (Trailer, error) {
	sw, err := s.NewWriter(ctx, key)
	if err != nil {
		return Trailer{}, err
	}
	ow, err := NewObjectWriter(sw, hdr)
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
	hdr, or, err := NewObjectReader(sr, key)
	if err != nil {
		sr.Close()
		return Header{}, nil, err
	}
	or.closer = sr
	return hdr, or, nil
}

// CheckHeader checks that an object's header agrees with its name.
func CheckHeader(o Object, h Header) error {
	var probs []string
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
