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

// Key layout, relative to the store's prefix. Each timeline has a directory of its own;
// revisions are zero-padded to 20 digits (the width of the largest int64) and timelines to 10
// (the largest uint32), so that a plain listing sorts by timeline, then by revision:
//
//	v1/timeline/<timeline>/full/<rev>-<unix seconds>.snap.zst
//	v1/timeline/<timeline>/delta/<first rev>-<last rev>.ev.zst
//
// Objects written before timelines existed, v1/full/... and v1/delta/..., are timeline 1.
const (
	LayoutPrefix   = "v1/"
	TimelinePrefix = "v1/timeline/"
	legacyFull     = "v1/full/"
	legacyDelta    = "v1/delta/"
	fullDir        = "full/"
	deltaDir       = "delta/"
	fullSuffix     = ".snap.zst"
	deltaSuffix    = ".ev.zst"
	revDigits      = 20
	timelineDigits = 10
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
	// Timeline is the history the object belongs to (see Chain): 1 for objects named before
	// timelines existed.
	Timeline uint32
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

// TimelineDir is the directory of timeline tl's objects: v1/timeline/<tl>/.
func TimelineDir(tl uint32) string {
	return fmt.Sprintf("%s%0*d/", TimelinePrefix, timelineDigits, tl)
}

// FullKey names a full snapshot of timeline tl taken at revision rev (as far as the writer
// knew) at time created: v1/timeline/<tl>/full/<rev>-<unix seconds>.snap.zst.
func FullKey(tl uint32, rev int64, created time.Time) string {
	return fmt.Sprintf("%s%s%0*d-%d%s", TimelineDir(tl), fullDir, revDigits, rev, created.Unix(), fullSuffix)
}

// DeltaKey names a delta of timeline tl holding the events of revisions first..last:
// v1/timeline/<tl>/delta/<first>-<last>.ev.zst.
func DeltaKey(tl uint32, first, last int64) string {
	return fmt.Sprintf("%s%s%0*d-%0*d%s", TimelineDir(tl), deltaDir, revDigits, first, revDigits, last, deltaSuffix)
}

// ParseKey parses a key made by FullKey or DeltaKey, or an object name from before
// timelines (v1/full/..., v1/delta/...: timeline 1). It rejects anything else, so foreign
// files under the prefix are never taken for backups.
func ParseKey(key string) (Object, error) {
	tl, rest := uint32(1), key
	if r, ok := strings.CutPrefix(key, TimelinePrefix); ok {
		n, after, ok := strings.Cut(r, "/")
		v, err := strconv.ParseUint(n, 10, 32)
		if !ok || err != nil || v < 1 || len(n) != timelineDigits {
			return Object{}, fmt.Errorf("%q is not a backup object: want %s<timeline, %d digits from 1>/", key, TimelinePrefix, timelineDigits)
		}
		tl, rest = uint32(v), after
	} else if r, ok := strings.CutPrefix(key, LayoutPrefix); ok && (strings.HasPrefix(key, legacyFull) || strings.HasPrefix(key, legacyDelta)) {
		rest = r
	} else {
		return Object{}, fmt.Errorf("%q is not a backup object: keys start with %s<timeline>/ (or, before timelines, %s or %s)", key, TimelinePrefix, legacyFull, legacyDelta)
	}
	var kind Kind
	var suffix string
	switch {
	case strings.HasPrefix(rest, fullDir):
		kind, rest, suffix = KindFull, rest[len(fullDir):], fullSuffix
	case strings.HasPrefix(rest, deltaDir):
		kind, rest, suffix = KindDelta, rest[len(deltaDir):], deltaSuffix
	default:
		return Object{}, fmt.Errorf("%q is not a backup object: a timeline holds %s and %s only", key, fullDir, deltaDir)
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
	o := Object{Key: key, Kind: kind, Timeline: tl, FirstRev: first}
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
