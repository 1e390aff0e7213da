// Package heal holds the cluster-wide healing decisions that whoever runs a cluster (the
// local supervisor, the Kubernetes operator) takes from the members' reports: whether the
// voters have a quorum, when a quorum is lost for good, which source a recovery starts from,
// and how a recovery directive moves through its phases. Everything here is a pure function
// of its observation; the callers observe and act.
package heal

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
)

// Timing bounds the waits of a recovery. Every wait ends: a condition that never comes true
// turns into a new decision.
type Timing struct {
	// Grace is how long the voters' quorum must stay lost before a recovery starts.
	Grace time.Duration
	// ReportTimeout is how long fencing waits for the reports from disk of members that are
	// not voters; those still silent then are taken as holding nothing, and named. Voters
	// are always waited for: one of them may hold the newest log.
	ReportTimeout time.Duration
	// SeedTimeout is how long the seed may take to serve and acknowledge; then a new epoch
	// starts (fenced again, the source chosen again).
	SeedTimeout time.Duration
	// ReportCurrent is how old a member's report may be and still say what its data dir
	// holds now, as evidence that data is gone for good (sidecars report every second; a
	// dir may be swapped after its sidecar last reported).
	ReportCurrent time.Duration
}

// DefaultTiming is the timing of a production cluster.
var DefaultTiming = Timing{Grace: 30 * time.Second, ReportTimeout: 30 * time.Second, SeedTimeout: 10 * time.Minute, ReportCurrent: 3 * time.Second}

// Member is one desired member as observed now.
type Member struct {
	Name string
	// Ready: the member serves linearizable reads. ID and Learner come from its etcd.
	Ready   bool
	ID      string
	Learner bool
	// Stopped: its etcd is confirmed stopped (fenced).
	Stopped bool
	// StoppedSince is when it was confirmed stopped (zero when it runs).
	StoppedSince time.Time
	// Report is its sidecar's last report (nil if none).
	Report *cluster.Report
}

// Members is the member list the decisions read, from what the supervisor or the operator
// records of each member (name, ID, readiness and role, and its sidecar's last report) and,
// when stopped is set, whether its etcd is confirmed stopped and since when.
func Members(sms []cluster.StatusMember, stopped func(name string) (bool, time.Time)) []Member {
	out := make([]Member, 0, len(sms))
	for _, sm := range sms {
		m := Member{Name: sm.Name, Ready: sm.Ready, ID: sm.ID, Learner: sm.Learner, Report: sm.Report}
		if stopped != nil {
			m.Stopped, m.StoppedSince = stopped(sm.Name)
		}
		out = append(out, m)
	}
	return out
}

// Backup is what the backup store holds.
type Backup struct {
	Configured bool
	// Revision is the newest revision stored (0: nothing stored; -1: unknown).
	Revision int64
}

// Status is the part of the cluster status the decisions read and write.
type Status struct {
	ClusterID string          `json:"clusterID,omitempty"`
	Voters    []cluster.Voter `json:"voters,omitempty"`
	// Directive is the recovery in progress; LastEpoch the newest ever issued.
	Directive *cluster.Directive `json:"directive,omitempty"`
	LastEpoch int64              `json:"lastEpoch,omitempty"`
	// LastRecovery is the newest retired directive, kept for the record.
	LastRecovery *cluster.Directive `json:"lastRecovery,omitempty"`
	// QuorumLostSince is when the voters were last seen losing their quorum (zero: quorate).
	QuorumLostSince time.Time `json:"quorumLostSince,omitempty"`
	// Withdrawn counts the recoveries withdrawn in a row because a majority still held its
	// data: each doubles the grace the restarted voters get to re-form the quorum.
	Withdrawn int `json:"withdrawn,omitempty"`
	// WithdrawnAt is when the newest directive was withdrawn (zero: none was): the members it
	// held start again then, and their NotReady grace with them.
	WithdrawnAt time.Time `json:"withdrawnAt,omitempty"`
	// Waiting says what the cluster waits for, in words ("" when healthy).
	Waiting string `json:"waiting,omitempty"`
}

// Observation is everything Decide depends on.
type Observation struct {
	Now     time.Time
	Status  Status
	Members []Member
	Backup  Backup
	Timing  Timing
}

// Decision is Decide's outcome: the new status (its Directive says who is fenced) and what
// happened, in words, for logs and Events ("" when nothing changed).
type Decision struct {
	Status Status
	Event  string
	// Case is the row of the table that decided whether a recovery starts, when no
	// directive was in force ("" otherwise), or the reason of a directive issued.
	Case Case
}

// Case names why a recovery starts, or does not: the rows of Decide's table while no
// directive is in force, and the other ways a directive is issued. A directive records the
// case that issued it (cluster.Directive.Case).
type Case string

const (
	// CaseQuorate: more than half of the voters serve; nothing to recover.
	CaseQuorate Case = "Quorate"
	// CaseNotFormed: no voter is recorded yet (the cluster bootstraps); no quorum to lose.
	CaseNotFormed Case = "NotFormed"
	// CaseQuorumLossWithinGrace: the quorum is lost, for less than the grace, and some
	// voters that cannot serve now may still come back with their data: wait for them.
	CaseQuorumLossWithinGrace Case = "QuorumLossWithinGrace"
	// CaseQuorumLossPastGrace: the quorum has been lost for the grace: a recovery starts.
	CaseQuorumLossPastGrace Case = "QuorumLossPastGrace"
	// CaseQuorumLossProven: the voters that may still bring their data back cannot form a
	// quorum even if all of them return (the others' own sidecars report that their data is
	// gone): a recovery starts at once, no grace can bring that data back.
	CaseQuorumLossProven Case = "QuorumLossProven"
	// CaseStatusLostWithBackups: no cluster is recorded, every data dir is empty and the
	// backup store holds backups, for the grace: the cluster is restored.
	CaseStatusLostWithBackups Case = "StatusLostWithBackups"
	// CaseRestoreRequested, CaseRestoreCancelled: a restore in place was asked for, or
	// cancelled (StartRestore, CancelRestore).
	CaseRestoreRequested Case = "RestoreRequested"
	CaseRestoreCancelled Case = "RestoreCancelled"
	// CaseDirectiveAbandoned: the directive in force could not complete; a new epoch
	// starts over.
	CaseDirectiveAbandoned Case = "DirectiveAbandoned"
)

