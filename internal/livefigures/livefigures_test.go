package livefigures

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

var (
	t0        = time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	written   = t0.Add(-50 * time.Minute) // the status's last write, its figures as of then
	renewFull = t0.Add(-20 * time.Minute)
	renewLast = t0.Add(-3 * time.Second)
)

func TestNewer(t *testing.T) {
	tests := []struct {
		name    string
		a, b    Publication
		wantRev int64
	}{
		{"the first publication", None, Publication{100, t0}, 100},
		{"a later delta after the full", Publication{100, t0}, Publication{150, t0.Add(time.Second)}, 150},
		{"a history restart: the new timeline's full is newer than the old timeline's delta", Publication{150, t0}, Publication{90, t0.Add(time.Second)}, 90},
		{"an older publication does not win", Publication{90, t0.Add(time.Second)}, Publication{150, t0}, 90},
		{"a tie: the higher revision", Publication{100, t0}, Publication{120, t0}, 120},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Newer(tt.a, tt.b); got.Revision != tt.wantRev {
				t.Fatalf("got %d, want %d", got.Revision, tt.wantRev)
			}
		})
	}
}

// mainCluster is an EtcdCluster of ID c1 with backups whose status was last written at written,
// with revision 100 and snapshots at 80 (full) and 95 (delta) as of then.
func mainCluster() *v1alpha1.EtcdCluster {
	return &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "main", UID: "uid-main",
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "steward", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: t0.Add(-2 * time.Hour)}},
				{Manager: "steward", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &metav1.Time{Time: written}},
			}},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: 3, Backup: &v1alpha1.BackupSpec{Store: "s3://bucket/main"}},
		Status: v1alpha1.EtcdClusterStatus{ClusterID: "c1", Revision: 100,
			LastFullSnapshot:  &v1alpha1.SnapshotRef{Revision: 80, Time: metav1.NewTime(written.Add(-time.Hour))},
			LastDeltaSnapshot: &v1alpha1.SnapshotRef{Revision: 95, Time: metav1.NewTime(written.Add(-time.Second))}},
	}
}

func member(name, report string) *v1alpha1.EtcdMember {
	em := &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{v1alpha1.LabelCluster: "main"}}}
	em.Status.Report = &runtime.RawExtension{Raw: []byte(report)}
	return em
}

func report(name, clusterID string, serving bool, rev int64, at time.Time) string {
	return fmt.Sprintf(`{"name":%q,"clusterID":%q,"serving":%t,"revision":%d,"at":%q}`, name, clusterID, serving, rev, at.Format(time.RFC3339Nano))
}

// lease is snapshot Lease name of ec, renewed at renewed for rev.
func lease(ec *v1alpha1.EtcdCluster, name, rev string, renewed time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ec.Namespace, Name: name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &rev, RenewTime: &metav1.MicroTime{Time: renewed}}}
	l.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ec, v1alpha1.GroupVersion.WithKind("EtcdCluster"))}
	return l
}

// objects are the cluster's reports and Leases: serving members of c1 at 150 and 148, a
// member no longer serving that reported 200, one of another history at 999; the full
// snapshot at 120 and the delta at 149.
func objects(ec *v1alpha1.EtcdCluster) []client.Object {
	return []client.Object{
		member("main-0", report("main-0", "c1", true, 150, renewLast)),
		member("main-1", report("main-1", "c1", true, 148, renewLast.Add(-time.Second))),
		member("main-2", report("main-2", "c1", false, 200, t0.Add(-time.Hour))),
		member("seed-0", report("seed-0", "c2", true, 999, renewLast)),
		lease(ec, v1alpha1.FullSnapshotLeaseName("main"), "120", renewFull),
		lease(ec, v1alpha1.DeltaSnapshotLeaseName("main"), "149", renewLast),
	}
}

// is says whether p is revision rev published at at.
func is(p *Publication, rev int64, at time.Time) bool {
	return p != nil && p.Revision == rev && p.At.Equal(at)
}

func newClient(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build(), funcs)
}

// forbid refuses reading kind, as the API server does for a user whose Role lacks it.
func forbid(kind string) interceptor.Funcs {
	refuse := func(obj runtime.Object) error {
		if strings.TrimSuffix(fmt.Sprintf("%T", obj), "List") == kind {
			return apierrors.NewForbidden(schema.GroupResource{Resource: kind}, "", errors.New("the user may not"))
		}
		return nil
	}
	return interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := refuse(obj); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := refuse(list); err != nil {
				return err
			}
			return c.List(ctx, list, opts...)
		},
	}
}

// TestReadLive: the revision is the highest a serving member of the cluster's ID reports
// (not a stopped member's, not another history's), the snapshots are the Leases', and the
// backups hold the newer publication: each newer than the status, which lags.
func TestReadLive(t *testing.T) {
	ec := mainCluster()
	f, err := Read(context.Background(), newClient(t, interceptor.Funcs{}, objects(ec)...), ec)
	if err != nil {
		t.Fatal(err)
	}
	if f.Revision != 150 || f.RevisionFrom != FromReports || !f.RevisionAt.Equal(renewLast) {
		t.Errorf("revision %d from %s at %s, want 150 from the members' reports at %s", f.Revision, f.RevisionFrom, f.RevisionAt, renewLast)
	}
	if f.BackupsFrom != FromLeases || !is(f.Full, 120, renewFull) || !is(f.Delta, 149, renewLast) {
		t.Errorf("backups from %s: full %+v, delta %+v; want the Leases' 120 and 149", f.BackupsFrom, f.Full, f.Delta)
	}
	if f.Stored == nil || f.Stored.Revision != 149 || !f.LastBackup().Equal(renewLast) {
		t.Errorf("stored %+v, last backup %s: want the delta's 149 at %s", f.Stored, f.LastBackup(), renewLast)
	}
	if !f.StatusAt.Equal(written) || len(f.Unread) != 0 || len(f.Reports) != 4 {
		t.Errorf("status at %s (want %s), unread %v, %d reports (want 4)", f.StatusAt, written, f.Unread, len(f.Reports))
	}
}

