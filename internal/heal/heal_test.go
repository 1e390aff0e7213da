package heal

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

var voters3 = []cluster.Voter{{ID: "a", Name: "m0"}, {ID: "b", Name: "m1"}, {ID: "c", Name: "m2"}}

// disk is a member's report from its data dir, made after its etcd stopped at t0.
func disk(name, id string, lastTerm, lastIndex uint64, rev int64) *cluster.Report {
	return &cluster.Report{Name: name, At: t0.Add(time.Second), Source: cluster.ReportFromDisk, DataValid: true, MemberID: id, ClusterID: "cid",
		Owner: name, LastTerm: lastTerm, LastIndex: lastIndex, Commit: lastIndex, Applied: lastIndex, Revision: rev}
}

func emptyDisk(name string) *cluster.Report {
	return &cluster.Report{Name: name, At: t0.Add(time.Second), Source: cluster.ReportFromDisk, DataEmpty: true}
}

func stopped(name string, r *cluster.Report) Member {
	return Member{Name: name, Stopped: true, StoppedSince: t0, Report: r}
}

// superseded is a member's report from its data dir, which holds its own valid data of the
// formed cluster and records that the restore of directive epoch supersedes it.
func superseded(name, id string, epoch int64) *cluster.Report {
	r := disk(name, id, 2, 9, 5)
	r.Formed, r.SupersededBy = true, epoch
	return r
}

func TestChoose(t *testing.T) {
	status := Status{ClusterID: "cid", Voters: voters3}
	tests := []struct {
		name     string
		status   Status
		members  []Member
		backup   Backup
		wantMode string
		wantSeed string
		intact   bool
	}{
		{name: "a majority of voters holds its data: nothing to recover", status: status,
			members: []Member{stopped("m0", disk("m0", "a", 2, 10, 5)), stopped("m1", disk("m1", "b", 2, 9, 5)), stopped("m2", emptyDisk("m2"))}, intact: true},
		{name: "one survivor seeds", status: status,
			members:  []Member{stopped("m0", emptyDisk("m0")), stopped("m1", disk("m1", "b", 2, 9, 5)), stopped("m2", emptyDisk("m2"))},
			wantMode: cluster.RecoverFromSurvivor, wantSeed: "m1"},
		{name: "the log that would win an election: higher last term beats a longer log", status: Status{ClusterID: "cid", Voters: append(voters3, cluster.Voter{ID: "d", Name: "m3"}, cluster.Voter{ID: "e", Name: "m4"})},
			members: []Member{stopped("m0", disk("m0", "a", 3, 100, 50)), stopped("m1", disk("m1", "b", 4, 90, 49)), stopped("m2", emptyDisk("m2")),
				stopped("m3", emptyDisk("m3")), stopped("m4", emptyDisk("m4"))},
			wantMode: cluster.RecoverFromSurvivor, wantSeed: "m1"},
		{name: "same term: the longer log seeds, not the higher database revision", status: Status{ClusterID: "cid", Voters: append(voters3, cluster.Voter{ID: "d", Name: "m3"}, cluster.Voter{ID: "e", Name: "m4"})},
			members: []Member{stopped("m0", disk("m0", "a", 3, 100, 50)), stopped("m1", func() *cluster.Report { r := disk("m1", "b", 3, 120, 40); r.Applied = 90; return r }()),
				stopped("m2", emptyDisk("m2")), stopped("m3", emptyDisk("m3")), stopped("m4", emptyDisk("m4"))},
			wantMode: cluster.RecoverFromSurvivor, wantSeed: "m1"},
		{name: "a learner's data never counts as a survivor", status: status,
			members:  []Member{stopped("m0", disk("m0", "x", 9, 999, 999)), stopped("m1", emptyDisk("m1")), stopped("m2", disk("m2", "c", 2, 5, 3))},
			wantMode: cluster.RecoverFromSurvivor, wantSeed: "m2"},
		{name: "data of another member does not count for the member holding it", status: status,
			members: []Member{stopped("m0", func() *cluster.Report { r := disk("m0", "c", 9, 99, 99); r.Foreign, r.Owner = "of m2", "m2"; return r }()),
				stopped("m1", disk("m1", "b", 2, 5, 3)), stopped("m2", emptyDisk("m2"))},
			wantMode: cluster.RecoverFromSurvivor, wantSeed: "m1"},
		{name: "the backup holds more than the survivor's log can reach: restore", status: status,
			members:  []Member{stopped("m0", emptyDisk("m0")), stopped("m1", disk("m1", "b", 2, 9, 5)), stopped("m2", emptyDisk("m2"))},
			backup:   Backup{Configured: true, Revision: 100},
			wantMode: cluster.RecoverFromBackup, wantSeed: "m0"},
		{name: "the backup might hold less than the survivor's unapplied entries: the survivor", status: status,
			members:  []Member{stopped("m0", emptyDisk("m0")), stopped("m1", func() *cluster.Report { r := disk("m1", "b", 2, 30, 5); r.Applied = 10; return r }()), stopped("m2", emptyDisk("m2"))},
			backup:   Backup{Configured: true, Revision: 20},
			wantMode: cluster.RecoverFromSurvivor, wantSeed: "m1"},
		{name: "members removed after the status last recorded the voters do not count: a majority of the voters now listed holds its data",
			status: Status{ClusterID: "cid", Voters: append(voters3, cluster.Voter{ID: "d", Name: "m3"}, cluster.Voter{ID: "e", Name: "m4"})},
			members: func() []Member {
				list := []cluster.LiveMember{{ID: "a", Name: "m0"}, {ID: "b", Name: "m1"}, {ID: "c", Name: "m2"}}
				r0, r1 := disk("m0", "a", 2, 10, 5), disk("m1", "b", 2, 10, 5)
				r0.Members, r1.Members = list, list
				return []Member{stopped("m0", r0), stopped("m1", r1), stopped("m2", emptyDisk("m2")), stopped("m3", emptyDisk("m3")), stopped("m4", emptyDisk("m4"))}
			}(), intact: true},
		{name: "data a restore superseded is never a survivor, however much it holds: restore the backup", status: status,
			members:  []Member{stopped("m0", superseded("m0", "a", 4)), stopped("m1", superseded("m1", "b", 4)), stopped("m2", emptyDisk("m2"))},
			backup:   Backup{Configured: true, Revision: 7},
			wantMode: cluster.RecoverFromBackup, wantSeed: "m2"},
		{name: "no data, backups: restore", status: status,
			members:  []Member{stopped("m0", emptyDisk("m0")), stopped("m1", emptyDisk("m1")), stopped("m2", emptyDisk("m2"))},
			backup:   Backup{Configured: true, Revision: 7},
			wantMode: cluster.RecoverFromBackup, wantSeed: "m0"},
		{name: "no data, no backups: nothing automatic (never an empty new cluster)", status: status,
			members: []Member{stopped("m0", emptyDisk("m0")), stopped("m1", emptyDisk("m1")), stopped("m2", emptyDisk("m2"))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Choose(tt.status, tt.members, tt.backup)
			if c.Mode != tt.wantMode || c.Seed != tt.wantSeed || c.MajorityIntact != tt.intact || c.Reason == "" {
				t.Fatalf("Choose = %+v; want mode %q seed %q intact %t", c, tt.wantMode, tt.wantSeed, tt.intact)
			}
			if c.Mode != "" && len(c.Alternatives) == 0 {
				t.Fatalf("no alternatives recorded: %+v", c)
			}
		})
	}
}

