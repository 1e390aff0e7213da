package cluster

import (
	"fmt"
	"slices"
	"time"
)

// Directive is an instruction to recover a quorum lost for good, issued by the supervisor or
// operator and carried out by the sidecars. Epochs only grow; a directive is carried out
// once, by its seed, which acknowledges it in the cluster status.
type Directive struct {
	Epoch int64 `json:"epoch"`
	// Phase: PhaseFencing (every member stopped; reports gathered), PhaseSeeding (the seed
	// recovers alone; the others stay stopped), PhaseRejoining (the seed serves; the others
	// rejoin as learners).
	Phase string `json:"phase"`
	// Case is why it was issued: the case of the decision that issued it (the quorum lost
	// past its grace, a loss proven at once, a restore asked for, ...).
	Case string `json:"case,omitempty"`
	// Mode (RecoverFromSurvivor or RecoverFromBackup) and Seed are set from PhaseSeeding on.
	Mode string `json:"mode,omitempty"`
	Seed string `json:"seed,omitempty"`
	// Reason explains the phase: why this source was chosen, or what the phase waits for.
	Reason string `json:"reason,omitempty"`
	// Alternatives lists the sources not chosen and what choosing them would have lost.
	Alternatives []string  `json:"alternatives,omitempty"`
	IssuedAt     time.Time `json:"issuedAt"`
	PhaseSince   time.Time `json:"phaseSince"`
	// Ack is the seed's acknowledgement, once it serves.
	Ack *DirectiveResult `json:"ack,omitempty"`
	// Restore, on a RecoverFromBackup directive, names the backup and the point to restore
	// (a new cluster's bootstrap.restore); nil: the seed's own backup store, the newest
	// revision of this cluster's newest timeline there (Observation.BackupTimeline).
	// Every member records in its data dir that the restore supersedes its data before the
	// seed may act (datadir.WriteSuperseded).
	Restore *RestoreTarget `json:"restore,omitempty"`
	// Cancels, on the directive that cancels a restore, is that restore's epoch: its seed
	// never restored it, so the members clear the records it made that their data is
	// superseded (those of it, or of an earlier epoch of the same restore) before they restart
	// on that data.
	Cancels int64 `json:"cancels,omitempty"`
	// Founders, on a recovery from the backup store, are the members the seed restores as
	// the voters of the restored cluster (the seed among them). Once the seed has restored,
	// each other founder restores the same point as its own member of that cluster, and they
	// start together: the cluster is whole at once, with no membership change and no
	// learner. Empty: the seed restores a one-member cluster, and the others rejoin it one
	// at a time as learners (the fallback, and every recovery from a survivor).
	Founders []string `json:"founders,omitempty"`
	// Restored names the founders (other than the seed) seen to have restored under this
	// directive. A founder starts its etcd only once named here, and never restores again:
	// one that lost its data since may have voted or acknowledged writes under its member
	// ID, and rejoins as a learner.
	Restored []string `json:"restored,omitempty"`
	// SeedActedAt is when the seed was first seen to have restored (its data dir records
	// the directive): a quorum of founders must hold what they restored within the grace,
	// plus twice the time the seed's restore took, from then.
	SeedActedAt time.Time `json:"seedActedAt,omitzero"`
}

// Founder: member name is one of the founders of directive d's restored cluster, other
// than its seed.
func (d *Directive) Founder(name string) bool {
	return d != nil && name != d.Seed && slices.Contains(d.Founders, name)
}

// RestoreTarget is a backup store and a point in its history: a revision, a time, or
// (neither) the newest.
type RestoreTarget struct {
	Store    string    `json:"store"`
	Revision int64     `json:"revision,omitempty"`
	Time     time.Time `json:"time,omitzero"`
	// Timeline is the timeline to restore (0: the newest, or the one of Time).
	Timeline uint32 `json:"timeline,omitempty"`
}

// Point says which point of the history is restored, in words.
func (t RestoreTarget) Point() string {
	switch {
	case t.Revision > 0:
		return fmt.Sprintf("revision %d", t.Revision)
	case !t.Time.IsZero():
		return "the newest revision at " + t.Time.UTC().Format(time.RFC3339)
	case t.Timeline != 0:
		return fmt.Sprintf("the newest revision of timeline %d", t.Timeline)
	}
	return "the newest revision"
}

// Directive phases.
const (
	PhaseFencing   = "Fencing"
	PhaseSeeding   = "Seeding"
	PhaseRejoining = "Rejoining"
)

// Recovery modes.
const (
	RecoverFromSurvivor = "survivor"
	RecoverFromBackup   = "backup"
)

// DirectiveAck is a seed's acknowledgement of the directive of epoch Epoch, as views record it.
type DirectiveAck struct {
	Epoch  int64           `json:"epoch"`
	Result DirectiveResult `json:"result"`
}

// DirectiveResult is what the seed reports when it serves after carrying out a directive.
type DirectiveResult struct {
	Member    string    `json:"member"`
	MemberID  string    `json:"memberID"`
	ClusterID string    `json:"clusterID"`
	Revision  int64     `json:"revision"`
	At        time.Time `json:"at"`
}

// Fenced lists the members whose etcd must be stopped and kept stopped under directive d:
// all of them while fencing, all but the seed and the founders while it recovers, none once
// it serves.
func (d *Directive) Fenced(members []string) []string {
	if d == nil {
		return nil
	}
	switch d.Phase {
	case PhaseFencing:
		return members
	case PhaseSeeding:
		var out []string
		for _, m := range members {
			if m != d.Seed && !d.Founder(m) {
				out = append(out, m)
			}
		}
		return out
	}
	return nil
}
