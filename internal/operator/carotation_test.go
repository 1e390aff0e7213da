package operator

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
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

// TestDecideCARotationExpiry: the cluster's own CA is rolled over by itself once less than 30
// days are left, and not before; a rollover the operator started leaves status.caRotated as
// it was, so the annotation of an earlier rollover, left in place, starts nothing afterwards.
func TestDecideCARotationExpiry(t *testing.T) {
	end := time.Date(2031, 11, 25, 12, 0, 0, 0, time.UTC)
	const prop = 2 * time.Minute
	st := CAState{Trust: "t1", TemplateTrust: "t1", MembersCurrent: true, NotAfter: end}
	for _, tc := range []struct {
		left  time.Duration
		start bool
	}{
		{365 * 24 * time.Hour, false},
		{30*24*time.Hour + time.Second, false},
		{30 * 24 * time.Hour, true},
		{24 * time.Hour, true},
		{-time.Hour, true}, // ended already: a new CA is still the way back
	} {
		d := decideCARotation("2026-11", nil, "2026-11", st, end.Add(-tc.left), prop)
		if got := d.Action == caStart; got != tc.start {
			t.Fatalf("%s left: rollover started %t, want %t", tc.left, got, tc.start)
		}
		if !tc.start {
			continue
		}
		if d.Status == nil || !d.Status.Automatic || d.Status.Phase != v1alpha1.CARotationTrustBoth || d.Status.Request == "2026-11" || d.Rotated != "2026-11" {
			t.Fatalf("%s left: %+v, rotated %q", tc.left, d.Status, d.Rotated)
		}
	}

	now := end.Add(-10 * 24 * time.Hour)
	auto := &v1alpha1.CARotationStatus{Request: "expiry 2031-11-25", Phase: v1alpha1.CARotationDropOld, Automatic: true, StartTime: metav1.NewTime(now.Add(-time.Hour))}
	renewed := st
	renewed.NotAfter = now.Add(5 * 365 * 24 * time.Hour)
	if d := decideCARotation("2026-11", auto, "2026-11", with(renewed, func(s *CAState) { s.Old, s.LeavesIssued = true, now.Add(-time.Hour) }), now, prop); d.Action != caDropOld || !d.Status.Automatic {
		t.Fatalf("an automatic rollover goes on as one: %d %+v", d.Action, d.Status)
	}
	d := decideCARotation("2026-11", auto, "2026-11", renewed, now, prop)
	if d.Action != caDone || d.Rotated != "2026-11" {
		t.Fatalf("automatic rollover done: action %d, rotated %q; want done, %q", d.Action, d.Rotated, "2026-11")
	}
	if d := decideCARotation("2026-11", nil, d.Rotated, renewed, now.Add(time.Minute), prop); d.Action != caWait || d.Status != nil {
		t.Fatalf("after the automatic rollover, the old annotation started another: %d %+v", d.Action, d.Status)
	}
	// A request made while the CA nears its end is the rollover that runs, as a request.
	if d := decideCARotation("2031-10", nil, "2026-11", st, now, prop); d.Action != caStart || d.Status.Automatic || d.Status.Request != "2031-10" {
		t.Fatalf("a request near the end: %d %+v", d.Action, d.Status)
	}
}

func with(s CAState, f func(*CAState)) CAState { f(&s); return s }

// TestCACondition: CAReady turns False, with the reason an alert matches on, from 30 days
// before the CA's end, for the cluster's own CA and for the issuer of the user's
// certificates alike; a CA Secret gone or replaced is False with what to do.
func TestCACondition(t *testing.T) {
	end := time.Date(2031, 11, 25, 12, 0, 0, 0, time.UTC)
	own := caCheck{Secret: "ns/main-ca", CA: &v1alpha1.CAStatus{Fingerprint: "AB:CD", NotAfter: metav1.NewTime(end)}}
	provided := own
	provided.Secret, provided.Provided = "ns/main-members", true
	for _, tc := range []struct {
		name   string
		check  caCheck
		left   time.Duration
		ok     bool
		reason string
		says   string
	}{
		{"own CA, 31 days left", own, 31 * 24 * time.Hour, true, v1alpha1.ReasonCAValid, "AB:CD is valid until 2031-11-25T12:00:00Z"},
		{"own CA, 30 days left", own, 30 * 24 * time.Hour, false, v1alpha1.ReasonCAExpiring, "the operator rolls the cluster over to a new CA"},
		{"own CA, ended", own, -time.Hour, false, v1alpha1.ReasonCAExpiring, "Secret ns/main-ca"},
		{"user's issuer, 31 days left", provided, 31 * 24 * time.Hour, true, v1alpha1.ReasonCAValid, "AB:CD"},
		{"user's issuer, 29 days left", provided, 29 * 24 * time.Hour, false, v1alpha1.ReasonCAExpiring, "Secret ns/main-members (spec.tls.serverSecret)"},
		{"CA Secret gone", caCheck{Secret: "ns/main-ca", CA: own.CA, Problem: v1alpha1.ReasonCASecretMissing, Message: "re-apply"}, 400 * 24 * time.Hour, false, v1alpha1.ReasonCASecretMissing, "re-apply"},
		{"CA Secret gone, no CA recorded", caCheck{Secret: "ns/main-ca", Problem: v1alpha1.ReasonCASecretMissing, Message: "re-apply"}, 0, false, v1alpha1.ReasonCASecretMissing, "re-apply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason, msg := caCondition(tc.check, end.Add(-tc.left))
			if ok != tc.ok || reason != tc.reason || !strings.Contains(msg, tc.says) {
				t.Fatalf("%t %s %q; want %t %s, saying %q", ok, reason, msg, tc.ok, tc.reason, tc.says)
			}
		})
	}
}
