package maintenance

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestNextRestart(t *testing.T) {
	healthy := func(leader uint64) []Member {
		return []Member{member("m0", 1, leader, 10, 10), member("m1", 2, leader, 10, 10), member("m2", 3, leader, 10, 10)}
	}
	with := func(ms []Member, i int, f func(*Member)) []Member { f(&ms[i]); return ms }
	all := []string{"m0", "m1", "m2"}
	for _, tc := range []struct {
		name    string
		members []Member
		rollout Rollout
		want    StepKind
		member  string
		to      string
		reason  string
	}{
		{name: "followers first, by name", members: healthy(1), rollout: Rollout{Outdated: all}, want: StepRestart, member: "m1"},
		{name: "the next follower", members: healthy(1), rollout: Rollout{Outdated: []string{"m0", "m2"}}, want: StepRestart, member: "m2"},
		{name: "the leader last, after its leadership moved to an updated voter",
			members: with(healthy(1), 1, func(m *Member) { m.RaftApplied = 4990 }), rollout: Rollout{Outdated: []string{"m0", "m2"}},
			want: StepRestart, member: "m2"},
		{name: "leader last: moves to the updated voter furthest along",
			members: with(healthy(1), 2, func(m *Member) { m.RaftApplied = 5001 }), rollout: Rollout{Outdated: []string{"m0"}},
			want: StepMoveLeader, member: "m0", to: "m2"},
		{name: "leader last, restart method: restarted as it leads", members: healthy(1), rollout: Rollout{Outdated: []string{"m0"}, Leader: LeaderRestart},
			want: StepRestart, member: "m0", reason: "elects"},
		{name: "leadership that keeps coming back: restarted as it leads", members: healthy(1), rollout: Rollout{Outdated: []string{"m0"}, Moves: MaxMoves},
			want: StepRestart, member: "m0", reason: "came back"},
		{name: "a single member restarts as it leads", members: []Member{member("m0", 1, 1, 10, 10)}, rollout: Rollout{Outdated: []string{"m0"}},
			want: StepRestart, member: "m0", reason: "no other voter"},
		{name: "every member updated", members: healthy(1), want: StepDone},
		{name: "an updated member not back yet: the rollout waits",
			members: with(healthy(1), 1, func(m *Member) { *m = Member{ID: 2, Name: "m1"} }), rollout: Rollout{Outdated: []string{"m0", "m2"}},
			want: StepWait, reason: "m1 does not answer"},
		{name: "an updated member still catching up: the rollout waits",
			members: with(healthy(1), 1, func(m *Member) { m.RaftApplied = 5000 - MaxLag - 1 }), rollout: Rollout{Outdated: []string{"m0", "m2"}},
			want: StepWait, reason: "m1 is catching up"},
		{name: "an updated member with an alarm: the rollout waits",
			members: with(healthy(1), 1, func(m *Member) { m.Errors = []string{"alarm:CORRUPT"} }), rollout: Rollout{Outdated: []string{"m0", "m2"}},
			want: StepWait, reason: "CORRUPT"},
		{name: "an outdated member that is down is updated first",
			members: with(healthy(1), 2, func(m *Member) { *m = Member{ID: 3, Name: "m2"} }), rollout: Rollout{Outdated: all},
			want: StepRestart, member: "m2", reason: "down already"},
		{name: "an outdated member catching up: wait", members: with(healthy(1), 2, func(m *Member) { m.RaftApplied = 1 }), rollout: Rollout{Outdated: all},
			want: StepWait, reason: "m2 is catching up"},
		{name: "no leader: wait", members: healthy(0), rollout: Rollout{Outdated: all}, want: StepWait, reason: "no leader"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NextRestart(tc.members, tc.rollout)
			if got.Kind != tc.want || got.Member.Name != tc.member || got.To.Name != tc.to || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("got %s %q to %q (%s); want %s %q to %q (reason with %q)", got.Kind, got.Member.Name, got.To.Name, got.Reason,
					tc.want, tc.member, tc.to, tc.reason)
			}
		})
	}
}

// rollModel is a cluster under a rolling update, with faults: members crash and come back,
// elections move leadership, and a bad new specification keeps updated members down.
type rollModel struct {
	r        *rand.Rand
	up       []bool
	outdated []bool
	leader   int // -1: none
	badSpec  bool
	// brokenByRollout are the members the rollout restarted on a bad specification: down for
	// good because of it. Never more than one.
	brokenByRollout map[int]bool
}

