// Command operator measures one Steward operator looking after many EtcdClusters on one real
// kube-apiserver, each with three members that behave towards the API server as running
// members do:
//
//	go run ./bench/operator -steward bin/steward -clusters 200 -rest 60s
//
// It starts the kube-apiserver built into bin/k8s (make kube-tools) with Steward's CRDs,
// runs `steward operator` against it as a process, and creates -clusters EtcdClusters of 3
// members each at once, with backups on (a store URL and its credentials Secret) and TLS and
// authentication by default. No kubelet runs: the benchmark plays the StatefulSet controller
// and the kubelet (each cluster's pods made Running and Ready) and each member's sidecar
// (its report, its member Lease renewed every 10 s, the backup leader's snapshot Leases and
// backup account), through the sidecar's own writing code (kubeview). It measures:
//
//   - the time from a cold start until every cluster is Ready;
//   - the operator's peak RSS (VmHWM) over the whole run;
//   - at rest, over -rest once the clusters settled (-settle), per cluster per minute: the
//     operator's reconciliations (controller_runtime_reconcile_total), its API
//     writes (rest_client_requests_total: POST/PUT/PATCH/DELETE) and its reads by verb, from
//     the API server's audit log of the operator's own user: gets of an object and lists
//     that bypass its cache, and the watches of its cache opened again (client-go counts all
//     three as GET);
//   - then one member fails (its pod NotReady, its sidecar silent): the time until the
//     cluster's status reports it.
//
// There is no reference to compare with in the same run: no other etcd operator builds
// here. The last line of output is the JSON result (bench/internal/result).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/bench/internal/proc"
	"github.com/etcd-steward/steward/bench/internal/result"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

const ns = "bench"

func main() {
	steward := flag.String("steward", "bin/steward", "steward binary")
	clusters := flag.Int("clusters", 200, "EtcdClusters to create")
	settle := flag.Duration("settle", 30*time.Second, "wait after every cluster is Ready before counting at rest")
	rest := flag.Duration("rest", 60*time.Second, "window over which the operator's work at rest is counted")
	flag.Parse()
	if err := run(*steward, *clusters, *settle, *rest); err != nil {
		fmt.Fprintln(os.Stderr, "operator benchmark:", err)
		os.Exit(1)
	}
}

