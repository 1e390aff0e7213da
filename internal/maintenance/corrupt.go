package maintenance

import (
	"context"
	"errors"
	"fmt"
	"github.com/etcd-steward/steward/internal/cluster"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/etcdutil"
)

// Corrupt alarm steps (Step.Kind), besides StepWait, StepMoveLeader and StepDone.
const (
	// StepRemove removes Member from the cluster: its sidecar then finds itself removed and
	// rejoins as a new learner on an empty data dir, as it does after any replacement.
	StepRemove StepKind = "Remove"
	// StepDisarm disarms the CORRUPT alarm of a member that is no longer in the cluster.
	StepDisarm StepKind = "Disarm"
)

// NextCorrupt decides the next step of the recovery from a CORRUPT alarm. etcd raises it for
// the member whose data disagrees with the others' (its periodic hash check), and then refuses
// every read and write until it is disarmed. The member named is replaced:
//
//   - only when exactly one member is named: with two or more, which data is right is not
//     clear, and nothing is done automatically;
//   - a voter only with at least 3 voters, so that a majority vouches for the others' data,
//     and only when the voters left after its removal still have a quorum among those
//     answering (a learner is removed whatever the voters: its data is never a source and
//     its removal leaves the quorum as it is);
//   - a leader named corrupt hands its leadership over first.
//
// Once the member is out of the cluster, its alarm is disarmed.
func NextCorrupt(alarms []Alarm, members []Member) Step {
	var ids []uint64
	for _, a := range alarms {
		if a.Type == pb.AlarmType_CORRUPT.String() && !slices.Contains(ids, a.MemberID) {
			ids = append(ids, a.MemberID)
		}
	}
	switch len(ids) {
	case 0:
		return Step{Kind: StepDone, Reason: "no CORRUPT alarm"}
	case 1:
	default:
		var named []string
		for _, id := range ids {
			named = append(named, nameOf(members, id))
		}
		return Step{Kind: StepWait, Reason: fmt.Sprintf("members %s are all marked CORRUPT: which data is right is not clear; "+
			"compare them (etcdctl endpoint hashkv), remove the wrong ones and disarm the alarms by hand", strings.Join(named, ", "))}
	}
	id := ids[0]
	bad, found := Member{}, false
	var voters, answering int
	for _, m := range members {
		if m.ID == id {
			bad, found = m, true
			continue
		}
		if !m.Learner {
			voters++
			if m.Answered {
				answering++
			}
		}
	}
	if !found {
		return Step{Kind: StepDisarm, Member: Member{ID: id, Name: fmt.Sprintf("%x", id)}, Reason: fmt.Sprintf("member %x is no longer in the cluster", id)}
	}
	if !bad.Learner {
		voters++
	}
	switch {
	case bad.Learner:
		// A learner's data is never a source and its removal leaves the quorum as it is.
	case voters < 3:
		return Step{Kind: StepWait, Member: bad, Reason: fmt.Sprintf("%s is marked CORRUPT, but with %d voters no majority vouches for the others' data: "+
			"check it by hand (etcdctl endpoint hashkv)", bad.Name, voters)}
	case answering <= (voters-1)/2:
		return Step{Kind: StepWait, Member: bad, Reason: fmt.Sprintf("%s is marked CORRUPT; only %d of the other %d voters answer: removing it would lose the quorum",
			bad.Name, answering, voters-1)}
	}
	leader := leaderOf(members)
	if leader == id {
		var others []Member
		for _, m := range members {
			if m.ID != id {
				others = append(others, m)
			}
		}
		if to, ok := successor(others, 0); ok {
			return Step{Kind: StepMoveLeader, Member: bad, To: to, Reason: fmt.Sprintf("%s is marked CORRUPT and leads: leadership moves to %s first", bad.Name, to.Name)}
		}
	}
	return Step{Kind: StepRemove, Member: bad, Reason: fmt.Sprintf("%s is marked CORRUPT: it is removed and rejoins as a new learner with empty data", bad.Name)}
}

func nameOf(members []Member, id uint64) string {
	for _, m := range members {
		if m.ID == id {
			return m.Name
		}
	}
	return fmt.Sprintf("%x", id)
}

// ErrCorruptUnresolved: the CORRUPT alarm cannot be resolved automatically; the error says
// why and what to do.
var ErrCorruptUnresolved = errors.New("CORRUPT alarm not resolved")

// RecoverCorrupt carries out NextCorrupt until the alarm is gone: it removes the member etcd
// named corrupt (after moving leadership away from it) and disarms its alarm. Its sidecar
// rejoins it with empty data. Without a CORRUPT alarm it does nothing.
func RecoverCorrupt(ctx context.Context, cli *clientv3.Client, progress func(Step)) (cluster.CorruptResult, error) {
	var res cluster.CorruptResult
	for moves := 0; ; {
		alarms, err := Alarms(ctx, cli)
		if err != nil {
			return res, err
		}
		members, err := Observe(ctx, cli)
		if err != nil {
			return res, err
		}
		step := NextCorrupt(alarms, members)
		if progress != nil {
			progress(step)
		}
		switch step.Kind {
		case StepDone:
			return res, nil
		case StepWait:
			return res, fmt.Errorf("%w: %s", ErrCorruptUnresolved, step.Reason)
		case StepMoveLeader:
			if moves++; moves > MaxMoves {
				return res, fmt.Errorf("%w: leadership keeps returning to %s", ErrCorruptUnresolved, step.Member.Name)
			}
			if err := moveLeader(ctx, cli, step.Member.Endpoint, step.To.ID); err != nil {
				return res, fmt.Errorf("move leadership from %s to %s: %w", step.Member.Name, step.To.Name, err)
			}
			res.MovedTo = step.To.Name
		case StepRemove:
			if err := etcdutil.RemoveMember(ctx, cli, step.Member.ID); err != nil {
				return res, fmt.Errorf("remove %s (%x), marked CORRUPT: %w", step.Member.Name, step.Member.ID, err)
			}
			res.Replaced = step.Member.Name
		case StepDisarm:
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := cli.AlarmDisarm(dctx, &clientv3.AlarmMember{MemberID: step.Member.ID, Alarm: pb.AlarmType_CORRUPT})
			cancel()
			if err != nil {
				return res, fmt.Errorf("disarm CORRUPT of member %x: %w", step.Member.ID, err)
			}
			res.Disarmed = true
		}
	}
}
