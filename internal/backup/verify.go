package backup

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"github.com/etcd-steward/steward/internal/units"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/etcd-steward/steward/internal/store"
)

// BadObject is an object that failed verification.
type BadObject struct {
	Key string
	Err error
}

// Report is the result of Verify.
type Report struct {
	Objects int   // backup objects read
	Bytes   int64 // bytes read from the store
	Events  int64 // delta events read
	Bad     []BadObject
	Issues  []Issue  // chain issues, with the bad objects counted as missing
	Foreign []string // keys under v1/ that are not backup objects
	// Timelines says, for each timeline, the cluster whose history it holds and the
	// revisions restorable with the good objects.
	Timelines []TimelineReport
}

// TimelineReport is what Verify found restorable on one timeline.
type TimelineReport struct {
	Timeline  uint32   `json:"timeline"`
	ClusterID units.ID `json:"clusterID"`
	Coverage  []Range  `json:"coverage"`
}

// OK reports whether every object is sound and the chain has no
// error-level issue.
func (r Report) OK() bool {
	if len(r.Bad) > 0 {
		return false
	}
	for _, i := range r.Issues {
		if i.Severity >= Error {
			return false
		}
	}
	return true
}

// Verify reads every backup object in s to the end: header, checksums,
// the agreement of header and name (timeline included), the framing of delta events and that
// their revisions follow each other with no gap, that full snapshots are bbolt databases
// followed by etcd's own SHA-256; then it checks, timeline by timeline, that the objects of a timeline
// are of one cluster and the chain, as if the bad objects were missing. progress, if not
// nil, is called with bytes read so far and the total to read.
//
// The error is for failures to verify at all (listing, ctx); what is
// wrong with the backups is in the report.
func Verify(ctx context.Context, s *store.Store, progress func(done, total int64)) (Report, error) {
	// It streams: per timeline, the full snapshots are held (few), the deltas are listed page
	// by page and checked as they come; per cluster of a timeline, a count and one key.
	ix, err := ReadIndex(ctx, s)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Foreign: ix.ForeignKeys}
	if ix.Foreign > len(ix.ForeignKeys) {
		rep.Foreign = append(rep.Foreign, fmt.Sprintf("(and %d more)", ix.Foreign-len(ix.ForeignKeys)))
	}
	var total, done int64
	for _, t := range ix.Timelines {
		total += t.Bytes
	}
	report := func() {
		if progress != nil {
			progress(done, total)
		}
	}
	report()
	type seen struct {
		n   int
		key string
	}
	// read verifies one object; ok=false: it is bad (recorded in the report). A delta's
	// revisions are handed to onRevision with the digest of their events.
	read := func(o Object, clusters map[uint64]*seen, onRevision func(rev int64, digest [sha256.Size]byte)) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("verify %s: %w", s, err)
		}
		start, reported := done, done
		hdr, events, err := verifyObject(ctx, s, o, onRevision, func(n int64) {
			done += n
			if done-reported >= 1<<20 {
				reported = done
				report()
			}
		})
		if ctx.Err() != nil {
			return false, fmt.Errorf("verify %s: %w", s, ctx.Err())
		}
		rep.Objects++
		rep.Events += events
		rep.Bytes += done - start
		// Count what was not read (a bad object stops early) as done.
		if done-start < o.Size {
			done = start + o.Size
		}
		report()
		if err != nil {
			rep.Bad = append(rep.Bad, BadObject{Key: o.Key, Err: err})
			return false, nil
		}
		if clusters[hdr.ClusterID] == nil {
			clusters[hdr.ClusterID] = &seen{key: o.Key}
		}
		clusters[hdr.ClusterID].n++
		return true, nil
	}
	for _, t := range ix.Timelines {
		tl := t.Timeline
		clusters := map[uint64]*seen{}
		var fulls []Object
		for _, f := range t.Fulls {
			ok, err := read(f, clusters, nil)
			if err != nil {
				return rep, err
			}
			if ok {
				fulls = append(fulls, f)
			}
		}
		k := newChecker(fulls)
		var runs []Range
		var div divergence
		for d, err := range Deltas(ctx, s, tl) {
			if err != nil {
				return rep, err
			}
			div.next(d)
			ok, err := read(d, clusters, div.revision)
			if err != nil {
				return rep, err
			}
			if ok {
				div.keep()
				k.delta(d)
				runs = addRun(runs, Range{d.FirstRev, d.LastRev})
			}
		}
		issues := append(k.finish(), div.issues...)
		for i := range issues {
			issues[i].Timeline = tl
		}
		rep.Issues = append(rep.Issues, issues...)
		if len(fulls) == 0 && len(runs) == 0 {
			continue // nothing sound left on it
		}
		tr := TimelineReport{Timeline: tl, Coverage: coverage(fulls, runs)}
		if tr.Coverage == nil {
			tr.Coverage = []Range{} // JSON: [] rather than null
		}
		ids := slices.Sorted(maps.Keys(clusters))
		if len(ids) == 1 {
			tr.ClusterID = units.ID(ids[0])
		} else if len(ids) > 1 {
			var parts []string
			for _, id := range ids {
				parts = append(parts, fmt.Sprintf("cluster %x (%d objects, e.g. %s)", id, clusters[id].n, clusters[id].key))
			}
			rep.Issues = append(rep.Issues, Issue{Severity: Error, Kind: IssueClusters, Timeline: tl, Keys: []string{clusters[ids[0]].key, clusters[ids[1]].key},
				Message: fmt.Sprintf("the objects hold the histories of %d clusters: %s; a timeline is one cluster's history: restore another timeline, or a revision the older objects reach alone", len(ids), strings.Join(parts, ", "))})
		}
		rep.Timelines = append(rep.Timelines, tr)
	}
	return rep, nil
}

