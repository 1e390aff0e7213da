package heal

import (
	"fmt"
	"time"

	"github.com/etcd-steward/steward/internal/cluster"
)

// DataDir is what one member's data dir says about the cluster it belongs to. It moves with
// the data, so a dir may hold another member's.
type DataDir struct {
	// Member is the member whose data dir it is.
	Member string
	// Token, Owner, ClusterID, MemberID and Epoch are from the identity file ("" and 0 when
	// there is none). ClusterID is recorded only once the cluster formed.
	Token, Owner, ClusterID, MemberID string
	Epoch                             int64
	// Superseded is the epoch of the restore the dir records supersedes its data (0: none;
	// a record not above Epoch marks nothing: the dir carried that restore out since).
	Superseded int64
	// WALMemberID is from the WAL ("" when it cannot be read).
	WALMemberID string
	// Applied and Members are the raft index and the member list applied to the database
	// (none when it cannot be read).
	Applied uint64
	Members []cluster.LiveMember
}

// RebuildStatus recovers the cluster ID and voters from the members' data dirs, for a status
// that was lost or never recorded. Any dir of this cluster (token) whose identity records
// that the cluster formed counts, even one whose database is damaged or that holds another
// member's data: a member that lost its data must never bootstrap a new cluster beside data
// of the old one. Where dirs disagree, the cluster of the newest recovery wins. The voters
// are those of the member list applied furthest among that cluster's dirs; without one,
// every desired member, by the ID its own dir proves, else by name. LastEpoch is the newest
// recovery any dir carried out, or records superseding its data.
//
// A dir whose data a restore superseded (it records so, see datadir.WriteSuperseded) counts as
// an empty one: its data is never adopted as the cluster's, nor are its member list or its
// member ID. The restore's seed acts only once every member's data is marked so: a status lost
// after the restored cluster served, whose own dirs were lost too, is rebuilt with no
// cluster, and heal.Decide restores the backup's newest timeline (CaseStatusLostWithBackups),
// which holds the restore and what was written after it, instead of restarting the data the
// restore replaced. (The members' sidecars never bootstrap beside a superseded dir: it proves
// the cluster formed.)
func RebuildStatus(token string, members []string, dirs []DataDir) Status {
	var st Status
	var ref *DataDir
	for i := range dirs {
		d := &dirs[i]
		if d.Token != token {
			continue
		}
		st.LastEpoch = max(st.LastEpoch, d.Epoch, d.Superseded)
		if d.ClusterID != "" && !d.superseded() && (ref == nil || d.Epoch > ref.Epoch) {
			ref = d
		}
	}
	if ref == nil {
		return st
	}
	st.ClusterID = ref.ClusterID
	var list *DataDir
	for i := range dirs {
		d := &dirs[i]
		if d.Token == token && d.ClusterID == st.ClusterID && !d.superseded() && len(d.Members) > 0 && (list == nil || d.Applied > list.Applied) {
			list = d
		}
	}
	if list != nil {
		for _, m := range list.Members {
			if !m.IsLearner {
				st.Voters = append(st.Voters, cluster.Voter{ID: m.ID, Name: m.Name, PeerURL: m.PeerURL})
			}
		}
		return st
	}
	ids := map[string]string{}
	for _, d := range dirs {
		if d.Token == token && d.Owner == d.Member && d.ClusterID == st.ClusterID && !d.superseded() && d.WALMemberID != "" && (d.MemberID == "" || d.MemberID == d.WALMemberID) {
			ids[d.Member] = d.WALMemberID
		}
	}
	for _, name := range members {
		st.Voters = append(st.Voters, cluster.Voter{ID: ids[name], Name: name})
	}
	return st
}

// superseded: the dir records that a restore it did not carry out supersedes its data.
func (d DataDir) superseded() bool { return d.Superseded > d.Epoch }

// adoptFormedCluster records a cluster that members report formed while the status records
// none (it was lost, or the quorum was lost before the status recorded it), from their
// reports of their own data made since freshAfter, as RebuildStatus does from data dirs.
// Without it, a formed cluster that lost its quorum before it was recorded would wait
// forever, its members that lost their data waiting to bootstrap.
func adoptFormedCluster(st Status, members []Member, freshAfter time.Time) (Status, string) {
	var names []string
	var dirs []DataDir
	for _, m := range members {
		names = append(names, m.Name)
		r := m.Report
		// Reports of data of this cluster made since freshAfter: the member's own, or
		// another member's found in its dir, or damaged. All say the cluster formed; only
		// a member's own valid data proves its ID.
		if r == nil || r.At.Before(freshAfter) || !(r.OwnData() || r.Formed) {
			continue
		}
		d := DataDir{Member: m.Name, Owner: r.Owner, MemberID: r.MemberID, Epoch: r.AppliedEpoch, Applied: r.Applied, Members: r.Members}
		if r.DataSuperseded() {
			d.Superseded = r.SupersededBy
		}
		if r.OwnData() {
			d.Owner, d.WALMemberID = m.Name, r.MemberID
		}
		if r.Formed {
			d.ClusterID = r.ClusterID
		}
		dirs = append(dirs, d)
	}
	rebuilt := RebuildStatus("", names, dirs)
	if rebuilt.ClusterID == "" {
		return st, ""
	}
	st.ClusterID, st.Voters, st.LastEpoch = rebuilt.ClusterID, rebuilt.Voters, max(st.LastEpoch, rebuilt.LastEpoch)
	return st, fmt.Sprintf("cluster %s formed, as its members report, but was not recorded: recorded with %d voters", st.ClusterID, len(st.Voters))
}
