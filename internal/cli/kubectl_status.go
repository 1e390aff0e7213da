package cli

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/livefigures"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// clusterStatus is what `kubectl steward status` prints.
type clusterStatus struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	ClusterID string `json:"clusterID,omitempty"`
	Replicas  int32  `json:"replicas"`
	Ready     int32  `json:"ready"`
	Leader    string `json:"leader,omitempty"`
	// Revision is the cluster's, and RevisionFrom where it was read (see origin): live from
	// the members' reports, or the status's, which lags on a cluster at rest.
	Revision     int64  `json:"revision,omitempty"`
	RevisionFrom string `json:"revisionFrom"`
	Client       string `json:"client,omitempty"`
	// StatusWritten is when the status was last written: the time of its figures.
	StatusWritten *time.Time `json:"statusWritten,omitempty"`
	// Unread says what the user could not read, the status's figures standing in.
	Unread []string `json:"unread,omitempty"`
	// Fenced are the members whose fence is in force (status.fencedMembers); FenceAsked the
	// members the annotation etcd.steward.dev/fenced-members names (a fence asked for may be
	// refused, or suspended while a recovery runs: the conditions and Events say why).
	Fenced     []string          `json:"fencedMembers,omitempty"`
	FenceAsked []string          `json:"fenceAsked,omitempty"`
	Conditions []statusCondition `json:"conditions"`
	Members    []memberView      `json:"members"`
	Backup     *backupView       `json:"backup,omitempty"`
	Events     []eventView       `json:"events"`
}

type statusCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