// TestReadWithoutRightsToLeases: a user who may not read Leases gets the status's snapshots,
// said to come from the status, and told what could not be read; the reports still count.
func TestReadWithoutRightsToLeases(t *testing.T) {
	ec := mainCluster()
	f, err := Read(context.Background(), newClient(t, forbid("*v1.Lease"), objects(ec)...), ec)
	if err != nil {
		t.Fatal(err)
	}
	if f.BackupsFrom != FromStatus || f.Full == nil || f.Full.Revision != 80 || f.Delta == nil || f.Delta.Revision != 95 || f.Stored.Revision != 95 {
		t.Errorf("backups from %s: full %+v, delta %+v; want the status's 80 and 95", f.BackupsFrom, f.Full, f.Delta)
	}
	if len(f.Unread) != 1 || !strings.Contains(f.Unread[0], "snapshot Leases of ns/main (forbidden") {
		t.Errorf("unread %v, want the snapshot Leases named", f.Unread)
	}
	if f.Revision != 150 || f.RevisionFrom != FromReports {
		t.Errorf("revision %d from %s, want 150 from the reports", f.Revision, f.RevisionFrom)
	}
}

// TestReadWithoutRightsToMembers: without the reports, the revision is the status's, as of
// its last write.
func TestReadWithoutRightsToMembers(t *testing.T) {
	ec := mainCluster()
	f, err := Read(context.Background(), newClient(t, forbid("*v1alpha1.EtcdMember"), objects(ec)...), ec)
	if err != nil {
		t.Fatal(err)
	}
	if f.Revision != 100 || f.RevisionFrom != FromStatus || !f.RevisionAt.Equal(written) || f.Reports != nil {
		t.Errorf("revision %d from %s at %s, reports %v: want the status's 100 as of %s", f.Revision, f.RevisionFrom, f.RevisionAt, f.Reports, written)
	}
	if len(f.Unread) != 1 || !strings.Contains(f.Unread[0], "EtcdMembers of ns/main") || f.BackupsFrom != FromLeases {
		t.Errorf("unread %v, backups from %s: want the EtcdMembers named and the Leases read", f.Unread, f.BackupsFrom)
	}
}

// TestReadKeepsWhatIsNotTheClusters: a Lease of the name that the cluster does not control
// says nothing of its backups; a status revision above every serving report (its member
// since stopped) stays, revisions only grow; without spec.backup no Lease is read.
func TestReadKeepsWhatIsNotTheClusters(t *testing.T) {
	ec := mainCluster()
	ec.Status.Revision = 170
	foreign := lease(ec, v1alpha1.DeltaSnapshotLeaseName("main"), "5000", renewLast)
	foreign.OwnerReferences = nil
	objs := append(objects(ec)[:5], foreign)
	f, err := Read(context.Background(), newClient(t, interceptor.Funcs{}, objs...), ec)
	if err != nil {
		t.Fatal(err)
	}
	if f.Delta != nil || f.Stored == nil || f.Stored.Revision != 120 {
		t.Errorf("delta %+v, stored %+v: want no delta (the Lease is not the cluster's) and the full's 120", f.Delta, f.Stored)
	}
	if f.Revision != 170 || f.RevisionFrom != FromStatus {
		t.Errorf("revision %d from %s, want the status's 170", f.Revision, f.RevisionFrom)
	}

	ec.Spec.Backup = nil
	f, err = Read(context.Background(), newClient(t, forbid("*v1.Lease"), objects(ec)...), ec)
	if err != nil || f.BackupsFrom != "" || f.Stored != nil || len(f.Unread) != 0 {
		t.Errorf("without backups: %v, %+v", err, f)
	}
}

// TestReadFails: an error other than a refusal is the caller's, naming the object.
func TestReadFails(t *testing.T) {
	ec := mainCluster()
	c := newClient(t, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		return apierrors.NewServiceUnavailable("the API server is going away")
	}}, objects(ec)...)
	if _, err := Read(context.Background(), c, ec); err == nil || !strings.Contains(err.Error(), "snapshot Lease ns/main-full-snapshot") {
		t.Errorf("got %v, want an error naming the Lease", err)
	}
}

// TestReadWithoutLeases: Leases that publish nothing (not made yet, or deleted) leave the
// status's snapshots, said to be the status's.
func TestReadWithoutLeases(t *testing.T) {
	ec := mainCluster()
	f, err := Read(context.Background(), newClient(t, interceptor.Funcs{}, objects(ec)[:4]...), ec)
	if err != nil {
		t.Fatal(err)
	}
	if f.BackupsFrom != FromStatus || f.Full == nil || f.Full.Revision != 80 || f.Stored == nil || f.Stored.Revision != 95 || len(f.Unread) != 0 {
		t.Errorf("backups from %s: full %+v, stored %+v, unread %v; want the status's 80 and 95", f.BackupsFrom, f.Full, f.Stored, f.Unread)
	}
}
