package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// fenceChange is what fence and unfence did: the member, whether it is fenced now, and every
// member the cluster's annotation fences.
type fenceChange struct {
	Cluster string   `json:"cluster"`
	Member  string   `json:"member"`
	Fenced  bool     `json:"fenced"`
	Changed bool     `json:"changed"`
	All     []string `json:"fencedMembers"`
}

func newKubectlFenceCommand(f *kubeFlags) *cobra.Command {
	return fenceCommand(f, true, cobra.Command{
		Use:   "fence MEMBER",
		Short: "Hold a member's etcd stopped, its pod and volume kept, until it is unfenced",
		Long: `Fence a member (its pod's name, <cluster>-<ordinal>): the operator holds its etcd stopped, its
pod running (or started again) and its volume kept, so that its data can be inspected, or the
member taken out of the cluster, without the operator restarting it. A fenced member counts as
down for etcd's quorum, but is no fault: the cluster is not Degraded for it, no quorum loss is
called on it, and it is never restarted. Scaling and rolling updates wait while a member is
fenced. If its etcd serves, the operator deletes its pod once (after moving leadership away
from it), and the new pod's sidecar holds etcd.

The fence is the annotation etcd.steward.dev/fenced-members on the EtcdCluster, written with
the version read as a precondition (a concurrent change is refused: run it again). A fence that
would leave fewer than a quorum of Ready voters unfenced is refused, here and by the operator:
to stop every member, hibernate the cluster. If the other members lose the quorum, the
recovery needs every member's data: while it runs, every fence is suspended (the member follows
the recovery), and once it is done the fence applies again, while a quorum of Ready voters
stays unfenced.`,
	})
}

func newKubectlUnfenceCommand(f *kubeFlags) *cobra.Command {
	return fenceCommand(f, false, cobra.Command{
		Use:   "unfence MEMBER",
		Short: "Let a fenced member's etcd start again on its data",
		Long: `Unfence a member (its pod's name, <cluster>-<ordinal>): its name leaves the annotation
etcd.steward.dev/fenced-members, and its sidecar starts etcd again on the member's data.`,
	})
}

// fenceCommand is fence (fence true) or unfence: it adds the member to the cluster's
// annotation etcd.steward.dev/fenced-members, or removes it.
func fenceCommand(f *kubeFlags, fence bool, cmd cobra.Command) *cobra.Command {
	var out outputFlag
	cmd.Args = cobra.ExactArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		member := args[0]
		i := strings.LastIndex(member, "-")
		if _, err := strconv.Atoi(member[i+1:]); i <= 0 || err != nil {
			return fmt.Errorf("%q is no member name: a member is named after its pod, <cluster>-<ordinal> (e.g. main-2)", member)
		}
		ctx := cmd.Context()
		k, ec, err := f.connectTo(ctx, member[:i])
		if err != nil {
			return err
		}
		var names []string
		for _, m := range ec.Status.Members {
			names = append(names, m.Name)
		}
		if !slices.Contains(names, member) {
			return fmt.Errorf("EtcdCluster %s/%s has no member %s: its members are %s", ec.Namespace, ec.Name, member, orNone(names))
		}
		fenced := operator.FencedMembers(ec)
		res := fenceChange{Cluster: ec.Name, Member: member, Fenced: fence}
		switch has := slices.Contains(fenced, member); {
		case fence && !has:
			fenced = append(fenced, member)
			if err := operator.FenceShortOfQuorum(member, readyVotersUnfenced(ec, fenced), len(ec.Status.Members)); err != nil {
				return fmt.Errorf("EtcdCluster %s/%s: %w, as its status last recorded them (to stop every member, hibernate: kubectl steward hibernate %s on); nothing done",
					ec.Namespace, ec.Name, err, ec.Name)
			}
			res.Changed = true
		case !fence && has:
			fenced = slices.DeleteFunc(fenced, func(n string) bool { return n == member })
			res.Changed = true
		}
		if res.Changed {
			value := jsonValue(strings.Join(fenced, ","))
			if len(fenced) == 0 {
				value = jsonValue(nil) // the annotation removed
			}
			raw := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:%s}}}`, ec.ResourceVersion, v1alpha1.AnnotationFencedMembers, value)
			if err := k.c.Patch(ctx, ec, client.RawPatch(types.MergePatchType, []byte(raw))); err != nil {
				if apierrors.IsConflict(err) {
					return fmt.Errorf("EtcdCluster %s/%s changed meanwhile: nothing done; run it again", ec.Namespace, ec.Name)
				}
				return fmt.Errorf("annotating EtcdCluster %s/%s: %w", ec.Namespace, ec.Name, err)
			}
		}
		res.All = fenced
		return out.print(cmd.OutOrStdout(), res, func(t *table) {
			state := map[bool]string{true: "fenced", false: "unfenced"}[fence]
			if !res.Changed {
				state = "already " + state
			}
			t.header("CLUSTER", "MEMBER", "STATE", "FENCED MEMBERS")
			t.row(res.Cluster, res.Member, state, orNone(res.All))
		})
	}
	out.register(&cmd)
	return &cmd
}

// readyVotersUnfenced counts the cluster's members that its status last recorded as Ready
// voters and that are not in fenced.
func readyVotersUnfenced(ec *v1alpha1.EtcdCluster, fenced []string) int {
	ready := 0
	for _, m := range ec.Status.Members {
		if m.Status == v1alpha1.MemberReady && m.Role != v1alpha1.RoleLearner && !slices.Contains(fenced, m.Name) {
			ready++
		}
	}
	return ready
}

// orNone joins names, or says there are none.
func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