func TestQuorumCountsOnlyVoters(t *testing.T) {
	// The deadlock once seen: m0 was replaced (removed, re-added as a learner) and m1 then
	// lost its data. Voters m1 and m2; m2 alone serves as a voter; the learner m0 serves too.
	voters := []cluster.Voter{{ID: "b", Name: "m1"}, {ID: "c", Name: "m2"}}
	members := []Member{{Name: "m0", Ready: true, ID: "x", Learner: true}, {Name: "m1"}, {Name: "m2", Ready: true, ID: "c"}}
	if ready, total := Quorum(voters, members); ready != 1 || total != 2 {
		t.Fatalf("Quorum = %d of %d, want 1 of 2", ready, total)
	}
	o := Observation{Now: t0, Status: Status{ClusterID: "cid", Voters: voters}, Members: members, Timing: Timing{Grace: 5 * time.Second}}
	d := Decide(o)
	if d.Status.Directive != nil || d.Status.QuorumLostSince != t0 || !strings.Contains(d.Status.Waiting, "quorum lost") {
		t.Fatalf("first round: %+v", d.Status)
	}
	o.Status, o.Now = d.Status, t0.Add(6*time.Second)
	d = Decide(o)
	if d.Status.Directive == nil || d.Status.Directive.Phase != cluster.PhaseFencing || d.Status.Directive.Epoch != 1 {
		t.Fatalf("after the grace: %+v", d.Status)
	}
}

// TestDecidePhases walks one recovery through every phase, with the faults that abandon it.
func TestDecidePhases(t *testing.T) {
	timing := Timing{Grace: 5 * time.Second, ReportTimeout: 10 * time.Second, SeedTimeout: time.Minute, ReportCurrent: 3 * time.Second}
	lost := Status{ClusterID: "cid", Voters: voters3, LastEpoch: 4}
	fencing := func(at time.Time) Status {
		st := lost
		st.LastEpoch = 5
		st.Directive = &cluster.Directive{Epoch: 5, Phase: cluster.PhaseFencing, IssuedAt: at, PhaseSince: at}
		return st
	}
	seeding := func() Status {
		st := fencing(t0)
		d := *st.Directive
		d.Phase, d.Mode, d.Seed, d.PhaseSince, d.Reason = cluster.PhaseSeeding, cluster.RecoverFromSurvivor, "m1", t0.Add(2*time.Second), "m1's log would win an election"
		st.Directive = &d
		return st
	}
	reports := []Member{stopped("m0", emptyDisk("m0")), stopped("m1", disk("m1", "b", 2, 9, 5)), stopped("m2", emptyDisk("m2"))}
	// The seed m1 serves alone, the quorum of its recovered cluster lost since.
	rejoiningLost := func(since time.Time) Status {
		st := seeding()
		st.Directive.Phase = cluster.PhaseRejoining
		st.Voters = []cluster.Voter{{ID: "n", Name: "m1"}}
		st.QuorumLostSince = since
		return st
	}
	atNow := func(r *cluster.Report, at time.Time) *cluster.Report { r.At = at; return r }
	tests := []struct {
		name      string
		o         Observation
		wantPhase string // "" = no directive
		wantEpoch int64
		wantSeed  string
	}{
		{name: "fencing waits while a member still runs",
			o:         Observation{Now: t0.Add(time.Second), Status: fencing(t0), Members: []Member{{Name: "m0"}, reports[1], reports[2]}, Timing: timing},
			wantPhase: cluster.PhaseFencing, wantEpoch: 5},
		{name: "fencing waits for reports made after the stop",
			o: Observation{Now: t0.Add(time.Second), Status: fencing(t0), Timing: timing,
				Members: []Member{stopped("m0", &cluster.Report{Name: "m0", At: t0.Add(-time.Second), Source: cluster.ReportFromEtcd, Serving: true}), reports[1], reports[2]}},
			wantPhase: cluster.PhaseFencing, wantEpoch: 5},
		{name: "fenced and reported: the survivor seeds",
			o:         Observation{Now: t0.Add(2 * time.Second), Status: fencing(t0), Members: reports, Timing: timing},
			wantPhase: cluster.PhaseSeeding, wantEpoch: 5, wantSeed: "m1"},
		{name: "a silent member that is no voter counts as holding nothing past the report timeout",
			o:         Observation{Now: t0.Add(11 * time.Second), Status: fencing(t0), Members: append(reports[:3:3], stopped("m3", nil)), Timing: timing},
			wantPhase: cluster.PhaseSeeding, wantEpoch: 5, wantSeed: "m1"},
		{name: "a silent voter is waited for, past the report timeout: it may hold the newest log",
			o:         Observation{Now: t0.Add(time.Hour), Status: fencing(t0), Members: []Member{stopped("m0", nil), reports[1], reports[2]}, Timing: timing},
			wantPhase: cluster.PhaseFencing, wantEpoch: 5},
		{name: "fenced, and a majority still holds its data: withdrawn, nothing recovered",
			o: Observation{Now: t0.Add(2 * time.Second), Status: fencing(t0), Timing: timing,
				Members: []Member{stopped("m0", disk("m0", "a", 2, 8, 5)), reports[1], reports[2]}}},
		{name: "a member that comes back while the seed recovers abandons the epoch",
			o: Observation{Now: t0.Add(3 * time.Second), Status: seeding(), Timing: timing,
				Members: []Member{{Name: "m0", Report: &cluster.Report{Name: "m0", At: t0.Add(3 * time.Second), Serving: true}}, {Name: "m1"}, reports[2]}},
			wantPhase: cluster.PhaseFencing, wantEpoch: 6},
		{name: "a seed that cannot carry it out abandons the epoch",
			o: Observation{Now: t0.Add(3 * time.Second), Status: seeding(), Timing: timing,
				Members: []Member{reports[0], {Name: "m1", Report: &cluster.Report{Name: "m1", At: t0.Add(3 * time.Second), Case: "QuorumLossSeedWithoutData", Reason: "data dir is empty"}}, reports[2]}},
			wantPhase: cluster.PhaseFencing, wantEpoch: 6},
		{name: "a seed that never serves abandons the epoch after the timeout",
			o:         Observation{Now: t0.Add(2 * time.Minute), Status: seeding(), Timing: timing, Members: []Member{reports[0], {Name: "m1"}, reports[2]}},
			wantPhase: cluster.PhaseFencing, wantEpoch: 6},
		{name: "the seed acknowledged: the others rejoin",
			o: Observation{Now: t0.Add(3 * time.Second), Timing: timing, Members: []Member{reports[0], {Name: "m1", Ready: true, ID: "n"}, reports[2]},
				Status: func() Status {
					st := seeding()
					st.Directive.Ack = &cluster.DirectiveResult{Member: "m1", MemberID: "n", ClusterID: "cid", Revision: 5}
					return st
				}()},
			wantPhase: cluster.PhaseRejoining, wantEpoch: 5, wantSeed: "m1"},
		{name: "every member a ready voter: retired",
			o: Observation{Now: t0.Add(9 * time.Second), Timing: timing,
				Members: []Member{{Name: "m0", Ready: true, ID: "x"}, {Name: "m1", Ready: true, ID: "n"}, {Name: "m2", Ready: true, ID: "y"}},
				Status: func() Status {
					st := seeding()
					st.Directive.Phase = cluster.PhaseRejoining
					st.Voters = []cluster.Voter{{ID: "x", Name: "m0"}, {ID: "n", Name: "m1"}, {ID: "y", Name: "m2"}}
					return st
				}()}},
		{name: "a status rebuilt after it was lost: the new epoch is above every epoch a member carried out",
			o: Observation{Now: t0.Add(10 * time.Second), Timing: timing, Status: Status{ClusterID: "cid", Voters: voters3, QuorumLostSince: t0},
				Members: []Member{stopped("m0", func() *cluster.Report { r := disk("m0", "a", 2, 9, 5); r.AppliedEpoch = 7; return r }()), reports[1], reports[2]}},
			wantPhase: cluster.PhaseFencing, wantEpoch: 8},
		{name: "the recovered cluster loses its quorum for the grace: a new epoch",
			o: Observation{Now: t0.Add(20 * time.Second), Timing: timing, Members: []Member{{Name: "m0"}, {Name: "m1"}, {Name: "m2"}},
				Status: rejoiningLost(t0.Add(10 * time.Second))},
			wantPhase: cluster.PhaseFencing, wantEpoch: 6},
		{name: "the recovered cluster's only voter wiped while the others rejoin: a new epoch at once",
			o: Observation{Now: t0.Add(12 * time.Second), Timing: timing,
				Members: []Member{{Name: "m0", Report: atNow(emptyDisk("m0"), t0.Add(12*time.Second))}, {Name: "m1", Report: atNow(emptyDisk("m1"), t0.Add(12*time.Second))},
					{Name: "m2", Report: atNow(emptyDisk("m2"), t0.Add(12*time.Second))}},
				Status: rejoiningLost(t0.Add(10 * time.Second))},
			wantPhase: cluster.PhaseFencing, wantEpoch: 6},
		{name: "the recovered cluster's only voter silent while the others rejoin: the grace is waited",
			o: Observation{Now: t0.Add(12 * time.Second), Timing: timing,
				Members: []Member{{Name: "m0", Report: atNow(emptyDisk("m0"), t0.Add(12*time.Second))}, {Name: "m1"}, {Name: "m2", Report: atNow(emptyDisk("m2"), t0.Add(12*time.Second))}},
				Status:  rejoiningLost(t0.Add(10 * time.Second))},
			wantPhase: cluster.PhaseRejoining, wantEpoch: 5, wantSeed: "m1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.o)
			got := d.Status.Directive
			if tt.wantPhase == "" {
				if got != nil {
					t.Fatalf("directive %+v, want none", got)
				}
				return
			}
			if got == nil || got.Phase != tt.wantPhase || got.Epoch != tt.wantEpoch || got.Seed != tt.wantSeed || got.Reason == "" && got.Phase != cluster.PhaseFencing {
				t.Fatalf("directive %+v; want phase %s epoch %d seed %q", got, tt.wantPhase, tt.wantEpoch, tt.wantSeed)
			}
			if d.Status.LastEpoch < got.Epoch {
				t.Fatalf("LastEpoch %d below the directive's %d", d.Status.LastEpoch, got.Epoch)
			}
			if d.Status.Waiting == "" {
				t.Fatalf("no wait reason in the status: %+v", d.Status)
			}
		})
	}
}

