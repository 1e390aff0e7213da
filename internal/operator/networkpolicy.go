package operator

import (
	"context"

	"github.com/etcd-steward/steward/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// OperatorPodLabels are the labels of the operator's pods, as its Deployment and the Helm
// chart set them: the members' NetworkPolicy lets these pods reach the sidecar API and the
// health port.
var OperatorPodLabels = map[string]string{LabelName: "steward", LabelComponent: "operator"}

func networkPolicyName(ec *v1alpha1.EtcdCluster) string { return ec.Name }

// syncNetworkPolicy keeps the cluster's NetworkPolicy (networkPolicySpec).
func syncNetworkPolicy(ctx context.Context, r *run) error {
	np := &networkingv1.NetworkPolicy{ObjectMeta: objectMeta(r, networkPolicyName(r.ec))}
	return apply(ctx, r, np, "network-policy", func() error {
		np.Spec = networkPolicySpec(r.ec, r.operatorNamespace)
		return nil
	})
}

// networkPolicySpec admits to the member pods only what the cluster needs: the peer port from
// its members; the sidecar API and the health port from its members and the operator's pods
// (in operatorNamespace; "": in any namespace, for an operator that does not know its own);
// the client port from the pods of the cluster's namespace, or from its members and the peers
// spec.network.clientFrom lists. Other NetworkPolicies can admit more (policies add up): a
// Prometheus in another namespace that scrapes the sidecars, say.
// Kubelet probes come from the node, which NetworkPolicies always admit. Egress is not
// limited: the sidecars reach the backup store and the API server.
func networkPolicySpec(ec *v1alpha1.EtcdCluster, operatorNamespace string) networkingv1.NetworkPolicySpec {
	members := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: selectorLabels(ec)}}
	operator := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: OperatorPodLabels},
		NamespaceSelector: &metav1.LabelSelector{}}
	if operatorNamespace != "" {
		operator.NamespaceSelector.MatchLabels = map[string]string{corev1.LabelMetadataName: operatorNamespace}
	}
	clients := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}} // the namespace
	if from := ec.Spec.Network.ClientFrom; len(from) > 0 {
		clients = append([]networkingv1.NetworkPolicyPeer{members}, from...)
	}
	ports := func(ns ...int) []networkingv1.NetworkPolicyPort {
		var out []networkingv1.NetworkPolicyPort
		for _, n := range ns {
			// The protocol spelled out, as the API server would default it: an unchanged
			// policy is never written again.
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: ptr(corev1.ProtocolTCP), Port: ptr(intstr.FromInt32(int32(n)))})
		}
		return out
	}
	return networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: selectorLabels(ec)},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{
			{From: []networkingv1.NetworkPolicyPeer{members}, Ports: ports(PeerPort)},
			{From: []networkingv1.NetworkPolicyPeer{members, operator}, Ports: ports(SidecarPort, HealthPort)},
			{From: clients, Ports: ports(ClientPort)},
		},
	}
}
