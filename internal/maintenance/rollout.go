package maintenance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// LeaderUpdate says how a rolling update treats the leader, which always goes last.
type LeaderUpdate string

const (
	// LeaderMoveLeader hands leadership to an updated, caught-up voter before the leader
	// restarts: no election, writes pause for a transfer only.
	LeaderMoveLeader LeaderUpdate = "moveLeader"
	// LeaderRestart restarts the leader as it is; the cluster elects a new one.
	LeaderRestart LeaderUpdate = "restart"
)

// ParseLeaderUpdate parses a LeaderUpdate ("" is LeaderMoveLeader).
func ParseLeaderUpdate(s string) (LeaderUpdate, error) {
	switch LeaderUpdate(s) {
	case "", LeaderMoveLeader:
		return LeaderMoveLeader, nil
	case LeaderRestart:
		return LeaderRestart, nil
	}
	return "", fmt.Errorf("leader update method %q: use %s or %s", s, LeaderMoveLeader, LeaderRestart)
}

// StepRestart: restart Member on the new specification (in Kubernetes: delete its pod).
const StepRestart StepKind = "Restart"

// Rollout is a rolling update in progress.
type Rollout struct {
	// Outdated names the members still running the old specification. A member restarted
	// by this rollout is not outdated any more, whether or not it is healthy yet.
	Outdated []string
	// Leader is how the leader is updated (LeaderMoveLeader by default).
	Leader LeaderUpdate
	// Moves counts the leadership transfers so far (MaxMoves bounds them, as in a
	// defragmentation round).
	Moves int
}

// NextRestart decides the next step of a rolling update over members (every member of the
// cluster, as observed now):
//
//   - A member already updated that is not healthy and caught up stops the rollout where it
//     is: a bad new specification takes down one member, never a second.
//   - An outdated member that does not answer is restarted first: it is down already, and
//     the new specification may be what brings it back.
//   - Otherwise nothing happens while the cluster is not fully healthy.
//   - Followers (and learners) go one at a time, by name; the leader last, after its
//     leadership moved to a healthy, caught-up voter (updated ones first), unless the
//     method is LeaderRestart or no voter can take over.
func NextRestart(members []Member, r Rollout) Step {
	outdated := func(m Member) bool { return slices.Contains(r.Outdated, m.Name) }
	var todo []Member
	for _, m := range members {
		if outdated(m) {
			todo = append(todo, m)
		}
	}
	if len(todo) == 0 {
		return Step{Kind: StepDone, Reason: "every member runs the new specification"}
	}
	leader := leaderOf(members)
	var notBack []string
	for _, m := range members {
		if !outdated(m) {
			if why := memberUnhealthy(m, members, leader); why != "" {
				notBack = append(notBack, why)
			}
		}
	}
	if len(notBack) > 0 {
		return Step{Kind: StepWait, Reason: "waiting for the updated members to be healthy before the next: " + strings.Join(notBack, ", ")}
	}
	for _, m := range todo {
		if !m.Answered {
			return Step{Kind: StepRestart, Member: m, Reason: m.Name + " does not answer: it is down already, so it is updated first"}
		}
	}
	if why := unhealthy(members); why != "" {
		return Step{Kind: StepWait, Reason: why}
	}
	sortLeaderLast(todo, leader)
	m := todo[0]
	left := fmt.Sprintf("%d of %d left", len(todo), len(members))
	if m.ID != leader {
		return Step{Kind: StepRestart, Member: m, Reason: fmt.Sprintf("follower %s (%s)", m.Name, left)}
	}
	if r.Leader == LeaderRestart {
		return Step{Kind: StepRestart, Member: m, Reason: fmt.Sprintf("the leader %s, last, restarted as it leads: the cluster elects another", m.Name)}
	}
	var updated []Member
	for _, o := range members {
		if !outdated(o) {
			updated = append(updated, o)
		}
	}
	to, ok := successor(updated, leader)
	if !ok {
		to, ok = successor(members, leader)
	}
	switch {
	case !ok:
		return Step{Kind: StepRestart, Member: m, Reason: fmt.Sprintf("the leader %s, last: no other voter can take over, the cluster elects once it is back", m.Name)}
	case r.Moves >= MaxMoves:
		return Step{Kind: StepRestart, Member: m, Reason: fmt.Sprintf("the leader %s, last: leadership came back %d times, restarted as it leads", m.Name, r.Moves)}
	}
	return Step{Kind: StepMoveLeader, Member: m, To: to, Reason: fmt.Sprintf("the leader %s, last: leadership moves to %s first", m.Name, to.Name)}
}

