package operator

import (
	"strings"
	"testing"

	"github.com/etcd-steward/steward/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestDecideClaim(t *testing.T) {
	yes := true
	controller := func(apiVersion, kind, name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: &yes}}
	}
	ours := controller(v1alpha1.GroupVersion.String(), "EtcdCluster", "x", "new")
	goneNamesake := controller(v1alpha1.GroupVersion.String(), "EtcdCluster", "x", "old")
	stewardLabels := map[string]string{LabelCluster: "x", LabelManagedBy: "steward"}
	cases := []struct {
		name   string
		in     claimInput
		labels map[string]string
		owners []metav1.OwnerReference
		want   ClaimCase
	}{
		{"its controller is this EtcdCluster", claimInput{}, stewardLabels, ours, ClaimOwned},
		{"no owner, no labels: made by someone else", claimInput{}, nil, nil, ClaimNameConflict},
		{"no owner, no labels, adopt asked: never taken", claimInput{Adopt: "true"}, nil, nil, ClaimNameConflict},
		{"another controller, with Steward's labels", claimInput{Adopt: "true"}, stewardLabels,
			controller("apps/v1", "Deployment", "x", "d"), ClaimNameConflict},
		{"another EtcdCluster's", claimInput{Adopt: "true"}, map[string]string{LabelCluster: "y", LabelManagedBy: "steward"},
			controller(v1alpha1.GroupVersion.String(), "EtcdCluster", "y", "y"), ClaimNameConflict},
		{"labelled by someone else than Steward", claimInput{Adopt: "true"}, map[string]string{LabelCluster: "x"}, nil, ClaimNameConflict},
		{"orphaned by the garbage collector, no annotation", claimInput{}, stewardLabels, nil, ClaimOrphaned},
		{"left by a deleted namesake, no annotation", claimInput{}, stewardLabels, goneNamesake, ClaimOrphaned},
		{"annotation neither true nor a cluster ID", claimInput{Adopt: "false"}, stewardLabels, nil, ClaimOrphaned},
		{"adopt, cluster ID unknown everywhere", claimInput{Adopt: "true"}, stewardLabels, goneNamesake, ClaimAdopt},
		{"adopt, orphans' cluster ID unknown", claimInput{Adopt: "c1"}, stewardLabels, nil, ClaimAdopt},
		{"adopt, status has no cluster ID yet", claimInput{Adopt: "true", OrphanClusterIDs: []string{"c1"}}, stewardLabels, nil, ClaimAdopt},
		{"adopt, cluster ID matches the annotation", claimInput{Adopt: "C1", OrphanClusterIDs: []string{"c1"}}, stewardLabels, nil, ClaimAdopt},
		{"adopt, cluster ID matches the status", claimInput{Adopt: "true", ClusterID: "c1", OrphanClusterIDs: []string{"c1"}}, stewardLabels, nil, ClaimAdopt},
		{"adopt, another cluster ID than the annotation's", claimInput{Adopt: "c2", OrphanClusterIDs: []string{"c1"}}, stewardLabels, nil, ClaimClusterIDMismatch},
		{"adopt, another cluster ID than the status's", claimInput{Adopt: "true", ClusterID: "c2", OrphanClusterIDs: []string{"c1"}}, stewardLabels, nil, ClaimClusterIDMismatch},
		{"adopt, the orphans disagree", claimInput{Adopt: "true", OrphanClusterIDs: []string{"c1", "c2"}}, stewardLabels, nil, ClaimClusterIDMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Name, tc.in.UID = "x", "new"
			obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x-config", Labels: tc.labels, OwnerReferences: tc.owners}}
			if got := decideClaim(tc.in, obj); got != tc.want {
				t.Errorf("decideClaim = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestOwnershipCondition(t *testing.T) {
	if c := ownershipCondition(nil, 3, metav1.Now()); c != nil {
		t.Errorf("no conflict: condition %+v, want none", c)
	}
	orphan := conflict{Case: ClaimOrphaned, Kind: "StatefulSet", Name: "x", Cluster: "x", Namespace: "ns"}
	foreign := conflict{Case: ClaimNameConflict, Kind: "ConfigMap", Name: "x-config", Cluster: "x", Namespace: "ns"}
	c := ownershipCondition([]conflict{orphan, foreign}, 3, metav1.Now())
	if c == nil || c.Type != v1alpha1.ConditionOwnershipConflict || c.Status != metav1.ConditionTrue || c.Reason != string(ClaimNameConflict) || c.ObservedGeneration != 3 {
		t.Fatalf("condition %+v: want OwnershipConflict True, reason NameConflict (the most serious)", c)
	}
	for _, want := range []string{"ConfigMap ns/x-config", "rename or delete it", "StatefulSet ns/x", v1alpha1.AnnotationAdopt + "=true"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q lacks %q", c.Message, want)
		}
	}
}
