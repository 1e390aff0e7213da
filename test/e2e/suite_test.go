// Package e2e runs Steward on a real Kubernetes of three nodes built here (see node; one with
// STEWARD_E2E_NODES=1): the operator and the members are real pods on real kubelets, installed with the project's own
// Helm chart, backing up to an S3 server in the cluster. `make e2e` runs it (as root).
//
// A test that touches nothing outside its own namespace calls t.Parallel: `make e2e` runs two
// of them at a time, after the tests that stop the API server (and the Manual quorum loss)
// have run alone. Those that kill the operator's pod mid-operation (restartOperator) pause
// the test beside them. They start in the order of their files and declarations, so the
// longest (TLS and authentication, auth_tls_test.go) come first.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/etcd-steward/steward/test/e2e/node"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The suite's shared state: the node, its admin kubeconfig and an API client.
var (
	bin        string
	kubeNode   *node.Node
	kubeconfig string
	kube       client.Client
)

func TestMain(m *testing.M) {
	if os.Getenv("STEWARD_E2E") == "" {
		fmt.Println("e2e: skipped; `make e2e` runs this suite on a real Kubernetes node (as root)")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	var err error
	if bin, err = filepath.Abs(envOr("STEWARD_E2E_BIN", "../../bin")); err != nil {
		fmt.Println(err)
		return 1
	}
	dir := envOr("STEWARD_E2E_DIR", "/var/lib/steward-e2e")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The machine as it is without a node: the teardown must give it back exactly so.
	if err := node.Down(dir, bin, os.Stdout); err != nil {
		fmt.Println("e2e: removing the node a previous run left:", err)
		return 1
	}
	before, err := node.MachineState()
	if err != nil {
		fmt.Println("e2e:", err)
		return 1
	}
	start := time.Now()
	nodes, err := strconv.Atoi(envOr("STEWARD_E2E_NODES", "3"))
	if err != nil || nodes < 1 {
		fmt.Printf("e2e: STEWARD_E2E_NODES=%q: want a number of nodes, 1 or more\n", os.Getenv("STEWARD_E2E_NODES"))
		return 1
	}
	n, err := node.Up(ctx, node.Config{Dir: dir, Bin: bin, Self: filepath.Join(bin, "e2e-node"), Log: os.Stdout, Nodes: nodes,
		Images: []node.Image{node.StewardImage(bin), node.S3Image(bin)}})
	defer func() {
		if os.Getenv("STEWARD_E2E_KEEP") != "" {
			fmt.Printf("e2e: node kept (STEWARD_E2E_KEEP): export KUBECONFIG=%s\n", node.AdminKubeconfig(dir))
			return
		}
		if err := node.Down(dir, bin, os.Stdout); err != nil {
			fmt.Println("e2e: tearing the node down:", err)
			code = 1
		}
		after, err := node.MachineState()
		if diff := node.DiffStates(before, after); err != nil || len(diff) > 0 {
			fmt.Printf("e2e: the teardown left the machine changed (%v):\n%s\n", err, strings.Join(diff, "\n"))
			code = 1
		}
	}()
	if err != nil {
		fmt.Println("e2e: starting the node:", err)
		return 1
	}
	kubeNode, kubeconfig = n, n.Admin
	if err := connect(); err != nil {
		fmt.Println("e2e:", err)
		return 1
	}
	if err := n.Install(filepath.Join(testutil.RepoRoot(), "deploy", "helm", "steward")); err != nil {
		fmt.Println("e2e: installing Steward:", err)
		return 1
	}
	fmt.Printf("e2e: node up and Steward installed in %s\n", time.Since(start).Round(time.Second))
	return m.Run()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func connect() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	kube, err = client.New(cfg, client.Options{Scheme: scheme})
	return err
}

// storeURL is a store on the node's S3 server (node.S3Endpoint), under prefix.
func storeURL(prefix string) string {
	return "s3://backups/" + prefix + "?endpoint=" + node.S3Endpoint + "&use_path_style=true&region=us-east-1"
}

// kubectlIn runs kubectl with stdin and returns its trimmed output.
func kubectlIn(ns, stdin string, args ...string) (string, error) {
	full := []string{"--kubeconfig", kubeconfig}
	if ns != "" {
		full = append(full, "-n", ns)
	}
	cmd := exec.Command(filepath.Join(bin, "k8s", "kubectl"), append(full, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func kubectl(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := kubectlIn(ns, "", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubectlSteward runs `kubectl steward ARGS` in the namespace: kubectl finds Steward's plugin,
// kubectl-steward, on the PATH as a user's kubectl would.
func kubectlSteward(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := kubectlStewardErr(ns, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubectlStewardErr is kubectlSteward for a caller that retries.
func kubectlStewardErr(ns string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(bin, "k8s", "kubectl"), append([]string{"steward", "--kubeconfig", kubeconfig, "-n", ns}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(bin, "e2e")+":"+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl steward %s: %v: %s", strings.Join(args, " "), err, stderrOf(err))
	}
	return string(out), nil
}

func stderrOf(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return strings.TrimSpace(string(exit.Stderr))
	}
	return ""
}

func apply(t *testing.T, ns, yaml string) {
	t.Helper()
	if _, err := kubectlIn(ns, yaml, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

// namespace makes a namespace for one test, and on cleanup deletes it (and with it the test's
// clusters, through their finalizers), dumping what a failure needs first.
func namespace(t *testing.T) string {
	t.Helper()
	ns := "e2e-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(ns) > 50 {
		ns = ns[:50]
	}
	ns = strings.TrimRight(ns, "-")
	kubectl(t, "", "create", "namespace", ns)
	start := time.Now()
	t.Cleanup(func() {
		t.Logf("%s took %s", t.Name(), time.Since(start).Round(100*time.Millisecond))
		if t.Failed() {
			dumpFailure(t, ns)
		}
		if _, err := kubectlIn("", "", "delete", "namespace", ns, "--timeout=3m"); err != nil {
			t.Logf("deleting namespace %s: %v", ns, err)
		}
	})
	return ns
}

// dumpFailure writes what a failure needs (the objects, Events, the operator's and the
// sidecars' logs) to files under the system's temp dir, and logs where, with a short
// summary: the output keeps the failure's own message near its end, where a CI excerpt
// shows it.
func dumpFailure(t *testing.T, ns string) {
	dir := filepath.Join(os.TempDir(), "steward-e2e-failures", ns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("dumping the failure: %v", err)
		return
	}
	write := func(file, namespace string, args ...string) {
		out, err := kubectlIn(namespace, "", args...)
		if err != nil {
			out += "\n" + err.Error()
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(out), 0o644); err != nil {
			t.Logf("dumping %s: %v", file, err)
		}
	}
	write("objects.txt", ns, "get", "ec,em,pods,pvc,lease,events", "-o", "wide")
	write("clusters.yaml", ns, "get", "ec", "-o", "yaml")
	write("operator.log", "steward-system", "logs", "deployment/steward-operator", "--tail=400")
	// The sidecars say what they decided and what they backed up (pods deleted by the test
	// are gone with their logs).
	pods, _ := kubectlIn(ns, "", "get", "pods", "-o", "jsonpath={.items[*].metadata.name}")
	for _, pod := range strings.Fields(pods) {
		write("sidecar-"+pod+".log", ns, "logs", pod, "-c", "sidecar", "--tail=1000")
	}
	summary, _ := kubectlIn(ns, "", "get", "ec,pods")
	t.Logf("failure dumped in %s (objects, Events, operator and sidecar logs); the namespace then:\n%s", dir, summary)
}

func getEC(ns, name string) (*v1alpha1.EtcdCluster, error) {
	ec := &v1alpha1.EtcdCluster{}
	err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ec)
	return ec, err
}

func condition(ec *v1alpha1.EtcdCluster, typ string) string {
	for _, c := range ec.Status.Conditions {
		if c.Type == typ {
			return string(c.Status)
		}
	}
	return "Unknown"
}

// waitReady waits until the cluster has n members, all ready, and reports Ready.
func waitReady(t *testing.T, ns, name string, n int32, timeout time.Duration) *v1alpha1.EtcdCluster {
	t.Helper()
	var ec *v1alpha1.EtcdCluster
	start := time.Now()
	testutil.Eventually(t, timeout, fmt.Sprintf("cluster %s/%s Ready with %d members", ns, name, n), func() error {
		var err error
		if ec, err = getEC(ns, name); err != nil {
			return err
		}
		if condition(ec, v1alpha1.ConditionReady) != "True" || ec.Status.ReadyReplicas != n || ec.Status.ClusterSize != n ||
			ec.Status.ObservedGeneration != ec.Generation {
			b, _ := json.Marshal(ec.Status.Conditions)
			return fmt.Errorf("ready %d/%d, size %d, observed generation %d of %d, conditions %s",
				ec.Status.ReadyReplicas, n, ec.Status.ClusterSize, ec.Status.ObservedGeneration, ec.Generation, b)
		}
		return nil
	})
	t.Logf("cluster %s Ready with %d members after %s", name, n, time.Since(start).Round(100*time.Millisecond))
	return ec
}

// waitBackedUp waits until the backups of cluster name hold revision rev, and returns the
// newest revision stored: from the delta-snapshot Lease, which carries it live (the status's
// figures are written at rest only with other changes, or hourly).
func waitBackedUp(t *testing.T, ns, name string, rev int64, timeout time.Duration) int64 {
	t.Helper()
	var stored int64
	testutil.Eventually(t, timeout, fmt.Sprintf("revision %d of %s backed up", rev, name), func() error {
		var l coordinationv1.Lease
		if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: v1alpha1.DeltaSnapshotLeaseName(name)}, &l); err != nil {
			return err
		}
		n, ok := v1alpha1.SnapshotLeaseRevision(l.Spec.HolderIdentity)
		if !ok || n < rev {
			return fmt.Errorf("the delta-snapshot Lease's holder %q", ptr.Deref(l.Spec.HolderIdentity, ""))
		}
		stored = n
		return nil
	})
	return stored
}

// memberPods are the cluster's pods, by name.
func memberPods(t *testing.T, ns, name string) map[string]corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := kube.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelCluster: name}); err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		out[p.Name] = p
	}
	return out
}

// plainHTTP opts a cluster out of TLS and authentication, which a new cluster has by default: for
// the tests of healing, scaling and restores that reach etcd and the sidecars over plain HTTP.
// The tests of TLS and authentication spell them out.
const plainHTTP = "  tls: {enabled: false}\n  auth: {enabled: false}\n"

// clusterYAML is an EtcdCluster backing up to the suite's S3 server under its namespace.
func clusterYAML(ns, name string, replicas int, extra string) string {
	return fmt.Sprintf(`apiVersion: etcd.steward.dev/v1alpha1
kind: EtcdCluster
metadata: {name: %s}
spec:
  replicas: %d
  storage: {size: 1Gi}
  backup:
    store: %q
    credentialsSecret: {name: store}
    deltaPeriod: 1s
%s`, name, replicas, storeURL(ns+"/"+name), extra)
}

// storeSecret is the S3 credentials Secret clusterYAML names (the suite's server takes any).
func storeSecret(t *testing.T, ns string) {
	t.Helper()
	apply(t, ns, `apiVersion: v1
kind: Secret
metadata: {name: store}
stringData: {AWS_ACCESS_KEY_ID: steward, AWS_SECRET_ACCESS_KEY: steward-e2e-secret}
`)
}

// waitEvent waits for an Event with the reason on the EtcdCluster.
func waitEvent(t *testing.T, ns, name, reason string, timeout time.Duration) {
	t.Helper()
	waitEventMatching(t, ns, name, reason, "", timeout)
}

// waitEventMatching waits for an Event with the reason on the EtcdCluster whose message
// contains text.
func waitEventMatching(t *testing.T, ns, name, reason, text string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, fmt.Sprintf("an Event %s on %s saying %q", reason, name, text), func() error {
		events, err := eventsOf(ns, "EtcdCluster", name)
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range events {
			if e.Reason == reason && strings.Contains(e.Message, text) {
				return nil
			}
			seen = append(seen, e.Reason)
		}
		return fmt.Errorf("events seen: %v", seen)
	})
}

// eventsOf are the Events about one object.
func eventsOf(ns, kind, name string) ([]corev1.Event, error) {
	var events corev1.EventList
	if err := kube.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var out []corev1.Event
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
			out = append(out, e)
		}
	}
	return out, nil
}

// occurrences is how often an Event happened: the operator's recorder folds repeats of one
// Event within minutes into a series, one object.
func occurrences(e corev1.Event) int32 {
	if e.Series != nil {
		return e.Series.Count
	}
	return max(e.Count, 1)
}

// countEvents is how often Events with the reason happened to the object.
func countEvents(t *testing.T, ns, kind, name, reason string) int32 {
	t.Helper()
	events, err := eventsOf(ns, kind, name)
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, e := range events {
		if e.Reason == reason {
			n += occurrences(e)
		}
	}
	return n
}

// podReady: the pod's Ready condition is True.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