// Quorum counts the voters and how many of them serve as voters now. Learners never count.
func Quorum(voters []cluster.Voter, members []Member) (ready, total int) {
	for _, v := range voters {
		total++
		for _, m := range members {
			if m.Ready && !m.Learner && sameMember(v, m) {
				ready++
				break
			}
		}
	}
	return ready, total
}

// Decide moves the cluster's recovery state one step.
func Decide(o Observation) Decision {
	st, event := o.Status, ""
	if st.ClusterID == "" && st.Directive == nil {
		st, event = adoptFormedCluster(st, o.Members, o.Now.Add(-o.Timing.ReportTimeout))
	}
	dec := decide(o, st)
	if dec.Event == "" {
		dec.Event = event
	}
	return dec
}

func decide(o Observation, st Status) Decision {
	ready, total := Quorum(st.Voters, o.Members)
	quorate := total > 0 && ready > total/2
	if quorate {
		st.QuorumLostSince, st.Withdrawn = time.Time{}, 0
	} else if st.QuorumLostSince.IsZero() && (total > 0 || neverFormedWithBackups(o)) {
		st.QuorumLostSince = o.Now
	}
	d := st.Directive
	if d == nil {
		return decideHealthy(o, st, ready, total, quorate)
	}
	switch d.Phase {
	case cluster.PhaseFencing:
		return decideFenced(o, st)
	case cluster.PhaseSeeding:
		return decideSeeding(o, st)
	case cluster.PhaseRejoining:
		return decideRejoining(o, st, quorate)
	}
	return restart(o, st, fmt.Sprintf("directive %d has unknown phase %q", d.Epoch, d.Phase))
}

// neverFormedWithBackups: no cluster was ever recorded, every member reports an empty data
// dir (or one whose data a restore superseded, which counts as empty), and the backup store
// holds backups: the status was lost (a member bootstraps only when no backup of its cluster
// exists: member.Decide's Bootstrap row), and the cluster is restored.
func neverFormedWithBackups(o Observation) bool {
	if o.Status.ClusterID != "" || len(o.Status.Voters) > 0 || !o.Backup.Configured || o.Backup.Revision <= 0 || len(o.Members) == 0 {
		return false
	}
	for _, m := range o.Members {
		if r := m.Report; r == nil || r.Serving || !(r.DataEmpty || r.DataSuperseded()) {
			return false
		}
	}
	return true
}

func decideHealthy(o Observation, st Status, ready, total int, quorate bool) Decision {
	switch {
	case quorate:
		st.Waiting = ""
		return Decision{Status: st, Case: CaseQuorate}
	case total == 0 && !neverFormedWithBackups(o):
		st.Waiting = ""
		return Decision{Status: st, Case: CaseNotFormed} // bootstrapping: no quorum to lose yet
	}
	if total > 0 {
		if gone, returnable, proven := lossProven(o, st); proven {
			return startRecovery(o, st, CaseQuorumLossProven, fmt.Sprintf(
				"quorum lost: %d of %d voters serve, and the data of %s is gone (their sidecars report it from disk): the voters that may still come back with their data (%s) cannot form a quorum",
				ready, total, strings.Join(gone, ", "), orNone(returnable)))
		}
	}
	lost, grace := o.Now.Sub(st.QuorumLostSince), o.Timing.Grace<<min(st.Withdrawn, 5)
	if lost < grace {
		st.Waiting = fmt.Sprintf("quorum lost: %d of %d voters serve; recovery starts if it lasts %s (lost for %s)",
			ready, total, grace, lost.Round(time.Second))
		return Decision{Status: st, Case: CaseQuorumLossWithinGrace}
	}
	if total == 0 {
		return startRecovery(o, st, CaseStatusLostWithBackups, "no cluster is recorded, every data dir is empty and the backup store holds backups")
	}
	return startRecovery(o, st, CaseQuorumLossPastGrace, fmt.Sprintf("quorum lost for %s: %d of %d voters serve", lost.Round(time.Second), ready, total))
}

// lossProven says whether the voters that may still come back with their data (returnable)
// are too few to form a quorum even if all of them return, the others' data being gone
// (voterDataGone). Only then is the grace pointless: it is for voters that are silent,
// stopped or unreachable, and may come back with their data.
func lossProven(o Observation, st Status) (gone, returnable []string, proven bool) {
	voters := latestVoters(st, o.Members)
	for _, v := range voters {
		if voterDataGone(o, st, v) {
			gone = append(gone, v.Name)
		} else {
			returnable = append(returnable, cmp.Or(v.Name, v.ID))
		}
	}
	return gone, returnable, len(voters) > 0 && len(returnable) <= len(voters)/2
}

// voterDataGone: voter v will never come back with its data. Its member's own sidecar
// reported from its data dir that the dir is empty, or holds valid data that is not v's
// (another member's, or that of v's replacement, which has begun), or data a restore
// superseded (which is never restarted); and every other member
// reported too, its dir holding nothing of v's (data moves with a swapped dir). Each of
// those reports is current: made since the quorum was lost, at most ReportCurrent ago, and
// not after now (a clock ahead proves nothing). Silence proves nothing: a member that has
// not reported may hold any voter's data. Nor does a dir that could not be read: it may
// hold v's.
func voterDataGone(o Observation, st Status, v cluster.Voter) bool {
	own := false
	for _, m := range o.Members {
		r := m.Report
		if r == nil || r.Name != m.Name || !r.At.After(st.QuorumLostSince) || r.At.After(o.Now) || o.Now.Sub(r.At) > o.Timing.ReportCurrent {
			return false
		}
		holdsV := r.DataValid && !r.DataSuperseded() && ((v.ID != "" && r.MemberID == v.ID) || (v.ID == "" && r.Owner == v.Name))
		if holdsV || (!r.DataValid && !r.DataEmpty && !r.DataSuperseded()) {
			return false
		}
		if m.Name == v.Name {
			own = r.Source == cluster.ReportFromDisk && !r.Serving
		}
	}
	return own && v.Name != ""
}

