package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/livefigures"
	"github.com/etcd-steward/steward/internal/operator"
)

// restoreTarget is the point `kubectl steward restore` asks for (all nil: the newest).
type restoreTarget struct {
	Revision, Timeline *int64
	Time               *metav1.Time
}

// String names the point as a directive names its target (cluster.RestoreTarget.Point).
func (t restoreTarget) String() string {
	return operator.RestoreTargetOf(t.Revision, t.Timeline, t.Time).Point()
}

// restorePlan is what `kubectl steward restore --dry-run` prints.
type restorePlan struct {
	Cluster string `json:"cluster"`
	Into    string `json:"into,omitempty"`
	// Revision is the cluster's revision now and RevisionFrom where it was read (live from
	// the members' reports, or the status's, see origin); Window the recoverable window its
	// status records, as of WindowFrom.
	Revision     int64  `json:"revision"`
	RevisionFrom string `json:"revisionFrom"`
	Window       string `json:"window,omitempty"`
	WindowFrom   string `json:"windowFrom,omitempty"`
	Target       string `json:"target"`
	// Dropped counts at least the revisions after the target that a restore in place drops,
	// from Revision (0: none known, as for a time).
	Dropped int64  `json:"dropped,omitempty"`
	Verdict string `json:"verdict"`
}

// planRestore checks the target against the recoverable window in the cluster's status, and
// counts what a restore in place drops from the cluster's live revision (f). The operator
// checks the target against the store itself before it acts; this is what a user can know
// beforehand. The error says why the restore would be refused.
func planRestore(ec *v1alpha1.EtcdCluster, f livefigures.Figures, target restoreTarget, into string, now time.Time) (restorePlan, error) {
	p := restorePlan{Cluster: ec.Name, Into: into, Revision: f.Revision, RevisionFrom: origin(f.RevisionFrom, f.RevisionAt, now), Target: target.String()}
	w := ec.Status.Recoverability
	if ec.Spec.Backup == nil {
		p.Verdict = "refused: the cluster has no spec.backup, so no backups to restore"
		return p, fmt.Errorf("EtcdCluster %s/%s: %s", ec.Namespace, ec.Name, p.Verdict)
	}
	if w == nil || w.LastRevision == 0 {
		p.Verdict = "not checked: the status records no recoverable window yet; the operator checks the target against the store"
		return p, nil
	}
	p.Window = fmt.Sprintf("revisions %d-%d", w.FirstRevision, w.LastRevision)
	if w.FirstTime != nil && w.LastTime != nil {
		p.Window += fmt.Sprintf(" (%s to %s)", w.FirstTime.UTC().Format(time.RFC3339), w.LastTime.UTC().Format(time.RFC3339))
	}
	p.WindowFrom = origin(livefigures.FromStatus, f.StatusAt, now)
	if target.Timeline != nil && *target.Timeline != w.Timeline {
		p.Verdict = fmt.Sprintf("not checked: timeline %d is not the cluster's own (%d), whose window the status records; the operator checks it against the store", *target.Timeline, w.Timeline)
		return p, nil
	}
	// The window's start is what retention left. Its end is as of the status's last write and
	// moves on with every backup: a target past it is not refused (the store may hold it by
	// now; the operator checks it there).
	outside := ""
	switch {
	case target.Revision != nil && *target.Revision < w.FirstRevision:
		outside = fmt.Sprintf("revision %d is before the recoverable %s", *target.Revision, p.Window)
	case target.Time != nil && w.FirstTime != nil && target.Time.Before(w.FirstTime):
		outside = fmt.Sprintf("%s is before the recoverable %s", p.Target, p.Window)
	}
	if outside != "" {
		p.Verdict = "refused: " + outside
		return p, fmt.Errorf("EtcdCluster %s/%s: %s", ec.Namespace, ec.Name, outside)
	}
	pending := ""
	if target.Revision != nil && *target.Revision > w.LastRevision {
		pending = fmt.Sprintf(" (revision %d is past the window the status last recorded; the backups taken since may hold it%s: the operator checks it against the store)",
			*target.Revision, storedNote(f))
	}
	switch {
	case into != "":
		p.Verdict = fmt.Sprintf("a new EtcdCluster %s would start from %s; %s stays as it is%s", into, p.Target, ec.Name, pending)
	case target.Revision != nil:
		p.Dropped = max(p.Revision-*target.Revision, 0)
		p.Verdict = fmt.Sprintf("in place: every write after revision %d would be dropped (at least %d revisions: the cluster's revision is %d, %s)%s",
			*target.Revision, p.Dropped, p.Revision, p.RevisionFrom, pending)
	case target.Time != nil:
		p.Verdict = fmt.Sprintf("in place: every write after %s would be dropped (the cluster's revision is %d, %s)", p.Target, p.Revision, p.RevisionFrom)
	default:
		p.Verdict = "in place: the writes after the newest revision the backups hold would be dropped (none, once the backups have caught up)"
	}
	return p, nil
}

