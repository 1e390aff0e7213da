package operator

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/etcd-steward/steward/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// ClaimCase names what the operator may do with an object that exists under a name its
// cluster needs. The cases that leave the object alone are also the reasons of the
// OwnershipConflict condition.
type ClaimCase string

const (
	// ClaimOwned: its controller owner reference is this EtcdCluster: it is kept as desired.
	ClaimOwned ClaimCase = "Owned"
	// ClaimAdopt: a deleted EtcdCluster of the same name left it (orphan deletion), and this
	// one's adopt annotation asks for it, with a cluster ID that matches or is unknown.
	ClaimAdopt ClaimCase = "Adopt"
	// ClaimNameConflict: something else made it. It is never changed or deleted.
	ClaimNameConflict ClaimCase = "NameConflict"
	// ClaimOrphaned: a deleted EtcdCluster of the same name left it, and no adopt annotation
	// asks for it: it is left alone.
	ClaimOrphaned ClaimCase = "Orphaned"
	// ClaimClusterIDMismatch: a deleted EtcdCluster of the same name left it, but its members
	// report another etcd cluster ID than the adopt annotation (or the status) names.
	ClaimClusterIDMismatch ClaimCase = "ClusterIDMismatch"
)

// claimInput is what decides a claim, besides the object.
type claimInput struct {
	// Name and UID are the EtcdCluster's.
	Name string
	UID  types.UID
	// Adopt is the adopt annotation's value; ClusterID the status's cluster ID.
	Adopt, ClusterID string
	// OrphanClusterIDs are the cluster IDs the members a deleted cluster left report.
	OrphanClusterIDs []string
}

func newClaimInput(ec *v1alpha1.EtcdCluster, orphanClusterIDs []string) claimInput {
	return claimInput{Name: ec.Name, UID: ec.UID, Adopt: ec.Annotations[v1alpha1.AnnotationAdopt],
		ClusterID: ec.Status.ClusterID, OrphanClusterIDs: orphanClusterIDs}
}

// decideClaim decides what the operator may do with obj, which exists under a name the
// cluster needs. Only its own objects are changed; what a deleted EtcdCluster of the same
// name left behind is taken over only when asked, and only for the same etcd cluster.
func decideClaim(in claimInput, obj metav1.Object) ClaimCase {
	ref := metav1.GetControllerOf(obj)
	if ref != nil && ref.UID == in.UID {
		return ClaimOwned
	}
	if !leftByNamesake(in.Name, obj.GetLabels(), ref) {
		return ClaimNameConflict
	}
	want, ok := adoptWants(in)
	if !ok {
		return ClaimOrphaned
	}
	ids := slices.Compact(slices.Sorted(slices.Values(in.OrphanClusterIDs)))
	if len(ids) > 1 || (len(ids) == 1 && want != "" && !strings.EqualFold(ids[0], want)) {
		return ClaimClusterIDMismatch
	}
	return ClaimAdopt
}

// leftByNamesake: the object carries Steward's labels for a cluster of this name and has no
// live controller: none (the garbage collector removed it with orphan propagation), or an
// EtcdCluster of this name that is not this one (a name is unique in a namespace, so that
// one is gone).
func leftByNamesake(name string, labels map[string]string, ref *metav1.OwnerReference) bool {
	if labels[LabelCluster] != name || labels[LabelManagedBy] != "steward" {
		return false
	}
	if ref == nil {
		return true
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == v1alpha1.GroupVersion.Group && ref.Kind == "EtcdCluster" && ref.Name == name
}

// adoptWants reads the adopt annotation: whether it asks for adoption, and the cluster ID the
// orphans must report (empty: any).
func adoptWants(in claimInput) (string, bool) {
	switch v := in.Adopt; {
	case v == "true":
		return in.ClusterID, true
	case isClusterID(v):
		return v, true
	default:
		return "", false
	}
}

func isClusterID(s string) bool {
	_, err := strconv.ParseUint(s, 16, 64)
	return err == nil
}

// conflict is an object under a name the cluster needs that the operator leaves alone.
type conflict struct {
	Case       ClaimCase
	Kind, Name string
	// Cluster and Namespace are the EtcdCluster's; IDs what the orphans' members report.
	Cluster, Namespace string
	IDs                []string
}

func (c conflict) Error() string {
	what := fmt.Sprintf("%s %s/%s", c.Kind, c.Namespace, c.Name)
	switch c.Case {
	case ClaimOrphaned:
		return fmt.Sprintf("%s was left by a deleted EtcdCluster named %s and is left alone: to take it over with its data, annotate this EtcdCluster %s=true (or =<etcd cluster ID>); to start anew, delete it",
			what, c.Cluster, v1alpha1.AnnotationAdopt)
	case ClaimClusterIDMismatch:
		return fmt.Sprintf("%s was left by a deleted EtcdCluster named %s whose members report cluster ID %s, not the one %s (or status.clusterID) names: it is not adopted; correct the annotation, or delete the object to start anew",
			what, c.Cluster, strings.Join(c.IDs, ", "), v1alpha1.AnnotationAdopt)
	default:
		return fmt.Sprintf("%s exists but was not made by EtcdCluster %s: it is left alone, neither changed nor deleted; rename or delete it, or give the EtcdCluster another name",
			what, c.Cluster)
	}
}

// ownershipCondition is the OwnershipConflict condition of the conflicts a pass met (nil:
// none, and the condition is absent). The reason is the most serious case: a foreign object
// first, then orphans that cannot be adopted, then orphans waiting for the annotation.
func ownershipCondition(conflicts []conflict, generation int64, now metav1.Time) *metav1.Condition {
	if len(conflicts) == 0 {
		return nil
	}
	rank := map[ClaimCase]int{ClaimNameConflict: 0, ClaimClusterIDMismatch: 1, ClaimOrphaned: 2}
	worst := slices.MinFunc(conflicts, func(a, b conflict) int { return rank[a.Case] - rank[b.Case] })
	msgs := make([]string, len(conflicts))
	for i, c := range conflicts {
		msgs[i] = c.Error()
	}
	return &metav1.Condition{Type: v1alpha1.ConditionOwnershipConflict, Status: metav1.ConditionTrue, Reason: string(worst.Case),
		Message: strings.Join(msgs, "; "), ObservedGeneration: generation, LastTransitionTime: now}
}
