package kubeview_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestEtcdRestoreOnARealMember runs the EtcdRestore reconciler against a real member
// and its real backups, up to its request to start: the full snapshot is taken by the real
// sidecar, the target is checked by the real sidecar's dry run of the restore against the
// store it backs up to, and the request names that target on that timeline. A timeline the
// store does not hold fails before the request. The member then carries the directive out,
// the test playing the cluster reconciler's part (the directive issued from the request, the
// fencing) and heal's choice of seed (no operator runs here): restored in place to exactly
// the target.
func TestEtcdRestoreOnARealMember(t *testing.T) {
	c := needAPI(t)
	ns, ms := newCluster(t, c, 1)
	ms[0].start(t, ns)
	var rep cluster.Report
	testutil.Eventually(t, 90*time.Second, "c-0 serving", func() error {
		var err error
		if rep, err = reportOf(t, c, ns, "c-0"); err != nil {
			return err
		}
		if !rep.Serving {
			return fmt.Errorf("c-0: case %s: %s", rep.Case, rep.Reason)
		}
		return nil
	})
	// The target must be backed up: the first full snapshot (taken when backups start) comes
	// before the puts, and deltas after it.
	testutil.Eventually(t, 90*time.Second, "c-0's backups ready", func() error {
		var em v1alpha1.EtcdMember
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "c-0"}, &em); err != nil {
			return err
		}
		if full := holder(t, c, ns, "c-full-snapshot"); full == "" || em.Status.Backup == nil || !em.Status.Backup.Ready {
			return fmt.Errorf("full-snapshot holder %q, backup status %+v", full, em.Status.Backup)
		}
		return nil
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{fmt.Sprintf("http://127.0.0.1:%d", ms[0].client)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var target int64
	for i := 0; i < 20; i++ {
		put, err := cli.Put(ctx, fmt.Sprintf("k%02d", i), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 9 {
			target = put.Header.Revision
		}
	}
	// The operator records the cluster ID once the members report it formed.
	var ec v1alpha1.EtcdCluster
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c"}, &ec); err != nil {
		t.Fatal(err)
	}
	ec.Status.ClusterID = rep.ClusterID
	if err := c.Status().Update(ctx, &ec); err != nil {
		t.Fatal(err)
	}

	rr := &operator.RestoreReconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100),
		Sidecars: sidecars(t, c, ns)}
	follow := func(name string, until func(*v1alpha1.EtcdRestore) bool) *v1alpha1.EtcdRestore {
		t.Helper()
		er := &v1alpha1.EtcdRestore{}
		testutil.Eventually(t, 60*time.Second, name, func() error {
			if _, err := rr.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}); err != nil {
				return err
			}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, er); err != nil {
				return err
			}
			if !until(er) {
				return fmt.Errorf("%s: %s", er.Status.Phase, er.Status.Message)
			}
			return nil
		})
		return er
	}
	run := func(name string, spec v1alpha1.EtcdRestoreSpec, until func(*v1alpha1.EtcdRestore) bool) *v1alpha1.EtcdRestore {
		t.Helper()
		spec.Cluster = "c"
		if err := c.Create(ctx, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}); err != nil {
			t.Fatal(err)
		}
		return follow(name, until)
	}

	// A timeline the store does not hold: refused by the dry run, before any directive.
	tl := int64(99)
	bad := run("bad", v1alpha1.EtcdRestoreSpec{Revision: &target, Timeline: &tl}, func(er *v1alpha1.EtcdRestore) bool {
		return er.Status.Phase == v1alpha1.RestoreFailed
	})
	if !strings.Contains(bad.Status.Message, "cannot give the target") || !strings.Contains(bad.Status.Message, "99") {
		t.Errorf("bad target: %s", bad.Status.Message)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c"}, &ec); err != nil || ec.Status.Recovery != nil {
		t.Fatalf("a directive after a bad target: %v %+v", err, ec.Status.Recovery)
	}

	er := run("good", v1alpha1.EtcdRestoreSpec{Revision: &target}, func(er *v1alpha1.EtcdRestore) bool {
		return er.Status.Phase == v1alpha1.RestoreFencing && er.Status.Request != nil
	})
	snap, checked := er.Status.Snapshot, er.Status.Target
	if snap == nil || snap.Revision < target+10 || snap.Timeline < 1 || !strings.Contains(snap.Key, "/full/") {
		t.Fatalf("snapshot %+v: want a full snapshot of the present, at revision %d or later", snap, target+10)
	}
	if checked == nil || !strings.Contains(checked.Checked, fmt.Sprintf("against the store: timeline %d gives revision %d", snap.Timeline, target)) ||
		checked.Revision != target || checked.Timeline != snap.Timeline {
		t.Fatalf("target %+v: want revision %d pinned to timeline %d", checked, target, snap.Timeline)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c"}, &ec); err != nil || ec.Status.Recovery != nil {
		t.Fatalf("the EtcdRestore's reconciler wrote the cluster's status.recovery: %v %+v", err, ec.Status.Recovery)
	}
	// The test plays the cluster's reconciler: it issues the directive the request asks for.
	issued := time.Now()
	writeRecovery(t, c, ns, "c", cluster.Directive{Epoch: er.Status.Request.AfterEpoch + 1, Phase: cluster.PhaseFencing,
		Restore: &cluster.RestoreTarget{Revision: checked.Revision, Timeline: uint32(checked.Timeline)}, IssuedAt: issued, PhaseSince: issued})
	er = follow("good", func(er *v1alpha1.EtcdRestore) bool { return er.Status.Epoch != 0 })
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c"}, &ec); err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Directive *cluster.Directive `json:"directive"`
	}
	if ec.Status.Recovery == nil || json.Unmarshal(ec.Status.Recovery.Raw, &rec) != nil || rec.Directive == nil {
		t.Fatalf("no directive: %+v", ec.Status.Recovery)
	}
	d := rec.Directive
	if d.Epoch != er.Status.Epoch || d.Phase != cluster.PhaseFencing || d.Restore == nil ||
		*d.Restore != (cluster.RestoreTarget{Revision: target, Timeline: uint32(snap.Timeline)}) {
		t.Fatalf("directive %+v, restore %+v: want epoch %d restoring revision %d of timeline %d from the cluster's store", d, d.Restore, er.Status.Epoch, target, snap.Timeline)
	}

	// The member carries the directive out, with the test in the operator's part: fenced
	// (its processes stopped, as its pod would be deleted), then told to seed from the
	// backup (heal chooses the only member). Its data is moved aside, the target restored from
	// its own store: the member serves exactly the target, with the keys written up to it.
	ms[0].stop()
	now := time.Now()
	writeRecovery(t, c, ns, "c", cluster.Directive{Epoch: d.Epoch, Phase: cluster.PhaseSeeding, Mode: cluster.RecoverFromBackup, Seed: "c-0",
		Restore: d.Restore, IssuedAt: d.IssuedAt, PhaseSince: now})
	ms[0].start(t, ns)
	testutil.Eventually(t, 90*time.Second, "c-0 restored to the target", func() error {
		r, err := reportOf(t, c, ns, "c-0")
		if err != nil {
			return err
		}
		// (A one-member cluster restored under the same name, peer URL and token gets the same
		// cluster ID: etcd derives it from them.)
		if !r.Serving || r.AppliedEpoch != d.Epoch {
			return fmt.Errorf("c-0: serving=%v epoch %d, case %s: %s", r.Serving, r.AppliedEpoch, r.Case, r.Reason)
		}
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		defer gcancel()
		resp, err := cli.Get(gctx, "k", clientv3.WithPrefix())
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 10 || resp.Header.Revision != target {
			return fmt.Errorf("c-0 holds %d keys at revision %d, want k00..k09 at revision %d", len(resp.Kvs), resp.Header.Revision, target)
		}
		return nil
	})
}