// VerifyObject reads one object to the end and checks it as Verify does.
// Snapshotters can use it to prove what they just wrote.
func VerifyObject(ctx context.Context, s *store.Store, o Object) error {
	_, _, err := verifyObject(ctx, s, o, nil, nil)
	return err
}

func verifyObject(ctx context.Context, s *store.Store, o Object, onRevision func(int64, [sha256.Size]byte), onRead func(int64)) (hdr Header, events int64, err error) {
	sr, err := s.NewReader(ctx, o.Key)
	if err != nil {
		return hdr, 0, err
	}
	defer sr.Close()
	hdr, or, err := NewObjectReader(&countingReader{r: sr, fn: onRead}, o.Key, s.Keys())
	if err != nil {
		return hdr, 0, err
	}
	defer or.Close()
	if err := CheckHeader(o, hdr); err != nil {
		return hdr, 0, err
	}
	if o.Kind == KindFull {
		return hdr, 0, verifyFull(or, o)
	}
	events, err = verifyDelta(or, o, onRevision)
	return hdr, events, err
}

// verifyDelta checks a delta's events (DeltaCheck) and, with onRevision, hands it each
// revision with the digest of its events: type and key-value, not prev_kv, which a watch sends
// only on request.
func verifyDelta(or *ObjectReader, o Object, onRevision func(int64, [sha256.Size]byte)) (int64, error) {
	er := NewEventReader(or, o.Key)
	check := NewDeltaCheck(o)
	var rev int64
	h := sha256.New()
	emit := func() {
		if onRevision != nil && rev != 0 {
			var sum [sha256.Size]byte
			h.Sum(sum[:0])
			onRevision(rev, sum)
		}
		h.Reset()
	}
	for {
		ev, err := er.ReadEvent()
		if err == io.EOF {
			if err := check.Done(); err != nil {
				return er.Count(), err
			}
			emit()
			return er.Count(), nil
		}
		if err != nil {
			return er.Count(), err
		}
		if err := check.Next(ev.Kv.ModRevision); err != nil {
			return er.Count(), err
		}
		if ev.Kv.ModRevision != rev {
			emit()
			rev = ev.Kv.ModRevision
		}
		if onRevision != nil {
			kv, err := ev.Kv.Marshal()
			if err != nil {
				return er.Count(), fmt.Errorf("backup object %s: %w: %v", o.Key, ErrCorrupt, err)
			}
			h.Write([]byte{byte(ev.Type)})
			h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(kv))))
			h.Write(kv)
		}
	}
}