// startRecovery issues a new directive in its first phase: every member is fenced. Its
// epoch is above every epoch a member reports having carried out, or having its data
// superseded by, so that a status rebuilt after it was lost never issues an epoch a member
// would take as done.
func startRecovery(o Observation, st Status, c Case, why string) Decision {
	for _, m := range o.Members {
		if m.Report != nil {
			st.LastEpoch = max(st.LastEpoch, m.Report.AppliedEpoch, m.Report.SupersededBy)
		}
	}
	st.LastEpoch++
	st.Directive = &cluster.Directive{Epoch: st.LastEpoch, Phase: cluster.PhaseFencing, Case: string(c), IssuedAt: o.Now, PhaseSince: o.Now,
		Reason: why + ": stopping every member, then choosing the recovery source from their reports"}
	st.Waiting = st.Directive.Reason
	return Decision{Status: st, Case: c, Event: fmt.Sprintf("directive %d: %s", st.LastEpoch, st.Directive.Reason)}
}

// Withdraw ends the directive in force before anything was chosen on disk, for why: the
// members restart on their own data, and the grace starts again, longer for each withdrawal
// in a row.
func Withdraw(o Observation, st Status, why string) Decision {
	epoch := st.Directive.Epoch
	st.Directive, st.QuorumLostSince, st.WithdrawnAt, st.Withdrawn = nil, o.Now, o.Now, st.Withdrawn+1
	st.Waiting = why
	return Decision{Status: st, Event: fmt.Sprintf("directive %d withdrawn: %s", epoch, why)}
}

// StartRestore starts restoring a running cluster back to target (a restore in place, see
// docs/restore.md): a new directive fences every member, restores target into one
// of them, and the others rejoin it as learners, their data moved aside. Until the seed
// serves, every new epoch restores the same target (restart). The caller checks the target
// against the store and takes a full snapshot first: this function only decides.
func StartRestore(o Observation, target cluster.RestoreTarget) (Decision, error) {
	if d := o.Status.Directive; d != nil {
		return Decision{Status: o.Status}, fmt.Errorf("directive %d is in progress (%s): a restore can start only once it completes", d.Epoch, d.Phase)
	}
	dec := startRecovery(o, o.Status, CaseRestoreRequested, "restore to "+target.Point()+" requested")
	d := dec.Status.Directive
	d.Restore = &target
	d.Reason = fmt.Sprintf("restore to %s requested: stopping every member; then one restores it alone and the others rejoin it as learners", target.Point())
	dec.Status.Waiting = d.Reason
	dec.Event = fmt.Sprintf("directive %d: %s", d.Epoch, d.Reason)
	return dec, nil
}

// FoldAck records in st, as read from the status, the seed's acknowledgement of the
// directive in force, which the seed writes beside its report (ack looks it up by the seed's
// name): once the seed serves, Seeding moves on. An acknowledgement of another epoch is not
// this directive's.
func FoldAck(st Status, ack func(seed string) (cluster.DirectiveAck, bool)) Status {
	if d := st.Directive; d != nil && d.Phase == cluster.PhaseSeeding && d.Ack == nil {
		if a, ok := ack(d.Seed); ok && a.Epoch == d.Epoch {
			dc := *d
			dc.Ack = &a.Result
			st.Directive = &dc
		}
	}
	return st
}

// ErrRestoreNotInForce: the restore a cancel names is not the directive in force (it
// completed, or was replaced or withdrawn): there is nothing of it to cancel.
var ErrRestoreNotInForce = errors.New("the restore to cancel is not in force")

// CancelRestoreOf is the one way the supervisor and the operator cancel a restore: the
// restore of directive epoch (0: whichever is in force), withdrawn by CancelRestore while
// that is safe. A restore that is not in force any more is ErrRestoreNotInForce.
func CancelRestoreOf(o Observation, epoch int64) (Decision, error) {
	if d := o.Status.Directive; epoch != 0 && (d == nil || d.Epoch != epoch || d.Restore == nil) {
		return Decision{Status: o.Status}, fmt.Errorf("%w: directive %d", ErrRestoreNotInForce, epoch)
	}
	return CancelRestore(o)
}

