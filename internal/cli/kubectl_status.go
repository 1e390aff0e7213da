package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/cluster"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	Revision  int64  `json:"revision,omitempty"`
	Client    string `json:"client,omitempty"`
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
	// Recoverable is what a restore reaches (status.recoverability).
	Recoverable *v1alpha1.Recoverability `json:"recoverable,omitempty"`
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
	st := &clusterStatus{Name: ec.Name, Namespace: ec.Namespace, ClusterID: ec.Status.ClusterID, Replicas: ec.Spec.Replicas,
		Ready: ec.Status.ReadyReplicas, Leader: ec.Status.Leader, Revision: ec.Status.Revision, Client: ec.Status.Endpoints.Client,
		Fenced: ec.Status.FencedMembers, FenceAsked: operator.FencedMembers(ec),
		Conditions: []statusCondition{}, Members: []memberView{}, Events: []eventView{}}
	for _, c := range ec.Status.Conditions {
		st.Conditions = append(st.Conditions, statusCondition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message})
	}
	var ems v1alpha1.EtcdMemberList
	if err := k.c.List(ctx, &ems, client.InNamespace(ec.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: ec.Name}); err != nil {
		return nil, fmt.Errorf("reading the EtcdMembers of %s/%s: %w", ec.Namespace, ec.Name, err)
	}
	reports := map[string]*runtime.RawExtension{}
	for _, em := range ems.Items {
		reports[em.Name] = em.Status.Report
	}
	for _, m := range ec.Status.Members {
		mv := memberView{Name: m.Name, ID: m.ID, Role: m.Role, Status: m.Status, Reason: m.Reason, Fenced: slices.Contains(ec.Status.FencedMembers, m.Name)}
		if raw := reports[m.Name]; raw != nil {
			var r cluster.Report
			if json.Unmarshal(raw.Raw, &r) == nil {
				mv.Revision, mv.LastIndex, mv.Serving = r.Revision, r.LastIndex, r.Serving
				if !r.At.IsZero() {
					mv.ReportAge = now.Sub(r.At).Round(time.Second).String()
				}
			}
		}
		st.Members = append(st.Members, mv)
	}
	if ec.Spec.Backup != nil {
		b := &backupView{Store: ec.Spec.Backup.Store, Recoverable: ec.Status.Recoverability}
		if s := ec.Status.LastFullSnapshot; s != nil {
			b.LastFull, b.LastFullRev = &s.Time.Time, s.Revision
		}
		if s := ec.Status.LastDeltaSnapshot; s != nil {
			b.LastDelta, b.LastDeltaRev = &s.Time.Time, s.Revision
		}
		if t := ec.Status.LastBackupTime; t != nil {
			b.LastBackupAge = now.Sub(t.Time).Round(time.Second).String()
		}
		st.Backup = b
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
	t.row("revision", strconv.FormatInt(st.Revision, 10))
	t.row("client", orDash(st.Client))
	t.row("fenced", st.fenceSummary())
	if b := st.Backup; b != nil {
		t.row("backup store", b.Store)
		t.row("last backup", orDash(b.LastBackupAge)+" ago")
		if b.LastFull != nil {
			t.row("last full snapshot", fmt.Sprintf("revision %d at %s", b.LastFullRev, b.LastFull.UTC().Format(time.RFC3339)))
		}
		if w := b.Recoverable; w != nil && w.FirstTime != nil && w.LastTime != nil {
			t.row("recoverable", recoverable(uint32(w.Timeline), w.FirstRevision, w.LastRevision, w.FirstTime.Time, w.LastTime.Time))
		} else {
			t.row("recoverable", "- (no backup leader has reported what the store can restore)")
		}
	} else {
		t.row("backup store", "none (spec.backup not set)")
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