func run(steward string, n int, settle, rest time.Duration) error {
	log.SetLogger(logr.Discard()) // the benchmark's cache logs nothing worth reading
	dir, err := os.MkdirTemp("", "bench-operator-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	audit, auditLog, err := withAudit(dir)
	if err != nil {
		return err
	}
	api, err := testutil.StartAPIServer(audit)
	if err != nil {
		return err
	}
	defer api.Stop()
	opKubeconfig, err := userKubeconfig(api, dir)
	if err != nil {
		return err
	}
	cfg := *api.Config
	cfg.QPS, cfg.Burst = 1000, 2000
	scheme, err := operator.Scheme()
	if err != nil {
		return err
	}
	c, err := client.New(&cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "store"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}}); err != nil {
		return err
	}

	// The members read through a cache of their own, as the sidecars do, and write directly.
	ca, err := cache.New(&cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return err
	}
	go func() { _ = ca.Start(ctx) }()
	cached, err := client.New(&cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: ca}})
	if err != nil {
		return err
	}

	metricsPort, err := freePort()
	if err != nil {
		return err
	}
	op := exec.Command(steward, "operator", "--member-image", "steward:bench", "--leader-elect=false",
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", metricsPort), "--metrics-plain", "--health-probe-bind-address", "0", "--log-level", "error")
	op.Env = append(os.Environ(), "KUBECONFIG="+opKubeconfig)
	op.Stderr = os.Stderr
	if err := op.Start(); err != nil {
		return err
	}
	defer func() { _ = op.Process.Kill(); _, _ = op.Process.Wait() }()
	metrics := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	if err := waitFor(30*time.Second, func() error { _, err := scrape(metrics); return err }); err != nil {
		return fmt.Errorf("operator metrics: %w", err)
	}

	sim := newMembers(cached, ns)
	var playing sync.WaitGroup
	defer playing.Wait()
	defer cancel()
	fmt.Fprintf(os.Stderr, "creating %d EtcdClusters with backups on\n", n)
	start := time.Now()
	for i := 0; i < n; i++ {
		playing.Go(func() { sim.run(ctx, i, name(i)) })
	}
	if err := createClusters(ctx, c, n); err != nil {
		return err
	}
	created := time.Since(start)
	err = waitFor(15*time.Minute, func() error {
		var ecs v1alpha1.EtcdClusterList
		if err := c.List(ctx, &ecs, client.InNamespace(ns)); err != nil {
			return err
		}
		ready := 0
		for _, ec := range ecs.Items {
			if apimeta.IsStatusConditionTrue(ec.Status.Conditions, v1alpha1.ConditionReady) {
				ready++
			}
		}
		fmt.Fprintf(os.Stderr, "\r%d of %d Ready (members' errors %d)", ready, n, sim.errors.Load())
		if ready < n {
			return fmt.Errorf("%d of %d Ready; the members' last error: %v", ready, n, ptrString(sim.lastErr.Load()))
		}
		return nil
	})
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	allReady := time.Since(start)

	fmt.Fprintf(os.Stderr, "settling for %s, then counting the operator's work at rest for %s\n", settle, rest)
	time.Sleep(settle) // settling time before the measured window, not synchronisation
	before, err := scrape(metrics)
	if err != nil {
		return err
	}
	from := time.Now()
	time.Sleep(rest) // the measured window itself
	after, err := scrape(metrics)
	if err != nil {
		return err
	}
	to := time.Now()
	perClusterMin := func(f func(counters) float64) float64 {
		return result.Round3((f(after) - f(before)) / float64(n) / rest.Minutes())
	}
	reconciles, writes, httpGets := perClusterMin(counters.reconciles), perClusterMin(counters.writes), perClusterMin(counters.reads)
	atRest, err := readAudit(auditLog, from, to)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "the operator's requests at rest, by verb and resource: %s\n", atRest)
	perMin := func(verb string) float64 {
		return result.Round3(float64(atRest.byVerb[verb]) / float64(n) / rest.Minutes())
	}
	gets, lists := perMin("get"), perMin("list")

	stopped, silent := name(0)+"-2", name(n-1)+"-2"
	fmt.Fprintf(os.Stderr, "member %s stops (pod NotReady, sidecar silent); member %s's sidecar alone falls silent\n", stopped, silent)
	failedAt := time.Now()
	sim.stop(stopped)
	sim.silence(silent)
	var stoppedSeen, silentSeen time.Duration
	if err := waitFor(5*time.Minute, func() error {
		for _, m := range []struct {
			name string
			seen *time.Duration
		}{{stopped, &stoppedSeen}, {silent, &silentSeen}} {
			if *m.seen != 0 {
				continue
			}
			if st, err := memberStatus(ctx, c, m.name); err != nil {
				return err
			} else if st != v1alpha1.MemberReady {
				*m.seen = time.Since(failedAt)
				fmt.Fprintf(os.Stderr, "%s reported %s after %s\n", m.name, st, m.seen.Round(time.Millisecond))
			}
		}
		if stoppedSeen == 0 || silentSeen == 0 {
			return fmt.Errorf("%s and %s not both reported", stopped, silent)
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "the members reported %d times; %d of their writes failed (the last: %s)\n", sim.reports.Load(), sim.errors.Load(), ptrString(sim.lastErr.Load()))

	hwm, _, err := proc.Memory(op.Process.Pid)
	if err != nil {
		return err
	}
	rss := result.Round3(result.MiB(hwm))
	res := result.Result{
		Benchmark: "operator",
		Title:     fmt.Sprintf("One operator looking after %d EtcdClusters of 3 members on one kube-apiserver", n),
		Params:    map[string]any{"clusters": n, "members per cluster": 3, "settle": settle.String(), "rest window": rest.String()},
		Rows: []result.Row{
			result.Compare("time from a cold start until every cluster is Ready", "s", "steward operator", result.Seconds(allReady), "", 0),
			result.Compare("operator peak RSS", "MiB", "steward operator", rss, "", 0).WithGoal("≤ 256 MiB", rss <= 256),
			result.Compare("reconciliations per cluster per minute at rest", "req", "steward operator", reconciles, "", 0).WithGoal("≤ 1", reconciles <= 1),
			result.Compare("API writes per cluster per minute at rest", "req", "steward operator", writes, "", 0).WithGoal("0", writes == 0),
			result.Compare("API reads of an object (GET) per cluster per minute at rest", "req", "steward operator", gets, "", 0).WithGoal("0", gets == 0),
			result.Compare("API lists (LIST) per cluster per minute at rest", "req", "steward operator", lists, "", 0).WithGoal("0", lists == 0),
			result.Compare("watches opened (WATCH) at rest, for all clusters", "req", "steward operator", float64(atRest.byVerb["watch"]), "", 0),
			result.Compare("requests sent as HTTP GET (gets, lists, watches) per cluster per minute at rest", "req", "steward operator", httpGets, "", 0),
			result.Compare("time until a stopped member (pod NotReady) is reported", "s", "steward operator", result.Seconds(stoppedSeen), "", 0),
			result.Compare("time until a silent sidecar (its Lease lapsing) is reported", "s", "steward operator", result.Seconds(silentSeen), "", 0),
		},
		Notes: []string{
			fmt.Sprintf("The %d EtcdClusters were created in %s (20 at a time); the time until Ready counts from the first create.", n, created.Round(time.Millisecond)),
			"No kubelet runs: the benchmark makes each StatefulSet's pods Running and Ready, and plays each member's sidecar through its own writing code (kubeview): a report each second (written when it changes, its figures every 10 s: each cluster's revision moves), the member Lease renewed every 10 s, and the backup leader's snapshot Leases (every delta period, 5 s) and backup account.",
			"Reconciliations are controller-runtime's controller_runtime_reconcile_total of the EtcdCluster controller; writes are the operator's POST, PUT, PATCH and DELETE (rest_client_requests_total). Its reads are counted by verb from the API server's audit log of the operator's own user: get (an object read past the cache), list, and watch (a watch of the cache opened again: client-go ends each after 5 to 10 minutes and resumes it from the revision it had, per kind, not per cluster). client-go's own count cannot tell them apart: all three are HTTP GETs.",
			"The operator's requests at rest, by verb and resource: " + atRest.String() + ".",
			fmt.Sprintf("After the window, member %s stops (its pod NotReady, no more reports or renewals) and, at the same moment, member %s's sidecar alone falls silent (its pod Ready, its Lease of 30 s renewed every 10 s no more); each time runs until the member's entry in its cluster's status is no longer Ready. Peak RSS spans the whole run.", stopped, silent),
		},
	}
	return res.Print(os.Stdout)
}

// userKubeconfig writes a kubeconfig of operatorUser, an administrator, for the operator.
func userKubeconfig(api *testutil.APIServer, dir string) (string, error) {
	user, err := api.Env.ControlPlane.AddUser(envtest.User{Name: operatorUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	b, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "operator.kubeconfig")
	return path, os.WriteFile(path, b, 0o600)
}

// memberStatus is the status of member name in its cluster's status ("" when not listed).
func memberStatus(ctx context.Context, c client.Client, member string) (string, error) {
	var ec v1alpha1.EtcdCluster
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: member[:strings.LastIndexByte(member, '-')]}, &ec); err != nil {
		return "", err
	}
	for _, m := range ec.Status.Members {
		if m.Name == member {
			return m.Status, nil
		}
	}
	return "", nil
}

