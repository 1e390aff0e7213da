package maintenance

import (
	"context"
	"errors"
	"fmt"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/units"
	"slices"
	"sort"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Observe reads every member's own status through cli (one Status call per member, on its
// first client URL). A member that does not answer is listed with Answered false.
func Observe(ctx context.Context, cli *clientv3.Client) ([]Member, error) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	list, err := cli.MemberList(lctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("list the members: %w", err)
	}
	out := make([]Member, 0, len(list.Members))
	for _, lm := range list.Members {
		m := Member{ID: lm.ID, Name: lm.Name, Learner: lm.IsLearner}
		if m.Name == "" {
			m.Name = fmt.Sprintf("%x", lm.ID) // added, not started yet
		}
		if len(lm.ClientURLs) > 0 {
			m.Endpoint = lm.ClientURLs[0]
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			st, err := cli.Status(sctx, m.Endpoint)
			cancel()
			if err == nil {
				m.Answered, m.Errors, m.DBSize, m.DBSizeInUse = true, st.Errors, st.DbSize, st.DbSizeInUse
				m.RaftApplied, m.Leader, m.Quota = st.RaftAppliedIndex, st.Leader, st.DbSizeQuota
			}
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Options tune a defragmentation round.
type Options struct {
	Policy Policy
	// MemberTimeout bounds one member's defragmentation (etcd finishes it regardless).
	MemberTimeout time.Duration
	// WaitTimeout is how long the round waits for the cluster to become fully healthy
	// before each member; then the round is postponed (ErrPostponed).
	WaitTimeout time.Duration
	// Progress, if set, hears every step as it starts, in words.
	Progress func(Step)
}

// Result is a round's outcome.
type Result struct {
	Members []cluster.MemberDefrag `json:"members"`
	// Skipped lists the members not worth it, with why.
	Skipped map[string]string `json:"skipped,omitempty"`
}

// Reclaimed is what the round gave back.
func (r Result) Reclaimed() int64 {
	var n int64
	for _, m := range r.Members {
		n += max(m.Before-m.After, 0)
	}
	return n
}

// ErrPostponed: the cluster was not fully healthy for the whole wait; nothing more was done.
var ErrPostponed = errors.New("defragmentation postponed")

// Defragment runs one round through cli: observe, decide (Next), act, until nothing is left.
// The members already done stay done when it stops early; its Result says what was done.
func Defragment(ctx context.Context, cli *clientv3.Client, o Options) (Result, error) {
	if o.MemberTimeout == 0 {
		o.MemberTimeout = 5 * time.Minute
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = time.Minute
	}
	res := Result{Skipped: map[string]string{}}
	var round Round
	var waitingSince time.Time
	movedTo := map[uint64]string{}
	first := true
	for {
		members, err := Observe(ctx, cli)
		if err != nil {
			return res, err
		}
		if first {
			if only := o.Policy.Only; only != "" && !slices.ContainsFunc(members, func(m Member) bool { return m.Name == only }) {
				return res, fmt.Errorf("no member named %q: the members are %s", only, names(members))
			}
			for _, m := range members {
				// Beside a member asked for by name, the others were never candidates.
				if ok, why := o.Policy.Worth(m); m.Answered && !ok && o.Policy.Only == "" {
					res.Skipped[m.Name] = why
				}
			}
			first = false
		}
		step := Next(members, round, o.Policy)
		if step.Kind != StepWait {
			waitingSince = time.Time{}
		}
		switch step.Kind {
		case StepDone:
			return res, nil
		case StepWait:
			if waitingSince.IsZero() {
				waitingSince = time.Now()
				o.progress(step)
			}
			if time.Since(waitingSince) > o.WaitTimeout {
				return res, fmt.Errorf("%w: %s (waited %s)", ErrPostponed, step.Reason, o.WaitTimeout)
			}
			if err := sleep(ctx, time.Second); err != nil {
				return res, err
			}
		case StepMoveLeader:
			o.progress(step)
			round.Moves++
			if err := moveLeader(ctx, cli, step.Member.Endpoint, step.To.ID); err != nil {
				return res, fmt.Errorf("move leadership from %s to %s: %w", step.Member.Name, step.To.Name, err)
			}
			movedTo[step.Member.ID] = step.To.Name
		case StepDefrag:
			o.progress(step)
			r, err := defragOne(ctx, cli, step.Member, o.MemberTimeout)
			r.Reason, r.WasLeader, r.MovedTo = step.Reason, movedTo[step.Member.ID] != "" || step.Member.ID == step.Member.Leader, movedTo[step.Member.ID]
			round.Done = append(round.Done, step.Member.ID)
			if err != nil {
				return res, err
			}
			res.Members = append(res.Members, r)
		}
	}
}

func (o Options) progress(s Step) {
	if o.Progress != nil {
		o.Progress(s)
	}
}

func defragOne(ctx context.Context, cli *clientv3.Client, m Member, timeout time.Duration) (cluster.MemberDefrag, error) {
	r := cluster.MemberDefrag{Name: m.Name, ID: fmt.Sprintf("%x", m.ID), Before: m.DBSize}
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, timeout)
	_, err := cli.Defragment(dctx, m.Endpoint)
	cancel()
	r.Duration = units.Duration(time.Since(start))
	if err != nil {
		return r, fmt.Errorf("defragment %s (%s) after %s: %w", m.Name, m.Endpoint, r.Duration.Round(time.Millisecond), err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if st, err := cli.Status(sctx, m.Endpoint); err == nil {
		r.After, r.InUse = st.DbSize, st.DbSizeInUse
	}
	return r, nil
}

// moveLeader asks the leader (at endpoint) to hand leadership to id, and waits until it has.
func moveLeader(ctx context.Context, cli *clientv3.Client, endpoint string, to uint64) error {
	conn, err := cli.Dial(endpoint)
	if err != nil {
		return err
	}
	defer conn.Close()
	mctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err = pb.NewMaintenanceClient(conn).MoveLeader(mctx, &pb.MoveLeaderRequest{TargetID: to})
	return err
}

// MoveLeader hands leadership to the member named to (or, with to "", to the voter furthest
// along) and returns who leads now.
func MoveLeader(ctx context.Context, cli *clientv3.Client, to string) (from, now Member, err error) {
	members, err := Observe(ctx, cli)
	if err != nil {
		return from, now, err
	}
	leader := leaderOf(members)
	var target Member
	found := false
	for _, m := range members {
		if m.ID == leader {
			from = m
		}
		if to != "" && (m.Name == to || fmt.Sprintf("%x", m.ID) == to) {
			target, found = m, true
		}
	}
	switch {
	case leader == 0:
		return from, now, errors.New("no leader: the cluster is electing one or has no quorum; try again once it serves")
	case to == "":
		target, found = successor(members, leader)
		if !found {
			return from, now, fmt.Errorf("%s leads and no other voter answers to take over", from.Name)
		}
	case !found:
		return from, now, fmt.Errorf("no member named %q: the members are %s", to, names(members))
	case target.ID == leader:
		return from, target, nil
	case target.Learner:
		return from, now, fmt.Errorf("%s is a learner: only a voter can lead", target.Name)
	case !target.Answered:
		return from, now, fmt.Errorf("%s does not answer: it cannot take over", target.Name)
	}
	if err := moveLeader(ctx, cli, from.Endpoint, target.ID); err != nil {
		return from, now, fmt.Errorf("move leadership from %s to %s: %w", from.Name, target.Name, err)
	}
	return from, target, nil
}

func names(members []Member) string {
	var out []string
	for _, m := range members {
		out = append(out, m.Name)
	}
	return fmt.Sprint(out)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
