package member

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
)

var (
	emptyData = datadir.State{}
	// validData: member abc of cluster def, unclean last shutdown (deep-checked).
	validData = datadir.State{HasWAL: true, WALValid: true, MemberID: 0xabc, ClusterID: 0xdef, HasDB: true, DBValid: true, Revision: 42, DeepChecked: true}
	cleanData = func() datadir.State { s := validData; s.CleanShutdown, s.DeepChecked = true, false; return s }()
	// WAL present but the database is damaged.
	damagedDB = datadir.State{HasWAL: true, WALValid: true, MemberID: 0xabc, ClusterID: 0xdef, HasDB: true, Problems: []string{"database is damaged"}}
	inUseDB   = datadir.State{HasWAL: true, WALValid: true, MemberID: 0xabc, ClusterID: 0xdef, HasDB: true, InUse: true, Problems: []string{"database: in use by a running etcd"}}
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
	// superseded: m1's own valid data of cluster def, whose dir records that the restore of
	// directive 4 supersedes it (recorded while that restore held the member).
	superseded = func() datadir.State {
		s := validData
		s.Identity = &datadir.Identity{ClusterName: "c", ClusterToken: "tok", MemberName: "m1", MemberID: "abc", ClusterID: "def"}
		s.SupersededBy = 4
		return s
	}()
)

func ready(names ...string) []cluster.StatusMember {
	var out []cluster.StatusMember
	for _, n := range names {
		out = append(out, cluster.StatusMember{Name: n, ID: "id-" + n, Ready: true})
	}
	return out
}

// quorate is a running 3-member cluster; m1 is member abc (this data dir's WAL).
var quorate = cluster.LiveCluster{Reachable: true, Quorate: true, ClusterID: "def", Members: []cluster.LiveMember{
	{ID: "a00", Name: "m0", PeerURL: "http://m0"}, {ID: "abc", Name: "m1", PeerURL: "http://m1"}, {ID: "c00", Name: "m2", PeerURL: "http://m2"}}}

func without(l cluster.LiveCluster, name string) cluster.LiveCluster {
	out := l
	out.Members = nil
	for _, m := range l.Members {
		if m.Name != name {
			out.Members = append(out.Members, m)
		}
	}
	return out
}

func with(l cluster.LiveCluster, m cluster.LiveMember) cluster.LiveCluster {
	out := l
	out.Members = append(append([]cluster.LiveMember{}, l.Members...), m)
	return out
}

// formed is the status of the formed 3-member cluster def (voters m0, m1 = abc, m2).
var formed = cluster.Status{ClusterID: "def", Voters: []cluster.Voter{{ID: "a00", Name: "m0"}, {ID: "abc", Name: "m1"}, {ID: "c00", Name: "m2"}}}

func status(s cluster.Status, members []cluster.StatusMember) cluster.Status {
	s.Members = members
	return s
}

func obs(self string, data datadir.State, live cluster.LiveCluster, st cluster.Status) Observation {
	return Observation{Self: self, SelfPeerURL: "http://" + self, ClusterSize: 3, ClusterToken: "tok", Status: st, Data: data, Live: live}
}

func with_(o Observation, f func(*Observation)) Observation { f(&o); return o }

func directive(epoch int64, phase, mode, seed string) *cluster.Directive {
	return &cluster.Directive{Epoch: epoch, Phase: phase, Mode: mode, Seed: seed}
}

// founding is d with every member of the 3-member cluster as a founder.
func founding(d cluster.Directive) *cluster.Directive {
	d.Founders, d.IssuedAt = []string{"m0", "m1", "m2"}, time.Unix(0, 0xabc)
	return &d
}

