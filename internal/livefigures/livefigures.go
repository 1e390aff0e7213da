// Package livefigures reads an EtcdCluster's moving figures where they live: the snapshot
// Leases that the backup leader renews at each backup (their holder names the revision
// stored) and the members' own reports (their EtcdMembers). The cluster's status carries the
// same figures, but the operator writes them with another change of the status or at most
// once an hour, so that a cluster at rest costs no API writes; they lag on a cluster at rest.
package livefigures

import (
	"context"
	"fmt"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/kubeview"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Publication is what a snapshot Lease says: the newest revision of its kind in the store,
// and when the backup leader renewed the Lease for it (zero: not known). A Revision below 0
// is no publication.
type Publication struct {
	Revision int64     `json:"revision"`
	At       time.Time `json:"at,omitzero"`
}

// None is no publication, the start of a search for the newer one.
var None = Publication{Revision: -1}

// FromLease reads a snapshot Lease (ok is false when its holder names no revision).
func FromLease(l *coordinationv1.Lease) (Publication, bool) {
	rev, ok := v1alpha1.SnapshotLeaseRevision(l.Spec.HolderIdentity)
	if !ok {
		return None, false
	}
	p := Publication{Revision: rev}
	if l.Spec.RenewTime != nil {
		p.At = l.Spec.RenewTime.Time
	}
	return p, true
}

// Newer is the later of two publications (on a tie, the higher revision). The newer one is
// of the timeline backed up now: after a history restart, the other Lease still names the
// old timeline's higher revision, which no restore of this cluster reaches.
func Newer(a, b Publication) Publication {
	if a.Revision < 0 || b.At.After(a.At) || (b.At.Equal(a.At) && b.Revision > a.Revision) {
		return b
	}
	return a
}

// ReadLease reads the snapshot Lease name of ec: its publication, found false when the Lease
// is not there, holds no revision yet, or is not the cluster's (a Lease of that name that
// another made says nothing of the cluster's backups).
func ReadLease(ctx context.Context, c client.Reader, ec *v1alpha1.EtcdCluster, name string) (p Publication, found bool, err error) {
	var l coordinationv1.Lease
	if err := c.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: name}, &l); err != nil {
		return None, false, client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(&l, ec) {
		return None, false, nil
	}
	p, found = FromLease(&l)
	return p, found, nil
}

// Source says where a figure was read.
type Source string

const (
	// FromReports: the members' own reports (EtcdMember), written by their sidecars when
	// something changes and their figures every 10 s.
	FromReports Source = "members' reports"
	// FromLeases: the snapshot Leases, renewed by the backup leader at each backup.
	FromLeases Source = "snapshot Leases"
	// FromStatus: the EtcdCluster's status, as of its last write (Figures.StatusAt).
	FromStatus Source = "status"
)

// Figures are a cluster's moving figures, each with where it was read.
type Figures struct {
	// Revision is the cluster's revision: the highest that a serving member of the cluster's
	// ID reports, or the status's when that is higher or no report can be read. At is the
	// report's time, or the status's last write.
	Revision     int64     `json:"revision"`
	RevisionFrom Source    `json:"revisionFrom"`
	RevisionAt   time.Time `json:"revisionAt,omitzero"`
	// Full and Delta are the newest full and delta snapshots (nil: none known); Stored the
	// newest revision the backups hold (the newer of the two, see Newer).
	Full        *Publication `json:"lastFullSnapshot,omitempty"`
	Delta       *Publication `json:"lastDeltaSnapshot,omitempty"`
	Stored      *Publication `json:"stored,omitempty"`
	BackupsFrom Source       `json:"backupsFrom,omitempty"`
	// StatusAt is when the status was last written (zero: not known), the time of the
	// figures taken from it.
	StatusAt time.Time `json:"statusAt,omitzero"`
	// Reports are the members' reports by member name (nil when they could not be read).
	Reports map[string]cluster.Report `json:"-"`
	// Unread says what could not be read, and why: the figures from the status stand in.
	Unread []string `json:"unread,omitempty"`
}

// Read reads ec's live figures with c: the members' reports and, with backups, the snapshot
// Leases. What the user may not read (a Role without Leases or EtcdMembers) is not an error:
// the status's figures stand in, and Unread says so. Other errors are returned.
func Read(ctx context.Context, c client.Reader, ec *v1alpha1.EtcdCluster) (Figures, error) {
	f := Figures{StatusAt: StatusWritten(ec)}
	if err := f.readReports(ctx, c, ec); err != nil {
		return f, err
	}
	return f, f.readLeases(ctx, c, ec)
}