// CancelRestore withdraws a restore (StartRestore) whose seed has not restored the target
// yet: a new epoch fences every member again without the target (it names the cancelled
// epoch, Cancels), and once each is confirmed stopped, has cleared its data dir's record that
// the restore supersedes its data, and has reported from disk, Decide finds a majority of the
// voters holding their own data and withdraws it, so they restart on that data (the former
// seed, whose data was moved aside, rejoins as a learner). It is refused, with the reason,
// when that could lose data or form a second cluster: once the seed has restored the target
// (it starts on it, and the others then move their data aside to rejoin it), or when fewer
// than a majority of the voters, the seed aside, are known to hold their own data of the
// formed cluster (serving, or reported from disk since they stopped).
func CancelRestore(o Observation) (Decision, error) {
	st, d := o.Status, o.Status.Directive
	switch {
	case d == nil:
		return Decision{Status: st}, errors.New("no restore is in progress: nothing to cancel")
	case d.Restore == nil:
		return Decision{Status: st}, fmt.Errorf("directive %d is a quorum-loss recovery, not a restore: it cannot be cancelled", d.Epoch)
	case d.Ack != nil || d.Phase == cluster.PhaseRejoining:
		return Decision{Status: st}, fmt.Errorf("the restore to %s cannot be cancelled: %s already serves the restored cluster and the others rejoin it with their data moved aside; let it complete, then restore again to the point you want", d.Restore.Point(), d.Seed)
	}
	if r := seedReport(o.Members, *d); d.Phase == cluster.PhaseSeeding && r != nil && r.AppliedEpoch >= d.Epoch && r.ClusterID != "" {
		return Decision{Status: st}, fmt.Errorf("the restore to %s cannot be cancelled: %s has restored it (cluster %s) and starts on it; let it complete, then restore again to the point you want", d.Restore.Point(), d.Seed, r.ClusterID)
	}
	voters := latestVoters(st, o.Members)
	var intact, unknown []string
	for _, m := range o.Members {
		if !isVoterData(voters, m.Name, reportedID(m)) || (d.Phase == cluster.PhaseSeeding && m.Name == d.Seed) {
			continue
		}
		switch r := m.Report; {
		case r == nil || (!(m.Ready && !m.Learner) && !freshDiskReport(m)):
			unknown = append(unknown, m.Name)
		case r.DataValid && r.Foreign == "" && !r.Learner && r.Formed && (st.ClusterID == "" || r.ClusterID == st.ClusterID) && r.AppliedEpoch < d.Epoch:
			// Formed: a restore an earlier epoch left behind, never served, is not the
			// cluster's data, even where it has the same member and cluster IDs (a restore
			// onto the same member with the same token makes them again).
			intact = append(intact, m.Name)
		}
	}
	if n := len(voters); len(intact) <= n/2 {
		why := fmt.Sprintf("only %d of the %d voters (%s) are known to hold their own data of the cluster to restart on", len(intact), n, orNone(intact))
		if d.Phase == cluster.PhaseSeeding {
			why += fmt.Sprintf("; the seed %s moved its data aside to restore", d.Seed)
		}
		if len(unknown) > 0 {
			why += fmt.Sprintf("; not yet known: %s (stopped, not reported from disk yet: try again in a few seconds)", strings.Join(unknown, ", "))
		}
		return Decision{Status: st}, fmt.Errorf("the restore to %s cannot be cancelled: %s; let it complete, then restore again to the point you want", d.Restore.Point(), why)
	}
	st.LastEpoch = max(st.LastEpoch, d.Epoch) // the new epoch is above the cancelled one, whatever the status says
	dec := startRecovery(o, st, CaseRestoreCancelled, fmt.Sprintf("restore to %s cancelled", d.Restore.Point()))
	nd := dec.Status.Directive
	nd.Cancels = d.Epoch
	nd.Reason = fmt.Sprintf("directive %d, the restore to %s, cancelled: stopping every member; each clears its data dir's record that the restore supersedes its data; then %s restart on their own data", d.Epoch, d.Restore.Point(), strings.Join(intact, ", "))
	dec.Status.Waiting = nd.Reason
	dec.Event = fmt.Sprintf("directive %d: %s", nd.Epoch, nd.Reason)
	return dec, nil
}