// A new cluster restored from a backup (spec.bootstrap.restore) whose seed never serves:
// the new epoch keeps the target, and restores it even though the members now hold data
// (a partial restore) and the backup store holds a newer revision.
func TestUnreachedRestoreTargetSurvivesANewEpoch(t *testing.T) {
	timing := Timing{Grace: 5 * time.Second, ReportTimeout: 10 * time.Second, SeedTimeout: time.Minute}
	target := cluster.RestoreTarget{Store: "s3://b/p", Revision: 42}
	seeding := Status{LastEpoch: 1, Directive: &cluster.Directive{Epoch: 1, Phase: cluster.PhaseSeeding, Mode: cluster.RecoverFromBackup,
		Seed: "m0", Restore: &target, IssuedAt: t0, PhaseSince: t0}}
	members := []Member{{Name: "m0"}, {Name: "m1"}, {Name: "m2"}}
	d := Decide(Observation{Now: t0.Add(2 * time.Minute), Status: seeding, Members: members, Timing: timing,
		Backup: Backup{Configured: true, Revision: 900}})
	got := d.Status.Directive
	if got == nil || got.Epoch != 2 || got.Phase != cluster.PhaseFencing || got.Restore == nil || *got.Restore != target {
		t.Fatalf("after the seed timed out: %+v, want epoch 2 fencing with the target kept", got)
	}
	// m0's dir holds the partial restore, and records that the new epoch's restore supersedes it.
	reports := []Member{stopped("m0", disk("m0", "a", 1, 3, 40)), stopped("m1", emptyDisk("m1")), stopped("m2", emptyDisk("m2"))}
	reports[0].Report.SupersededBy = 2
	for i := range reports {
		reports[i].StoppedSince, reports[i].Report.At = t0.Add(2*time.Minute), t0.Add(2*time.Minute+time.Second)
	}
	d = Decide(Observation{Now: t0.Add(2*time.Minute + 2*time.Second), Status: d.Status, Members: reports, Timing: timing,
		Backup: Backup{Configured: true, Revision: 900}})
	got = d.Status.Directive
	if got == nil || got.Phase != cluster.PhaseSeeding || got.Mode != cluster.RecoverFromBackup || got.Restore == nil || *got.Restore != target {
		t.Fatalf("fenced: %+v, want seeding from the backup at the same target", got)
	}

	// Once the seed served (acknowledged), the target was reached: a later epoch chooses
	// from what the members hold, as any recovery does.
	acked := seeding
	dir := *acked.Directive
	dir.Phase, dir.Ack = cluster.PhaseRejoining, &cluster.DirectiveResult{Member: "m0", MemberID: "n", ClusterID: "c", Revision: 42}
	acked.Directive, acked.ClusterID, acked.Voters, acked.QuorumLostSince = &dir, "c", []cluster.Voter{{ID: "n", Name: "m0"}}, t0
	d = Decide(Observation{Now: t0.Add(time.Minute), Status: acked, Members: members, Timing: timing})
	if got := d.Status.Directive; got == nil || got.Epoch != 2 || got.Restore != nil {
		t.Fatalf("a reached target carried into a new epoch: %+v", got)
	}
}

func TestStartRestore(t *testing.T) {
	timing := Timing{Grace: 5 * time.Second, ReportTimeout: 10 * time.Second, SeedTimeout: time.Minute}
	target := cluster.RestoreTarget{Revision: 42}
	voters := []cluster.Voter{{ID: "a", Name: "m0"}, {ID: "b", Name: "m1"}, {ID: "c", Name: "m2"}}
	healthy := Status{ClusterID: "c1", Voters: voters, LastEpoch: 3}
	serving := []Member{{Name: "m0", Ready: true, ID: "a"}, {Name: "m1", Ready: true, ID: "b"}, {Name: "m2", Ready: true, ID: "c"}}
	serving[1].Report = &cluster.Report{AppliedEpoch: 7}

	d, err := StartRestore(Observation{Now: t0, Status: healthy, Members: serving, Timing: timing}, target)
	if err != nil {
		t.Fatal(err)
	}
	got := d.Status.Directive
	if got == nil || got.Phase != cluster.PhaseFencing || got.Epoch != 8 || got.Restore == nil || *got.Restore != target || d.Event == "" {
		t.Fatalf("restore requested: %+v (event %q), want epoch 8 (above every applied epoch) fencing with the target", got, d.Event)
	}
	if fenced := got.Fenced([]string{"m0", "m1", "m2"}); len(fenced) != 3 {
		t.Fatalf("fenced %v, want every member", fenced)
	}

	// Fenced with every member's data intact (a majority that could re-form the quorum,
	// which an ordinary recovery would withdraw for), each dir recording that the restore
	// supersedes it: the target is restored all the same.
	reports := []Member{stopped("m0", disk("m0", "a", 2, 90, 80)), stopped("m1", disk("m1", "b", 2, 90, 80)), stopped("m2", disk("m2", "c", 2, 90, 80))}
	for i := range reports {
		reports[i].StoppedSince, reports[i].Report.At = t0.Add(time.Second), t0.Add(2*time.Second)
		reports[i].Report.SupersededBy = 8
	}
	d = Decide(Observation{Now: t0.Add(3 * time.Second), Status: d.Status, Members: reports, Timing: timing, Backup: Backup{Configured: true, Revision: 80}})
	if got := d.Status.Directive; got == nil || got.Phase != cluster.PhaseSeeding || got.Mode != cluster.RecoverFromBackup || got.Restore == nil || *got.Restore != target {
		t.Fatalf("fenced: %+v, want seeding from the backup at the target", got)
	}

	if _, err := StartRestore(Observation{Now: t0, Status: d.Status, Members: reports, Timing: timing}, target); err == nil {
		t.Fatal("a second restore was accepted while a directive is in progress")
	}
}