func TestDecide(t *testing.T) {
	noQuorum := cluster.LiveCluster{Reachable: true, Members: quorate.Members}
	bootstrapping := cluster.LiveCluster{Reachable: true, Members: []cluster.LiveMember{{ID: "a00", Name: "m0", PeerURL: "http://m0"}, {ID: "abc", PeerURL: "http://m1"}, {ID: "c00", PeerURL: "http://m2"}}}
	newClusterOfM0 := cluster.LiveCluster{Reachable: true, Quorate: true, ClusterID: "def", Members: []cluster.LiveMember{{ID: "a00", Name: "m0", PeerURL: "http://m0"}}}
	none := cluster.Status{}
	all := status(formed, ready("m0", "m1", "m2"))
	seedingM1 := directive(3, cluster.PhaseSeeding, cluster.RecoverFromSurvivor, "m1")
	// m1 restored revision 77 as the seed of directive 4 (below), its etcd not serving yet.
	restored := &cluster.Report{Name: "m1", AppliedEpoch: 4, Source: cluster.ReportFromDisk, RestoredTimeline: 2, RestoredRevision: 77}
	backupM1 := directive(4, cluster.PhaseSeeding, cluster.RecoverFromBackup, "m1")
	bootTarget := &cluster.RestoreTarget{Store: "s3://old/main", Revision: 4242}
	seedingM0 := directive(5, cluster.PhaseSeeding, cluster.RecoverFromSurvivor, "m0")
	rejoinM0 := directive(5, cluster.PhaseRejoining, cluster.RecoverFromSurvivor, "m0")
	rejoinM1 := directive(3, cluster.PhaseRejoining, cluster.RecoverFromSurvivor, "m1")
	fencing := directive(6, cluster.PhaseFencing, "", "")
	// m2's data dir holds m1's data (abc) and m1's holds nothing: relocatable.
	m1sDataInM2 := validData
	withReports := func(st cluster.Status, reports map[string]*cluster.Report) cluster.Status {
		out := st
		out.Members = nil
		for _, m := range st.Members {
			m.Report = reports[m.Name]
			out.Members = append(out.Members, m)
		}
		return out
	}

	tests := []struct {
		name string
		obs  Observation
		want Plan // Reason is checked to be non-empty, not compared
	}{
		// The initialisation table.
		{name: "first start of a fresh cluster, no backups",
			obs:  obs("m0", emptyData, cluster.LiveCluster{}, none),
			want: Plan{Case: "Bootstrap", Action: ActionBootstrap, ClusterState: "new"}},
		{name: "member starting while its peers are still starting (no quorum, nothing formed)",
			obs:  obs("m1", emptyData, bootstrapping, none),
			want: Plan{Case: "Bootstrap", Action: ActionBootstrap, ClusterState: "new"}},
		{name: "nothing formed but the backup store holds backups of this cluster: wait for a restore directive",
			obs:  with_(obs("m0", emptyData, cluster.LiveCluster{}, none), func(o *Observation) { o.BackupTimeline, o.ForeignTimelines = 2, 1 }),
			want: Plan{Case: "NoStatusBackupExistsWait", Action: ActionWait}},
		{name: "a new cluster on a prefix that holds only other clusters' backups: bootstrap (its backups start a timeline of their own)",
			obs:  with_(obs("m0", emptyData, cluster.LiveCluster{}, none), func(o *Observation) { o.ForeignTimelines = 2 }),
			want: Plan{Case: "Bootstrap", Action: ActionBootstrap, ClusterState: "new"}},
		{name: "listed member that never started, the others formed a quorum: starts as that member (existing)",
			obs:  obs("m1", emptyData, cluster.LiveCluster{Reachable: true, Quorate: true, ClusterID: "def", Members: bootstrapping.Members}, status(formed, ready("m0", "m2"))),
			want: Plan{Case: "StartUnstartedMember", Action: ActionJoinAsLearner, ClusterState: "existing"}},
		{name: "restart of a member of a quorate cluster with valid data (unclean stop, deep check)",
			obs:  obs("m1", validData, quorate, all),
			want: Plan{Case: "RestartQuorate", Action: ActionRestart, ClusterState: "existing"}},
		{name: "restart after a clean shutdown (quick check)",
			obs:  obs("m1", cleanData, quorate, all),
			want: Plan{Case: "RestartQuorate", Action: ActionRestart, ClusterState: "existing"}},
		{name: "valid metadata, damaged database, quorate",
			obs:  obs("m1", damagedDB, quorate, all),
			want: Plan{Case: "ReplaceInvalidData", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: WipeData, RemoveMemberID: "abc"}},
		{name: "database in use by a running etcd (its lock held), quorate: wait, never replace it as damaged",
			obs:  obs("m1", inUseDB, quorate, all),
			want: Plan{Case: "DataInUseWait", Action: ActionWait}},
		{name: "database in use by a running etcd, under a directive to seed from survivor data: wait",
			obs: with_(obs("m1", inUseDB, cluster.LiveCluster{}, all), func(o *Observation) {
				o.Directive = &cluster.Directive{Epoch: 1, Phase: cluster.PhaseSeeding, Mode: cluster.RecoverFromSurvivor, Seed: "m1"}
			}),
			want: Plan{Case: "DataInUseWait", Action: ActionWait}},
		{name: "database without WAL, quorate",
			obs:  obs("m1", noWAL, quorate, all),
			want: Plan{Case: "ReplaceInvalidData", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: WipeData, RemoveMemberID: "abc"}},
		{name: "no metadata (wiped), quorate",
			obs:  obs("m1", emptyData, quorate, all),
			want: Plan{Case: "ReplaceLostData", Action: ActionJoinAsLearner, ClusterState: "existing", RemoveMemberID: "abc"}},
		{name: "restart of a member of a non-quorate cluster with valid data",
			obs:  obs("m1", validData, noQuorum, formed),
			want: Plan{Case: "RestartNonQuorate", Action: ActionRestart, ClusterState: "existing"}},
		{name: "seed of a recovery from backup",
			obs: with_(obs("m1", emptyData, cluster.LiveCluster{}, all), func(o *Observation) { o.Directive, o.BackupTimeline, o.ForeignTimelines = backupM1, 2, 1 }),
			want: Plan{Case: "QuorumLossRestoreFromBackup", Action: ActionRestoreFromBackup, ClusterState: "new", Disposal: MoveDataAside, RecoveryEpoch: 4,
				Restore: &cluster.RestoreTarget{Timeline: 2}}},
		{name: "seed of a recovery from backup with founders: restores every founder as a voter",
			obs: with_(obs("m1", emptyData, cluster.LiveCluster{}, all), func(o *Observation) {
				o.Directive, o.BackupTimeline = founding(*backupM1), 2
			}),
			want: Plan{Case: "QuorumLossRestoreFromBackup", Action: ActionRestoreFromBackup, ClusterState: "new", Disposal: MoveDataAside, RecoveryEpoch: 4,
				Restore: &cluster.RestoreTarget{Timeline: 2}, Founders: []string{"m0", "m1", "m2"}, FoundersToken: "tok-recovery-4-abc"}},
		{name: "seed that lost what it restored while a founder started on it: wait, never restore a second cluster beside it",
			obs: with_(obs("m1", emptyData, cluster.LiveCluster{}, withReports(all, map[string]*cluster.Report{"m2": {Name: "m2", AppliedEpoch: 4}})), func(o *Observation) {
				o.Directive, o.BackupTimeline = founding(*backupM1), 2
			}),
			want: Plan{Case: "QuorumLossSeedFoundersStarted", Action: ActionWait}},
		{name: "founder before the seed restored: wait",
			obs: with_(obs("m2", validData, cluster.LiveCluster{}, withReports(all, map[string]*cluster.Report{"m1": {Name: "m1", AppliedEpoch: 3}})), func(o *Observation) {
				o.Directive = founding(*backupM1)
			}),
			want: Plan{Case: "QuorumLossFounderWait", Action: ActionWait}},
		{name: "founder once the seed restored: its data moved aside, restore the seed's revision as its member of the restored cluster",
			obs: with_(obs("m2", validData, cluster.LiveCluster{}, withReports(all, map[string]*cluster.Report{"m1": restored})), func(o *Observation) {
				o.Directive = founding(*backupM1)
			}),
			want: Plan{Case: "QuorumLossFounderRestore", Action: ActionRestoreFromBackup, ClusterState: "new", Disposal: MoveDataAside, RecoveryEpoch: 4,
				Restore: &cluster.RestoreTarget{Timeline: 2, Revision: 77}, Founders: []string{"m0", "m1", "m2"}, FoundersToken: "tok-recovery-4-abc"}},
		{name: "founder once another founder restored, the seed having lost its data since: restores the point that founder reports",
			obs: with_(obs("m2", emptyData, cluster.LiveCluster{}, withReports(all, map[string]*cluster.Report{"m1": {Name: "m1", Source: cluster.ReportFromDisk, DataEmpty: true},
				"m0": {Name: "m0", AppliedEpoch: 4, Source: cluster.ReportFromDisk, RestoredTimeline: 2, RestoredRevision: 77}})), func(o *Observation) {
				o.Directive = founding(*backupM1)
			}),
			want: Plan{Case: "QuorumLossFounderRestore", Action: ActionRestoreFromBackup, ClusterState: "new", Disposal: MoveDataAside, RecoveryEpoch: 4,
				Restore: &cluster.RestoreTarget{Timeline: 2, Revision: 77}, Founders: []string{"m0", "m1", "m2"}, FoundersToken: "tok-recovery-4-abc"}},
		{name: "founder while another founder reports another point than the seed's: restores the seed's",
			obs: with_(obs("m0", emptyData, cluster.LiveCluster{}, withReports(all, map[string]*cluster.Report{"m1": restored,
				"m2": {Name: "m2", AppliedEpoch: 4, Source: cluster.ReportFromDisk, RestoredTimeline: 1, RestoredRevision: 55}})), func(o *Observation) {
				o.Directive = founding(*backupM1)
			}),
			want: Plan{Case: "QuorumLossFounderRestore", Action: ActionRestoreFromBackup, ClusterState: "new", Disposal: MoveDataAside, RecoveryEpoch: 4,
				Restore: &cluster.RestoreTarget{Timeline: 2, Revision: 77}, Founders: []string{"m0", "m1", "m2"}, FoundersToken: "tok-recovery-4-abc"}},
		{name: "founder that restored before (recorded) and lost its data since: never restores again under the same member ID",
			obs: with_(obs("m0", emptyData, cluster.LiveCluster{}, withReports(all, map[string]*cluster.Report{"m1": restored})), func(o *Observation) {
				o.Directive = founding(*backupM1)
				o.Directive.Restored = []string{"m0"}
			}),
			want: Plan{Case: "QuorumLossFounderLost", Action: ActionWait}},
		{name: "founder whose restore is recorded: starts on it",
			obs: with_(obs("m0", cleanData, cluster.LiveCluster{}, withReports(all, map[string]*cluster.Report{"m1": restored})), func(o *Observation) {
				o.Directive, o.AppliedEpoch = founding(*backupM1), 4
				o.Directive.Restored = []string{"m0"}
			}),
			want: Plan{Case: "QuorumLossFounderStart", Action: ActionRestart, ClusterState: "existing"}},
		{name: "founder whose restore is not recorded yet: its etcd waits",
			obs: with_(obs("m0", cleanData, cluster.LiveCluster{}, withReports(all, map[string]*cluster.Report{"m1": restored})), func(o *Observation) {
				o.Directive, o.AppliedEpoch = founding(*backupM1), 4
			}),
			want: Plan{Case: "QuorumLossFounderRecording", Action: ActionWait}},
		{name: "seed of a recovery from backup, the store holds only other clusters' timelines: wait (never restores another cluster)",
			obs:  with_(obs("m1", emptyData, cluster.LiveCluster{}, all), func(o *Observation) { o.Directive, o.ForeignTimelines = backupM1, 3 }),
			want: Plan{Case: "QuorumLossSeedNoOwnBackup", Action: ActionWait}},
		{name: "bootstrap.restore: the first member of a new cluster restores the target and starts alone",
			obs: with_(obs("m0", emptyData, cluster.LiveCluster{}, none), func(o *Observation) {
				d := *directive(1, cluster.PhaseSeeding, cluster.RecoverFromBackup, "m0")
				d.Restore = bootTarget
				o.Directive = &d
			}),
			want: Plan{Case: "BootstrapRestore", Action: ActionRestoreFromBackup, ClusterState: "new", Disposal: MoveDataAside, RecoveryEpoch: 1, Restore: bootTarget}},
		{name: "restore in place: the seed moves its data aside and restores the target from its own store",
			obs: with_(obs("m0", validData, noQuorum, formed), func(o *Observation) {
				d := *directive(6, cluster.PhaseSeeding, cluster.RecoverFromBackup, "m0")
				d.Restore = &cluster.RestoreTarget{Timeline: 2, Revision: 77}
				o.Directive = &d
			}),
			want: Plan{Case: "RestoreInPlace", Action: ActionRestoreFromBackup, ClusterState: "new", Disposal: MoveDataAside, RecoveryEpoch: 6,
				Restore: &cluster.RestoreTarget{Timeline: 2, Revision: 77}}},
		{name: "restore in place: the others wait with their data for the seed",
			obs: with_(obs("m1", validData, noQuorum, formed), func(o *Observation) {
				d := *directive(6, cluster.PhaseSeeding, cluster.RecoverFromBackup, "m0")
				d.Restore = &cluster.RestoreTarget{Timeline: 2, Revision: 77}
				o.Directive = &d
			}),
			want: Plan{Case: "QuorumLossFollowerWait", Action: ActionWait}},
		{name: "bootstrap.restore: the other members wait for the seed",
			obs: with_(obs("m1", emptyData, cluster.LiveCluster{}, none), func(o *Observation) {
				d := *directive(1, cluster.PhaseSeeding, cluster.RecoverFromBackup, "m0")
				d.Restore = bootTarget
				o.Directive = &d
			}),
			want: Plan{Case: "QuorumLossFollowerWait", Action: ActionWait}},
		{name: "following member of a recovered cluster without valid data",
			obs:  with_(obs("m2", emptyData, newClusterOfM0, status(formed, ready("m0"))), func(o *Observation) { o.Directive = rejoinM0 }),
			want: Plan{Case: "QuorumLossFollowerRejoin", Action: ActionJoinAsLearner, ClusterState: "existing", RecoveryEpoch: 5}},

		// A user's fence.
		{name: "fenced member on valid data with a quorum: etcd held",
			obs:  with_(obs("m1", validData, quorate, all), func(o *Observation) { o.Fenced = true }),
			want: Plan{Case: CaseFenced, Action: ActionWait}},
		// A recovery directive comes before the fence: it needs every member's data.
		{name: "fenced member a directive seeds: it seeds (force-new-cluster on its own data)",
			obs: with_(obs("m1", validData, noQuorum, formed), func(o *Observation) {
				o.Fenced, o.FencedOnDisk, o.Directive = true, true, seedingM1
			}),
			want: Plan{Case: "QuorumLossSeedFromSurvivor", Action: ActionForceNewCluster, ClusterState: "existing", RecoveryEpoch: 3}},
		{name: "fenced seed that carried out its directive (not acknowledged yet): restarts on the recovered data",
			obs: with_(obs("m1", validData, noQuorum, formed), func(o *Observation) {
				o.Fenced, o.Directive, o.AppliedEpoch = true, seedingM1, 3
			}),
			want: Plan{Case: "QuorumLossSeedRestart", Action: ActionRestart, ClusterState: "existing"}},
		{name: "fenced member rejoins the recovered cluster",
			obs: with_(obs("m2", emptyData, newClusterOfM0, status(formed, ready("m0"))), func(o *Observation) {
				o.Fenced, o.FencedOnDisk, o.Directive = true, true, rejoinM0
			}),
			want: Plan{Case: "QuorumLossFollowerRejoin", Action: ActionJoinAsLearner, ClusterState: "existing", RecoveryEpoch: 5}},
		{name: "fenced member once the directive asks nothing more of it: held again",
			obs: with_(obs("m2", validData, newClusterOfM0, status(formed, ready("m0"))), func(o *Observation) {
				o.Fenced, o.Directive, o.AppliedEpoch = true, rejoinM0, 5
			}),
			want: Plan{Case: CaseFenced, Action: ActionWait}},
		{name: "member whose data dir still records a suspended fence follows the directive",
			obs:  with_(obs("m1", validData, noQuorum, formed), func(o *Observation) { o.FencedOnDisk, o.Directive = true, seedingM1 }),
			want: Plan{Case: "QuorumLossSeedFromSurvivor", Action: ActionForceNewCluster, ClusterState: "existing", RecoveryEpoch: 3}},
		{name: "unfenced member whose data dir still records the fence: restarts (the view decides)",
			obs:  with_(obs("m1", validData, quorate, all), func(o *Observation) { o.FencedOnDisk = true }),
			want: Plan{Case: "RestartQuorate", Action: ActionRestart, ClusterState: "existing"}},

		// Directives.
		{name: "every member waits while the recovery fences",
			obs:  with_(obs("m1", validData, noQuorum, formed), func(o *Observation) { o.Directive = fencing }),
			want: Plan{Case: "QuorumLossFenced", Action: ActionWait}},
		{name: "survivor seed: force-new-cluster on its own data",
			obs:  with_(obs("m1", validData, noQuorum, formed), func(o *Observation) { o.Directive = seedingM1 }),
			want: Plan{Case: "QuorumLossSeedFromSurvivor", Action: ActionForceNewCluster, ClusterState: "existing", RecoveryEpoch: 3}},
		{name: "a seed that carried out its directive (not acknowledged yet) restarts on the recovered data, never carries it out again",
			obs:  with_(obs("m1", validData, noQuorum, formed), func(o *Observation) { o.Directive, o.AppliedEpoch = seedingM1, 3 }),
			want: Plan{Case: "QuorumLossSeedRestart", Action: ActionRestart, ClusterState: "existing"}},
		{name: "a directive this data dir carried out is not applied again",
			obs:  with_(obs("m1", validData, quorate, all), func(o *Observation) { o.Directive, o.AppliedEpoch = rejoinM1, 3 }),
			want: Plan{Case: "RestartQuorate", Action: ActionRestart, ClusterState: "existing"}},
		{name: "survivor seed whose data turned out invalid waits (the supervisor starts a new epoch)",
			obs:  with_(obs("m1", damagedDB, noQuorum, formed), func(o *Observation) { o.Directive = seedingM1 }),
			want: Plan{Case: "QuorumLossSeedWithoutData", Action: ActionWait}},
		{name: "acknowledged seed that lost its data afterwards is never seeded again: replaced like any member",
			obs:  with_(obs("m1", emptyData, noQuorum, status(formed, nil)), func(o *Observation) { o.Directive = rejoinM1 }),
			want: Plan{Case: "LostDataWaitForQuorum", Action: ActionWait}},
		{name: "a seed whose acknowledgement the supervisor has not recorded yet, and that lost its data since, is never seeded again",
			obs: with_(obs("m1", emptyData, noQuorum, status(formed, nil)), func(o *Observation) {
				d := *seedingM1
				d.Ack = &cluster.DirectiveResult{Member: "m1", MemberID: "b", ClusterID: "cid", Revision: 9}
				o.Directive = &d
			}),
			want: Plan{Case: "LostDataWaitForQuorum", Action: ActionWait}},
		{name: "follower waits while the seed recovers",
			obs:  with_(obs("m2", validData, noQuorum, formed), func(o *Observation) { o.Directive = seedingM0 }),
			want: Plan{Case: "QuorumLossFollowerWait", Action: ActionWait}},
		{name: "follower with old valid data once the seed serves: moved aside, never wiped, rejoins",
			obs:  with_(obs("m2", validData, newClusterOfM0, status(formed, ready("m0"))), func(o *Observation) { o.Directive = rejoinM0 }),
			want: Plan{Case: "QuorumLossFollowerRejoin", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside, RecoveryEpoch: 5}},
		{name: "follower holding a swapped volume once the seed serves: moved aside",
			obs:  with_(obs("m1", swapped, newClusterOfM0, status(formed, ready("m0"))), func(o *Observation) { o.Directive = rejoinM0 }),
			want: Plan{Case: "QuorumLossFollowerRejoin", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside, RecoveryEpoch: 5}},

		// Foreign data, swapped volumes, other clusters.
		{name: "volume of another member (identity names m2), quorate: moved aside, never started on",
			obs:  obs("m1", swapped, quorate, all),
			want: Plan{Case: "ForeignDataReplace", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside, RemoveMemberID: "abc"}},
		{name: "volume of another member without identity file: the WAL's member is known under another name",
			obs:  obs("m2", validData, quorate, all),
			want: Plan{Case: "ForeignDataReplace", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside, RemoveMemberID: "c00"}},
		{name: "volume of another cluster (identity token differs), quorate",
			obs:  obs("m1", foreignCluster, quorate, all),
			want: Plan{Case: "ForeignDataReplace", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside, RemoveMemberID: "abc"}},
		{name: "volume of another member without quorum: wait, never start on it",
			obs:  obs("m1", swapped, noQuorum, formed),
			want: Plan{Case: "ForeignDataWaitForQuorum", Action: ActionWait}},
		{name: "volume of another member whose own dir lacks it, where data is relocated: wait for the move",
			obs: with_(obs("m2", m1sDataInM2, noQuorum, withReports(status(formed, ready("m0", "m1", "m2")), map[string]*cluster.Report{"m1": {Name: "m1", DataEmpty: true}})),
				func(o *Observation) { o.RelocatesData = true }),
			want: Plan{Case: "DataOfAnotherMemberRelocate", Action: ActionWait}},
		{name: "copy of a member's data that the member still holds, where data is relocated: not moved, replaced",
			obs: with_(obs("m2", m1sDataInM2, quorate, withReports(all, map[string]*cluster.Report{"m1": {Name: "m1", Serving: true, DataValid: true}})),
				func(o *Observation) { o.RelocatesData = true }),
			want: Plan{Case: "ForeignDataReplace", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside, RemoveMemberID: "c00"}},
		{name: "data of an earlier incarnation of the cluster (other cluster ID), quorate",
			obs:  obs("m1", validData, func() cluster.LiveCluster { l := quorate; l.ClusterID = "fff"; return l }(), all),
			want: Plan{Case: "DataOfAnotherClusterReplace", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside, RemoveMemberID: "abc"}},
		{name: "data of another cluster than the status records, no quorum: never started on",
			obs:  obs("m1", validData, noQuorum, func() cluster.Status { s := formed; s.ClusterID = "fff"; return s }()),
			want: Plan{Case: "DataOfAnotherClusterWait", Action: ActionWait}},

		// Membership.
		{name: "member removed from the cluster while it was down",
			obs:  obs("m1", validData, without(quorate, "m1"), status(formed, ready("m0", "m2"))),
			want: Plan{Case: "RemovedWhileDownRejoin", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: WipeData}},
		{name: "leftover learner with valid data restarts and is promoted later",
			obs: obs("m1", validData, func() cluster.LiveCluster {
				l := without(quorate, "m1")
				return with(l, cluster.LiveMember{ID: "abc", Name: "m1", PeerURL: "http://m1", IsLearner: true})
			}(), status(formed, ready("m0", "m2"))),
			want: Plan{Case: "RestartLearner", Action: ActionRestart, ClusterState: "existing"}},
		{name: "leftover learner without data rejoins in its place",
			obs: obs("m1", emptyData, func() cluster.LiveCluster {
				l := without(quorate, "m1")
				return with(l, cluster.LiveMember{ID: "abc", PeerURL: "http://m1", IsLearner: true})
			}(), status(formed, ready("m0", "m2"))),
			want: Plan{Case: "ReplaceLostData", Action: ActionJoinAsLearner, ClusterState: "existing", RemoveMemberID: "abc"}},
		{name: "new member of a running cluster (scale-up)",
			obs:  Observation{Self: "m3", SelfPeerURL: "http://m3", ClusterSize: 4, ClusterToken: "tok", Data: emptyData, Live: quorate, Status: all},
			want: Plan{Case: "JoinRunningCluster", Action: ActionJoinAsLearner, ClusterState: "existing"}},
		{name: "scale-up member that cannot reach a quorum never bootstraps beside the formed cluster",
			obs:  Observation{Self: "m3", SelfPeerURL: "http://m3", ClusterSize: 4, ClusterToken: "tok", Data: emptyData, Live: cluster.LiveCluster{}, Status: all},
			want: Plan{Case: "LostDataWaitForQuorum", Action: ActionWait}},
		{name: "lost data and no quorum: wait for a directive",
			obs:  obs("m1", emptyData, cluster.LiveCluster{}, all),
			want: Plan{Case: "LostDataWaitForQuorum", Action: ActionWait}},
		{name: "damaged data and no quorum: wait for a directive",
			obs:  obs("m1", damagedDB, noQuorum, all),
			want: Plan{Case: "InvalidDataWaitForQuorum", Action: ActionWait}},
		{name: "lost data, no status (lost), but another member reports data of the formed cluster: never bootstraps",
			obs: obs("m1", emptyData, cluster.LiveCluster{}, withReports(status(none, []cluster.StatusMember{{Name: "m0"}, {Name: "m1"}, {Name: "m2"}}), map[string]*cluster.Report{
				"m0": {Name: "m0", Source: cluster.ReportFromDisk, DataValid: true, MemberID: "a00", ClusterID: "def", Formed: true}})),
			want: Plan{Case: "LostDataWaitForQuorum", Action: ActionWait}},
		{name: "lost data, no status, another member holds data of a cluster that never formed: bootstrap with it",
			obs: obs("m1", emptyData, cluster.LiveCluster{}, withReports(status(none, []cluster.StatusMember{{Name: "m0"}, {Name: "m1"}, {Name: "m2"}}), map[string]*cluster.Report{
				"m0": {Name: "m0", Source: cluster.ReportFromEtcd, Serving: true, DataValid: true, MemberID: "a00", ClusterID: "def"}})),
			want: Plan{Case: "Bootstrap", Action: ActionBootstrap, ClusterState: "new"}},
		{name: "damaged data of a cluster that never formed, no backups: wiped, bootstrap again (waiting would wait forever)",
			obs:  obs("m1", damagedDB, cluster.LiveCluster{}, none),
			want: Plan{Case: "InvalidDataNeverFormedBootstrap", Action: ActionBootstrap, ClusterState: "new", Disposal: WipeData}},
		{name: "damaged data of a cluster that never formed, but the backup store holds backups of it: wait",
			obs:  with_(obs("m1", damagedDB, cluster.LiveCluster{}, none), func(o *Observation) { o.BackupTimeline = 1 }),
			want: Plan{Case: "InvalidDataWaitForQuorum", Action: ActionWait}},
		{name: "damaged data of a cluster that never formed, the backup store holds other clusters' backups: wiped, bootstrap again",
			obs:  with_(obs("m1", damagedDB, cluster.LiveCluster{}, none), func(o *Observation) { o.ForeignTimelines = 1 }),
			want: Plan{Case: "InvalidDataNeverFormedBootstrap", Action: ActionBootstrap, ClusterState: "new", Disposal: WipeData}},
		{name: "damaged data whose identity records that the cluster formed: wait, never bootstrap",
			obs: obs("m1", func() datadir.State {
				s := damagedDB
				s.Identity = &datadir.Identity{ClusterToken: "tok", MemberName: "m1", MemberID: "abc", ClusterID: "def"}
				return s
			}(), cluster.LiveCluster{}, none),
			want: Plan{Case: "InvalidDataWaitForQuorum", Action: ActionWait}},
		{name: "another member's data, of a cluster that never formed: moved aside, bootstrap",
			obs:  obs("m1", swapped, cluster.LiveCluster{}, none),
			want: Plan{Case: "ForeignDataNeverFormedBootstrap", Action: ActionBootstrap, ClusterState: "new", Disposal: MoveDataAside}},
		{name: "data of a member that is no longer desired (scaled down), where data is relocated: not waited for, replaced",
			obs: with_(obs("m2", m1sDataInM2, quorate, status(formed, ready("m0", "m2"))), func(o *Observation) {
				o.RelocatesData = true
			}),
			want: Plan{Case: "ForeignDataReplace", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside, RemoveMemberID: "c00"}},
		{name: "seed whose carried-out data is in another member's dir: waits for it to be moved back, never seeds twice",
			obs: with_(obs("m1", emptyData, noQuorum, withReports(status(formed, ready("m0", "m1", "m2")), map[string]*cluster.Report{
				"m2": {Name: "m2", Source: cluster.ReportFromDisk, DataValid: true, Owner: "m1", Foreign: "of m1", AppliedEpoch: 3}})),
				func(o *Observation) {
					o.Directive = directive(3, cluster.PhaseSeeding, cluster.RecoverFromBackup, "m1")
				}),
			want: Plan{Case: "QuorumLossSeedDataElsewhere", Action: ActionWait}},

		// Data a restore superseded: treated as if the dir were empty.
		{name: "data a restore superseded, no quorum, the status lost: never restarted, never bootstraps beside it: wait",
			obs: obs("m1", superseded, noQuorum, withReports(status(none, []cluster.StatusMember{{Name: "m0"}, {Name: "m1"}, {Name: "m2"}}), map[string]*cluster.Report{
				"m0": {Name: "m0", Source: cluster.ReportFromDisk, DataValid: true, MemberID: "a00", ClusterID: "def", Formed: true, SupersededBy: 4}})),
			want: Plan{Case: "SupersededDataWait", Action: ActionWait}},
		{name: "data a restore superseded, alone, nothing recorded anywhere else: wait, never bootstraps",
			obs:  obs("m1", superseded, cluster.LiveCluster{}, none),
			want: Plan{Case: "SupersededDataWait", Action: ActionWait}},
		{name: "data a restore superseded, the restored cluster has quorum: moved aside with its record, rejoin as a learner",
			obs:  obs("m1", superseded, newClusterOfM0, status(cluster.Status{ClusterID: "def", Voters: []cluster.Voter{{ID: "a00", Name: "m0"}}}, ready("m0"))),
			want: Plan{Case: "SupersededDataRejoin", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside}},
		{name: "damaged data a restore superseded, no quorum: wait as superseded",
			obs: obs("m1", func() datadir.State {
				s := damagedDB
				s.Identity, s.SupersededBy = superseded.Identity, 4
				return s
			}(), noQuorum, none),
			want: Plan{Case: "SupersededDataWait", Action: ActionWait}},
		{name: "a superseded record the data dir carried out since (it rejoined the restore) marks nothing",
			obs: obs("m1", func() datadir.State {
				s := superseded
				id := *s.Identity
				id.RecoveryEpoch = 4
				s.Identity = &id
				return s
			}(), quorate, all),
			want: Plan{Case: "RestartQuorate", Action: ActionRestart, ClusterState: "existing"}},
		{name: "a superseded record in an empty data dir marks nothing",
			obs:  obs("m0", func() datadir.State { s := emptyData; s.SupersededBy = 4; return s }(), cluster.LiveCluster{}, none),
			want: Plan{Case: "Bootstrap", Action: ActionBootstrap, ClusterState: "new"}},
		{name: "survivor seed whose data a restore superseded waits (never forces it into a cluster)",
			obs: with_(obs("m1", superseded, noQuorum, formed), func(o *Observation) {
				o.Directive = directive(5, cluster.PhaseSeeding, cluster.RecoverFromSurvivor, "m1")
			}),
			want: Plan{Case: "QuorumLossSeedWithoutData", Action: ActionWait}},
		{name: "follower whose data a restore superseded rejoins the recovered cluster: moved aside",
			obs:  with_(obs("m1", superseded, newClusterOfM0, status(formed, ready("m0"))), func(o *Observation) { o.Directive = rejoinM0 }),
			want: Plan{Case: "QuorumLossFollowerRejoin", Action: ActionJoinAsLearner, ClusterState: "existing", Disposal: MoveDataAside, RecoveryEpoch: 5}},
		{name: "unfinished restore beside an empty data dir: cleaned, then bootstrap",
			obs:  obs("m0", partial, cluster.LiveCluster{}, none),
			want: Plan{Case: "Bootstrap", Action: ActionBootstrap, ClusterState: "new", CleanPartialRestore: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.obs)
			if got.Reason == "" {
				t.Fatalf("Decide() gave no reason: %+v", got)
			}
			reason := got.Reason
			got.Reason = ""
			if got.Restore != nil && tt.want.Restore != nil && *got.Restore == *tt.want.Restore {
				got.Restore = tt.want.Restore
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Decide() = %+v\nwant        %+v\n(reason: %s)", got, tt.want, reason)
			}
			// Invariant 2: never start on data that is not this member's.
			if got.Action == ActionRestart || got.Action == ActionForceNewCluster {
				if tt.obs.foreignReason() != "" || tt.obs.liveOwnerReason() != "" {
					t.Fatalf("starts on foreign data: %+v", got)
				}
			}
			// Never a new cluster on existing data, beside a formed one, or over backups.
			if got.Action == ActionBootstrap && ((!tt.obs.Data.Empty() && got.Disposal == KeepData) || tt.obs.formed() || tt.obs.BackupTimeline != 0) {
				t.Fatalf("bootstraps a new cluster where one exists: %+v", got)
			}
			// Data a restore superseded is never started on, nor bootstrapped beside.
			if tt.obs.Data.Superseded() && (got.Action == ActionRestart || got.Action == ActionForceNewCluster || got.Action == ActionBootstrap) {
				t.Fatalf("acts on data a restore superseded: %+v", got)
			}
		})
	}
}

