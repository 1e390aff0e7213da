package maintenance

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// corruptModel is an abstract cluster in which etcd has named one member CORRUPT. The test
// drives NextCorrupt through it, as RecoverCorrupt does, with faults landing between steps:
// members going down and coming back, elections, a second member named CORRUPT, the removed
// member rejoining as a learner and being promoted.
type corruptModel struct {
	rng     *rand.Rand
	members []Member
	down    map[uint64]bool
	alarms  []Alarm
	leader  uint64
	nextID  uint64
	trace   []string
}

func newCorruptModel(seed int64, voters int, learner bool) *corruptModel {
	m := &corruptModel{rng: rand.New(rand.NewSource(seed)), down: map[uint64]bool{}}
	for i := range voters {
		m.add(fmt.Sprintf("m%d", i), false)
	}
	if learner {
		m.add(fmt.Sprintf("m%d", voters), true)
	}
	m.leader = m.members[m.rng.Intn(voters)].ID
	bad := m.members[m.rng.Intn(len(m.members))]
	m.alarms = []Alarm{{MemberID: bad.ID, Type: "CORRUPT"}}
	m.trace = append(m.trace, fmt.Sprintf("start: %d voters, learner %v, leader %x, %s corrupt", voters, learner, m.leader, bad.Name))
	return m
}

func (m *corruptModel) add(name string, learner bool) {
	m.nextID++
	m.members = append(m.members, Member{ID: m.nextID, Name: name, Endpoint: "http://" + name, Learner: learner})
}

// observe is what Observe would return: members that answer report the leader.
func (m *corruptModel) observe() []Member {
	out := make([]Member, len(m.members))
	for i, mm := range m.members {
		out[i] = Member{ID: mm.ID, Name: mm.Name, Endpoint: mm.Endpoint, Learner: mm.Learner}
		if !m.down[mm.ID] {
			out[i].Answered, out[i].Leader, out[i].RaftApplied = true, m.leader, 100
		}
	}
	return out
}

func (m *corruptModel) voters() (all, answering int) {
	for _, mm := range m.members {
		if !mm.Learner {
			all++
			if !m.down[mm.ID] {
				answering++
			}
		}
	}
	return all, answering
}

func (m *corruptModel) corruptIDs() []uint64 {
	var ids []uint64
	for _, a := range m.alarms {
		if !slices.Contains(ids, a.MemberID) {
			ids = append(ids, a.MemberID)
		}
	}
	return ids
}

// fault lands one random fault.
func (m *corruptModel) fault() {
	mm := m.members[m.rng.Intn(len(m.members))]
	switch k := m.rng.Intn(10); {
	case k < 4:
		m.down[mm.ID] = !m.down[mm.ID]
		m.trace = append(m.trace, fmt.Sprintf("%s down=%v", mm.Name, m.down[mm.ID]))
	case k < 6:
		if !mm.Learner && !m.down[mm.ID] {
			m.leader = mm.ID
			m.trace = append(m.trace, fmt.Sprintf("election: %s leads", mm.Name))
		}
	case k < 7:
		if len(m.corruptIDs()) < 2 && m.rng.Intn(4) == 0 {
			m.alarms = append(m.alarms, Alarm{MemberID: mm.ID, Type: "CORRUPT"})
			m.trace = append(m.trace, fmt.Sprintf("%s named CORRUPT too", mm.Name))
		}
	case k < 9:
		if mm.Learner && !m.down[mm.ID] {
			i := slices.IndexFunc(m.members, func(x Member) bool { return x.ID == mm.ID })
			m.members[i].Learner = false
			m.trace = append(m.trace, fmt.Sprintf("%s promoted", mm.Name))
		}
	default:
		if all, _ := m.voters(); all < 5 {
			m.add(fmt.Sprintf("r%d", m.nextID), true)
			m.trace = append(m.trace, "a replacement joins as a learner")
		}
	}
	if m.down[m.leader] || !slices.ContainsFunc(m.members, func(x Member) bool { return x.ID == m.leader }) {
		m.leader = 0 // no leader until an election
	}
}

