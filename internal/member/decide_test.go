package member

import (
	"testing"

	"github.com/etcd-steward/steward/internal/datadir"
)

var (
	emptyData = datadir.State{}
	// validData: member abc of cluster def, unclean last shutdown (deep-checked).
	validData = datadir.State{HasWAL: true, WALValid: true, MemberID: 0xabc, ClusterID: 0xdef, HasDB: true, DBValid: true, Revision: 42, DeepChecked: true}
	cleanData = func() datadir.State { s := validData; s.CleanShutdown, s.DeepChecked = true, false; return s }()
	// WAL present but the database is damaged.
	damagedDB = datadir.State{HasWAL: true, WALValid: true, MemberID: 0xabc, ClusterID: 0xdef, HasDB: true, Problems: []string{"database is damaged"}}
	// Database present but the WAL is gone.
	noWAL = datadir.State{HasDB: true, DBValid: true, Revision: 7}
	// Valid data whose identity file names another member (a swapped volume).
	swapped = func() datadir.State {
		s := validData
		s.Identity = &datadir.Identity{ClusterName: "c", ClusterToken: "tok", MemberName: "m2", MemberID: "abc"}
		return s
	}()
	// Valid data of another cluster incarnation (other token).
	foreignCluster = func() datadir.State {
		s := validData
		s.Identity = &datadir.Identity{ClusterName: "other", ClusterToken: "other-tok", MemberName: "m1", MemberID: "abc"}
		return s
	}()
	partial = func() datadir.State { s := emptyData; s.PartialRestore = true; return s }()
)

func ready(names ...string) []StatusMember {
	var out []StatusMember
	for _, n := range names {
		out = append(out, StatusMember{Name: n, ID: "id-" + n, Ready: true})
	}
	return out
}

// quorate is a running 3-member cluster; m1 is member abc (this data dir's WAL).
var quorate = LiveCluster{Reachable: true, Quorate: true, ClusterID: "def", Members: []LiveMember{
	{ID: "a00", Name: "m0", PeerURL: "http://m0"}, {ID: "abc", Name: "m1", PeerURL: "http://m1"}, {ID: "c00", Name: "m2", PeerURL: "http://m2"}}}

func without(l LiveCluster, name string) LiveCluster {
	out := l
	out.Members = nil
	for _, m := range l.Members {
		if m.Name != name {
			out.Members = append(out.Members, m)
		}
	}
	return out
}

func with(l LiveCluster, m LiveMember) LiveCluster {
	out := l
	out.Members = append(append([]LiveMember{}, l.Members...), m)
	return out
}

func obs(self string, data datadir.State, live LiveCluster, status []StatusMember) Observation {
	return Observation{Self: self, SelfPeerURL: "http://" + self, ClusterSize: 3, ClusterToken: "tok", Status: status, Data: data, Live: live}
}