// TestCancelRestore: a restore is withdrawn only while the members it would restart hold
// their own data and the seed has not served; then the members restart on their data.
func TestCancelRestore(t *testing.T) {
	timing := Timing{Grace: 5 * time.Second, ReportTimeout: 10 * time.Second, SeedTimeout: time.Minute}
	target := cluster.RestoreTarget{Revision: 42, Timeline: 1}
	restoreIn := func(phase, seed string) Status {
		return Status{ClusterID: "cid", Voters: voters3, LastEpoch: 4, Directive: &cluster.Directive{Epoch: 4, Phase: phase,
			Seed: seed, Mode: cluster.RecoverFromBackup, Restore: &target, IssuedAt: t0, PhaseSince: t0}}
	}
	intact := func(name, id string) Member {
		r := disk(name, id, 2, 90, 80)
		r.Formed = true
		return stopped(name, r)
	}
	serving := func(name, id string) Member {
		return Member{Name: name, ID: id, Ready: true, Report: &cluster.Report{Name: name, At: t0, Source: cluster.ReportFromEtcd, Serving: true,
			DataValid: true, MemberID: id, ClusterID: "cid", Owner: name, Formed: true}}
	}
	// A restore an earlier epoch of the same restore left in m1's dir: valid, with m1's
	// member ID and the cluster's ID (the same token and peer URL make the same IDs), never served.
	leftover := stopped("m1", disk("m1", "b", 1, 3, 30))
	leftover.Report.AppliedEpoch = 3
	movedAside := stopped("m0", emptyDisk("m0"))
	restored := stopped("m0", &cluster.Report{Name: "m0", At: t0.Add(time.Second), Source: cluster.ReportFromDisk, DataValid: true,
		MemberID: "n", ClusterID: "new", Owner: "m0", AppliedEpoch: 4})
	notReported := intact("m1", "b")
	notReported.StoppedSince = t0.Add(5 * time.Second)
	recovery := restoreIn(cluster.PhaseSeeding, "m1")
	recovery.Directive.Restore = nil
	acked := restoreIn(cluster.PhaseRejoining, "m0")
	acked.Directive.Ack = &cluster.DirectiveResult{Member: "m0", ClusterID: "new", Revision: 42}

	tests := []struct {
		name    string
		status  Status
		members []Member
		wantErr string // "" : accepted
	}{
		{"no directive", Status{ClusterID: "cid", Voters: voters3}, []Member{intact("m0", "a"), intact("m1", "b"), intact("m2", "c")}, "no restore is in progress"},
		{"a quorum-loss recovery", recovery, []Member{intact("m0", "a"), intact("m1", "b"), intact("m2", "c")}, "not a restore"},
		{"the seed serves the restored cluster", acked, []Member{restored, intact("m1", "b"), intact("m2", "c")}, "already serves the restored cluster"},
		{"the seed restored the target, not acknowledged yet", restoreIn(cluster.PhaseSeeding, "m0"), []Member{restored, intact("m1", "b"), intact("m2", "c")}, "has restored it"},
		{"fencing, every member still serving", restoreIn(cluster.PhaseFencing, ""), []Member{serving("m0", "a"), serving("m1", "b"), serving("m2", "c")}, ""},
		{"seeding, the others intact", restoreIn(cluster.PhaseSeeding, "m0"), []Member{movedAside, intact("m1", "b"), intact("m2", "c")}, ""},
		{"seeding, the seed's data intact does not count", restoreIn(cluster.PhaseSeeding, "m0"), []Member{intact("m0", "a"), intact("m1", "b"), stopped("m2", emptyDisk("m2"))}, "only 1 of the 3 voters (m1)"},
		{"seeding, another member lost its data", restoreIn(cluster.PhaseSeeding, "m0"), []Member{movedAside, intact("m1", "b"), stopped("m2", emptyDisk("m2"))}, "the seed m0 moved its data aside"},
		{"fencing again, an earlier epoch's unserved restore does not count", restoreIn(cluster.PhaseFencing, ""), []Member{intact("m0", "a"), leftover, stopped("m2", emptyDisk("m2"))}, "only 1 of the 3 voters (m0)"},
		{"seeding, a member not reported since it stopped", restoreIn(cluster.PhaseSeeding, "m0"), []Member{movedAside, notReported, intact("m2", "c")}, "not yet known: m1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Observation{Now: t0.Add(10 * time.Second), Status: tt.status, Members: tt.members, Timing: timing}
			d, err := CancelRestore(o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tt.wantErr)
				}
				if !reflect.DeepEqual(d.Status, tt.status) {
					t.Fatalf("a refused cancel changed the status: %+v", d.Status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := d.Status.Directive
			if got == nil || got.Epoch != 5 || got.Phase != cluster.PhaseFencing || got.Restore != nil || got.Cancels != 4 || d.Event == "" {
				t.Fatalf("cancelled: %+v (event %q), want epoch 5 fencing without a target, cancelling epoch 4", got, d.Event)
			}
			// Once every member stopped and reported from disk, the voters restart on their data.
			after := []Member{intact("m0", "a"), intact("m1", "b"), intact("m2", "c")}
			if tt.members[0].Report.DataEmpty {
				after[0] = movedAside
			}
			for i := range after {
				after[i].StoppedSince, after[i].Report.At = t0.Add(11*time.Second), t0.Add(12*time.Second)
			}
			d = Decide(Observation{Now: t0.Add(13 * time.Second), Status: d.Status, Members: after, Timing: timing, Backup: Backup{Configured: true, Revision: 80}})
			if d.Status.Directive != nil || d.Status.ClusterID != "cid" {
				t.Fatalf("after the cancel: %+v, want the directive withdrawn and cluster cid kept", d.Status)
			}
		})
	}
}

// TestRestoreWaitsForSupersededRecords is the table of when a restore's seed may act, and
// when the cancel of a restore lets the members restart: each member's data dir records that
// the restore supersedes its data first (member.SupersededRecord), and the cancel clears
// those records first.
func TestRestoreWaitsForSupersededRecords(t *testing.T) {
	timing := Timing{Grace: 5 * time.Second, ReportTimeout: 10 * time.Second, SeedTimeout: time.Minute}
	target := cluster.RestoreTarget{Revision: 42, Timeline: 1}
	restore := Status{ClusterID: "cid", Voters: voters3, LastEpoch: 5,
		Directive: &cluster.Directive{Epoch: 5, Phase: cluster.PhaseFencing, Restore: &target, IssuedAt: t0, PhaseSince: t0}}
	cancel := Status{ClusterID: "cid", Voters: voters3, LastEpoch: 5,
		Directive: &cluster.Directive{Epoch: 5, Phase: cluster.PhaseFencing, Cancels: 4, IssuedAt: t0, PhaseSince: t0}}
	marked := func(name, id string, epoch int64) Member {
		r := disk(name, id, 2, 9, 5)
		r.Formed, r.SupersededBy = true, epoch
		return stopped(name, r)
	}
	unmarked := func(name, id string) Member { return marked(name, id, 0) }
	tests := []struct {
		name      string
		status    Status
		members   []Member
		now       time.Time // t0+3s unless set
		wantPhase string    // "" = withdrawn
		waiting   string
	}{
		{name: "every member's dir records that the restore supersedes its data: the seed restores", status: restore,
			members: []Member{marked("m0", "a", 5), marked("m1", "b", 5), marked("m2", "c", 5)}, wantPhase: cluster.PhaseSeeding},
		{name: "an empty dir needs no record", status: restore,
			members: []Member{marked("m0", "a", 5), marked("m1", "b", 5), stopped("m2", emptyDisk("m2"))}, wantPhase: cluster.PhaseSeeding},
		{name: "a voter whose dir does not record it yet is waited for, however long: the seed would restore beside its data", status: restore, now: t0.Add(time.Hour),
			members: []Member{marked("m0", "a", 5), unmarked("m1", "b"), marked("m2", "c", 5)}, wantPhase: cluster.PhaseFencing, waiting: "waiting for voters m1 to record"},
		{name: "a record of an earlier epoch is not this restore's", status: restore,
			members: []Member{marked("m0", "a", 5), marked("m1", "b", 4), marked("m2", "c", 5)}, wantPhase: cluster.PhaseFencing, waiting: "waiting for voters m1 to record"},
		{name: "a member that is no voter and does not record it: waited for within the report timeout", status: restore,
			members: []Member{marked("m0", "a", 5), marked("m1", "b", 5), marked("m2", "c", 5), unmarked("m3", "d")}, wantPhase: cluster.PhaseFencing, waiting: "m3"},
		{name: "a member that is no voter and does not record it: past the report timeout it counts as holding nothing", status: restore, now: t0.Add(11 * time.Second),
			members: []Member{marked("m0", "a", 5), marked("m1", "b", 5), marked("m2", "c", 5), unmarked("m3", "d")}, wantPhase: cluster.PhaseSeeding},
		{name: "the cancel of a restore waits for a voter to clear its record", status: cancel, now: t0.Add(time.Hour),
			members: []Member{unmarked("m0", "a"), marked("m1", "b", 4), unmarked("m2", "c")}, wantPhase: cluster.PhaseFencing, waiting: "clear"},
		{name: "the cancel of a restore: every record cleared, a majority holds its data: withdrawn, the voters restart on it", status: cancel,
			members: []Member{unmarked("m0", "a"), unmarked("m1", "b"), unmarked("m2", "c")}},
		{name: "the cancel of a restore: a newer restore's record is not cleared by it, and counts as gone", status: cancel,
			members: []Member{unmarked("m0", "a"), marked("m1", "b", 6), marked("m2", "c", 6)}, wantPhase: cluster.PhaseSeeding},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = t0.Add(3 * time.Second)
			}
			d := Decide(Observation{Now: now, Status: tt.status, Members: tt.members, Timing: timing, Backup: Backup{Configured: true, Revision: 80}})
			got := d.Status.Directive
			switch {
			case tt.wantPhase == "" && got != nil:
				t.Fatalf("directive %+v, want it withdrawn", got)
			case tt.wantPhase != "" && (got == nil || got.Phase != tt.wantPhase):
				t.Fatalf("directive %+v, want phase %s", got, tt.wantPhase)
			case !strings.Contains(d.Status.Waiting, tt.waiting):
				t.Fatalf("waiting %q, want it to say %q", d.Status.Waiting, tt.waiting)
			}
		})
	}
}

