package maintenance

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// defragModel is an abstract cluster going through a defragmentation round, with faults
// landing between the round's steps.
type defragModel struct {
	rng     *rand.Rand
	members []Member
	down    map[uint64]bool
	lagging map[uint64]bool
	errors  map[uint64]string
	leader  uint64
	round   Round
	defrags map[uint64]int
	trace   []string
}

func newDefragModel(seed int64, n int) *defragModel {
	m := &defragModel{rng: rand.New(rand.NewSource(seed)), down: map[uint64]bool{}, lagging: map[uint64]bool{}, errors: map[uint64]string{}, defrags: map[uint64]int{}}
	for i := range n {
		size := int64(200 + m.rng.Intn(600))
		inUse := size * int64(20+m.rng.Intn(70)) / 100
		m.members = append(m.members, Member{ID: uint64(i + 1), Name: fmt.Sprintf("m%d", i), Endpoint: fmt.Sprintf("http://m%d", i),
			DBSize: size * mib, DBSizeInUse: inUse * mib, Quota: 2048 * mib})
	}
	m.leader = uint64(1 + m.rng.Intn(n))
	m.trace = append(m.trace, fmt.Sprintf("start: %d members, leader m%d", n, m.leader-1))
	return m
}

func (m *defragModel) observe() []Member {
	out := slices.Clone(m.members)
	for i := range out {
		mm := &out[i]
		if m.down[mm.ID] {
			*mm = Member{ID: mm.ID, Name: mm.Name, Endpoint: mm.Endpoint}
			continue
		}
		mm.Answered, mm.Leader, mm.RaftApplied = true, m.leader, 5000
		if m.lagging[mm.ID] && mm.ID != m.leader { // the leader is what the others catch up with
			mm.RaftApplied = 5000 - 2*MaxLag
		}
		if e := m.errors[mm.ID]; e != "" {
			mm.Errors = []string{e}
		}
	}
	return out
}

func (m *defragModel) healthy() bool {
	if m.leader == 0 {
		return false
	}
	for _, mm := range m.members {
		if m.down[mm.ID] || (m.lagging[mm.ID] && mm.ID != m.leader) || (m.errors[mm.ID] != "" && m.errors[mm.ID] != "alarm:NOSPACE") {
			return false
		}
	}
	return true
}

func (m *defragModel) fault() {
	mm := m.members[m.rng.Intn(len(m.members))]
	switch k := m.rng.Intn(10); {
	case k < 3:
		m.down[mm.ID] = !m.down[mm.ID]
		m.trace = append(m.trace, fmt.Sprintf("%s down=%v", mm.Name, m.down[mm.ID]))
	case k < 5:
		if !m.down[mm.ID] {
			m.leader = mm.ID
			m.trace = append(m.trace, fmt.Sprintf("election: %s leads", mm.Name))
		}
	case k < 7:
		m.lagging[mm.ID] = !m.lagging[mm.ID]
		m.trace = append(m.trace, fmt.Sprintf("%s lagging=%v", mm.Name, m.lagging[mm.ID]))
	case k < 8:
		e := []string{"", "alarm:NOSPACE", "alarm:CORRUPT"}[m.rng.Intn(3)]
		m.errors[mm.ID] = e
		m.trace = append(m.trace, fmt.Sprintf("%s errors %q", mm.Name, e))
	default:
		i := slices.IndexFunc(m.members, func(x Member) bool { return x.ID == mm.ID })
		m.members[i].DBSize += 300 * mib // writes and deletes: more free pages
		m.trace = append(m.trace, fmt.Sprintf("%s grows to %d MiB", mm.Name, m.members[i].DBSize/mib))
	}
	if m.down[m.leader] {
		m.leader = 0
	}
}

func (m *defragModel) apply(t *testing.T, s Step, p Policy) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s\ntrace:\n  %s", fmt.Sprintf(format, args...), joinLines(m.trace))
	}
	m.trace = append(m.trace, fmt.Sprintf("step %s %s to %s: %s", s.Kind, s.Member.Name, s.To.Name, s.Reason))
	switch s.Kind {
	case StepDefrag:
		if !m.healthy() {
			fail("defragmented %s while the cluster is not fully healthy", s.Member.Name)
		}
		if slices.Contains(m.round.Done, s.Member.ID) {
			fail("defragmented %s twice in one round", s.Member.Name)
		}
		if s.Member.ID == m.leader {
			for _, mm := range m.observe() {
				if ok, _ := p.Worth(mm); ok && mm.ID != m.leader && !slices.Contains(m.round.Done, mm.ID) {
					fail("defragmented the leader %s before follower %s", s.Member.Name, mm.Name)
				}
			}
			if m.round.Moves < MaxMoves && len(m.members) > 1 {
				fail("defragmented the leader %s in place after %d moves, with another voter able to lead", s.Member.Name, m.round.Moves)
			}
		}
		i := slices.IndexFunc(m.members, func(x Member) bool { return x.ID == s.Member.ID })
		m.members[i].DBSize = m.members[i].DBSizeInUse
		m.round.Done = append(m.round.Done, s.Member.ID)
		m.defrags[s.Member.ID]++
	case StepMoveLeader:
		if s.Member.ID != m.leader || s.To.ID == m.leader || m.down[s.To.ID] {
			fail("leadership moved from %s to %s, which cannot lead (leader %x)", s.Member.Name, s.To.Name, m.leader)
		}
		m.leader = s.To.ID
		m.round.Moves++
	}
}

// TestNextGenerated: generated fault sequences during defragmentation rounds of 3 and 5
// members (members down and back, elections, members falling behind, alarms, fragmentation
// growing). Whatever lands between steps, no member is defragmented while the cluster is not
// fully healthy or twice in a round, the leader only after every follower worth it and after
// its leadership moved away (unless it kept coming back); once the faults stop, the round
// ends within a bounded number of steps with every member below the policy.
func TestNextGenerated(t *testing.T) {
	p := Policy{Threshold: 0.45, MinReclaim: 100 * mib}
	for seed := int64(0); seed < 3000; seed++ {
		m := newDefragModel(seed, 3+2*int(seed%2))
		for range 30 {
			if m.rng.Intn(3) == 0 {
				m.fault()
				continue
			}
			m.apply(t, Next(m.observe(), m.round, p), p)
		}
		clear(m.down)
		clear(m.lagging)
		clear(m.errors)
		if m.leader == 0 {
			m.leader = m.members[0].ID
		}
		m.trace = append(m.trace, "calm")
		var last Step
		for range len(m.members) + MaxMoves + 2 {
			if last = Next(m.observe(), m.round, p); last.Kind == StepDone {
				break
			}
			m.apply(t, last, p)
		}
		if last.Kind != StepDone {
			t.Fatalf("seed %d: the round is not over after the faults stopped: %s %s\ntrace:\n  %s", seed, last.Kind, last.Reason, joinLines(m.trace))
		}
		for _, mm := range m.observe() {
			if ok, why := p.Worth(mm); ok && !slices.Contains(m.round.Done, mm.ID) {
				t.Fatalf("seed %d: round over with %s still worth defragmenting (%s)\ntrace:\n  %s", seed, mm.Name, why, joinLines(m.trace))
			}
		}
	}
}
