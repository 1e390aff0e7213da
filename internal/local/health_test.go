package local

import (
	"testing"

	"github.com/etcd-steward/steward/internal/cluster"
)

// TestReportHealth: the cluster is down without its supervisor or without a quorum of
// healthy voters (learners do not count), degraded while it serves with a member unhealthy or
// a recovery in progress, and healthy otherwise.
func TestReportHealth(t *testing.T) {
	m := func(role string, healthy bool) MemberReport { return MemberReport{Role: role, Healthy: healthy} }
	running := SupervisorReport{Running: true}
	for _, tc := range []struct {
		name string
		rep  Report
		want Health
	}{
		{"every member healthy", Report{Supervisor: running, Members: []MemberReport{m(RoleLeader, true), m(RoleFollower, true), m(RoleFollower, true)}}, HealthHealthy},
		{"supervisor stopped", Report{Members: []MemberReport{m(RoleStopped, false), m(RoleStopped, false), m(RoleStopped, false)}}, HealthDown},
		{"one member stopped", Report{Supervisor: running, Members: []MemberReport{m(RoleLeader, true), m(RoleFollower, true), m(RoleStopped, false)}}, HealthDegraded},
		{"a learner catching up", Report{Supervisor: running, Members: []MemberReport{m(RoleLeader, true), m(RoleLearner, false)}}, HealthDegraded},
		{"quorum lost", Report{Supervisor: running, Members: []MemberReport{m(RoleFollower, true), m(RoleUnreachable, false), m(RoleStopped, false)}}, HealthDown},
		{"healthy but not answering", Report{Supervisor: running, Members: []MemberReport{m(RoleUnreachable, true), m(RoleUnreachable, true), m(RoleLeader, true)}}, HealthDown},
		{"recovery in progress", Report{Supervisor: SupervisorReport{Running: true, Recovery: &cluster.Directive{Epoch: 1}},
			Members: []MemberReport{m(RoleLeader, true), m(RoleFollower, true), m(RoleFollower, true)}}, HealthDegraded},
		{"no member", Report{Supervisor: running}, HealthDown},
	} {
		if got := tc.rep.Health(); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
