package member

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/datadir"
)

// TestSupersededRecordKeptByTheReports: a member whose etcd is held stopped runs no
// initialisation, so its sidecar's reports from disk keep the data dir's record that a
// restore supersedes its data, and show it: written under the restore, cleared under its
// cancel, and gone once data is started on in the dir (a new identity).
func TestSupersededRecordKeptByTheReports(t *testing.T) {
	spec := oneMember(t, "tok")
	self := spec.Members[0]
	restore := &cluster.Directive{Epoch: 4, Phase: cluster.PhaseFencing, Mode: cluster.RecoverFromBackup, Restore: &cluster.RestoreTarget{Timeline: 1, Revision: 9}}
	cancel := &cluster.Directive{Epoch: 5, Phase: cluster.PhaseFencing, Cancels: 4}
	dataDir := filepath.Join(t.TempDir(), "data")
	sc, err := New(Config{Name: "test", DataDir: dataDir, View: staticView{cluster.Snapshot{Spec: spec}}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	report := func(d *cluster.Directive) cluster.Report {
		t.Helper()
		return sc.buildReport(context.Background(), nil, self, cluster.Snapshot{Spec: spec, Directive: d})
	}
	recorded := func() int64 {
		t.Helper()
		epoch, err := datadir.ReadSuperseded(dataDir)
		if err != nil {
			t.Fatal(err)
		}
		return epoch
	}

	if r := report(restore); r.SupersededBy != 0 || recorded() != 0 {
		t.Fatalf("an empty data dir under a restore: report %d, record %d; want none (nothing to mark)", r.SupersededBy, recorded())
	}
	// Something of a member in the dir (a damaged database will do).
	if err := os.MkdirAll(filepath.Dir(datadir.DBPath(dataDir)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(datadir.DBPath(dataDir), []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := report(nil); r.SupersededBy != 0 || recorded() != 0 {
		t.Fatalf("no directive: report %d, record %d; want none", r.SupersededBy, recorded())
	}
	if r := report(restore); r.SupersededBy != 4 || recorded() != 4 {
		t.Fatalf("under the restore: report %d, record %d; want 4", r.SupersededBy, recorded())
	}
	if r := report(nil); r.SupersededBy != 4 || recorded() != 4 {
		t.Fatalf("once the directive is gone (a status lost): report %d, record %d; want 4 kept", r.SupersededBy, recorded())
	}
	if r := report(cancel); r.SupersededBy != 0 || recorded() != 0 {
		t.Fatalf("under the cancel of the restore: report %d, record %d; want it cleared", r.SupersededBy, recorded())
	}
	report(restore)
	if err := sc.writeIdentity(datadir.Identity{ClusterName: spec.Name, ClusterToken: spec.Token, MemberName: "test"}); err != nil {
		t.Fatal(err)
	}
	if recorded() != 0 {
		t.Fatalf("data started on in the dir (a new identity) keeps the record %d", recorded())
	}
}
