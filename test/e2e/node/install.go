package node

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// S3Endpoint is the node's S3 server, in the steward-s3 namespace (bucket "backups").
const S3Endpoint = "http://s3.steward-s3.svc:9000"

// Install installs Steward as a user would, with the project's Helm chart (short graces, so
// that healing shows within a test's patience), and the S3 server the clusters back up to,
// with its own volume so that backups outlive every member. The operator, the S3 server and
// CoreDNS run on the first node, which holds the control plane: the faults of a node
// (PowerOff, Partition) strike the others, and with them only the members they run.
func (n *Node) Install(chart string) error {
	out, err := exec.Command(filepath.Join(n.cfg.Bin, "k8s", "helm"), "--kubeconfig", n.Admin, "install", "steward", chart,
		"--namespace", "steward-system", "--create-namespace", "--wait", "--timeout", "3m",
		"--set", "image.repository=steward", "--set", "image.tag=e2e", "--set", "image.pullPolicy=Never",
		"--set", "graces.unknown=10s", "--set", "graces.notReady=30s", "--set", "graces.caPropagation=90s",
		"--set", `nodeSelector.kubernetes\.io/hostname=`+NodeName).CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm install: %v: %s", err, out)
	}
	if _, err := n.kubectlStdin(s3YAML, "apply", "-f", "-"); err != nil {
		return err
	}
	_, err = n.kubectl("-n", "steward-s3", "rollout", "status", "deployment/s3", "--timeout=2m")
	return err
}

const s3YAML = `apiVersion: v1
kind: Namespace
metadata: {name: steward-s3}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: s3, namespace: steward-s3}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: s3, namespace: steward-s3}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector: {matchLabels: {app: s3}}
  template:
    metadata: {labels: {app: s3}}
    spec:
      nodeSelector: {kubernetes.io/hostname: steward-e2e}
      securityContext: {runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532}
      containers:
      - name: s3
        image: steward-e2e-s3:e2e
        imagePullPolicy: Never
        args: ["-db", "/data/s3.db", "-listen", ":9000", "-bucket", "backups"]
        ports: [{containerPort: 9000}]
        readinessProbe: {tcpSocket: {port: 9000}, periodSeconds: 1}
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: s3}}]
---
apiVersion: v1
kind: Service
metadata: {name: s3, namespace: steward-s3}
spec:
  selector: {app: s3}
  ports: [{port: 9000}]
`