// reportedID is the member ID of the data m last reported ("" without a report).
func reportedID(m Member) string {
	if m.Report == nil {
		return m.ID
	}
	return m.Report.MemberID
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// restart abandons the directive in force for a new epoch.
// A restore target (spec.bootstrap.restore) the seed never reached stays the target: the
// new epoch restores it too, never another point.
func restart(o Observation, st Status, why string) Decision {
	old := *st.Directive
	dec := startRecovery(o, st, CaseDirectiveAbandoned, fmt.Sprintf("directive %d abandoned (%s)", old.Epoch, why))
	if old.Restore != nil && old.Ack == nil {
		target := *old.Restore
		dec.Status.Directive.Restore = &target
	}
	return dec
}

// fencedMembers sorts the members of a fencing recovery by what it waits for: running (not
// confirmed stopped yet), silentVoters (stopped, no report from disk yet, and may be voters:
// their log may be the newest), recordingVoters (voters that reported from disk, but whose
// data dir does not show the record the directive asks for yet: recordSettled) and silent
// (the others without such a report).
func fencedMembers(o Observation, st Status) (running, silentVoters, recordingVoters, silent []string) {
	voters := latestVoters(st, o.Members)
	for _, m := range o.Members {
		switch {
		case !m.Stopped:
			running = append(running, m.Name)
		case freshDiskReport(m) && recordSettled(st.Directive, m.Report):
		case freshDiskReport(m) && mayBeVoter(voters, m):
			recordingVoters = append(recordingVoters, m.Name)
		case mayBeVoter(voters, m):
			silentVoters = append(silentVoters, m.Name)
		default:
			silent = append(silent, m.Name)
		}
	}
	return running, silentVoters, recordingVoters, silent
}

// recordSettled: report r, from a member's data dir, shows the record directive d asks for.
// A restore (d.Restore) supersedes every member's data: before its seed may act, each data
// dir that holds anything records it (member.SupersededRecord), so that a status lost later
// never has the old data restarted beside the restored cluster. The cancel of a restore
// (d.Cancels) clears those records before the members restart on their data. A member that
// does not show it waits as one that did not report: a voter always, any other for the
// report timeout (then it counts as holding nothing).
func recordSettled(d *cluster.Directive, r *cluster.Report) bool {
	switch {
	case d == nil:
		return true
	case d.Restore != nil:
		return r.DataEmpty || r.SupersededBy >= d.Epoch
	case d.Cancels != 0:
		return !r.DataSuperseded() || r.SupersededBy > d.Cancels
	}
	return true
}

// FencingQuorumLoss: d is a quorum-loss recovery (not a restore someone asked for) in its
// fencing phase.
func FencingQuorumLoss(d *cluster.Directive) bool {
	return d != nil && d.Phase == cluster.PhaseFencing && d.Restore == nil
}

// AwaitedVoters names the voters a quorum-loss recovery in its fencing phase waits for: stopped,
// with no report from disk yet, so that the source cannot be chosen (nil when none is awaited).
// Only their data, or proof that it is gone, lets it go on.
func AwaitedVoters(o Observation) []string {
	if !FencingQuorumLoss(o.Status.Directive) {
		return nil
	}
	_, silentVoters, _, _ := fencedMembers(o, o.Status)
	return silentVoters
}

func decideFenced(o Observation, st Status) Decision {
	d := *st.Directive
	running, silentVoters, recordingVoters, silent := fencedMembers(o, st)
	// Reports are awaited from when the last member was confirmed stopped: a member stopped
	// late (or again, after the supervisor restarted) gets the whole timeout to report.
	since := d.PhaseSince
	for _, m := range o.Members {
		if m.StoppedSince.After(since) {
			since = m.StoppedSince
		}
	}
	waited := o.Now.Sub(since)
	if len(running) > 0 {
		// Deciding while an old member may still serve could make two clusters.
		st.Waiting = fmt.Sprintf("directive %d: waiting for %s to stop (%s)", d.Epoch, strings.Join(running, ", "), waited.Round(time.Second))
		return Decision{Status: st}
	}
	if len(silentVoters) > 0 {
		// A voter that cannot report may hold the newest log: choosing without it could lose
		// acknowledged writes. Its sidecar restarts, or its data is proven gone (a person
		// removes the member; on Kubernetes, its volume replaced with its node out of service).
		st.Waiting = fmt.Sprintf("directive %d: waiting for the reports of voters %s from disk (%s): the recovery source is chosen only when every voter's log is known",
			d.Epoch, strings.Join(silentVoters, ", "), waited.Round(time.Second))
		return Decision{Status: st}
	}
	if len(recordingVoters) > 0 {
		what := "record in their data dirs that the restore supersedes their data (the seed restores only then, so that the old data is never restarted beside the restored cluster)"
		if d.Restore == nil {
			what = fmt.Sprintf("clear their data dirs' record that the cancelled restore %d supersedes their data", d.Cancels)
		}
		st.Waiting = fmt.Sprintf("directive %d: waiting for voters %s to %s (%s)", d.Epoch, strings.Join(recordingVoters, ", "), what, waited.Round(time.Second))
		return Decision{Status: st}
	}
	if len(silent) > 0 && waited < o.Timing.ReportTimeout {
		what := "the reports of %s from disk"
		if d.Restore != nil || d.Cancels != 0 {
			what = "the reports of %s from disk, showing their data dirs' record of the restore"
		}
		st.Waiting = fmt.Sprintf("directive %d: waiting for "+what+" (%s of %s)", d.Epoch, strings.Join(silent, ", "),
			waited.Round(time.Second), o.Timing.ReportTimeout)
		return Decision{Status: st}
	}
	c := Choose(st, o.Members, o.Backup)
	if t := d.Restore; t != nil && len(o.Members) > 0 {
		// Nothing was served since the target was set (restart keeps it only then): the
		// cluster starts from it, whatever the members or the backup store hold.
		c = Choice{Mode: cluster.RecoverFromBackup, Seed: backupSeed(o.Members),
			Reason: fmt.Sprintf("the restore target, %s from %s, was never reached: restoring it", t.Point(), storeName(*t))}
	}
	if len(silent) > 0 {
		c.Reason += fmt.Sprintf(" (%s did not report, or did not show the record of the directive, within %s and count as holding nothing)", strings.Join(silent, ", "), o.Timing.ReportTimeout)
	}
	switch c.Mode {
	case "":
		if c.MajorityIntact {
			// Nothing to recover: unfence; the voters restart on their data and the quorum
			// re-forms.
			return Withdraw(o, st, c.Reason)
		}
		d.Reason = c.Reason
		st.Directive, st.Waiting = &d, fmt.Sprintf("directive %d: %s", d.Epoch, c.Reason)
		return Decision{Status: st}
	}
	d.Phase, d.PhaseSince, d.Mode, d.Seed, d.Reason, d.Alternatives = cluster.PhaseSeeding, o.Now, c.Mode, c.Seed, c.Reason, c.Alternatives
	st.Waiting = fmt.Sprintf("directive %d: %s recovers alone (%s)", d.Epoch, d.Seed, d.Mode)
	if founders(o, d, silent) {
		for _, m := range o.Members {
			d.Founders = append(d.Founders, m.Name)
		}
		d.Reason += fmt.Sprintf("; %s restores it with every member (%s) as a voter, and the others restore the same revision as those members: they start together", d.Seed, strings.Join(d.Founders, ", "))
		st.Waiting = fmt.Sprintf("directive %d: %s restores (%s); %s start with it", d.Epoch, d.Seed, d.Mode, strings.Join(slices.DeleteFunc(slices.Clone(d.Founders), func(n string) bool { return n == d.Seed }), ", "))
	}
	st.Directive = &d
	return Decision{Status: st, Event: fmt.Sprintf("directive %d: seed %s, from %s: %s", d.Epoch, d.Seed, d.Mode, d.Reason)}
}

// founders: the recovery from the backup that directive d is about to start restores every
// member at once (cluster.Directive.Founders): each reported from disk (none counted as
// holding nothing for its silence), and d is the first epoch of this recovery. A new epoch
// after an abandoned one, a restore someone asked for and its cancel restore into the seed
// alone, the others rejoining as learners one at a time: the path that needs no other member.
func founders(o Observation, d cluster.Directive, silent []string) bool {
	return d.Mode == cluster.RecoverFromBackup && d.Restore == nil && d.Cancels == 0 && len(silent) == 0 &&
		d.Case != string(CaseDirectiveAbandoned) && len(o.Members) > 1
}

// storeName names a restore target's backup store in words.
func storeName(t cluster.RestoreTarget) string {
	if t.Store == "" {
		return "the cluster's own backup store"
	}
	return t.Store
}

// mayBeVoter: the member is among voters, by name or by the member ID it last reported.
func mayBeVoter(voters []cluster.Voter, m Member) bool {
	for _, v := range voters {
		if (v.Name != "" && v.Name == m.Name) || (m.Report != nil && m.Report.MemberID != "" && v.ID == m.Report.MemberID) {
			return true
		}
	}
	return false
}

// freshDiskReport: the member reported from its data dir since its etcd stopped.
func freshDiskReport(m Member) bool {
	r := m.Report
	return r != nil && r.Source == cluster.ReportFromDisk && !r.Serving && !m.StoppedSince.IsZero() && r.At.After(m.StoppedSince)
}

func decideSeeding(o Observation, st Status) Decision {
	d := *st.Directive
	if r := seedReport(o.Members, d); d.Ack == nil && len(d.Founders) == 0 && r != nil && r.AppliedEpoch >= d.Epoch && r.ClusterID != "" && r.MemberID != "" {
		// The seed's data dir records that it carried the directive out and served: as good
		// as its acknowledgement, which it may not have sent before it stopped. (A cluster
		// restored with founders serves only once they start: its reports say when.)
		d.Ack = &cluster.DirectiveResult{Member: d.Seed, MemberID: r.MemberID, ClusterID: r.ClusterID, Revision: r.Revision, At: r.At}
	}
	for _, m := range o.Members {
		if r := m.Report; d.Ack == nil && foundedBy(m, d) && r.Source == cluster.ReportFromEtcd && r.Serving && r.Formed && !r.Learner && r.ClusterID != "" {
			// The restored cluster serves through its founders, the seed among them or not
			// (it may have lost its data since it restored: it never restores twice beside
			// them, and rejoins as a learner).
			d.Ack = &cluster.DirectiveResult{Member: m.Name, MemberID: r.MemberID, ClusterID: r.ClusterID, Revision: r.Revision, At: r.At}
		}
	}
	if d.Ack != nil {
		// The restored cluster serves: record it, and let the others rejoin. Every founder
		// is its voter, known by name until the members' reports give their IDs.
		d.Phase, d.PhaseSince = cluster.PhaseRejoining, o.Now
		st.Directive = &d
		st.ClusterID = d.Ack.ClusterID
		st.Voters = []cluster.Voter{{ID: d.Ack.MemberID, Name: d.Ack.Member}}
		for _, f := range d.Founders {
			if f != d.Ack.Member {
				st.Voters = append(st.Voters, cluster.Voter{Name: f})
			}
		}
		st.QuorumLostSince = time.Time{}
		st.Waiting = fmt.Sprintf("directive %d: %s serves at revision %d; the others rejoin as learners", d.Epoch, d.Ack.Member, d.Ack.Revision)
		if len(d.Founders) > 0 {
			st.Waiting = fmt.Sprintf("directive %d: the restored cluster serves at revision %d; the founders that are not serving yet join it", d.Epoch, d.Ack.Revision)
		}
		return Decision{Status: st, Event: fmt.Sprintf("directive %d acknowledged by %s: serving cluster %s at revision %d", d.Epoch, d.Ack.Member, d.Ack.ClusterID, d.Ack.Revision)}
	}
	// A member that serves beside the seed aborts the recovery. One that is merely not
	// confirmed stopped (its fence was lifted, as by a restart of the supervisor) is fenced
	// again by the caller; its sidecar waits for the seed meanwhile.
	for _, m := range o.Members {
		if m.Name != d.Seed && m.Report != nil && m.Report.Serving && m.Report.At.After(d.PhaseSince) && !foundedBy(m, d) {
			return restart(o, st, fmt.Sprintf("member %s came back while %s was recovering", m.Name, d.Seed))
		}
	}
	seed := find(o.Members, d.Seed)
	if seed == nil {
		return restart(o, st, fmt.Sprintf("the seed %s is no longer a desired member", d.Seed))
	}
	if len(d.Founders) > 0 {
		st.Directive = &d
		if why := trackFounders(o, &d); why != "" {
			return restart(o, st, why)
		}
	}
	if r := seed.Report; r != nil && r.At.After(d.PhaseSince) && r.Case == "QuorumLossSeedWithoutData" {
		return restart(o, st, fmt.Sprintf("the seed %s cannot carry it out: %s", d.Seed, r.Reason))
	}
	if waited := o.Now.Sub(d.PhaseSince); waited > o.Timing.SeedTimeout {
		return restart(o, st, fmt.Sprintf("the seed %s did not serve within %s", d.Seed, o.Timing.SeedTimeout))
	}
	st.Waiting = fmt.Sprintf("directive %d: waiting for %s to recover alone (%s) and serve", d.Epoch, d.Seed, d.Mode)
	if len(d.Founders) > 0 {
		st.Waiting = fmt.Sprintf("directive %d: waiting for %s to restore the backup, then the other founders to restore the same revision (restored: %s), and the restored cluster to serve",
			d.Epoch, d.Seed, orNone(d.Restored))
	}
	return Decision{Status: st}
}

// seedActed: the seed's data, in its own dir or found in another, records that it carried
// out directive d.
func seedActed(members []Member, d cluster.Directive) bool {
	r := seedReport(members, d)
	return r != nil && r.AppliedEpoch >= d.Epoch
}

// trackFounders records in d, a recovery with founders, which founders restored and when
// the seed did, and says why the epoch must be abandoned ("" while it may go on). The
// restored cluster needs a quorum of its founders holding what they restored; each restores
// the seed's point, which takes about as long as the seed's restore took. Too few within
// the grace beyond that (a second fault), and a new epoch restores into the seed alone.
func trackFounders(o Observation, d *cluster.Directive) string {
	d.Restored = founding(o.Members, *d)
	acted := seedActed(o.Members, *d)
	if d.SeedActedAt.IsZero() && acted {
		d.SeedActedAt = o.Now
	}
	if d.SeedActedAt.IsZero() {
		return ""
	}
	var holding []string
	for _, m := range o.Members {
		if (m.Name == d.Seed && acted) || foundedBy(m, *d) {
			holding = append(holding, m.Name)
		}
	}
	if wait := o.Timing.Grace + 2*d.SeedActedAt.Sub(d.PhaseSince); len(holding) <= len(d.Founders)/2 && o.Now.Sub(d.SeedActedAt) > wait {
		return fmt.Sprintf("%s restored, but only %s of the founders %s hold what they restored %s after: a quorum of them is needed",
			d.Seed, orNone(holding), strings.Join(d.Founders, ", "), wait.Round(time.Second))
	}
	return ""
}

// foundedBy: member m started under directive d as one of its founders (its data dir
// records d): it serves the restored cluster, never another beside it.
func foundedBy(m Member, d cluster.Directive) bool {
	return d.Founder(m.Name) && m.Report != nil && m.Report.AppliedEpoch >= d.Epoch
}

// founding names the founders of d other than its seed that restored under d: named
// before (d.Restored: a founder that lost its data since stays named), or reporting it now.
func founding(members []Member, d cluster.Directive) []string {
	out := slices.Clone(d.Restored)
	for _, m := range members {
		if foundedBy(m, d) && !slices.Contains(out, m.Name) {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

// seedReport is the report of the seed's data: from its own dir, or from the dir it was
// found in since (a swap).
func seedReport(members []Member, d cluster.Directive) *cluster.Report {
	if m := find(members, d.Seed); m != nil && m.Report.OwnData() {
		return m.Report
	}
	for _, m := range members {
		if r := m.Report; r != nil && r.DataValid && r.Owner == d.Seed {
			return r
		}
	}
	return nil
}

func decideRejoining(o Observation, st Status, quorate bool) Decision {
	d := *st.Directive
	if !quorate {
		if gone, _, proven := lossProven(o, st); proven {
			// As before any recovery: no grace brings back data its own sidecar reports gone.
			return restart(o, st, fmt.Sprintf("the recovered cluster lost its quorum, and the data of %s is gone (their sidecars report it from disk)", strings.Join(gone, ", ")))
		}
		if lost := o.Now.Sub(st.QuorumLostSince); lost >= o.Timing.Grace {
			return restart(o, st, fmt.Sprintf("the recovered cluster lost its quorum for %s", lost.Round(time.Second)))
		}
		st.Waiting = fmt.Sprintf("directive %d: the recovered cluster has no quorum; a new recovery starts if it lasts %s", d.Epoch, o.Timing.Grace)
		return Decision{Status: st}
	}
	var behind []string
	for _, m := range o.Members {
		if !m.Ready || m.Learner || !isVoter(st.Voters, m) {
			behind = append(behind, m.Name)
		}
	}
	if len(behind) == 0 {
		st.LastRecovery, st.Directive, st.Waiting = &d, nil, ""
		return Decision{Status: st, Event: fmt.Sprintf("directive %d done: every member is a healthy voter again", d.Epoch)}
	}
	st.Waiting = fmt.Sprintf("directive %d: waiting for %s to rejoin", d.Epoch, strings.Join(behind, ", "))
	return Decision{Status: st}
}

func isVoter(voters []cluster.Voter, m Member) bool {
	for _, v := range voters {
		if sameMember(v, m) {
			return true
		}
	}
	return false
}

// sameMember: the voter is this member, by ID when the status knows the voter's ID (a
// member replaced under a new ID is another voter), else by name.
func sameMember(v cluster.Voter, m Member) bool {
	if v.ID != "" {
		return m.ID == v.ID
	}
	return v.Name != "" && v.Name == m.Name
}

func find(ms []Member, name string) *Member {
	for i := range ms {
		if ms[i].Name == name {
			return &ms[i]
		}
	}
	return nil
}

// Choice is a recovery source.
type Choice struct {
	// Mode is member.RecoverFromSurvivor or member.RecoverFromBackup; "" when no recovery
	// is possible or needed (MajorityIntact).
	Mode string
	Seed string
	// MajorityIntact: a majority of the voters hold their own valid data; restarting them
	// re-forms the quorum with nothing lost.
	MajorityIntact bool
	Reason         string
	// Alternatives lists what every other source holds and would have lost.
	Alternatives []string
}

// candidate is a voter's data: whose log it is and how far it reaches.
type candidate struct {
	name                string
	lastTerm, lastIndex uint64
	// maxRevision bounds the revision its log reaches once applied: the database's revision
	// plus one per logged entry not yet applied (an entry changes the revision by at most 1).
	revision, maxRevision int64
}

// Choose picks the recovery source (invariant 9): the voter whose log would win a raft
// election (highest last term, then last index; ties by name), unless the backup certainly
// holds more. Learners never count, and neither does data of another cluster or member.
func Choose(st Status, members []Member, b Backup) Choice {
	voters := latestVoters(st, members)
	var cands []candidate
	var others []string
	for _, m := range members {
		r := m.Report
		switch {
		case r == nil:
			others = append(others, m.Name+": no report")
		case r.DataSuperseded():
			others = append(others, fmt.Sprintf("%s: data superseded by the restore of directive %d (never a survivor)", m.Name, r.SupersededBy))
		case !r.DataValid || r.Foreign != "":
			others = append(others, fmt.Sprintf("%s: %s", m.Name, holdsWhat(r)))
		case r.Learner || !isVoterData(voters, m.Name, r.MemberID):
			others = append(others, fmt.Sprintf("%s: data of learner or non-voter %s (never a survivor)", m.Name, r.MemberID))
		case st.ClusterID != "" && r.ClusterID != st.ClusterID:
			others = append(others, fmt.Sprintf("%s: data of cluster %s, not %s", m.Name, r.ClusterID, st.ClusterID))
		default:
			unapplied := int64(0)
			if r.LastIndex > r.Applied {
				unapplied = int64(r.LastIndex - r.Applied)
			}
			cands = append(cands, candidate{name: m.Name, lastTerm: r.LastTerm, lastIndex: r.LastIndex, revision: r.Revision, maxRevision: r.Revision + unapplied})
		}
	}
	if n := len(voters); n > 0 && len(cands) > n/2 {
		return Choice{MajorityIntact: true, Reason: fmt.Sprintf("%d of %d voters hold their own valid data: restarting them re-forms the quorum, nothing to recover", len(cands), n)}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, c := cands[i], cands[j]
		if a.lastTerm != c.lastTerm {
			return a.lastTerm > c.lastTerm
		}
		if a.lastIndex != c.lastIndex {
			return a.lastIndex > c.lastIndex
		}
		return a.name < c.name
	})
	backupHolds := b.Configured && b.Revision > 0
	if len(cands) > 0 && !(backupHolds && b.Revision > cands[0].maxRevision) {
		best := cands[0]
		var alts []string
		for _, c := range cands[1:] {
			alts = append(alts, fmt.Sprintf("%s: log at term %d index %d, revision %d (up to %d revisions behind)", c.name, c.lastTerm, c.lastIndex, c.revision, max(best.maxRevision-c.revision, 0)))
		}
		if backupHolds {
			alts = append(alts, fmt.Sprintf("backup: revision %d (up to %d revisions behind)", b.Revision, max(best.maxRevision-b.Revision, 0)))
		}
		return Choice{Mode: cluster.RecoverFromSurvivor, Seed: best.name, Alternatives: append(alts, others...),
			Reason: fmt.Sprintf("%s's log would win an election (last term %d, index %d; revision %d to %d)", best.name, best.lastTerm, best.lastIndex, best.revision, best.maxRevision)}
	}
	if backupHolds && len(members) > 0 {
		var alts []string
		for _, c := range cands {
			alts = append(alts, fmt.Sprintf("%s: log at term %d index %d, revision %d to %d (at least %d revisions behind the backup)", c.name, c.lastTerm, c.lastIndex, c.revision, c.maxRevision, b.Revision-c.maxRevision))
		}
		why := fmt.Sprintf("no voter holds valid data; the backup holds revision %d", b.Revision)
		if len(cands) > 0 {
			why = fmt.Sprintf("the backup holds revision %d, more than any surviving voter's log can reach", b.Revision)
		}
		return Choice{Mode: cluster.RecoverFromBackup, Seed: backupSeed(members), Reason: why, Alternatives: append(alts, others...)}
	}
	why := "no voter holds valid data and there is no backup: nothing to recover from; restore a backup by hand (`steward restore`)"
	if b.Configured && b.Revision < 0 {
		why = "no voter holds valid data and the backup store cannot be read: waiting for it"
	} else if b.Configured {
		why = "no voter holds valid data and the backup store holds nothing: nothing to recover from"
	}
	return Choice{Reason: why, Alternatives: others}
}

// latestVoters are the voters of the newest member list a member reports having applied (of
// the status's cluster; data a restore superseded says nothing): membership changes the
// status has not recorded yet (a member removed for its replacement just before the quorum
// was lost) count. Without such a report, the status's voters.
func latestVoters(st Status, members []Member) []cluster.Voter {
	var latest *cluster.Report
	for _, m := range members {
		r := m.Report
		if r.OwnData() && len(r.Members) > 0 && (st.ClusterID == "" || r.ClusterID == st.ClusterID) && (latest == nil || r.Applied > latest.Applied) {
			latest = r
		}
	}
	if latest == nil {
		return st.Voters
	}
	var voters []cluster.Voter
	for _, lm := range latest.Members {
		if !lm.IsLearner {
			voters = append(voters, cluster.Voter{ID: lm.ID, Name: lm.Name, PeerURL: lm.PeerURL})
		}
	}
	return voters
}

// backupSeed picks the member that restores the backup: one without valid data of its own
// first (nothing of value is moved aside; data a restore superseded still counts, it is the
// newest kept beside), else the first.
func backupSeed(members []Member) string {
	for _, m := range members {
		if r := m.Report; r == nil || !(r.Serving || r.DataValid && r.Foreign == "") {
			return m.Name
		}
	}
	return members[0].Name
}

// isVoterData: data of member ID id, found in member name's own dir, is a voter's: the
// status lists the ID, or lists name without an ID (a status rebuilt from data dirs that
// could not all prove their member's ID).
func isVoterData(voters []cluster.Voter, name, id string) bool {
	for _, v := range voters {
		if v.ID == id || (v.ID == "" && v.Name == name) {
			return true
		}
	}
	return len(voters) == 0 // no cluster recorded: nothing to tell voters from others
}

func holdsWhat(r *cluster.Report) string {
	switch {
	case r.DataEmpty:
		return "empty data dir"
	case r.Foreign != "":
		return "data of someone else (" + r.Foreign + ")"
	case r.Problem != "":
		return "invalid data (" + r.Problem + ")"
	}
	return "invalid data"
}

// Relocated is the decision once data was moved back between members' data dirs
// (Relocations): what those dirs held when their members reported is void, and so is a
// recovery source chosen from it. A lost quorum waits its grace again from now (the members
// whose data moved back restart now); a seed chosen but not acting yet is chosen again from
// new reports, in a new epoch. A seed whose data records that it carried the directive out
// keeps it: that data, moved back, is the recovered cluster the others rejoin.
func Relocated(o Observation, st Status, moved []Relocation) Decision {
	if !st.QuorumLostSince.IsZero() {
		st.QuorumLostSince = o.Now
	}
	if d := st.Directive; d != nil && d.Phase == cluster.PhaseSeeding && d.Ack == nil && !seedActed(o.Members, *d) {
		var names []string
		for _, rel := range moved {
			names = append(names, rel.Owner)
		}
		return restart(o, st, fmt.Sprintf("the data of %s was moved back to its own data dir after %s was chosen", strings.Join(names, ", "), d.Seed))
	}
	return Decision{Status: st}
}

// Relocation moves a member's data found in another member's data dir back where it belongs.
type Relocation struct {
	// From holds Owner's data; Owner's own data dir does not hold it. Swap: Owner's dir
	// holds From's data (a swap), so the two are exchanged.
	From  string `json:"from"`
	Owner string `json:"owner"`
	Swap  bool   `json:"swap,omitempty"`
}

// Relocations lists the data to move back: member A's dir holds valid data of member B of
// this cluster, and B's dir does not hold B's own data. The caller stops both members' etcd
// before it moves anything.
func Relocations(members []Member) []Relocation {
	var out []Relocation
	done := map[string]bool{}
	for _, a := range members {
		r := a.Report
		if r == nil || r.Serving || !r.DataValid || r.Owner == "" || r.Owner == a.Name || done[a.Name] {
			continue
		}
		b := find(members, r.Owner)
		if b == nil || b.Report.OwnData() {
			continue
		}
		swap := b.Report != nil && b.Report.DataValid && b.Report.Owner == a.Name
		out = append(out, Relocation{From: a.Name, Owner: b.Name, Swap: swap})
		done[a.Name], done[b.Name] = true, true
	}
	return out
}
