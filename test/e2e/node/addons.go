package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// addonsYAML is CoreDNS (cluster DNS only: no forward, nothing leaves the machine), the
// default StorageClass, served by the kube-controller-manager's hostPath provisioner, and
// LocalClass, served by ProvisionLocalVolumes.
var addonsYAML = `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
---
# Volumes pinned to one node, as local disks are (ProvisionLocalVolumes).
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: steward-local
provisioner: e2e.steward.dev/local
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 5
        }
        cache 5
        loadbalance
        reload
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      nodeSelector: {kubernetes.io/hostname: steward-e2e}
      containers:
      - name: coredns
        image: coredns:e2e
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
        livenessProbe: {httpGet: {path: /health, port: 8080}}
        volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: ` + DNSIP + `
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
`

// OwnVolumes gives every volume the hostPath provisioner makes to VolumeOwner, until ctx ends.
// The provisioner makes them root's with mode 0750 and the kubelet applies no fsGroup to
// hostPath volumes; a CSI driver would apply the pods' fsGroup (Steward's pods run as
// 65532 with fsGroup 65532). This stands in for that, and for nothing else.
func OwnVolumes(ctx context.Context) error {
	for {
		entries, _ := os.ReadDir(HostPathPV)
		for _, e := range entries {
			p := filepath.Join(HostPathPV, e.Name())
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil || st.Uid == VolumeOwner {
				continue
			}
			if err := os.Chown(p, VolumeOwner, VolumeOwner); err != nil {
				return fmt.Errorf("volume %s: %w", p, err)
			}
			if err := os.Chmod(p, 0o2770); err != nil {
				return fmt.Errorf("volume %s: %w", p, err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func httpsClient(ca, cert, key string) (*http.Client, error) {
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
	}}, nil
}
