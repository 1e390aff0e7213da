package restore

import (
	"fmt"

	"github.com/etcd-steward/steward/internal/backup"
)

// plan is what a restore reads: a full snapshot and the deltas that lead from its name's
// revision to target. requested is the target asked for (resolved to the newest revision if
// none was); missing is set when AllowPartial cut target short of it at a hole.
type plan struct {
	full      backup.Object
	deltas    []backup.Object
	target    int64
	requested int64
	missing   *backup.Range
}

// planRestore is planFrom for a chain of one timeline held whole in memory.
func planRestore(c backup.Chain, target int64, allowPartial bool, storeName string) (plan, error) {
	ix := backup.IndexOf(c)
	var ti backup.TimelineIndex
	if n := len(ix.Timelines); n > 0 {
		ti = ix.Timelines[n-1]
	}
	return planFrom(c, ti, target, allowPartial, storeName)
}

// planBase is the full snapshot planFrom starts from for target (<= 0: the newest revision of
// ti), of those not excluded: the deltas it needs are those backup.DeltasBetween(base,
// target) keeps.
func planBase(ti backup.TimelineIndex, target int64, excluded map[string]bool) (base, resolved int64) {
	if target <= 0 {
		target = ti.NewestRevision()
	}
	for _, f := range ti.Fulls {
		if f.FirstRev <= target && !excluded[f.Key] {
			base = f.FirstRev
		}
	}
	return base, target
}

// planFrom picks the newest full snapshot at or below target and the deltas after it. c holds
// the timeline's full snapshots and (at least) the deltas between the newest of them at or
// below target and target; ti summarises the whole timeline, for the newest revision and the
// messages. target <= 0 means the newest revision any object holds, so that a hole before the
// newest deltas is reported rather than silently restored around. storeName is for messages.
func planFrom(c backup.Chain, ti backup.TimelineIndex, target int64, allowPartial bool, storeName string) (plan, error) {
	if len(c.Fulls) == 0 {
		if ti.Deltas > 0 {
			return plan{}, fmt.Errorf("restore: %w: %s holds %d deltas but no full snapshot to apply them to; nothing can be restored", ErrOutOfRange, storeName, ti.Deltas)
		}
		return plan{}, fmt.Errorf("restore: %w: %s holds no backups (check the store URL and its prefix)", ErrOutOfRange, storeName)
	}
	cov := ti.Coverage()
	newest := ti.NewestRevision()
	if target <= 0 {
		target = newest
	}
	if oldest := c.Fulls[0]; target < oldest.FirstRev {
		return plan{}, fmt.Errorf("restore to revision %d: %w: the oldest full snapshot %s is at revision %d; restorable revisions: %s",
			target, ErrOutOfRange, oldest.Key, oldest.FirstRev, backup.DescribeRanges(cov))
	}
	if target > newest {
		return plan{}, fmt.Errorf("restore to revision %d: %w: the newest backed-up revision is %d; restorable revisions: %s",
			target, ErrOutOfRange, newest, backup.DescribeRanges(cov))
	}
	if rp, err := c.Plan(target); err == nil {
		return plan{full: rp.Full, deltas: rp.Deltas, target: rp.Target, requested: target}, nil
	}
	// target is above what the deltas after its full snapshot reach: a hole.
	var base backup.Object
	for _, f := range c.Fulls {
		if f.FirstRev <= target {
			base = f
		}
	}
	reach := reachFrom(c, base.FirstRev)
	next := newest + 1 // the first revision after reach that any object holds
	if n := ti.NextAfter(reach); n > 0 {
		next = min(next, n)
	}
	missing := backup.Range{From: reach + 1, To: next - 1}
	if !allowPartial {
		return plan{}, fmt.Errorf("restore to revision %d: %w: revisions %s are in no backup after %s, which reaches revision %d; restorable revisions: %s; restore to %d or earlier, or pass --allow-partial to restore up to the hole",
			target, ErrMissingRevisions, missing, base.Key, reach, backup.DescribeRanges(cov), reach)
	}
	rp, err := c.Plan(reach)
	if err != nil {
		return plan{}, fmt.Errorf("restore: plan up to the hole at revision %d: %w", reach+1, err)
	}
	return plan{full: rp.Full, deltas: rp.Deltas, target: rp.Target, requested: target, missing: &missing}, nil
}

// reachFrom is the newest revision the deltas continue to, without a hole, from revision from.
// It follows Chain.Plan: among the deltas that continue the chain, the one that goes furthest.
func reachFrom(c backup.Chain, from int64) int64 {
	reach := from
	for di := 0; ; {
		best := int64(-1)
		for ; di < len(c.Deltas) && c.Deltas[di].FirstRev <= reach+1; di++ {
			best = max(best, c.Deltas[di].LastRev)
		}
		if best <= reach {
			return reach
		}
		reach = best
	}
}
