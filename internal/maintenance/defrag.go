// Package maintenance keeps a serving cluster lean without disrupting it: defragmentation one
// member at a time with the leader last, compaction, and the NOSPACE alarm's recovery. The
// decisions are pure functions of what the members' etcd report (Observe reads it); Defragment
// and RecoverNoSpace carry them out.
package maintenance

import (
	"fmt"
	"slices"
	"strings"

	"github.com/etcd-steward/steward/internal/units"
)

// Member is one member as its etcd reports itself (Maintenance.Status).
type Member struct {
	ID       uint64 `json:"id"`
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"`
	Learner  bool   `json:"learner,omitempty"`
	// Answered: its Status call succeeded. Unanswered members carry only ID, name and endpoint.
	Answered bool `json:"answered"`
	// Errors are the member's own errors (etcd reports active alarms there).
	Errors []string `json:"errors,omitempty"`
	// DBSize is the database file's size; DBSizeInUse the part holding data. The rest is free
	// pages that only a defragmentation gives back.
	DBSize      int64 `json:"dbSize"`
	DBSizeInUse int64 `json:"dbSizeInUse"`
	// Quota is the member's backend quota (the NOSPACE alarm fires above it).
	Quota       int64  `json:"quota"`
	RaftApplied uint64 `json:"raftApplied"`
	Leader      uint64 `json:"leader"`
}

// Reclaimable is what a defragmentation would give back.
func (m Member) Reclaimable() int64 { return max(m.DBSize-m.DBSizeInUse, 0) }

// Fragmented is the share of the database file that is free pages.
func (m Member) Fragmented() float64 {
	if m.DBSize <= 0 {
		return 0
	}
	return float64(m.Reclaimable()) / float64(m.DBSize)
}

// Policy says which members are worth defragmenting.
type Policy struct {
	// Threshold is the fragmented share above which a member is worth it (0.45 by default)...
	Threshold float64
	// ...provided at least MinReclaim bytes come back (100 MiB by default).
	MinReclaim int64
	// All defragments every member, worth it or not (by hand, or to recover from NOSPACE).
	All bool
	// Only, when set, names the one member to defragment, worth it or not (by hand).
	Only string
}

// DefaultPolicy is the policy of the scheduled defragmentation.
var DefaultPolicy = Policy{Threshold: 0.45, MinReclaim: 100 << 20}

// Worth says whether m is worth defragmenting, and why, in words.
func (p Policy) Worth(m Member) (bool, string) {
	frag := fmt.Sprintf("%.0f%% of %s free, %s reclaimable", 100*m.Fragmented(), units.Bytes(m.DBSize), units.Bytes(m.Reclaimable()))
	switch {
	case p.Only != "" && m.Name != p.Only:
		return false, "not the member asked for"
	case p.Only != "":
		return true, frag + " (asked for by name)"
	case p.All:
		return true, frag + " (every member was asked for)"
	case m.Fragmented() < p.Threshold:
		return false, fmt.Sprintf("%s: below the %.0f%% threshold", frag, 100*p.Threshold)
	case m.Reclaimable() < p.MinReclaim:
		return false, fmt.Sprintf("%s: less than the %s minimum", frag, units.Bytes(p.MinReclaim))
	}
	return true, frag
}

// MaxLag is how many raft entries a member may be behind the leader and still count as
// caught up: a member further behind is still applying what it missed (as after its own
// defragmentation), and the next one waits for it.
const MaxLag = 1000

// StepKind is what Next asks for.
type StepKind string

const (
	// StepWait: the cluster is not fully healthy; check again later (or postpone the round).
	StepWait StepKind = "Wait"
	// StepDefrag: defragment Member.
	StepDefrag StepKind = "Defrag"
	// StepMoveLeader: hand leadership from the leader (Member) to To before it is defragmented.
	StepMoveLeader StepKind = "MoveLeader"
	// StepDone: nothing is left to defragment in this round.
	StepDone StepKind = "Done"
)

// Step is Next's decision.
type Step struct {
	Kind   StepKind
	Member Member
	// To is the member that takes over leadership (StepMoveLeader).
	To     Member
	Reason string
}

// Round is what a defragmentation round has done so far.
type Round struct {
	// Done lists the members this round defragmented or decided against.
	Done []uint64
	// Moves counts the leadership transfers so far: a leadership that keeps coming back
	// to a member is defragmented in place rather than chased for ever.
	Moves int
}

