package operator

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecideCARotation(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	const prop = 2 * time.Minute
	running := &v1alpha1.CARotationStatus{Request: "r1", Phase: v1alpha1.CARotationTrustBoth, StartTime: metav1.NewTime(now.Add(-time.Hour))}
	applied := CAState{Trust: "t2", TemplateTrust: "t2", MembersCurrent: true}
	with := func(s CAState, f func(*CAState)) CAState { f(&s); return s }
	for _, tc := range []struct {
		name    string
		request string
		prev    *v1alpha1.CARotationStatus
		rotated string
		st      CAState
		action  caAction
		phase   string // "" = no rollover in progress afterwards
		rot     string // status.caRotated afterwards
	}{
		{"no request: nothing", "", nil, "", applied, caWait, "", ""},
		{"a request already done: nothing", "r1", nil, "r1", applied, caWait, "", "r1"},
		{"a new request starts", "r2", nil, "r1", applied, caStart, v1alpha1.CARotationTrustBoth, "r1"},
		{"a new request starts while the members restart", "r2", nil, "r1", with(applied, func(s *CAState) { s.MembersCurrent = false }), caStart, v1alpha1.CARotationTrustBoth, "r1"},
		{"both trusted in the Secrets, not yet in the template", "r1", running, "", with(applied, func(s *CAState) { s.Next, s.TemplateTrust = true, "t1" }), caWait, v1alpha1.CARotationTrustBoth, ""},
		{"both trusted in the template, members restarting", "r1", running, "", with(applied, func(s *CAState) { s.Next, s.MembersCurrent = true, false }), caWait, v1alpha1.CARotationTrustBoth, ""},
		{"every member trusts both: promote", "r1", running, "", with(applied, func(s *CAState) { s.Next = true }), caPromote, v1alpha1.CARotationNewLeaves, ""},
		{"an operator stopped mid-promotion promotes again", "r1", running, "", with(applied, func(s *CAState) { s.Next, s.Old, s.LeavesIssued = true, true, now.Add(-time.Hour) }), caPromote, v1alpha1.CARotationNewLeaves, ""},
		{"new leaves mounting", "r1", running, "", with(applied, func(s *CAState) { s.Old, s.LeavesIssued = true, now.Add(-prop+time.Second) }), caWait, v1alpha1.CARotationNewLeaves, ""},
		{"new leaves mounted: drop the old CA", "r1", running, "", with(applied, func(s *CAState) { s.Old, s.LeavesIssued = true, now.Add(-prop) }), caDropOld, v1alpha1.CARotationDropOld, ""},
		{"old CA dropped, members restarting", "r1", running, "", with(applied, func(s *CAState) { s.TemplateTrust = "t1" }), caWait, v1alpha1.CARotationDropOld, ""},
		{"old CA dropped everywhere: done", "r1", running, "", applied, caDone, "", "r1"},
		{"status lost mid-rollover: the Secrets say where it is", "r1", nil, "", with(applied, func(s *CAState) { s.Old, s.LeavesIssued = true, now.Add(-time.Hour) }), caDropOld, v1alpha1.CARotationDropOld, ""},
		{"the annotation changed mid-rollover: the first one finishes", "r9", running, "", applied, caDone, "", "r1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideCARotation(tc.request, tc.prev, tc.rotated, tc.st, now, prop)
			phase := ""
			if d.Status != nil {
				phase = d.Status.Phase
			}
			if d.Action != tc.action || phase != tc.phase || d.Rotated != tc.rot {
				t.Fatalf("action %d, phase %q, rotated %q; want %d, %q, %q", d.Action, phase, d.Rotated, tc.action, tc.phase, tc.rot)
			}
			if d.Status != nil && tc.prev != nil && (d.Status.Request != tc.prev.Request || !d.Status.StartTime.Equal(&tc.prev.StartTime)) {
				t.Fatalf("the rollover's request and start changed: %+v", d.Status)
			}
		})
	}
}

// caModel is a cluster in a CA rollover, as the decision sees it and as it really is: the CA
// Secrets, the members' leaf Secret, and each member's process, which trusts the CAs that its
// ca.crt held when it started and presents the leaf its kubelet last mounted.
type caModel struct {
	now            time.Time
	cur, next, old int       // CA numbers; 0: no such Secret
	leaf           int       // the CA that issued the leaf in the members' Secret
	leafChanged    time.Time // when the Secret's leaf last changed
	template       string    // the trust the pod template carries
	members        []caMember
	status         *v1alpha1.CARotationStatus
	rotated        string
}