// apply carries out a step and checks it against the cluster as it really is.
func (m *corruptModel) apply(t *testing.T, s Step) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s\ntrace:\n  %s", fmt.Sprintf(format, args...), joinLines(m.trace))
	}
	ids := m.corruptIDs()
	m.trace = append(m.trace, fmt.Sprintf("step %s %s to %s: %s", s.Kind, s.Member.Name, s.To.Name, s.Reason))
	switch s.Kind {
	case StepRemove:
		if len(ids) != 1 || ids[0] != s.Member.ID {
			fail("removed %s while the members named CORRUPT are %x", s.Member.Name, ids)
		}
		i := slices.IndexFunc(m.members, func(x Member) bool { return x.ID == s.Member.ID })
		if i < 0 {
			fail("removed %s, not a member", s.Member.Name)
		}
		if s.Member.ID == m.leader && slices.ContainsFunc(m.members, func(x Member) bool { return x.ID != m.leader && !x.Learner && !m.down[x.ID] }) {
			fail("removed the leader %s while another voter could take over", s.Member.Name)
		}
		wasVoter := !m.members[i].Learner
		before, _ := m.voters()
		m.members = slices.Delete(m.members, i, i+1)
		delete(m.down, s.Member.ID)
		if s.Member.ID == m.leader {
			m.leader = 0
		}
		if all, answering := m.voters(); wasVoter && (before < 3 || answering <= all/2) {
			fail("removing %s left %d of %d voters answering (from %d voters): the quorum is lost", s.Member.Name, answering, all, before)
		}
	case StepMoveLeader:
		if s.To.Learner || m.down[s.To.ID] || s.To.ID == s.Member.ID {
			fail("leadership moved to %s, which cannot lead", s.To.Name)
		}
		m.leader = s.To.ID
	case StepDisarm:
		if slices.ContainsFunc(m.members, func(x Member) bool { return x.ID == s.Member.ID }) {
			fail("disarmed the alarm of %s, still a member", s.Member.Name)
		}
		m.alarms = slices.DeleteFunc(m.alarms, func(a Alarm) bool { return a.MemberID == s.Member.ID })
	}
}

func joinLines(lines []string) string {
	out := ""
	for i, l := range lines {
		if i > 0 {
			out += "\n  "
		}
		out += l
	}
	return out
}

// TestNextCorruptGenerated: generated fault sequences during CORRUPT recoveries of 3- and
// 5-voter clusters (with and without a learner). Whatever lands between steps, a step never
// removes a member not named, never removes with two named, never removes a leader another
// voter could replace, never leaves the voters without an answering quorum, and never
// disarms the alarm of a member still in the cluster. Once the faults stop (every member
// answers, a leader elected), the recovery ends within a bounded number of steps: the
// member named is gone and its alarm disarmed, or it waits for a person (two named, or too
// few voters) with a reason.
func TestNextCorruptGenerated(t *testing.T) {
	for seed := int64(0); seed < 3000; seed++ {
		voters := 3 + 2*int(seed%2)
		m := newCorruptModel(seed, voters, seed%3 == 0)
		for range 30 {
			if m.rng.Intn(3) == 0 {
				m.fault()
				continue
			}
			m.apply(t, NextCorrupt(m.alarms, m.observe()))
		}
		// Calm: everyone answers and a voter leads.
		clear(m.down)
		if m.leader == 0 {
			i := slices.IndexFunc(m.members, func(x Member) bool { return !x.Learner })
			m.leader = m.members[i].ID
		}
		m.trace = append(m.trace, "calm")
		var last Step
		for range MaxMoves + 4 {
			last = NextCorrupt(m.alarms, m.observe())
			if last.Kind == StepDone || last.Kind == StepWait {
				break
			}
			m.apply(t, last)
		}
		switch last.Kind {
		case StepDone:
			if len(m.alarms) != 0 {
				t.Fatalf("seed %d: done with alarms %v\ntrace:\n  %s", seed, m.alarms, joinLines(m.trace))
			}
		case StepWait:
			all, _ := m.voters()
			named := m.corruptIDs()
			learner := len(named) == 1 && slices.ContainsFunc(m.members, func(x Member) bool { return x.ID == named[0] && x.Learner })
			if len(named) < 2 && (all >= 3 || learner) {
				t.Fatalf("seed %d: waits with one member named, %d voters, all answering: %s\ntrace:\n  %s", seed, all, last.Reason, joinLines(m.trace))
			}
			if last.Reason == "" {
				t.Fatalf("seed %d: waits without a reason", seed)
			}
		default:
			t.Fatalf("seed %d: not over after %d calm steps: %s %s\ntrace:\n  %s", seed, MaxMoves+4, last.Kind, last.Reason, joinLines(m.trace))
		}
	}
}