func TestStatusLostWithBackupsRestores(t *testing.T) {
	members := []Member{stopped("m0", emptyDisk("m0")), stopped("m1", emptyDisk("m1")), stopped("m2", emptyDisk("m2"))}
	o := Observation{Now: t0, Members: members, Backup: Backup{Configured: true, Revision: 40}, Timing: Timing{Grace: time.Second}}
	d := Decide(o)
	o.Status, o.Now = d.Status, t0.Add(2*time.Second)
	d = Decide(o)
	if d.Status.Directive == nil || d.Status.Directive.Phase != cluster.PhaseFencing {
		t.Fatalf("no recovery started: %+v", d.Status)
	}
	for i := range o.Members {
		o.Members[i].Report.At = t0.Add(3 * time.Second)
	}
	o.Status, o.Now = d.Status, t0.Add(3*time.Second)
	d = Decide(o)
	if d.Status.Directive == nil || d.Status.Directive.Mode != cluster.RecoverFromBackup {
		t.Fatalf("not restored from backup: %+v", d.Status.Directive)
	}
	// Without backups the same cluster is a new one being bootstrapped: nothing happens.
	o = Observation{Now: t0.Add(time.Hour), Members: members, Backup: Backup{Configured: true}, Timing: Timing{Grace: time.Second}}
	if d := Decide(o); d.Status.Directive != nil || !d.Status.QuorumLostSince.IsZero() {
		t.Fatalf("a fresh cluster was taken for a lost one: %+v", d.Status)
	}
}

func TestRelocations(t *testing.T) {
	ofOther := func(name, owner string) *cluster.Report {
		r := disk(name, "id-"+owner, 2, 9, 5)
		r.Owner, r.Foreign = owner, "of "+owner
		return r
	}
	swap := Relocations([]Member{{Name: "m0", Report: ofOther("m0", "m1")}, {Name: "m1", Report: ofOther("m1", "m0")}, {Name: "m2", Report: disk("m2", "c", 2, 9, 5)}})
	if len(swap) != 1 || swap[0] != (Relocation{From: "m0", Owner: "m1", Swap: true}) {
		t.Fatalf("swap: %+v", swap)
	}
	move := Relocations([]Member{{Name: "m0", Report: ofOther("m0", "m1")}, {Name: "m1", Report: emptyDisk("m1")}})
	if len(move) != 1 || move[0] != (Relocation{From: "m0", Owner: "m1"}) {
		t.Fatalf("move: %+v", move)
	}
	// m1 still holds its own data: m0's copy is stale and is not moved over it.
	if got := Relocations([]Member{{Name: "m0", Report: ofOther("m0", "m1")}, {Name: "m1", Report: disk("m1", "b", 2, 9, 5)}}); len(got) != 0 {
		t.Fatalf("moved over the owner's own data: %+v", got)
	}
}

func TestRelocated(t *testing.T) {
	now := t0.Add(time.Minute)
	moved := []Relocation{{From: "m0", Owner: "m1", Swap: true}}
	members := []Member{{Name: "m0", Report: disk("m0", "a", 2, 9, 5)}, {Name: "m1", Report: disk("m1", "b", 3, 7, 5)}}
	seeding := func(ack *cluster.DirectiveResult) Status {
		return Status{LastEpoch: 4, QuorumLostSince: t0, Directive: &cluster.Directive{Epoch: 4, Phase: cluster.PhaseSeeding,
			Mode: cluster.RecoverFromSurvivor, Seed: "m0", PhaseSince: t0, Ack: ack}}
	}
	// The seed was chosen from what the dirs held before the move: chosen again, in a new epoch.
	d := Relocated(Observation{Now: now, Members: members}, seeding(nil), moved)
	if dir := d.Status.Directive; dir == nil || dir.Epoch != 5 || dir.Phase != cluster.PhaseFencing || dir.Seed != "" || !d.Status.QuorumLostSince.Equal(now) {
		t.Fatalf("a seed chosen before a move was kept: %+v", d.Status)
	}
	// A seed that serves, or whose data (here found in m1's dir, moved back) records that it
	// carried the directive out, formed the cluster the others rejoin: a move does not undo it.
	ack := &cluster.DirectiveResult{Member: "m0", MemberID: "a", ClusterID: "cid"}
	if d := Relocated(Observation{Now: now, Members: members}, seeding(ack), moved); d.Status.Directive.Epoch != 4 {
		t.Fatalf("a seed that serves was abandoned: %+v", d.Status.Directive)
	}
	acted := disk("m1", "a2", 1, 3, 5)
	acted.Owner, acted.AppliedEpoch = "m0", 4
	if d := Relocated(Observation{Now: now, Members: []Member{{Name: "m0", Report: emptyDisk("m0")}, {Name: "m1", Report: acted}}}, seeding(nil), moved); d.Status.Directive.Epoch != 4 {
		t.Fatalf("a seed that carried the directive out was abandoned: %+v", d.Status.Directive)
	}
	// Still fencing: the reports are awaited anew (the caller stops the moved members again);
	// the grace of a lost quorum starts again.
	fencing := Status{QuorumLostSince: t0, Directive: &cluster.Directive{Epoch: 2, Phase: cluster.PhaseFencing, PhaseSince: t0}}
	if d := Relocated(Observation{Now: now, Members: members}, fencing, moved); d.Status.Directive.Epoch != 2 || !d.Status.QuorumLostSince.Equal(now) {
		t.Fatalf("fencing: %+v", d.Status)
	}
	if d := Relocated(Observation{Now: now, Members: members}, Status{}, moved); !d.Status.QuorumLostSince.IsZero() {
		t.Fatalf("a quorate cluster was marked as having lost its quorum: %+v", d.Status)
	}
}