func (m *rollModel) members() []Member {
	var ms []Member
	lid := uint64(0)
	if m.leader >= 0 {
		lid = uint64(m.leader + 1)
	}
	for i := range m.up {
		mm := Member{ID: uint64(i + 1), Name: fmt.Sprintf("m%d", i)}
		if m.up[i] {
			mm.Answered, mm.Leader, mm.RaftApplied = true, lid, 100
		}
		ms = append(ms, mm)
	}
	return ms
}

func (m *rollModel) elect() {
	n := 0
	for _, u := range m.up {
		if u {
			n++
		}
	}
	if m.leader >= 0 && m.up[m.leader] {
		return
	}
	m.leader = -1
	if n > len(m.up)/2 {
		for {
			if i := m.r.IntN(len(m.up)); m.up[i] {
				m.leader = i
				return
			}
		}
	}
}

// TestNextRestartUnderFaults runs generated rollouts with crashes, restarts and elections
// between the steps, and checks that the rollout never restarts an answering member while
// another is down, never lets a bad specification take down a second member, keeps the
// leader for last, and finishes when faults stop and the specification is good.
func TestNextRestartUnderFaults(t *testing.T) {
	for seed := range 500 {
		r := rand.New(rand.NewPCG(uint64(seed), 3))
		n := []int{1, 3, 5}[r.IntN(3)]
		m := &rollModel{r: r, up: make([]bool, n), outdated: make([]bool, n), badSpec: r.IntN(4) == 0, brokenByRollout: map[int]bool{}}
		for i := range n {
			m.up[i], m.outdated[i] = true, true
		}
		m.leader = r.IntN(n)
		var trace []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d (n=%d, bad spec %v): %s\ntrace:\n%s", seed, n, m.badSpec, fmt.Sprintf(format, args...), strings.Join(trace, "\n"))
		}
		moves := 0
		done := false
		for tick := 0; tick < 400 && !done; tick++ {
			faults := tick < 150
			// Faults: a member crashes, a crashed one comes back (an updated member with a
			// bad specification never does).
			if faults && r.IntN(6) == 0 {
				m.up[r.IntN(n)] = false
			}
			for i := range m.up {
				if !m.up[i] && r.IntN(3) == 0 && !(m.badSpec && !m.outdated[i]) {
					m.up[i] = true
				}
			}
			m.elect()
			var outdated []string
			for i, o := range m.outdated {
				if o {
					outdated = append(outdated, fmt.Sprintf("m%d", i))
				}
			}
			members := m.members()
			step := NextRestart(members, Rollout{Outdated: outdated, Moves: moves})
			trace = append(trace, fmt.Sprintf("up %v outdated %v leader %d: %s %s %s (%s)", m.up, m.outdated, m.leader, step.Kind, step.Member.Name, step.To.Name, step.Reason))
			switch step.Kind {
			case StepDone:
				if len(outdated) > 0 {
					fail("done with %v outdated", outdated)
				}
				done = true
			case StepMoveLeader:
				to := int(step.To.ID - 1)
				if int(step.Member.ID-1) != m.leader || !m.up[to] {
					fail("moved leadership from %s (leader m%d) to %s (up %v)", step.Member.Name, m.leader, step.To.Name, m.up[to])
				}
				m.leader, moves = to, moves+1
			case StepRestart:
				i := int(step.Member.ID - 1)
				if !m.outdated[i] {
					fail("restarted %s, already updated", step.Member.Name)
				}
				if m.up[i] {
					if slices.Contains(m.up, false) {
						fail("restarted %s, which answers, while another member is down", step.Member.Name)
					}
					for j, o := range m.outdated {
						if o && j != i && i == m.leader && m.up[j] {
							fail("restarted the leader %s before the outdated follower m%d", step.Member.Name, j)
						}
					}
				}
				if m.badSpec {
					m.brokenByRollout[i] = true
				}
				if len(m.brokenByRollout) > 1 {
					fail("a bad specification took down %d members", len(m.brokenByRollout))
				}
				m.up[i], m.outdated[i] = false, false
				if m.leader == i {
					m.leader = -1
				}
			}
		}
		if !done && !m.badSpec {
			fail("the rollout did not finish once faults stopped")
		}
	}
}