type caMember struct {
	trusts   []int
	template string
	mounted  int // the CA of the leaf this member's kubelet mounted
}

func (m *caModel) trusted() []int {
	var out []int
	for _, ca := range []int{m.cur, m.next, m.old} {
		if ca != 0 && !slices.Contains(out, ca) {
			out = append(out, ca)
		}
	}
	slices.Sort(out)
	return out
}

func (m *caModel) trust() string { return fmt.Sprint(m.trusted()) }

// pass is one reconciliation: the TLS component, the StatefulSet's template, the decision
// and its step.
func (m *caModel) pass(request string, prop time.Duration) {
	if m.leaf != m.cur {
		m.leaf, m.leafChanged = m.cur, m.now
	}
	m.template = m.trust()
	current := true
	for _, mb := range m.members {
		current = current && mb.template == m.template
	}
	d := decideCARotation(request, m.status, m.rotated, CAState{Next: m.next != 0, Old: m.old != 0, LeavesIssued: m.leafChanged,
		Trust: m.trust(), TemplateTrust: m.template, MembersCurrent: current}, m.now, prop)
	switch d.Action {
	case caStart:
		m.next = m.cur + 1
	case caPromote:
		if m.old == 0 {
			m.old = m.cur
		}
		m.cur, m.next = m.next, 0
	case caDropOld:
		m.old = 0
	}
	m.status, m.rotated = d.Status, d.Rotated
}

// restart is the rolling update's next step: one member whose template is behind restarts,
// trusting the CAs its ca.crt holds now and mounting the Secret's leaf.
func (m *caModel) restart() {
	for i := range m.members {
		if m.members[i].template != m.template {
			m.lose(i)
			return
		}
	}
}

// lose is member i's pod lost (a node gone, a crash) and made again by the StatefulSet, at
// any point of the rollover: it starts as a restarted one does.
func (m *caModel) lose(i int) {
	m.members[i] = caMember{trusts: m.trusted(), template: m.template, mounted: m.leaf}
}

// TestCARotationModel runs CA rollovers through random interleavings of operator passes,
// member restarts, members lost and made again at any point, kubelet syncs (each within the
// propagation time, at any moment in it) and time, and checks at every step that every member takes every other member's leaf (no peer
// or client traffic fails), and that each rollover ends with every member trusting only the
// new CA and serving its leaf.
func TestCARotationModel(t *testing.T) {
	const prop = 2 * time.Minute
	for seed := int64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewSource(seed))
		m := &caModel{now: time.Unix(0, 0), cur: 1, leaf: 1}
		m.template = m.trust()
		for range 3 + rng.Intn(3) {
			m.members = append(m.members, caMember{trusts: []int{1}, template: m.template, mounted: 1})
		}
		for round, request := range []string{"a", "b"} {
			for step := 0; ; step++ {
				if step > 2000 {
					t.Fatalf("seed %d: rollover %q did not end: %+v", seed, request, m)
				}
				switch rng.Intn(5) {
				case 0:
					m.pass(request, prop)
				case 1:
					m.restart()
				case 2:
					i := rng.Intn(len(m.members))
					m.members[i].mounted = m.leaf
				case 3:
					m.now = m.now.Add(time.Duration(rng.Intn(40)) * time.Second)
				case 4:
					if rng.Intn(10) == 0 {
						m.lose(rng.Intn(len(m.members)))
					}
				}
				// A kubelet mounts a changed Secret within the propagation time.
				for i := range m.members {
					if m.members[i].mounted != m.leaf && !m.now.Before(m.leafChanged.Add(prop)) {
						m.members[i].mounted = m.leaf
					}
				}
				for i, a := range m.members {
					for j, b := range m.members {
						if !slices.Contains(b.trusts, a.mounted) {
							t.Fatalf("seed %d, rollover %q, step %d: member %d presents a leaf of CA %d, which member %d (trusting %v) refuses; CAs cur %d next %d old %d",
								seed, request, step, i, a.mounted, j, b.trusts, m.cur, m.next, m.old)
						}
					}
				}
				if m.rotated == request {
					break
				}
			}
			want := round + 2
			for i, mb := range m.members {
				if !slices.Equal(mb.trusts, []int{want}) || m.leaf != want || m.next != 0 || m.old != 0 {
					t.Fatalf("seed %d: after rollover %q, member %d trusts %v, leaf of CA %d; CAs cur %d next %d old %d", seed, request, i, mb.trusts, m.leaf, m.cur, m.next, m.old)
				}
			}
		}
	}
}