// divergence finds overlapping deltas of a timeline that hold different events at one
// revision: deltas come in the order of their first revision, and the digests of the
// revisions that a later delta can still overlap are held (at most about one delta's).
type divergence struct {
	held    map[int64]heldRevision
	cur     Object
	pending map[int64][sha256.Size]byte
	issues  []Issue
}

type heldRevision struct {
	digest [sha256.Size]byte
	key    string
}

// next starts delta d: revisions below its first can no longer be overlapped.
func (v *divergence) next(d Object) {
	if v.held == nil {
		v.held = map[int64]heldRevision{}
	}
	for r := range v.held {
		if r < d.FirstRev {
			delete(v.held, r)
		}
	}
	v.cur, v.pending = d, map[int64][sha256.Size]byte{}
}

// revision records one revision of the current delta.
func (v *divergence) revision(rev int64, digest [sha256.Size]byte) { v.pending[rev] = digest }

// keep compares the current delta, read whole and sound, with what earlier deltas held at its
// revisions (the first difference is reported), then holds its digests.
func (v *divergence) keep() {
	for _, rev := range slices.Sorted(maps.Keys(v.pending)) {
		d := v.pending[rev]
		h, ok := v.held[rev]
		if !ok {
			v.held[rev] = heldRevision{digest: d, key: v.cur.Key}
			continue
		}
		if h.digest != d && (len(v.issues) == 0 || v.issues[len(v.issues)-1].Keys[1] != v.cur.Key) {
			v.issues = append(v.issues, Issue{Severity: Error, Kind: IssueDiverged, From: rev, To: rev, Keys: []string{h.key, v.cur.Key},
				Message: fmt.Sprintf("deltas %s and %s hold different events at revision %d: two histories in one timeline, and a restore through revision %d may apply either; restore to a revision below %d, or from another timeline", h.key, v.cur.Key, rev, rev, rev)})
		}
	}
}

// DeltaCheck checks a delta's events, one by one, against the object: every event inside
// its revisions, revisions that never go back and leave no gap (each revision is at least
// one event), and events at both ends.
type DeltaCheck struct {
	o           Object
	events      int64
	first, last int64
}

// NewDeltaCheck starts checking the events of delta o.
func NewDeltaCheck(o Object) *DeltaCheck { return &DeltaCheck{o: o} }

// Next checks the next event's revision.
func (c *DeltaCheck) Next(rev int64) error {
	c.events++
	o := c.o
	switch {
	case rev < o.FirstRev || rev > o.LastRev:
		return fmt.Errorf("backup object %s: %w: event %d at revision %d is outside the object's revisions %d-%d", o.Key, ErrCorrupt, c.events, rev, o.FirstRev, o.LastRev)
	case c.first == 0:
		c.first = rev
	case rev < c.last:
		return fmt.Errorf("backup object %s: %w: event %d at revision %d follows revision %d: the events go back", o.Key, ErrCorrupt, c.events, rev, c.last)
	case rev > c.last+1:
		return fmt.Errorf("backup object %s: %w: revisions %d-%d are missing inside the object (event %d at revision %d follows revision %d)",
			o.Key, ErrCorrupt, c.last+1, rev-1, c.events, rev, c.last)
	}
	c.last = rev
	return nil
}

// Done checks, after the last event, that the events reach both ends of the object's revisions.
func (c *DeltaCheck) Done() error {
	o := c.o
	if c.events == 0 {
		return fmt.Errorf("backup object %s: %w: delta holds no events but claims revisions %d-%d", o.Key, ErrCorrupt, o.FirstRev, o.LastRev)
	}
	if c.first != o.FirstRev || c.last != o.LastRev {
		return fmt.Errorf("backup object %s: %w: events span revisions %d-%d but the object claims %d-%d", o.Key, ErrCorrupt, c.first, c.last, o.FirstRev, o.LastRev)
	}
	return nil
}

// verifyFull reads the snapshot through a SnapshotCheck: a bbolt database followed by etcd's
// SHA-256 of it.
func verifyFull(or *ObjectReader, o Object) error {
	check := NewSnapshotCheck(o.Key)
	if _, err := io.Copy(check, or); err != nil {
		return err
	}
	return check.Done()
}

type countingReader struct {
	r  io.Reader
	fn func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.fn != nil && n > 0 {
		c.fn(int64(n))
	}
	return n, err
}