func (f *Figures) readReports(ctx context.Context, c client.Reader, ec *v1alpha1.EtcdCluster) error {
	f.Revision, f.RevisionFrom, f.RevisionAt = ec.Status.Revision, FromStatus, f.StatusAt
	var ems v1alpha1.EtcdMemberList
	err := c.List(ctx, &ems, client.InNamespace(ec.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: ec.Name})
	if apierrors.IsForbidden(err) {
		f.Unread = append(f.Unread, fmt.Sprintf("the EtcdMembers of %s/%s (forbidden: %v)", ec.Namespace, ec.Name, err))
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the EtcdMembers of %s/%s: %w", ec.Namespace, ec.Name, err)
	}
	f.Reports = map[string]cluster.Report{}
	for i := range ems.Items {
		if r, ok := kubeview.MemberReport(&ems.Items[i], time.Time{}); ok {
			f.Reports[ems.Items[i].Name] = r
		}
	}
	if r, ok := newestServing(f.Reports, ec.Status.ClusterID); ok && r.Revision >= f.Revision {
		f.Revision, f.RevisionFrom, f.RevisionAt = r.Revision, FromReports, r.At
	}
	return nil
}

// newestServing is the report of the highest revision among the serving members of
// clusterID (a member of another history, as during a recovery, is not the cluster's).
func newestServing(reports map[string]cluster.Report, clusterID string) (cluster.Report, bool) {
	var best cluster.Report
	found := false
	for _, r := range reports {
		if r.Serving && clusterID != "" && r.ClusterID == clusterID && (!found || r.Revision > best.Revision) {
			best, found = r, true
		}
	}
	return best, found
}

func (f *Figures) readLeases(ctx context.Context, c client.Reader, ec *v1alpha1.EtcdCluster) error {
	if ec.Spec.Backup == nil {
		return nil
	}
	var pubs [2]*Publication
	for i, name := range []string{v1alpha1.FullSnapshotLeaseName(ec.Name), v1alpha1.DeltaSnapshotLeaseName(ec.Name)} {
		p, found, err := ReadLease(ctx, c, ec, name)
		if apierrors.IsForbidden(err) {
			f.Unread = append(f.Unread, fmt.Sprintf("the snapshot Leases of %s/%s (forbidden: %v)", ec.Namespace, ec.Name, err))
			f.backupsOfStatus(ec)
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the snapshot Lease %s/%s: %w", ec.Namespace, name, err)
		}
		if found {
			pubs[i] = &p
		}
	}
	if pubs[0] == nil && pubs[1] == nil {
		f.backupsOfStatus(ec) // no Lease publishes (not made yet, or deleted): the status may know
		return nil
	}
	f.Full, f.Delta, f.BackupsFrom = pubs[0], pubs[1], FromLeases
	f.setStored()
	return nil
}

// backupsOfStatus takes the newest snapshots from the status, when the Leases cannot be read
// or publish none.
func (f *Figures) backupsOfStatus(ec *v1alpha1.EtcdCluster) {
	f.BackupsFrom = FromStatus
	if s := ec.Status.LastFullSnapshot; s != nil {
		f.Full = &Publication{Revision: s.Revision, At: s.Time.Time}
	}
	if s := ec.Status.LastDeltaSnapshot; s != nil {
		f.Delta = &Publication{Revision: s.Revision, At: s.Time.Time}
	}
	f.setStored()
}

// setStored sets Stored, the newer of the newest snapshots.
func (f *Figures) setStored() {
	stored := None
	for _, p := range []*Publication{f.Full, f.Delta} {
		if p != nil {
			stored = Newer(stored, *p)
		}
	}
	if stored.Revision >= 0 {
		f.Stored = &stored
	}
}

// LastBackup is when the newest backup was published (zero: none known).
func (f Figures) LastBackup() time.Time {
	if f.Stored == nil {
		return time.Time{}
	}
	return f.Stored.At
}

// StatusWritten is when ec's status was last written, as the API server records it in the
// object's managed fields (zero when it does not say): every status write carries the
// moving figures as of that pass.
func StatusWritten(ec *v1alpha1.EtcdCluster) time.Time {
	var at time.Time
	for _, m := range ec.ManagedFields {
		if m.Subresource == "status" && m.Time != nil && m.Time.After(at) {
			at = m.Time.Time
		}
	}
	return at
}
