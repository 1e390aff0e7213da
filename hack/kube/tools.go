//go:build tools

// Package tools pins the Kubernetes test binaries (kube-apiserver and kubectl for envtest and by
// hand; the controller manager, scheduler, kubelet and kube-proxy for the e2e node), the etcd that backs that API server, and controller-gen, apart from Steward's own module:
// Kubernetes needs a newer etcd than the one Steward embeds. `make kube-tools` builds them into ./bin.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "helm.sh/helm/v3/cmd/helm"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
