package member

import (
	"testing"

	"github.com/etcd-steward/steward/internal/datadir"
)

var (
	emptyData = datadir.State{}
	validData = datadir.State{HasWAL: true, WALValid: true, MemberID: 0xabc, ClusterID: 0xdef, HasDB: true, DBValid: true, Revision: 42}
	// WAL present but the database is damaged.
	damagedDB = datadir.State{HasWAL: true, WALValid: true, MemberID: 0xabc, HasDB: true, Problems: []string{"database is damaged"}}
	// Database present but the WAL is gone.
	noWAL = datadir.State{HasDB: true, DBValid: true, Revision: 7}
)

func ready(names ...string) []StatusMember {
	var out []StatusMember
	for _, n := range names {
		out = append(out, StatusMember{Name: n, ID: "1", Ready: true})
	}
	return out
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name       string
		obs        Observation
		wantCase   string
		wantAction Action
		wantState  string
	}{
		{
			name:     "001 case 1: first member during bootstrap of a fresh cluster",
			obs:      Observation{Self: "m0", ClusterSize: 3, Data: emptyData},
			wantCase: "BootstrapFirstMember", wantAction: ActionBootstrap, wantState: "new",
		},
		{
			name:     "001 case 1: single-member cluster",
			obs:      Observation{Self: "m0", ClusterSize: 1, Data: emptyData},
			wantCase: "BootstrapFirstMember", wantAction: ActionBootstrap, wantState: "new",
		},
		{
			name:     "001 case 2: following member during bootstrap, others already in the status",
			obs:      Observation{Self: "m2", ClusterSize: 3, Status: ready("m0", "m1"), Data: emptyData},
			wantCase: "BootstrapFollowingMember", wantAction: ActionBootstrap, wantState: "new",
		},
		{
			name:     "001 case 3: restart of a member of a quorate cluster with valid data",
			obs:      Observation{Self: "m1", ClusterSize: 3, Status: ready("m0", "m1", "m2"), Data: validData},
			wantCase: "RestartQuorate", wantAction: ActionRestart, wantState: "existing",
		},
		{
			name: "001 case 3: restart while itself not ready, the other two are",
			obs: Observation{Self: "m1", ClusterSize: 3, Data: validData,
				Status: []StatusMember{{Name: "m0", Ready: true}, {Name: "m1"}, {Name: "m2", Ready: true}}},
			wantCase: "RestartQuorate", wantAction: ActionRestart, wantState: "existing",
		},
		{
			name: "001 case 6: restart of a member of a non-quorate cluster with valid data",
			obs: Observation{Self: "m1", ClusterSize: 3, Data: validData,
				Status: []StatusMember{{Name: "m0"}, {Name: "m1"}, {Name: "m2", Ready: true}}},
			wantCase: "RestartNonQuorate", wantAction: ActionRestart, wantState: "existing",
		},
		{
			name:     "001 case 6: whole cluster restarting, status empty, valid data",
			obs:      Observation{Self: "m0", ClusterSize: 3, Data: validData},
			wantCase: "RestartNonQuorate", wantAction: ActionRestart, wantState: "existing",
		},
		{
			name:     "not handled yet: empty data dir of a member the status lists (001 case 5)",
			obs:      Observation{Self: "m1", ClusterSize: 3, Status: ready("m0", "m1", "m2"), Data: emptyData},
			wantCase: "NotHandled", wantAction: ActionNotHandled,
		},
		{
			name:     "not handled yet: valid WAL, damaged database (001 case 4)",
			obs:      Observation{Self: "m1", ClusterSize: 3, Status: ready("m0", "m1", "m2"), Data: damagedDB},
			wantCase: "NotHandled", wantAction: ActionNotHandled,
		},
		{
			name:     "not handled yet: database without WAL is never bootstrapped over",
			obs:      Observation{Self: "m0", ClusterSize: 3, Data: noWAL},
			wantCase: "NotHandled", wantAction: ActionNotHandled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.obs)
			if got.Case != tt.wantCase || got.Action != tt.wantAction || got.ClusterState != tt.wantState {
				t.Fatalf("Decide() = %+v; want case %s, action %s, state %q", got, tt.wantCase, tt.wantAction, tt.wantState)
			}
			if got.Reason == "" {
				t.Fatalf("Decide() gave no reason: %+v", got)
			}
		})
	}
}