// memberUnhealthy says why m is not healthy and caught up in a cluster led by leader ("" when it is).
func memberUnhealthy(m Member, members []Member, leader uint64) string {
	if !m.Answered {
		return m.Name + " does not answer"
	}
	if len(m.Errors) > 0 {
		return fmt.Sprintf("%s reports %s", m.Name, strings.Join(m.Errors, "; "))
	}
	if leader == 0 || m.Leader != leader {
		return m.Name + " has no leader in common with the others"
	}
	for _, l := range members {
		if l.ID == leader && m.RaftApplied+MaxLag < l.RaftApplied {
			return fmt.Sprintf("%s is catching up (%d entries behind)", m.Name, l.RaftApplied-m.RaftApplied)
		}
	}
	return ""
}

// RollOptions drive a rolling update (Roll).
type RollOptions struct {
	Leader LeaderUpdate
	// Outdated lists the members still on the old specification, as the caller knows them.
	Outdated func(ctx context.Context) ([]string, error)
	// Restart restarts one member on the new specification. It returns once the member's
	// old process is gone: from then on the member counts as updated.
	Restart func(ctx context.Context, m Member) error
	// WaitTimeout is how long one wait may last (for the cluster, or for a restarted member
	// to be healthy again) before the rollout stops with ErrStalled. Default 5 minutes.
	WaitTimeout time.Duration
	// Progress, if set, hears every step as it starts.
	Progress func(Step)
}

// ErrStalled: the rollout waited WaitTimeout for a member or the cluster to be healthy and
// stopped there. The members updated so far stay updated.
var ErrStalled = errors.New("rolling update stalled")

// Roll runs a rolling update through cli: observe, decide (NextRestart), act, until every
// member runs the new specification.
func Roll(ctx context.Context, cli *clientv3.Client, o RollOptions) error {
	if o.WaitTimeout == 0 {
		o.WaitTimeout = 5 * time.Minute
	}
	r := Rollout{Leader: o.Leader}
	var waitingSince time.Time
	for {
		members, err := Observe(ctx, cli)
		if err != nil {
			return err
		}
		if r.Outdated, err = o.Outdated(ctx); err != nil {
			return err
		}
		step := NextRestart(members, r)
		if step.Kind != StepWait {
			waitingSince = time.Time{}
		}
		switch step.Kind {
		case StepDone:
			return nil
		case StepWait:
			if waitingSince.IsZero() {
				waitingSince = time.Now()
				o.progress(step)
			}
			if time.Since(waitingSince) > o.WaitTimeout {
				return fmt.Errorf("%w: %s (waited %s)", ErrStalled, step.Reason, o.WaitTimeout)
			}
			if err := sleep(ctx, 500*time.Millisecond); err != nil {
				return err
			}
		case StepMoveLeader:
			o.progress(step)
			r.Moves++
			if err := moveLeader(ctx, cli, step.Member.Endpoint, step.To.ID); err != nil {
				return fmt.Errorf("move leadership from %s to %s: %w", step.Member.Name, step.To.Name, err)
			}
		case StepRestart:
			o.progress(step)
			if err := o.Restart(ctx, step.Member); err != nil {
				return fmt.Errorf("restart %s: %w", step.Member.Name, err)
			}
		}
	}
}

func (o RollOptions) progress(s Step) {
	if o.Progress != nil {
		o.Progress(s)
	}
}
