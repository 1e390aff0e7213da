package maintenance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/units"
)

// Alarm is an active etcd alarm.
type Alarm struct {
	MemberID uint64 `json:"memberID"`
	Type     string `json:"type"` // NOSPACE, CORRUPT
}

// Alarms lists the cluster's active alarms.
func Alarms(ctx context.Context, cli *clientv3.Client) ([]Alarm, error) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.AlarmList(actx)
	if err != nil {
		return nil, fmt.Errorf("list the alarms: %w", err)
	}
	var out []Alarm
	for _, a := range resp.Alarms {
		out = append(out, Alarm{MemberID: a.MemberID, Type: a.Alarm.String()})
	}
	return out, nil
}

// DisarmBelow is the share of its quota every member's database must be below before the
// NOSPACE alarm is disarmed: disarmed any higher, the next writes raise it again at once.
const DisarmBelow = 0.9

// CanDisarm says whether every member's database is below DisarmBelow of its quota, and if
// not, which are not.
func CanDisarm(members []Member) (bool, string) {
	var over []string
	for _, m := range members {
		switch {
		case !m.Answered:
			over = append(over, m.Name+" does not answer")
		case m.Quota > 0 && float64(m.DBSize) >= DisarmBelow*float64(m.Quota):
			over = append(over, fmt.Sprintf("%s holds %s of its %s quota", m.Name, units.Bytes(m.DBSize), units.Bytes(m.Quota)))
		}
	}
	if len(over) > 0 {
		return false, fmt.Sprintf("%s (every member must be below %.0f%%)", strings.Join(over, ", "), 100*DisarmBelow)
	}
	return true, ""
}

// NoSpaceResult is what RecoverNoSpace did.
type NoSpaceResult struct {
	CompactedAt int64  `json:"compactedAt"`
	Defrag      Result `json:"defrag"`
	Disarmed    bool   `json:"disarmed"`
}

// ErrStillFull: after compaction and defragmentation a member is still too close to its
// quota; the alarm stays until data is deleted or the quota raised.
var ErrStillFull = errors.New("the database is still too close to its quota")

// RecoverNoSpace recovers from a NOSPACE alarm without losing data: it compacts the history
// up to the current revision (keys and values stay), defragments every member (leader last),
// and disarms only once every member is below DisarmBelow of its quota. Without an active
// NOSPACE alarm it does nothing.
func RecoverNoSpace(ctx context.Context, cli *clientv3.Client, o Options) (NoSpaceResult, error) {
	var res NoSpaceResult
	alarms, err := Alarms(ctx, cli)
	if err != nil {
		return res, err
	}
	nospace := noSpace(alarms)
	if len(nospace) == 0 {
		return res, nil
	}
	if res.CompactedAt, err = Compact(ctx, cli, 0, 0); err != nil {
		return res, err
	}
	o.Policy = Policy{All: true}
	if res.Defrag, err = Defragment(ctx, cli, o); err != nil {
		return res, err
	}
	members, err := Observe(ctx, cli)
	if err != nil {
		return res, err
	}
	if ok, why := CanDisarm(members); !ok {
		return res, fmt.Errorf("%w: %s; delete data or raise the quota (etcd --quota-backend-bytes), and the alarm is disarmed at the next check", ErrStillFull, why)
	}
	// A member raises its own NOSPACE after it applied a write past its quota, in a proposal
	// of its own that may be committed after the first listing, or even after the disarm: the
	// alarms are listed again and disarmed until none is left (a few rounds at most).
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for round := 0; len(nospace) > 0; round++ {
		if round == 3 {
			return res, fmt.Errorf("%w: NOSPACE raised again after %d disarms (member %x): something still writes past the quota", ErrStillFull, round, nospace[0].MemberID)
		}
		for _, a := range nospace {
			if _, err := cli.AlarmDisarm(dctx, &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: pb.AlarmType_NOSPACE}); err != nil {
				return res, fmt.Errorf("disarm NOSPACE of member %x: %w", a.MemberID, err)
			}
		}
		now, err := Alarms(dctx, cli)
		if err != nil {
			return res, err
		}
		nospace = noSpace(now)
	}
	res.Disarmed = true
	return res, nil
}

// noSpace are the NOSPACE alarms among alarms.
func noSpace(alarms []Alarm) []Alarm {
	return slices.DeleteFunc(alarms, func(a Alarm) bool { return a.Type != pb.AlarmType_NOSPACE.String() })
}

// Compact compacts the history before revision (0: before the current revision minus keep),
// physically: every member has applied it when Compact returns, so a defragmentation after
// it reclaims the space. It returns the revision compacted at.
func Compact(ctx context.Context, cli *clientv3.Client, revision, keep int64) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if revision <= 0 {
		// A read is allowed under NOSPACE and gives the current revision.
		resp, err := cli.Get(cctx, "\x00", clientv3.WithCountOnly())
		if err != nil {
			return 0, fmt.Errorf("read the current revision: %w", err)
		}
		revision = max(resp.Header.Revision-keep, 1)
	}
	if _, err := cli.Compact(cctx, revision, clientv3.WithCompactPhysical()); err != nil {
		if errors.Is(err, rpctypes.ErrCompacted) {
			return revision, nil // compacted there or later already
		}
		if errors.Is(err, rpctypes.ErrFutureRev) {
			return 0, fmt.Errorf("compact at revision %d: the cluster is not at that revision yet", revision)
		}
		return 0, fmt.Errorf("compact at revision %d: %w", revision, err)
	}
	return revision, nil
}