// MaxMoves bounds the leadership transfers of one round.
const MaxMoves = 3

// Next decides the next step of a defragmentation round over members (every member of the
// cluster, as observed now): followers one at a time, the leader last after its leadership
// moved to a healthy, caught-up voter, and nothing while the cluster is not fully healthy.
func Next(members []Member, r Round, p Policy) Step {
	if why := unhealthy(members); why != "" {
		return Step{Kind: StepWait, Reason: why}
	}
	leader := leaderOf(members)
	var todo []Member
	for _, m := range members {
		if slices.Contains(r.Done, m.ID) {
			continue
		}
		if ok, _ := p.Worth(m); ok {
			todo = append(todo, m)
		}
	}
	if len(todo) == 0 {
		return Step{Kind: StepDone, Reason: "no member left worth defragmenting"}
	}
	sortLeaderLast(todo, leader)
	m := todo[0]
	_, why := p.Worth(m)
	if m.ID != leader {
		return Step{Kind: StepDefrag, Member: m, Reason: why}
	}
	to, ok := successor(members, leader)
	switch {
	case !ok:
		return Step{Kind: StepDefrag, Member: m, Reason: why + "; the leader is defragmented in place: no other voter can take over, writes pause meanwhile"}
	case r.Moves >= MaxMoves:
		return Step{Kind: StepDefrag, Member: m, Reason: fmt.Sprintf("%s; leadership came back %d times: defragmented in place, writes pause meanwhile", why, r.Moves)}
	}
	return Step{Kind: StepMoveLeader, Member: m, To: to, Reason: fmt.Sprintf("%s; %s leads: leadership moves to %s first", why, m.Name, to.Name)}
}

// sortLeaderLast orders members by name, the leader last.
func sortLeaderLast(members []Member, leader uint64) {
	slices.SortStableFunc(members, func(a, b Member) int {
		if (a.ID == leader) != (b.ID == leader) {
			if a.ID == leader {
				return 1
			}
			return -1
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// unhealthy says why the cluster is not fully healthy enough to defragment a member ("" when it is).
func unhealthy(members []Member) string {
	if len(members) == 0 {
		return "no member answers"
	}
	leader := leaderOf(members)
	if leader == 0 {
		return "no leader: waiting for an election"
	}
	var leaderApplied uint64
	for _, m := range members {
		if m.ID == leader {
			leaderApplied = m.RaftApplied
		}
	}
	var why []string
	for _, m := range members {
		switch {
		case !m.Answered:
			why = append(why, fmt.Sprintf("%s does not answer", m.Name))
		case len(m.Errors) > 0 && !onlyNoSpace(m.Errors):
			why = append(why, fmt.Sprintf("%s reports %s", m.Name, strings.Join(m.Errors, "; ")))
		case m.Leader != leader:
			why = append(why, fmt.Sprintf("%s sees another leader (%x, not %x)", m.Name, m.Leader, leader))
		case m.RaftApplied+MaxLag < leaderApplied:
			why = append(why, fmt.Sprintf("%s is catching up (%d entries behind)", m.Name, leaderApplied-m.RaftApplied))
		}
	}
	if len(why) > 0 {
		return "cluster not fully healthy: " + strings.Join(why, ", ")
	}
	return ""
}

// onlyNoSpace: the member's only errors are the NOSPACE alarm, which defragmentation is part
// of the recovery from.
func onlyNoSpace(errs []string) bool {
	for _, e := range errs {
		if !strings.Contains(e, "NOSPACE") {
			return false
		}
	}
	return true
}

// leaderOf is the leader a majority of the answering members agree on (0: none).
func leaderOf(members []Member) uint64 {
	votes := map[uint64]int{}
	for _, m := range members {
		if m.Answered && m.Leader != 0 {
			votes[m.Leader]++
		}
	}
	for id, n := range votes {
		if n > len(members)/2 {
			return id
		}
	}
	return 0
}

// Leader is the member a majority of the answering members agree leads.
func Leader(members []Member) (Member, bool) {
	id := leaderOf(members)
	for _, m := range members {
		if id != 0 && m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// successor is the voter furthest along that can take over from the leader.
func successor(members []Member, leader uint64) (Member, bool) {
	var best Member
	found := false
	for _, m := range members {
		if m.ID == leader || m.Learner || !m.Answered {
			continue
		}
		if !found || m.RaftApplied > best.RaftApplied {
			best, found = m, true
		}
	}
	return best, found
}
