package backup

import (
	"sort"
	"strings"
	"testing"
	"time"
)

func TestKeysRoundTrip(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	fk := FullKey(7, 1234, at)
	if fk != "v1/timeline/0000000007/full/00000000000000001234-1740830400.snap.zst" {
		t.Fatalf("FullKey = %s", fk)
	}
	o, err := ParseKey(fk)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != KindFull || o.Timeline != 7 || o.FirstRev != 1234 || o.LastRev != 1234 || !o.Created.Equal(at) {
		t.Fatalf("ParseKey(%s) = %+v", fk, o)
	}

	dk := DeltaKey(1, 1235, 99999)
	if dk != "v1/timeline/0000000001/delta/00000000000000001235-00000000000000099999.ev.zst" {
		t.Fatalf("DeltaKey = %s", dk)
	}
	o, err = ParseKey(dk)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != KindDelta || o.Timeline != 1 || o.FirstRev != 1235 || o.LastRev != 99999 {
		t.Fatalf("ParseKey(%s) = %+v", dk, o)
	}

	// The largest timeline fits.
	if o, err := ParseKey(DeltaKey(1<<32-1, 5, 6)); err != nil || o.Timeline != 1<<32-1 {
		t.Fatalf("max timeline: %+v, %v", o, err)
	}
}

// TestKeysVersion1ReadAsTimeline1: names from before timelines (no timeline directory) are
// still backups, of timeline 1.
func TestKeysVersion1ReadAsTimeline1(t *testing.T) {
	o, err := ParseKey("v1/full/00000000000000001234-1740830400.snap.zst")
	if err != nil || o.Kind != KindFull || o.Timeline != 1 || o.FirstRev != 1234 || o.Created.Unix() != 1740830400 {
		t.Fatalf("old full snapshot name: %+v, %v", o, err)
	}
	o, err = ParseKey("v1/delta/00000000000000001235-00000000000000099999.ev.zst")
	if err != nil || o.Kind != KindDelta || o.Timeline != 1 || o.FirstRev != 1235 || o.LastRev != 99999 {
		t.Fatalf("old delta name: %+v, %v", o, err)
	}

	// The largest revision fits.
	const maxRev = 1<<63 - 1
	if o, err := ParseKey(DeltaKey(1, maxRev, maxRev)); err != nil || o.LastRev != maxRev {
		t.Fatalf("max revision: %+v, %v", o, err)
	}
}

func TestKeysSortByTimelineThenRevision(t *testing.T) {
	revs := []int64{9, 10, 100, 99, 1, 123456789012}
	var keys []string
	for _, tl := range []uint32{10, 2, 9, 1} {
		for _, r := range revs {
			keys = append(keys, DeltaKey(tl, r, r+1))
		}
	}
	sort.Strings(keys)
	var prev Object
	for _, k := range keys {
		o, _ := ParseKey(k)
		if o.Timeline < prev.Timeline || (o.Timeline == prev.Timeline && o.FirstRev < prev.FirstRev) {
			t.Fatalf("keys sort %d/%d after %d/%d: %v", o.Timeline, o.FirstRev, prev.Timeline, prev.FirstRev, keys)
		}
		prev = o
	}
}

func TestParseKeyRejectsForeignKeys(t *testing.T) {
	for _, tc := range []struct{ name, key, why string }{
		{"other dir", "v1/other/00000000000000000001-1.snap.zst", "is not a backup object"},
		{"no version dir", "full/00000000000000000001-1.snap.zst", "is not a backup object"},
		{"future layout", "v2/full/00000000000000000001-1.snap.zst", "is not a backup object"},
		{"wrong suffix", "v1/full/00000000000000000001-1.snap", "ends in .snap.zst"},
		{"delta suffix on full", "v1/full/00000000000000000001-1.ev.zst", "ends in .snap.zst"},
		{"unpadded revision", "v1/full/1-1.snap.zst", "not 20 digits"},
		{"revision not a number", "v1/delta/0000000000000000000x-00000000000000000002.ev.zst", "not a number"},
		{"revision zero", "v1/delta/00000000000000000000-00000000000000000002.ev.zst", "out of range"},
		{"revision overflow", "v1/delta/99999999999999999999-99999999999999999999.ev.zst", "out of range"},
		{"last before first", "v1/delta/00000000000000000005-00000000000000000004.ev.zst", "before first"},
		{"no separator", "v1/delta/00000000000000000005.ev.zst", "want <revision>-<revision>"},
		{"bad time", "v1/full/00000000000000000001-x.snap.zst", "bad unix time"},
		{"signed time", "v1/full/00000000000000000001-+5.snap.zst", "bad unix time"},
		{"temp file", "v1/full/00000000000000000001-1.snap.zst.17a2b3c4.tmp", "ends in .snap.zst"},
		{"sub dir", "v1/full/x/00000000000000000001-1.snap.zst", "not 20 digits"},
		{"timeline zero", "v1/timeline/0000000000/full/00000000000000000001-1.snap.zst", "timeline, 10 digits from 1"},
		{"unpadded timeline", "v1/timeline/2/full/00000000000000000001-1.snap.zst", "timeline, 10 digits from 1"},
		{"timeline overflow", "v1/timeline/4294967296/full/00000000000000000001-1.snap.zst", "timeline, 10 digits from 1"},
		{"timeline without objects", "v1/timeline/0000000002", "timeline, 10 digits from 1"},
		{"other dir in a timeline", "v1/timeline/0000000002/other/00000000000000000001-1.snap.zst", "holds full/ and delta/ only"},
		{"old layout inside a timeline", "v1/timeline/0000000002/v1/full/00000000000000000001-1.snap.zst", "holds full/ and delta/ only"},
		{"bad timeline delta", "v1/timeline/0000000002/delta/00000000000000000005-00000000000000000004.ev.zst", "before first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseKey(tc.key)
			if err == nil || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("ParseKey(%s) = %v, want an error naming the key and saying %q", tc.key, err, tc.why)
			}
		})
	}
}