// TestDecideWithoutView: while the cluster view cannot be read (the API server does not
// answer), the only start is a restart on this member's own valid data as it last started;
// a join, a bootstrap, a replacement of data or anything uncertain about whose data it is
// waits for the view.
func TestDecideWithoutView(t *testing.T) {
	own := func(s datadir.State) datadir.State {
		s.Identity = &datadir.Identity{ClusterName: "c", ClusterToken: "tok", MemberName: "m1", MemberID: "abc", ClusterID: "def"}
		return s
	}
	blind := func(data datadir.State, lastStart bool) Observation {
		return Observation{Self: "m1", Data: data, LastStart: lastStart, ViewUnavailable: "the API server does not answer"}
	}
	for _, tt := range []struct {
		name string
		obs  Observation
		want Plan
	}{
		{"own valid data, started before: restart on it", blind(own(validData), true),
			Plan{Case: "RestartWithoutView", Action: ActionRestart, ClusterState: "existing"}},
		{"own data after a clean shutdown: restart on it", blind(own(cleanData), true),
			Plan{Case: "RestartWithoutView", Action: ActionRestart, ClusterState: "existing"}},
		{"own data whose identity does not record the cluster yet (it never formed): restart on it",
			blind(func() datadir.State { s := own(validData); s.Identity.ClusterID = ""; return s }(), true),
			Plan{Case: "RestartWithoutView", Action: ActionRestart, ClusterState: "existing"}},
		{"empty data dir (a join or a lost disk): wait", blind(emptyData, false), Plan{Case: "ViewUnavailableWait", Action: ActionWait}},
		{"empty data dir with a recorded start: wait", blind(emptyData, true), Plan{Case: "ViewUnavailableWait", Action: ActionWait}},
		{"damaged data: wait", blind(own(damagedDB), true), Plan{Case: "ViewUnavailableWait", Action: ActionWait}},
		{"valid data without identity: wait", blind(validData, true), Plan{Case: "ViewUnavailableWait", Action: ActionWait}},
		{"another member's data (a swapped volume): wait", blind(swapped, true), Plan{Case: "ViewUnavailableWait", Action: ActionWait}},
		{"identity of another cluster than the WAL's: wait",
			blind(func() datadir.State { s := own(validData); s.Identity.ClusterID = "f00"; return s }(), true),
			Plan{Case: "ViewUnavailableWait", Action: ActionWait}},
		{"identity of another member ID than the WAL's: wait",
			blind(func() datadir.State { s := own(validData); s.Identity.MemberID = "a00"; return s }(), true),
			Plan{Case: "ViewUnavailableWait", Action: ActionWait}},
		{"own data never started by this sidecar: wait", blind(own(validData), false), Plan{Case: "ViewUnavailableWait", Action: ActionWait}},
		{"own data beside an unfinished restore: wait",
			blind(func() datadir.State { s := own(validData); s.PartialRestore = true; return s }(), true),
			Plan{Case: "ViewUnavailableWait", Action: ActionWait, CleanPartialRestore: true}},
		{"own data in use by a running etcd: wait for it to stop", blind(own(inUseDB), true), Plan{Case: "DataInUseWait", Action: ActionWait}},
		{"own data, started before, that a restore superseded: wait, never restarted",
			blind(func() datadir.State { s := own(validData); s.SupersededBy = 4; return s }(), true),
			Plan{Case: "ViewUnavailableWait", Action: ActionWait}},
		{"own valid data, started before, the data dir records a fence: etcd held",
			func() Observation { o := blind(own(validData), true); o.FencedOnDisk = true; return o }(),
			Plan{Case: CaseFenced, Action: ActionWait}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.obs)
			reason := got.Reason
			got.Reason = ""
			if !reflect.DeepEqual(got, tt.want) || reason == "" {
				t.Fatalf("Decide() = %+v (reason %q)\nwant        %+v", got, reason, tt.want)
			}
			if got.Action == ActionWait && got.Case == "ViewUnavailableWait" && !strings.Contains(reason, "the API server does not answer") {
				t.Fatalf("the wait does not say what it waits for: %q", reason)
			}
		})
	}
}