// storedNote names the newest revision the backups hold, when the snapshot Leases say it.
func storedNote(f livefigures.Figures) string {
	if f.BackupsFrom != livefigures.FromLeases || f.Stored == nil {
		return ""
	}
	return fmt.Sprintf(", and the snapshot Leases say they hold revision %d by now", f.Stored.Revision)
}

// restoredInto is what `kubectl steward restore --into` prints.
type restoredInto struct {
	Cluster  string `json:"cluster"`
	From     string `json:"from"`
	Target   string `json:"target"`
	Ready    bool   `json:"ready"`
	Revision int64  `json:"revision,omitempty"`
}

// restoreInto creates a new EtcdCluster into of src's spec, without src's backups (two clusters
// writing one store would mix their histories) and starting from target in src's store, read
// with src's credentials Secret; and waits for it to be Ready.
func restoreInto(cmd *cobra.Command, k *kube, src *v1alpha1.EtcdCluster, target restoreTarget, into string, wait time.Duration, out outputFlag) error {
	ctx := cmd.Context()
	b := src.Spec.Backup
	if b == nil || b.Store == "" {
		return fmt.Errorf("EtcdCluster %s/%s has no spec.backup: there is no store to restore from", src.Namespace, src.Name)
	}
	if target.Timeline == nil && src.Status.Recoverability != nil && src.Status.Recoverability.Timeline != 0 {
		tl := src.Status.Recoverability.Timeline // the cluster's own history, never another's in the same store
		target.Timeline = &tl
	}
	spec := src.Spec.DeepCopy()
	spec.Backup = nil
	spec.Bootstrap = &v1alpha1.BootstrapSpec{Restore: &v1alpha1.RestoreSource{Store: b.Store, CredentialsSecret: b.CredentialsSecret,
		Revision: target.Revision, Time: target.Time, Timeline: target.Timeline}}
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: src.Namespace, Name: into}, Spec: *spec}
	if err := k.c.Create(ctx, ec); apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("an EtcdCluster %s/%s exists already: name another with --into", src.Namespace, into)
	} else if err != nil {
		return fmt.Errorf("creating EtcdCluster %s/%s: %w", src.Namespace, into, err)
	}
	w := cmd.ErrOrStderr()
	fmt.Fprintf(w, "EtcdCluster %s created, starting from %s of %s's backups; it has no backups of its own: give it spec.backup with a store of its own\n", into, target, src.Name)
	res := restoredInto{Cluster: into, From: src.Name, Target: target.String()}
	if wait > 0 {
		err := waitFor(ctx, wait, "EtcdCluster "+into, func(l string) { fmt.Fprintln(w, l) }, func(ctx context.Context) (bool, string, error) {
			if err := k.c.Get(ctx, client.ObjectKeyFromObject(ec), ec); err != nil {
				return false, "", fmt.Errorf("reading EtcdCluster %s/%s: %w", ec.Namespace, into, err)
			}
			if c := apimeta.FindStatusCondition(ec.Status.Conditions, v1alpha1.ConditionReady); c != nil {
				return c.Status == metav1.ConditionTrue, fmt.Sprintf("Ready=%s: %s", c.Status, c.Message), nil
			}
			return false, "", nil
		})
		if err != nil {
			return err
		}
		res.Ready, res.Revision = true, ec.Status.Revision
	}
	return out.print(cmd.OutOrStdout(), res, func(t *table) {
		t.header("CLUSTER", "FROM", "TARGET", "READY", "REVISION")
		t.row(res.Cluster, res.From, res.Target, strconv.FormatBool(res.Ready), orDashIfZero(res.Revision, strconv.FormatInt(res.Revision, 10)))
	})
}