type memberView struct {
	Name   string `json:"name"`
	ID     string `json:"id,omitempty"`
	Role   string `json:"role,omitempty"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// Fenced: the member's fence is in force (its etcd is held stopped on purpose).
	Fenced bool `json:"fenced"`
	// From the member's own report.
	Revision  int64  `json:"revision,omitempty"`
	LastIndex uint64 `json:"lastIndex,omitempty"`
	Serving   bool   `json:"serving"`
	// ReportAge is how old the member's newest report is ("" for none).
	ReportAge string `json:"reportAge,omitempty"`
}

type backupView struct {
	Store         string     `json:"store"`
	LastFull      *time.Time `json:"lastFullSnapshot,omitempty"`
	LastFullRev   int64      `json:"lastFullRevision,omitempty"`
	LastDelta     *time.Time `json:"lastDeltaSnapshot,omitempty"`
	LastDeltaRev  int64      `json:"lastDeltaRevision,omitempty"`
	LastBackupAge string     `json:"lastBackupAge,omitempty"`
	// From is where the newest snapshots were read: live from the snapshot Leases, or the
	// status's (see origin).
	From string `json:"from"`
	// Recoverable is what a restore reaches (status.recoverability), as of RecoverableFrom.
	Recoverable     *v1alpha1.Recoverability `json:"recoverable,omitempty"`
	RecoverableFrom string                   `json:"recoverableFrom,omitempty"`
}

type eventView struct {
	Age     string `json:"age"`
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func newKubectlStatusCommand(f *kubeFlags) *cobra.Command {
	var out outputFlag
	var events int
	cmd := &cobra.Command{
		Use:   "status CLUSTER",
		Short: "Show a cluster: conditions, members as they report themselves, backups and recent Events",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			k, err := f.connect()
			if err != nil {
				return err
			}
			st, err := readClusterStatus(cmd.Context(), k, args[0], events, time.Now())
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), st, func(t *table) { st.table(t) })
		},
	}
	out.register(cmd)
	cmd.Flags().IntVar(&events, "events", 10, "how many of the newest Events to show")
	return cmd
}

func readClusterStatus(ctx context.Context, k *kube, name string, events int, now time.Time) (*clusterStatus, error) {
	ec, err := k.cluster(ctx, name)
	if err != nil {
		return nil, err
	}
	f, err := livefigures.Read(ctx, k.c, ec)
	if err != nil {
		return nil, err
	}
	st := &clusterStatus{Name: ec.Name, Namespace: ec.Namespace, ClusterID: ec.Status.ClusterID, Replicas: ec.Spec.Replicas,
		Ready: ec.Status.ReadyReplicas, Leader: ec.Status.Leader, Revision: f.Revision, RevisionFrom: origin(f.RevisionFrom, f.RevisionAt, now),
		Client: ec.Status.Endpoints.Client, Fenced: ec.Status.FencedMembers, FenceAsked: operator.FencedMembers(ec), Unread: f.Unread,
		Conditions: []statusCondition{}, Members: []memberView{}, Events: []eventView{}}
	if !f.StatusAt.IsZero() {
		st.StatusWritten = &f.StatusAt
	}
	for _, c := range ec.Status.Conditions {
		st.Conditions = append(st.Conditions, statusCondition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message})
	}
	for _, m := range ec.Status.Members {
		mv := memberView{Name: m.Name, ID: m.ID, Role: m.Role, Status: m.Status, Reason: m.Reason, Fenced: slices.Contains(ec.Status.FencedMembers, m.Name)}
		if r, ok := f.Reports[m.Name]; ok {
			mv.Revision, mv.LastIndex, mv.Serving = r.Revision, r.LastIndex, r.Serving
			if !r.At.IsZero() {
				mv.ReportAge = now.Sub(r.At).Round(time.Second).String()
			}
		}
		st.Members = append(st.Members, mv)
	}
	if ec.Spec.Backup != nil {
		st.Backup = backupOf(ec, f, now)
	}
	var list corev1.EventList
	if err := k.c.List(ctx, &list, client.InNamespace(ec.Namespace)); err != nil {
		return nil, fmt.Errorf("reading the Events of %s/%s: %w", ec.Namespace, ec.Name, err)
	}
	var mine []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "EtcdCluster" && e.InvolvedObject.Name == ec.Name {
			mine = append(mine, e)
		}
	}
	sort.Slice(mine, func(i, j int) bool { return eventTime(mine[i]).After(eventTime(mine[j])) })
	for i := 0; i < len(mine) && i < events; i++ {
		e := mine[i]
		st.Events = append(st.Events, eventView{Age: now.Sub(eventTime(e)).Round(time.Second).String(), Type: e.Type, Reason: e.Reason, Message: e.Message})
	}
	return st, nil
}

// backupOf is the cluster's backups: the newest snapshots from f, the window from the status.
func backupOf(ec *v1alpha1.EtcdCluster, f livefigures.Figures, now time.Time) *backupView {
	b := &backupView{Store: ec.Spec.Backup.Store, Recoverable: ec.Status.Recoverability, From: origin(f.BackupsFrom, f.StatusAt, now)}
	if s := f.Full; s != nil {
		b.LastFull, b.LastFullRev = &s.At, s.Revision
	}
	if s := f.Delta; s != nil {
		b.LastDelta, b.LastDeltaRev = &s.At, s.Revision
	}
	if t := f.LastBackup(); !t.IsZero() {
		b.LastBackupAge = now.Sub(t).Round(time.Second).String()
	}
	if b.Recoverable != nil {
		b.RecoverableFrom = origin(livefigures.FromStatus, f.StatusAt, now)
	}
	return b
}

// origin says where a figure was read, and, for the status's, as of when: the status's
// moving figures are written at most once an hour on a cluster at rest.
func origin(from livefigures.Source, at, now time.Time) string {
	switch {
	case from != livefigures.FromStatus:
		return "live, from the " + string(from)
	case at.IsZero():
		return "from the status, as of its last write (its time not known)"
	}
	return fmt.Sprintf("from the status, as of %s (%s ago)", at.UTC().Format(time.RFC3339), now.Sub(at).Round(time.Second))
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func (st *clusterStatus) table(t *table) {
	t.row("cluster", st.Namespace+"/"+st.Name)
	t.row("cluster ID", orDash(st.ClusterID))
	t.row("ready", fmt.Sprintf("%d/%d", st.Ready, st.Replicas))
	t.row("leader", orDash(st.Leader))
	t.row("revision", fmt.Sprintf("%d (%s)", st.Revision, st.RevisionFrom))
	t.row("client", orDash(st.Client))
	t.row("fenced", st.fenceSummary())
	if b := st.Backup; b != nil {
		t.row("backup store", b.Store)
		t.row("last backup", fmt.Sprintf("%s ago (%s)", orDash(b.LastBackupAge), b.From))
		if b.LastFull != nil {
			t.row("last full snapshot", fmt.Sprintf("revision %d at %s", b.LastFullRev, b.LastFull.UTC().Format(time.RFC3339)))
		}
		if b.LastDelta != nil {
			t.row("last delta snapshot", fmt.Sprintf("revision %d at %s", b.LastDeltaRev, b.LastDelta.UTC().Format(time.RFC3339)))
		}
		if w := b.Recoverable; w != nil && w.FirstTime != nil && w.LastTime != nil {
			t.row("recoverable", recoverable(uint32(w.Timeline), w.FirstRevision, w.LastRevision, w.FirstTime.Time, w.LastTime.Time)+" ("+b.RecoverableFrom+")")
		} else {
			t.row("recoverable", "- (no backup leader has reported what the store can restore)")
		}
	} else {
		t.row("backup store", "none (spec.backup not set)")
	}
	for _, u := range st.Unread {
		t.row("not read", u+"; the status's figures stand in")
	}
	t.row("")
	t.header("CONDITION", "STATUS", "REASON", "MESSAGE")
	for _, c := range st.Conditions {
		t.row(c.Type, c.Status, orDash(c.Reason), c.Message)
	}
	t.row("")
	t.header("MEMBER", "ID", "ROLE", "STATUS", "FENCED", "REVISION", "LAST INDEX", "SERVING", "REPORT AGE")
	for _, m := range st.Members {
		t.row(m.Name, orDash(m.ID), orDash(m.Role), m.Status+reasonSuffix(m.Reason), strconv.FormatBool(m.Fenced), strconv.FormatInt(m.Revision, 10),
			strconv.FormatUint(m.LastIndex, 10), strconv.FormatBool(m.Serving), orDash(m.ReportAge))
	}
	if len(st.Events) > 0 {
		t.row("")
		t.header("AGE", "TYPE", "REASON", "MESSAGE")
		for _, e := range st.Events {
			t.row(e.Age, e.Type, e.Reason, e.Message)
		}
	}
}

// fenceSummary names the members fenced, and those the annotation asks for that are not.
func (st *clusterStatus) fenceSummary() string {
	s := "none"
	if len(st.Fenced) > 0 {
		s = strings.Join(st.Fenced, ", ")
	}
	if pending := slices.DeleteFunc(slices.Clone(st.FenceAsked), func(n string) bool { return slices.Contains(st.Fenced, n) }); len(pending) > 0 {
		s += fmt.Sprintf("; asked for but not in force: %s (refused, or suspended while a recovery runs: see the conditions and Events)", strings.Join(pending, ", "))
	}
	return s
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}