func TestRebuildStatus(t *testing.T) {
	list := []cluster.LiveMember{{ID: "a", Name: "m0"}, {ID: "b", Name: "m1"}, {ID: "x", Name: "m3", IsLearner: true}}
	tests := []struct {
		name       string
		dirs       []DataDir
		wantID     string
		wantVoters string
		wantEpoch  int64
	}{
		{name: "nothing formed: no cluster", dirs: []DataDir{{Member: "m0", Token: "tok", WALMemberID: "a"}, {Member: "m1"}}},
		{name: "another cluster's token: not ours", dirs: []DataDir{{Member: "m0", Token: "other", ClusterID: "c9", Owner: "m0"}}},
		{name: "the member list applied furthest names the voters; learners are none",
			dirs: []DataDir{
				{Member: "m0", Token: "tok", Owner: "m0", ClusterID: "c1", WALMemberID: "a", Applied: 9, Members: list},
				{Member: "m1", Token: "tok", Owner: "m1", ClusterID: "c1", WALMemberID: "b", Applied: 5, Members: append(list[:2:2], cluster.LiveMember{ID: "c", Name: "m2"})}},
			wantID: "c1", wantVoters: "a/m0 b/m1"},
		{name: "damaged and swapped dirs still say the cluster formed; without member lists every member counts, by name where unproven",
			dirs: []DataDir{
				{Member: "m0", Token: "tok", Owner: "m1", ClusterID: "c1", WALMemberID: "b"},
				{Member: "m1", Token: "tok", Owner: "m1", ClusterID: "c1", MemberID: "b"},
				{Member: "m2", Token: "tok", Owner: "m2", ClusterID: "c1", WALMemberID: "c", Epoch: 2}},
			wantID: "c1", wantVoters: "/m0 /m1 c/m2", wantEpoch: 2},
		{name: "dirs whose data a restore superseded count as empty: no cluster, the restore's epoch kept (its seed's dir was lost)",
			dirs: []DataDir{
				{Member: "m0", Token: "tok", Owner: "m0", ClusterID: "old", WALMemberID: "a", Superseded: 4, Applied: 9, Members: list},
				{Member: "m1"},
				{Member: "m2", Token: "tok", Owner: "m2", ClusterID: "old", WALMemberID: "c", Superseded: 4, Applied: 9, Members: list}},
			wantEpoch: 4},
		{name: "beside superseded dirs, the restored seed's dir names the cluster and its voters",
			dirs: []DataDir{
				{Member: "m0", Token: "tok", Owner: "m0", ClusterID: "old", WALMemberID: "a", Superseded: 4, Applied: 99, Members: list},
				{Member: "m1", Token: "tok", Owner: "m1", ClusterID: "new", WALMemberID: "n", Epoch: 4, Applied: 3, Members: []cluster.LiveMember{{ID: "n", Name: "m1"}}},
				{Member: "m2", Token: "tok", Owner: "m2", ClusterID: "old", WALMemberID: "c", Superseded: 4, Applied: 99, Members: list}},
			wantID: "new", wantVoters: "n/m1", wantEpoch: 4},
		{name: "a superseded record the dir carried out since (it rejoined the restored cluster) marks nothing",
			dirs: []DataDir{
				{Member: "m0", Token: "tok", Owner: "m0", ClusterID: "c1", WALMemberID: "a", Epoch: 4, Superseded: 4, Applied: 9, Members: list}},
			wantID: "c1", wantVoters: "a/m0 b/m1", wantEpoch: 4},
		{name: "the cluster of the newest recovery wins",
			dirs: []DataDir{
				{Member: "m0", Token: "tok", Owner: "m0", ClusterID: "old", WALMemberID: "a", Epoch: 1},
				{Member: "m1", Token: "tok", Owner: "m1", ClusterID: "new", WALMemberID: "n", Epoch: 3}},
			wantID: "new", wantVoters: "/m0 n/m1 /m2", wantEpoch: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := RebuildStatus("tok", []string{"m0", "m1", "m2"}, tt.dirs)
			var voters []string
			for _, v := range st.Voters {
				voters = append(voters, v.ID+"/"+v.Name)
			}
			if st.ClusterID != tt.wantID || strings.Join(voters, " ") != tt.wantVoters || st.LastEpoch != tt.wantEpoch {
				t.Fatalf("RebuildStatus = cluster %q voters %q epoch %d; want %q %q %d", st.ClusterID, strings.Join(voters, " "), st.LastEpoch, tt.wantID, tt.wantVoters, tt.wantEpoch)
			}
		})
	}
}

// A formed cluster that lost its quorum before the status recorded it is adopted from the
// members' fresh reports, and recovered; stale reports adopt nothing.
func TestUnrecordedFormedClusterIsAdopted(t *testing.T) {
	timing := Timing{Grace: time.Second, ReportTimeout: 10 * time.Second}
	formed := func(at time.Time) *cluster.Report {
		r := disk("m0", "a", 2, 9, 5)
		r.At, r.Formed = at, true
		r.Members = []cluster.LiveMember{{ID: "a", Name: "m0"}, {ID: "b", Name: "m1"}}
		return r
	}
	members := []Member{{Name: "m0", Report: formed(t0)}, {Name: "m1", Report: emptyDisk("m1")}}
	d := Decide(Observation{Now: t0.Add(time.Second), Members: members, Timing: timing})
	if d.Status.ClusterID != "cid" || len(d.Status.Voters) != 2 || d.Event == "" {
		t.Fatalf("not adopted: %+v (event %q)", d.Status, d.Event)
	}
	d = Decide(Observation{Now: t0.Add(3 * time.Second), Status: d.Status, Members: members, Timing: timing})
	if d.Status.Directive == nil {
		t.Fatalf("the adopted cluster's lost quorum starts no recovery: %+v", d.Status)
	}
	if d := Decide(Observation{Now: t0.Add(time.Minute), Members: members, Timing: timing}); d.Status.ClusterID != "" {
		t.Fatalf("adopted from a stale report: %+v", d.Status)
	}
}

// Each recovery withdrawn because a majority still held its data doubles the time the
// restarted voters get to re-form the quorum: restarts slower than the grace never loop.
func TestWithdrawnRecoveriesBackOff(t *testing.T) {
	timing := Timing{Grace: 5 * time.Second, ReportTimeout: 10 * time.Second}
	members := []Member{stopped("m0", disk("m0", "a", 2, 9, 5)), stopped("m1", disk("m1", "b", 2, 9, 5)), stopped("m2", emptyDisk("m2"))}
	st := Status{ClusterID: "cid", Voters: voters3, LastEpoch: 1,
		Directive: &cluster.Directive{Epoch: 1, Phase: cluster.PhaseFencing, IssuedAt: t0, PhaseSince: t0}}
	d := Decide(Observation{Now: t0.Add(2 * time.Second), Status: st, Members: members, Timing: timing})
	if d.Status.Directive != nil || d.Status.Withdrawn != 1 {
		t.Fatalf("not withdrawn: %+v", d.Status)
	}
	restarting := []Member{{Name: "m0"}, {Name: "m1"}, {Name: "m2"}}
	at := t0.Add(2 * time.Second)
	if d := Decide(Observation{Now: at.Add(8 * time.Second), Status: d.Status, Members: restarting, Timing: timing}); d.Status.Directive != nil {
		t.Fatalf("a new recovery within the doubled grace: %+v", d.Status.Directive)
	}
	if d := Decide(Observation{Now: at.Add(11 * time.Second), Status: d.Status, Members: restarting, Timing: timing}); d.Status.Directive == nil {
		t.Fatalf("no recovery after the doubled grace: %+v", d.Status)
	}
}