func TestDecide(t *testing.T) {
	noQuorum := LiveCluster{Reachable: true, Members: quorate.Members}
	bootstrapping := LiveCluster{Reachable: true, Members: []LiveMember{{ID: "a00", Name: "m0", PeerURL: "http://m0"}, {ID: "abc", PeerURL: "http://m1"}, {ID: "c00", PeerURL: "http://m2"}}}
	survivor := &Recovery{Epoch: 3, Mode: RecoverFromSurvivor, Seed: "m1"}
	fromBackup := &Recovery{Epoch: 4, Mode: RecoverFromBackup, Seed: "m1"}
	seededByM0 := &Recovery{Epoch: 5, Mode: RecoverFromSurvivor, Seed: "m0"}
	newClusterOfM0 := LiveCluster{Reachable: true, Quorate: true, ClusterID: "def", Members: []LiveMember{{ID: "a00", Name: "m0", PeerURL: "http://m0"}}}

	tests := []struct {
		name         string
		obs          Observation
		wantCase     string
		wantAction   Action
		wantDisposal DataDisposal
		wantRemove   string
	}{
		// Seed 001, initialisation table.
		{name: "001-1 first member during bootstrap of a fresh cluster",
			obs: obs("m0", emptyData, LiveCluster{}, nil), wantCase: "BootstrapFirstMember", wantAction: ActionBootstrap},
		{name: "001-2 following member during bootstrap, others already in the status",
			obs: obs("m2", emptyData, noQuorum, ready("m0", "m1")), wantCase: "BootstrapFollowingMember", wantAction: ActionBootstrap},
		{name: "001-1 member starting while its peers are still starting (no quorum, empty status)",
			obs: obs("m1", emptyData, bootstrapping, nil), wantCase: "BootstrapFirstMember", wantAction: ActionBootstrap},
		{name: "001-2 following member that never started, the others formed a quorum",
			obs:      obs("m1", emptyData, LiveCluster{Reachable: true, Quorate: true, ClusterID: "def", Members: bootstrapping.Members}, ready("m0", "m2")),
			wantCase: "BootstrapFollowingMember", wantAction: ActionBootstrap},
		{name: "001-3 restart of a member of a quorate cluster with valid data (unclean stop, deep check)",
			obs: obs("m1", validData, quorate, ready("m0", "m1", "m2")), wantCase: "RestartQuorate", wantAction: ActionRestart},
		{name: "001-3 restart after a clean shutdown (quick check)",
			obs: obs("m1", cleanData, quorate, ready("m0", "m1", "m2")), wantCase: "RestartQuorate", wantAction: ActionRestart},
		{name: "001-4 valid metadata, damaged database, quorate",
			obs: obs("m1", damagedDB, quorate, ready("m0", "m1", "m2")), wantCase: "ReplaceInvalidData", wantAction: ActionJoinAsLearner, wantDisposal: WipeData, wantRemove: "abc"},
		{name: "001-4 database without WAL, quorate",
			obs: obs("m1", noWAL, quorate, ready("m0", "m1", "m2")), wantCase: "ReplaceInvalidData", wantAction: ActionJoinAsLearner, wantDisposal: WipeData, wantRemove: "abc"},
		{name: "001-5 no metadata (wiped), quorate",
			obs: obs("m1", emptyData, quorate, ready("m0", "m1", "m2")), wantCase: "ReplaceLostData", wantAction: ActionJoinAsLearner, wantRemove: "abc"},
		{name: "001-6 restart of a member of a non-quorate cluster with valid data",
			obs: obs("m1", validData, noQuorum, nil), wantCase: "RestartNonQuorate", wantAction: ActionRestart},
		{name: "001-7 first member of a non-quorate cluster without valid data: restore from backup",
			obs: func() Observation {
				o := obs("m1", emptyData, LiveCluster{}, ready("m0", "m1", "m2"))
				o.Recovery = fromBackup
				return o
			}(),
			wantCase: "QuorumLossRestoreFromBackup", wantAction: ActionRestoreFromBackup, wantDisposal: MoveDataAside},
		{name: "001-8 following member of a recovered cluster without valid data",
			obs: func() Observation {
				o := obs("m2", emptyData, newClusterOfM0, ready("m0"))
				o.Recovery = seededByM0
				return o
			}(),
			wantCase: "QuorumLossFollowerRejoin", wantAction: ActionJoinAsLearner},

		// Cases Steward adds.
		{name: "quorum lost for good, this member has the newest valid data: seed from survivor",
			obs:      func() Observation { o := obs("m1", validData, noQuorum, nil); o.Recovery = survivor; return o }(),
			wantCase: "QuorumLossSeedFromSurvivor", wantAction: ActionForceNewCluster},
		{name: "a directive already carried out is not applied again",
			obs: func() Observation {
				o := obs("m1", validData, quorate, ready("m0", "m1", "m2"))
				o.Recovery, o.AppliedRecoveryEpoch = survivor, 3
				return o
			}(),
			wantCase: "RestartQuorate", wantAction: ActionRestart},
		{name: "survivor seed whose data turned out invalid waits for a new directive",
			obs:      func() Observation { o := obs("m1", damagedDB, noQuorum, nil); o.Recovery = survivor; return o }(),
			wantCase: "QuorumLossSeedWithoutData", wantAction: ActionWait},
		{name: "follower with old valid data while the seed has not recovered yet waits",
			obs:      func() Observation { o := obs("m2", validData, noQuorum, nil); o.Recovery = seededByM0; return o }(),
			wantCase: "QuorumLossFollowerWait", wantAction: ActionWait},
		{name: "follower with old valid data once the seed recovered: wiped, rejoins",
			obs: func() Observation {
				o := obs("m2", validData, newClusterOfM0, ready("m0"))
				o.Recovery = seededByM0
				return o
			}(),
			wantCase: "QuorumLossFollowerRejoin", wantAction: ActionJoinAsLearner, wantDisposal: WipeData},
		{name: "follower holding a swapped volume once the seed recovered: moved aside, not wiped",
			obs: func() Observation {
				o := obs("m1", swapped, newClusterOfM0, ready("m0"))
				o.Recovery = seededByM0
				return o
			}(),
			wantCase: "QuorumLossFollowerRejoin", wantAction: ActionJoinAsLearner, wantDisposal: MoveDataAside},
		{name: "volume of another member (identity names m2), quorate: moved aside, never started on",
			obs: obs("m1", swapped, quorate, ready("m0", "m1", "m2")), wantCase: "ForeignDataReplace", wantAction: ActionJoinAsLearner, wantDisposal: MoveDataAside, wantRemove: "abc"},
		{name: "volume of another member without identity file: the WAL's member is known under another name",
			obs: obs("m2", validData, quorate, ready("m0", "m1", "m2")), wantCase: "ForeignDataReplace", wantAction: ActionJoinAsLearner, wantDisposal: MoveDataAside, wantRemove: "c00"},
		{name: "volume of another cluster (identity token differs), quorate",
			obs: obs("m1", foreignCluster, quorate, ready("m0", "m1", "m2")), wantCase: "ForeignDataReplace", wantAction: ActionJoinAsLearner, wantDisposal: MoveDataAside, wantRemove: "abc"},
		{name: "volume of another member without quorum: wait, never start on it",
			obs: obs("m1", swapped, noQuorum, nil), wantCase: "ForeignDataWaitForQuorum", wantAction: ActionWait},
		{name: "data of an earlier incarnation of the cluster (other cluster ID)",
			obs:      obs("m1", validData, func() LiveCluster { l := quorate; l.ClusterID = "fff"; return l }(), ready("m0", "m1", "m2")),
			wantCase: "DataOfAnotherClusterReplace", wantAction: ActionJoinAsLearner, wantDisposal: MoveDataAside, wantRemove: "abc"},
		{name: "member removed from the cluster while it was down",
			obs: obs("m1", validData, without(quorate, "m1"), ready("m0", "m2")), wantCase: "RemovedWhileDownRejoin", wantAction: ActionJoinAsLearner, wantDisposal: WipeData},
		{name: "leftover learner with valid data restarts and is promoted later",
			obs: obs("m1", validData, func() LiveCluster {
				l := without(quorate, "m1")
				return with(l, LiveMember{ID: "abc", Name: "m1", PeerURL: "http://m1", IsLearner: true})
			}(), ready("m0", "m2")),
			wantCase: "RestartLearner", wantAction: ActionRestart},
		{name: "leftover learner without data rejoins in its place",
			obs: obs("m1", emptyData, func() LiveCluster {
				l := without(quorate, "m1")
				return with(l, LiveMember{ID: "abc", PeerURL: "http://m1", IsLearner: true})
			}(), ready("m0", "m2")),
			wantCase: "ReplaceLostData", wantAction: ActionJoinAsLearner, wantRemove: "abc"},
		{name: "new member of a running cluster (scale-up)",
			obs:      Observation{Self: "m3", SelfPeerURL: "http://m3", ClusterSize: 4, ClusterToken: "tok", Data: emptyData, Live: quorate, Status: ready("m0", "m1", "m2")},
			wantCase: "JoinRunningCluster", wantAction: ActionJoinAsLearner},
		{name: "lost data and no quorum: wait for a directive",
			obs: obs("m1", emptyData, LiveCluster{}, ready("m0", "m1", "m2")), wantCase: "LostDataWaitForQuorum", wantAction: ActionWait},
		{name: "damaged data and no quorum: wait for a directive",
			obs: obs("m1", damagedDB, noQuorum, ready("m0", "m1", "m2")), wantCase: "InvalidDataWaitForQuorum", wantAction: ActionWait},
		{name: "unfinished restore beside an empty data dir: cleaned, then bootstrap",
			obs: obs("m0", partial, LiveCluster{}, nil), wantCase: "BootstrapFirstMember", wantAction: ActionBootstrap},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.obs)
			if got.Case != tt.wantCase || got.Action != tt.wantAction || got.Disposal != tt.wantDisposal || got.RemoveMemberID != tt.wantRemove {
				t.Fatalf("Decide() = %+v\nwant case %s, action %s, disposal %q, remove %q", got, tt.wantCase, tt.wantAction, tt.wantDisposal, tt.wantRemove)
			}
			if got.Reason == "" {
				t.Fatalf("Decide() gave no reason: %+v", got)
			}
			if got.CleanPartialRestore != tt.obs.Data.PartialRestore {
				t.Fatalf("partial restore not cleaned: %+v", got)
			}
			// Invariant 2: never start on data that is not this member's.
			if got.Action == ActionRestart || got.Action == ActionForceNewCluster {
				if tt.obs.foreignReason() != "" || tt.obs.liveOwnerReason() != "" {
					t.Fatalf("starts on foreign data: %+v", got)
				}
			}
			// Invariant: never bootstrap a new cluster over existing data or next to a quorate one that knows this member.
			if got.Action == ActionBootstrap && !tt.obs.Data.Empty() {
				t.Fatalf("bootstraps over existing data: %+v", got)
			}
		})
	}
}
