package maintenance

import (
	"strings"
	"testing"
)

const mib = 1 << 20

// member builds a healthy member led by leader, size MiB of which inUse MiB hold data.
func member(name string, id, leader uint64, size, inUse int64) Member {
	return Member{ID: id, Name: name, Endpoint: "http://" + name, Answered: true, DBSize: size * mib, DBSizeInUse: inUse * mib,
		RaftApplied: 5000, Leader: leader, Quota: 2048 * mib}
}

func TestNext(t *testing.T) {
	fragmented := func(leader uint64) []Member {
		return []Member{member("m0", 1, leader, 400, 100), member("m1", 2, leader, 400, 100), member("m2", 3, leader, 400, 100)}
	}
	with := func(ms []Member, i int, f func(*Member)) []Member { f(&ms[i]); return ms }
	for _, tc := range []struct {
		name    string
		members []Member
		round   Round
		policy  Policy
		want    StepKind
		member  string // the member the step is about
		to      string
		reason  string // a part of the reason
	}{
		{name: "followers first, by name", members: fragmented(1), policy: DefaultPolicy, want: StepDefrag, member: "m1"},
		{name: "the next follower", members: fragmented(1), round: Round{Done: []uint64{2}}, policy: DefaultPolicy, want: StepDefrag, member: "m2"},
		{name: "leader last: leadership moves first, to the voter furthest along",
			members: with(fragmented(1), 2, func(m *Member) { m.RaftApplied = 5001 }), round: Round{Done: []uint64{2, 3}}, policy: DefaultPolicy,
			want: StepMoveLeader, member: "m0", to: "m2"},
		{name: "the former leader, now a follower", members: fragmented(3), round: Round{Done: []uint64{2, 3}, Moves: 1}, policy: DefaultPolicy,
			want: StepDefrag, member: "m0"},
		{name: "a learner never takes over", members: with(fragmented(1), 2, func(m *Member) { m.Learner = true; m.RaftApplied = 9000 }),
			round: Round{Done: []uint64{2, 3}}, policy: DefaultPolicy, want: StepMoveLeader, member: "m0", to: "m1"},
		{name: "a single member is defragmented in place", members: []Member{member("m0", 1, 1, 400, 100)}, policy: DefaultPolicy,
			want: StepDefrag, member: "m0", reason: "in place"},
		{name: "leadership that keeps coming back: in place", members: fragmented(1), round: Round{Done: []uint64{2, 3}, Moves: MaxMoves},
			policy: DefaultPolicy, want: StepDefrag, member: "m0", reason: "came back"},
		{name: "below the threshold", members: []Member{member("m0", 1, 1, 400, 300), member("m1", 2, 1, 400, 300), member("m2", 3, 1, 400, 300)},
			policy: DefaultPolicy, want: StepDone},
		{name: "fragmented but too little to reclaim", members: []Member{member("m0", 1, 1, 100, 10), member("m1", 2, 1, 100, 10), member("m2", 3, 1, 100, 10)},
			policy: DefaultPolicy, want: StepDone},
		{name: "all, asked by hand", members: []Member{member("m0", 1, 1, 100, 99), member("m1", 2, 1, 100, 99), member("m2", 3, 1, 100, 99)},
			policy: Policy{All: true}, want: StepDefrag, member: "m1"},
		{name: "one member asked for by name, worth it or not", members: []Member{member("m0", 1, 1, 100, 99), member("m1", 2, 1, 100, 99), member("m2", 3, 1, 100, 99)},
			policy: Policy{Only: "m2"}, want: StepDefrag, member: "m2"},
		{name: "one member asked for by name: the leader moves leadership first", members: fragmented(1), policy: Policy{Only: "m0"},
			want: StepMoveLeader, member: "m0", to: "m1"},
		{name: "one member asked for by name, done: nothing else", members: fragmented(1), round: Round{Done: []uint64{2}}, policy: Policy{Only: "m1"},
			want: StepDone},
		{name: "every member done", members: fragmented(1), round: Round{Done: []uint64{1, 2, 3}}, policy: DefaultPolicy, want: StepDone},
		{name: "a member that does not answer: wait", members: with(fragmented(1), 2, func(m *Member) { *m = Member{ID: 3, Name: "m2"} }),
			policy: DefaultPolicy, want: StepWait, reason: "m2 does not answer"},
		{name: "no leader: wait", members: fragmented(0), policy: DefaultPolicy, want: StepWait, reason: "no leader"},
		{name: "a member catching up: wait", members: with(fragmented(1), 1, func(m *Member) { m.RaftApplied = 5000 - MaxLag - 1 }),
			policy: DefaultPolicy, want: StepWait, reason: "m1 is catching up"},
		{name: "a member that sees another leader: wait", members: with(fragmented(1), 2, func(m *Member) { m.Leader = 2 }),
			policy: DefaultPolicy, want: StepWait, reason: "m2 sees another leader"},
		{name: "a corrupt member: wait", members: with(fragmented(1), 1, func(m *Member) { m.Errors = []string{"memberID:2 alarm:CORRUPT"} }),
			policy: DefaultPolicy, want: StepWait, reason: "CORRUPT"},
		{name: "NOSPACE does not block: defragmentation is how it recovers",
			members: with(fragmented(1), 1, func(m *Member) { m.Errors = []string{"memberID:2 alarm:NOSPACE"} }),
			policy:  DefaultPolicy, want: StepDefrag, member: "m1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Next(tc.members, tc.round, tc.policy)
			if got.Kind != tc.want || got.Member.Name != tc.member || got.To.Name != tc.to || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("got %s %q to %q (%s); want %s %q to %q (reason with %q)", got.Kind, got.Member.Name, got.To.Name, got.Reason,
					tc.want, tc.member, tc.to, tc.reason)
			}
		})
	}
}

func TestCanDisarm(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []Member
		want    bool
		reason  string
	}{
		{name: "all below 90%", members: []Member{{Name: "m0", Answered: true, DBSize: 89, Quota: 100}, {Name: "m1", Answered: true, DBSize: 10, Quota: 100}}, want: true},
		{name: "one at 90%", members: []Member{{Name: "m0", Answered: true, DBSize: 89, Quota: 100}, {Name: "m1", Answered: true, DBSize: 90, Quota: 100}},
			reason: "m1 holds 90 B of its 100 B quota"},
		{name: "one does not answer", members: []Member{{Name: "m0", Answered: true, DBSize: 1, Quota: 100}, {Name: "m1"}}, reason: "m1 does not answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := CanDisarm(tc.members)
			if ok != tc.want || !strings.Contains(why, tc.reason) {
				t.Fatalf("CanDisarm = %v (%s), want %v with %q", ok, why, tc.want, tc.reason)
			}
		})
	}
}