// TestDecideWithoutDirective is the table of whether a recovery starts: each row names the
// case it shows. The grace is for voters that may come back with their data; once those
// cannot form a quorum even if all of them return, the recovery starts at once.
func TestDecideWithoutDirective(t *testing.T) {
	timing := Timing{Grace: 30 * time.Second, ReportTimeout: 10 * time.Second, ReportCurrent: 3 * time.Second}
	lost := Status{ClusterID: "cid", Voters: voters3, QuorumLostSince: t0}
	list := []cluster.LiveMember{{ID: "a", Name: "m0"}, {ID: "b", Name: "m1"}, {ID: "c", Name: "m2"}}
	// leader is m0's etcd answering its status (it runs on its data) without a quorum.
	leader := Member{Name: "m0", ID: "a", Report: &cluster.Report{Name: "m0", At: t0.Add(time.Second), Source: cluster.ReportFromEtcd, Serving: true,
		DataValid: true, MemberID: "a", ClusterID: "cid", Owner: "m0", Members: list}}
	wiped := func(name string) Member { return Member{Name: name, Report: emptyDisk(name)} }
	killed := func(name, id string) Member { return Member{Name: name, Report: disk(name, id, 2, 9, 5)} }
	at := func(m Member, when time.Time) Member { r := *m.Report; r.At = when; m.Report = &r; return m }
	five := append(voters3, cluster.Voter{ID: "d", Name: "m3"}, cluster.Voter{ID: "e", Name: "m4"})
	lost5 := Status{ClusterID: "cid", Voters: five, QuorumLostSince: t0}
	leader5 := leader
	leader5.Report = &cluster.Report{}
	*leader5.Report = *leader.Report
	leader5.Report.Members = append(list, cluster.LiveMember{ID: "d", Name: "m3"}, cluster.LiveMember{ID: "e", Name: "m4"})
	tests := []struct {
		name    string
		status  Status
		members []Member
		now     time.Time // t0+3s unless set
		want    Case
		// wantEpoch is the epoch of the directive issued (0: not checked).
		wantEpoch int64
	}{
		{name: "a majority serves", status: lost, want: CaseQuorate,
			members: []Member{{Name: "m0", ID: "a", Ready: true}, {Name: "m1", ID: "b", Ready: true}, wiped("m2")}},
		{name: "no voter recorded: bootstrapping", status: Status{}, want: CaseNotFormed,
			members: []Member{{Name: "m0"}, {Name: "m1"}, {Name: "m2"}}},
		{name: "two followers wiped, the leader holds everything: proven at once", status: lost, want: CaseQuorumLossProven,
			members: []Member{leader, wiped("m1"), wiped("m2")}},
		{name: "every member wiped: proven at once", status: lost, want: CaseQuorumLossProven,
			members: []Member{wiped("m0"), wiped("m1"), wiped("m2")}},
		{name: "one follower wiped, the other killed with its data: it may come back, the grace runs", status: lost, want: CaseQuorumLossWithinGrace,
			members: []Member{leader, wiped("m1"), killed("m2", "c")}},
		{name: "one follower wiped, the other silent (no report): never counted as lost", status: lost, want: CaseQuorumLossWithinGrace,
			members: []Member{leader, wiped("m1"), {Name: "m2"}}},
		{name: "a data-gone report made before the quorum was lost proves nothing", status: lost, want: CaseQuorumLossWithinGrace,
			members: []Member{leader, wiped("m1"), at(wiped("m2"), t0.Add(-time.Second))}},
		{name: "a data-gone report that is not current proves nothing (the dir may have changed since)", status: lost, now: t0.Add(20 * time.Second), want: CaseQuorumLossWithinGrace,
			members: []Member{at(leader, t0.Add(19*time.Second)), at(wiped("m1"), t0.Add(15*time.Second)), at(wiped("m2"), t0.Add(19*time.Second))}},
		{name: "a data-gone report dated after now (a clock ahead) proves nothing", status: lost, want: CaseQuorumLossWithinGrace,
			members: []Member{leader, wiped("m1"), at(wiped("m2"), t0.Add(5*time.Second))}},
		{name: "another member silent: it may hold the wiped voters' data", status: lost, want: CaseQuorumLossWithinGrace,
			members: []Member{{Name: "m0"}, wiped("m1"), wiped("m2")}},
		{name: "a report that is not the member's own sidecar's proves nothing", status: lost, want: CaseQuorumLossWithinGrace,
			members: []Member{leader, wiped("m1"), {Name: "m2", Report: emptyDisk("m9")}}},
		{name: "an empty report from etcd (not from disk) proves nothing", status: lost, want: CaseQuorumLossWithinGrace,
			members: []Member{leader, wiped("m1"), func() Member { m := wiped("m2"); m.Report.Source = cluster.ReportFromEtcd; return m }()}},
		{name: "swapped dirs: each voter's data is in the other's dir, nothing is gone", status: lost, want: CaseQuorumLossWithinGrace,
			members: []Member{leader,
				{Name: "m1", Report: func() *cluster.Report {
					r := disk("m1", "c", 2, 9, 5)
					r.Owner, r.Foreign = "m2", "it records member m2"
					return r
				}()},
				{Name: "m2", Report: func() *cluster.Report {
					r := disk("m2", "b", 2, 9, 5)
					r.Owner, r.Foreign = "m1", "it records member m1"
					return r
				}()}}},
		{name: "a wiped voter's data is in another member's dir: not gone (that member's own data is)", status: lost, want: CaseQuorumLossWithinGrace,
			members: []Member{leader, {Name: "m1", Report: func() *cluster.Report {
				r := disk("m1", "c", 2, 9, 5)
				r.Owner, r.Foreign = "m2", "it records member m2"
				return r
			}()},
				wiped("m2")}},
		{name: "damaged data proves nothing (a read may fail for a while)", status: lost, want: CaseQuorumLossWithinGrace,
			members: []Member{leader, wiped("m1"), {Name: "m2", Report: &cluster.Report{Name: "m2", At: t0.Add(time.Second), Source: cluster.ReportFromDisk, Problem: "database page checksum mismatch"}}}},
		{name: "a wiped follower whose replacement began (its dir holds a learner's new data) and another wiped: proven", status: lost, want: CaseQuorumLossProven,
			members: []Member{leader, {Name: "m1", Report: func() *cluster.Report { r := disk("m1", "x", 2, 9, 5); r.Learner = true; return r }()}, wiped("m2")}},
		{name: "five voters, two wiped and two killed: the three that may come back are a majority", status: lost5, want: CaseQuorumLossWithinGrace,
			members: []Member{leader5, wiped("m1"), wiped("m2"), killed("m3", "d"), killed("m4", "e")}},
		{name: "five voters, three wiped: proven", status: lost5, want: CaseQuorumLossProven,
			members: []Member{leader5, wiped("m1"), wiped("m2"), wiped("m3"), killed("m4", "e")}},
		{name: "lost past the grace, not proven: the recovery starts", status: lost, now: t0.Add(31 * time.Second), want: CaseQuorumLossPastGrace,
			members: []Member{leader, killed("m1", "b"), {Name: "m2"}}},
		{name: "no cluster recorded, every dir empty, backups: restored after the grace", status: Status{QuorumLostSince: t0}, now: t0.Add(31 * time.Second), want: CaseStatusLostWithBackups,
			members: []Member{wiped("m0"), wiped("m1"), wiped("m2")}},
		{name: "no cluster recorded (the status lost), every dir empty or holding data a restore superseded, backups: restored after the grace, in a newer epoch",
			status: Status{QuorumLostSince: t0}, now: t0.Add(31 * time.Second), want: CaseStatusLostWithBackups, wantEpoch: 5,
			members: []Member{{Name: "m0", Report: superseded("m0", "a", 4)}, wiped("m1"), {Name: "m2", Report: superseded("m2", "c", 4)}}},
		{name: "no cluster recorded, fresh reports of data a restore superseded: nothing adopted, the grace runs", status: Status{}, want: CaseQuorumLossWithinGrace,
			members: []Member{{Name: "m0", Report: superseded("m0", "a", 4)}, wiped("m1"), {Name: "m2", Report: superseded("m2", "c", 4)}}},
		{name: "two voters whose data a restore superseded (their sidecars report it from disk): gone, proven at once", status: lost, want: CaseQuorumLossProven,
			members: []Member{leader, {Name: "m1", Report: superseded("m1", "b", 4)}, {Name: "m2", Report: superseded("m2", "c", 4)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = t0.Add(3 * time.Second)
			}
			d := Decide(Observation{Now: now, Status: tt.status, Members: tt.members, Timing: timing, Backup: Backup{Configured: true, Revision: 40}})
			if d.Case != tt.want {
				t.Fatalf("case %s, want %s (status %+v)", d.Case, tt.want, d.Status)
			}
			starts := tt.want == CaseQuorumLossProven || tt.want == CaseQuorumLossPastGrace || tt.want == CaseStatusLostWithBackups
			got := d.Status.Directive
			switch {
			case starts && (got == nil || got.Phase != cluster.PhaseFencing || got.Case != string(tt.want) || d.Event == ""):
				t.Fatalf("directive %+v (event %q), want one fencing, recording case %s", got, d.Event, tt.want)
			case !starts && got != nil:
				t.Fatalf("directive %+v issued, want none", got)
			case tt.want == CaseQuorumLossWithinGrace && !strings.Contains(d.Status.Waiting, "recovery starts if it lasts"):
				t.Fatalf("waiting %q, want the grace named", d.Status.Waiting)
			case tt.want == CaseQuorumLossProven && !strings.Contains(got.Reason, "is gone"):
				t.Fatalf("reason %q does not say whose data is gone", got.Reason)
			case tt.wantEpoch != 0 && got.Epoch != tt.wantEpoch:
				t.Fatalf("directive epoch %d, want %d (above every epoch a dir carried out or records superseding it)", got.Epoch, tt.wantEpoch)
			}
		})
	}
}

