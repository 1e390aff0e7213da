// Package backup defines Steward's backup objects: their names, their byte
// format (header, zstd payload, checksummed trailer), the framing of delta
// events, the chain of full snapshots and deltas, verification, and (in
// the retention sub-package) garbage collection.
//
// docs/backup-format.md describes the layout and bytes for people who
// read backups without this code.
package backup

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Key layout, relative to the store's prefix. Revisions are zero-padded to
// 20 digits (the width of the largest int64) so that names sort by revision.
const (
	LayoutPrefix = "v1/"
	FullPrefix   = "v1/full/"
	DeltaPrefix  = "v1/delta/"
	fullSuffix   = ".snap.zst"
	deltaSuffix  = ".ev.zst"
	revDigits    = 20
)

// Kind says what an object holds.
type Kind uint8

const (
	// KindFull is a full snapshot: the etcd database at one revision.
	KindFull Kind = 1
	// KindDelta is a run of watch events covering a range of revisions.
	KindDelta Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindFull:
		return "full"
	case KindDelta:
		return "delta"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Object is one backup object as named in the store.
type Object struct {
	Key  string
	Kind Kind
	// FirstRev and LastRev are the revisions in the name. For a full
	// snapshot both are the revision the writer knew when it started, a
	// lower bound of the snapshot's true revision (which a restore reads
	// from the database itself). For a delta they are the revisions of its
	// first and last event.
	FirstRev int64
	LastRev  int64
	// Created is the time in the name for a full snapshot, the store's
	// modification time for a delta.
	Created time.Time
	Size    int64     // bytes in the store
	ModTime time.Time // from the store
}

// Rev is a full snapshot's revision (its FirstRev).
func (o Object) Rev() int64 { return o.FirstRev }

func (o Object) String() string {
	if o.Kind == KindFull {
		return fmt.Sprintf("full snapshot %s (revision %d)", o.Key, o.FirstRev)
	}
	return fmt.Sprintf("delta %s (revisions %d-%d)", o.Key, o.FirstRev, o.LastRev)
}

// FullKey names a full snapshot taken at revision rev (as far as the
// writer knew) at time created: v1/full/<rev>-<unix seconds>.snap.zst.
func FullKey(rev int64, created time.Time) string {
	return fmt.Sprintf("%s%0*d-%d%s", FullPrefix, revDigits, rev, created.Unix(), fullSuffix)
}

// DeltaKey names a delta holding the events of revisions first..last:
// v1/delta/<first>-<last>.ev.zst.
func DeltaKey(first, last int64) string {
	return fmt.Sprintf("%s%0*d-%0*d%s", DeltaPrefix, revDigits, first, revDigits, last, deltaSuffix)
}

// ParseKey parses a key made by FullKey or DeltaKey. It rejects anything
// else, so foreign files under the prefix are never taken for backups.
func ParseKey(key string) (Object, error) {
	var kind Kind
	var rest, suffix string
	switch {
	case strings.HasPrefix(key, FullPrefix):
		kind, rest, suffix = KindFull, key[len(FullPrefix):], fullSuffix
	case strings.HasPrefix(key, DeltaPrefix):
		kind, rest, suffix = KindDelta, key[len(DeltaPrefix):], deltaSuffix
	default:
		return Object{}, fmt.Errorf("%q is not a backup object: keys start with %s or %s", key, FullPrefix, DeltaPrefix)
	}
	body, ok := strings.CutSuffix(rest, suffix)
	if !ok {
		return Object{}, fmt.Errorf("%q is not a backup object: a %s key ends in %s", key, kind, suffix)
	}
	a, b, ok := strings.Cut(body, "-")
	if !ok {
		return Object{}, fmt.Errorf("%q is not a backup object: want <revision>-<%s>", key, map[Kind]string{KindFull: "unix seconds", KindDelta: "revision"}[kind])
	}
	first, err := parseRev(a)
	if err != nil {
		return Object{}, fmt.Errorf("%q is not a backup object: %w", key, err)
	}
	o := Object{Key: key, Kind: kind, FirstRev: first}
	if kind == KindFull {
		secs, err := strconv.ParseInt(b, 10, 64)
		if err != nil || secs < 0 || b != strconv.FormatInt(secs, 10) {
			return Object{}, fmt.Errorf("%q is not a backup object: bad unix time %q", key, b)
		}
		o.LastRev, o.Created = first, time.Unix(secs, 0).UTC()
		return o, nil
	}
	last, err := parseRev(b)
	if err != nil {
		return Object{}, fmt.Errorf("%q is not a backup object: %w", key, err)
	}
	if last < first {
		return Object{}, fmt.Errorf("%q is not a backup object: last revision %d is before first %d", key, last, first)
	}
	o.LastRev = last
	return o, nil
}

func parseRev(s string) (int64, error) {
	if len(s) != revDigits {
		return 0, fmt.Errorf("revision %q is not %d digits", s, revDigits)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("revision %q is not a number", s)
		}
	}
	r, err := strconv.ParseInt(s, 10, 64)
	if err != nil || r < 1 {
		return 0, fmt.Errorf("revision %q is out of range", s)
	}
	return r, nil
}
