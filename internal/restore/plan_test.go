package restore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
)

func chainOf(t *testing.T, keys ...string) backup.Chain {
	t.Helper()
	var objs []backup.Object
	for _, k := range keys {
		o, err := backup.ParseKey(k)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	return backup.NewChain(objs)
}

// TestPlanRestore covers the planning rules without a store: the newest full snapshot at or
// below the target, holes, gaps before a newer full snapshot, and targets out of range.
func TestPlanRestore(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := chainOf(t,
		backup.FullKey(1, 100, now),
		backup.DeltaKey(1, 101, 150),
		backup.DeltaKey(1, 140, 180), // overlaps
		backup.DeltaKey(1, 181, 200),
		// hole 201-220
		backup.DeltaKey(1, 221, 250),
		backup.FullKey(1, 300, now),
		backup.DeltaKey(1, 301, 320),
	)
	cases := []struct {
		target  int64
		partial bool
		full    int64
		deltas  int
		to      int64
		missing *backup.Range
		err     error
		msg     string
	}{
		{target: 100, full: 100, to: 100},
		{target: 170, full: 100, deltas: 2, to: 170},
		{target: 200, full: 100, deltas: 3, to: 200},
		{target: 0, full: 300, deltas: 1, to: 320},
		{target: 310, full: 300, deltas: 1, to: 310},
		{target: 230, err: ErrMissingRevisions, msg: "revisions 201-220 are in no backup"},
		{target: 230, partial: true, full: 100, deltas: 3, to: 200, missing: &backup.Range{From: 201, To: 220}},
		// A gap before the newer full snapshot: 251-299.
		{target: 260, err: ErrMissingRevisions, msg: "revisions 201-220"},
		{target: 99, err: ErrOutOfRange, msg: "restorable revisions: 100-200, 300-320"},
		{target: 321, err: ErrOutOfRange, msg: "newest backed-up revision is 320"},
	}
	for _, tc := range cases {
		p, err := planRestore(c, tc.target, tc.partial, "mem://x")
		if tc.err != nil {
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("target %d: err %v, want %v with %q", tc.target, err, tc.err, tc.msg)
			}
			continue
		}
		if err != nil {
			t.Errorf("target %d: %v", tc.target, err)
			continue
		}
		if p.full.FirstRev != tc.full || len(p.deltas) != tc.deltas || p.target != tc.to ||
			(tc.missing == nil) != (p.missing == nil) || (tc.missing != nil && *tc.missing != *p.missing) {
			t.Errorf("target %d: plan %+v, want full %d, %d deltas, to %d, missing %v", tc.target, p, tc.full, tc.deltas, tc.to, tc.missing)
		}
	}
	if _, err := planRestore(chainOf(t, backup.DeltaKey(1, 5, 6)), 0, false, "mem://x"); !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), "no full snapshot") {
		t.Errorf("deltas only: err %v", err)
	}
}

func TestIsNoSpace(t *testing.T) {
	if !isNoSpace(errors.New("replay: etcd storage failed at revision 5: write /x/db: no space left on device")) {
		t.Error("a panic message about a full disk is not recognised")
	}
	if isNoSpace(errors.New("permission denied")) {
		t.Error("an unrelated error counts as a full disk")
	}
}