// A recovery from the backup restores every member at once (Directive.Founders) on its first
// epoch; a new epoch after an abandoned one restores into the seed alone. Founders that do
// not start within the grace of the seed's restore abandon the epoch; a serving founder is
// the restored cluster, never a member that came back beside it.
func TestFounders(t *testing.T) {
	timing := Timing{Grace: 5 * time.Second, ReportTimeout: 10 * time.Second, SeedTimeout: time.Minute, ReportCurrent: 3 * time.Second}
	backup := Backup{Configured: true, Revision: 100}
	fencing := func(c Case) Status {
		return Status{ClusterID: "cid", Voters: voters3, LastEpoch: 5,
			Directive: &cluster.Directive{Epoch: 5, Phase: cluster.PhaseFencing, Case: string(c), IssuedAt: t0, PhaseSince: t0}}
	}
	wiped := []Member{stopped("m0", emptyDisk("m0")), stopped("m1", emptyDisk("m1")), stopped("m2", emptyDisk("m2"))}
	decide := func(st Status, now time.Time, members []Member) Status {
		return Decide(Observation{Now: now, Status: st, Members: members, Backup: backup, Timing: timing}).Status
	}

	seeding := decide(fencing(CaseQuorumLossProven), t0.Add(2*time.Second), wiped)
	d := seeding.Directive
	if d == nil || d.Phase != cluster.PhaseSeeding || d.Mode != cluster.RecoverFromBackup || !reflect.DeepEqual(d.Founders, []string{"m0", "m1", "m2"}) {
		t.Fatalf("every member reported its data gone, the backup holds it: want a restore with every member as a founder, got %+v", d)
	}
	if fenced := d.Fenced([]string{"m0", "m1", "m2"}); len(fenced) != 0 {
		t.Fatalf("founders fenced while the seed restores: %v", fenced)
	}
	if alone := decide(fencing(CaseDirectiveAbandoned), t0.Add(2*time.Second), wiped).Directive; alone.Phase != cluster.PhaseSeeding || len(alone.Founders) != 0 {
		t.Fatalf("a new epoch after an abandoned one: want the seed alone, got %+v", alone)
	}
	if fenced := decide(fencing(CaseDirectiveAbandoned), t0.Add(2*time.Second), wiped).Directive.Fenced([]string{"m0", "m1", "m2"}); len(fenced) != 2 {
		t.Fatalf("the seed restoring alone: want the two others fenced, got %v", fenced)
	}
	silent := append(wiped[:3:3], stopped("m3", nil))
	if late := decide(fencing(CaseQuorumLossProven), t0.Add(11*time.Second), silent).Directive; late.Phase != cluster.PhaseSeeding || len(late.Founders) != 0 {
		t.Fatalf("a member silent past the report timeout: want the seed alone, got %+v", late)
	}

	seed := d.Seed
	report := func(name string, epoch int64, at time.Time, serving bool) Member {
		r := &cluster.Report{Name: name, At: at, AppliedEpoch: epoch, Source: cluster.ReportFromDisk, DataValid: epoch > 0, DataEmpty: epoch == 0, Owner: name}
		if epoch > 0 {
			r.MemberID, r.ClusterID, r.Formed = "id-"+name, "restored", true
		}
		if serving {
			r.Source, r.Serving = cluster.ReportFromEtcd, true
		}
		return Member{Name: name, Report: r}
	}
	others := slices.DeleteFunc([]string{"m0", "m1", "m2"}, func(n string) bool { return n == seed })
	at := t0.Add(3 * time.Second)
	acted := decide(seeding, at, []Member{report(seed, 5, at, false), report(others[0], 0, at, false), report(others[1], 0, at, false)})
	if acted.Directive.Phase != cluster.PhaseSeeding || !acted.Directive.SeedActedAt.Equal(at) || acted.Directive.Ack != nil {
		t.Fatalf("the seed restored, its founders not started: want it waited for (no acknowledgement from the seed's dir alone), got %+v", acted.Directive)
	}
	past := at.Add(8 * time.Second) // the grace, and twice the second the seed's restore took
	if d := decide(acted, past, []Member{report(seed, 5, past, false), report(others[0], 0, past, false), report(others[1], 0, past, false)}).Directive; d.Phase != cluster.PhaseFencing || d.Epoch != 6 || d.Case != string(CaseDirectiveAbandoned) {
		t.Fatalf("no founder started within the grace of the restore: want a new epoch, got %+v", d)
	}
	one := decide(acted, past, []Member{report(seed, 5, past, false), report(others[0], 5, past, false), report(others[1], 0, past, false)}).Directive
	if one.Phase != cluster.PhaseSeeding || one.Epoch != 5 || !slices.Equal(one.Restored, others[:1]) {
		t.Fatalf("a quorum of founders restored: want it waited for, with %s recorded as restored; got %+v", others[0], one)
	}
	// Recorded, a founder stays recorded when its data is lost: it never restores again.
	soon := at.Add(time.Second)
	if d := decide(Status{ClusterID: "cid", Voters: voters3, LastEpoch: 5, Directive: one}, soon, []Member{report(seed, 5, soon, false), report(others[0], 0, soon, false), report(others[1], 0, soon, false)}).Directive; !slices.Equal(d.Restored, others[:1]) {
		t.Fatalf("a recorded founder that lost its data: want it still recorded, got %+v", d)
	}
	serving := decide(acted, past, []Member{report(seed, 0, past, false), report(others[0], 5, past, true), report(others[1], 5, past, false)})
	if d := serving.Directive; d.Phase != cluster.PhaseRejoining || d.Ack == nil || d.Ack.Member != others[0] {
		t.Fatalf("a founder serves the restored cluster (the seed lost its data since): want it acknowledged, got %+v", d)
	}
	want := []cluster.Voter{{ID: "id-" + others[0], Name: others[0]}}
	for _, n := range []string{"m0", "m1", "m2"} {
		if n != others[0] {
			want = append(want, cluster.Voter{Name: n})
		}
	}
	if !reflect.DeepEqual(serving.Voters, want) || serving.ClusterID != "restored" {
		t.Fatalf("voters %+v of cluster %s; want %+v of the restored cluster", serving.Voters, serving.ClusterID, want)
	}
}