// TestSupersededRecord is the table of what a member's data dir records of the restore that
// supersedes its data, under the directive in force: each row names the situation.
func TestSupersededRecord(t *testing.T) {
	restoreIn := func(epoch int64, phase, seed string) *cluster.Directive {
		d := directive(epoch, phase, cluster.RecoverFromBackup, seed)
		d.Restore = &cluster.RestoreTarget{Timeline: 1, Revision: 42}
		return d
	}
	cancel := func(epoch, cancels int64) *cluster.Directive {
		d := directive(epoch, cluster.PhaseFencing, "", "")
		d.Cancels = cancels
		return d
	}
	own := func(epoch, record int64) datadir.State {
		s := validData
		s.Identity = &datadir.Identity{ClusterToken: "tok", MemberName: "m1", MemberID: "abc", ClusterID: "def", RecoveryEpoch: epoch}
		s.SupersededBy = record
		return s
	}
	for _, tt := range []struct {
		name string
		d    *cluster.Directive
		data datadir.State
		want int64
	}{
		{"a restore fencing every member: recorded", restoreIn(4, cluster.PhaseFencing, ""), own(0, 0), 4},
		{"a restore fencing, damaged data: recorded too", restoreIn(4, cluster.PhaseFencing, ""), damagedDB, 4},
		{"a restore fencing, an empty dir: nothing to record", restoreIn(4, cluster.PhaseFencing, ""), emptyData, 0},
		{"a restore whose seed is another member: recorded", restoreIn(4, cluster.PhaseSeeding, "m0"), own(0, 0), 4},
		{"a restore whose seed is this member: left as it is (the seed moves its data aside)", restoreIn(4, cluster.PhaseSeeding, "m1"), own(0, 0), 0},
		{"a restore this member's seed serves: data it starts since (a replacement) is never marked", restoreIn(4, cluster.PhaseRejoining, "m1"), own(0, 0), 0},
		{"a restore whose seed serves, data not rejoined yet: recorded", restoreIn(4, cluster.PhaseRejoining, "m0"), own(0, 0), 4},
		{"data that carried the restore out (the restored seed's, a rejoined member's): not recorded", restoreIn(4, cluster.PhaseRejoining, "m0"), own(4, 0), 0},
		{"a new epoch of the same restore: the record follows it", restoreIn(6, cluster.PhaseFencing, ""), own(0, 4), 6},
		{"a quorum-loss recovery: the record kept", directive(5, cluster.PhaseFencing, "", ""), own(0, 4), 4},
		{"no directive: the record kept", nil, own(0, 4), 4},
		{"the cancel of the restore: cleared", cancel(5, 4), own(0, 4), 0},
		{"the cancel of a later epoch of the same restore: cleared", cancel(7, 6), own(0, 4), 0},
		{"the cancel of an earlier restore: a newer record kept", cancel(7, 3), own(0, 4), 4},
		{"a record the data dir carried out since: cleared", nil, own(4, 4), 0},
		{"a record in an empty dir: cleared", nil, func() datadir.State { s := emptyData; s.SupersededBy = 4; return s }(), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := SupersededRecord(tt.d, "m1", tt.data); got != tt.want {
				t.Fatalf("SupersededRecord = %d, want %d", got, tt.want)
			}
		})
	}
}