func name(i int) string { return fmt.Sprintf("c%03d", i) }

// createClusters creates n EtcdClusters, 20 at a time, each with backups to its own prefix.
func createClusters(ctx context.Context, c client.Client, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 20)
	for i := 0; i < n; i++ {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name(i)},
				Spec: v1alpha1.EtcdClusterSpec{Replicas: 3, Backup: &v1alpha1.BackupSpec{Store: "s3://bench/" + name(i),
					CredentialsSecret: &corev1.LocalObjectReference{Name: "store"}, DeltaPeriod: &metav1.Duration{Duration: deltaPeriod}}}}
			if err := c.Create(ctx, ec); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// counters are the operator's metrics, one value per series.
type counters map[string]float64

func (m counters) sum(name string, with ...string) float64 {
	total := 0.0
	for series, v := range m {
		if !strings.HasPrefix(series, name+"{") {
			continue
		}
		match := len(with) == 0
		for _, w := range with {
			match = match || strings.Contains(series, w)
		}
		if match {
			total += v
		}
	}
	return total
}

func (m counters) reconciles() float64 {
	return m.sum("controller_runtime_reconcile_total", `controller="etcdcluster"`)
}

func (m counters) writes() float64 {
	return m.sum("rest_client_requests_total", `method="POST"`, `method="PUT"`, `method="PATCH"`, `method="DELETE"`)
}

func (m counters) reads() float64 { return m.sum("rest_client_requests_total", `method="GET"`) }

// scrape reads the operator's metrics.
func scrape(url string) (counters, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	m := counters{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if m.sum("rest_client_requests_total") == 0 {
		return nil, fmt.Errorf("GET %s: no rest_client_requests_total", url)
	}
	return m, nil
}

func ptrString(s *string) string {
	if s == nil {
		return "none"
	}
	return *s
}

func waitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second) // poll interval
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
