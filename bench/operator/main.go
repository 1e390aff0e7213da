// Command operator measures one Steward operator reconciling many EtcdClusters on one real
// kube-apiserver (issue 12, "Benchmark"):
//
//	go run ./bench/operator -steward bin/steward -clusters 200 -rest 60s
//
// It starts the kube-apiserver built into bin/k8s (make kube-tools) with Steward's CRDs,
// runs `steward operator` against it as a process, creates -clusters EtcdClusters of 3
// members each at once, and measures:
//
//   - the time until every cluster is reconciled: its StatefulSet exists and its status
//     reports the generation it was created with (observedGeneration);
//   - the operator's peak RSS (VmHWM) over the whole run;
//   - the API requests the operator makes per cluster per minute at rest, over -rest after
//     the clusters settled, from its own client metrics (rest_client_requests_total), and how
//     many of them write (a cluster that does not change must cause none).
//
// No kubelet runs, so no member pod starts: "at rest" is a cluster whose objects are all as
// its spec asks. There is no reference to compare with in the same run: no other etcd
// operator builds here. The last line of output is the JSON result (bench/internal/result).
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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/bench/internal/proc"
	"github.com/etcd-steward/steward/bench/internal/result"
	"github.com/etcd-steward/steward/internal/operator"
	"github.com/etcd-steward/steward/internal/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func main() {
	steward := flag.String("steward", "bin/steward", "steward binary")
	clusters := flag.Int("clusters", 200, "EtcdClusters to create")
	rest := flag.Duration("rest", 60*time.Second, "window over which requests at rest are counted")
	flag.Parse()
	if err := run(*steward, *clusters, *rest); err != nil {
		fmt.Fprintln(os.Stderr, "operator benchmark:", err)
		os.Exit(1)
	}
}

func run(steward string, n int, rest time.Duration) error {
	api, err := testutil.StartAPIServer()
	if err != nil {
		return err
	}
	defer api.Stop()
	cfg := *api.Config
	cfg.QPS, cfg.Burst = 500, 1000
	scheme, err := operator.Scheme()
	if err != nil {
		return err
	}
	c, err := client.New(&cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		return err
	}

	metricsPort, err := freePort()
	if err != nil {
		return err
	}
	op := exec.Command(steward, "operator", "--member-image", "steward:bench", "--leader-elect=false",
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", metricsPort), "--health-probe-bind-address", "0", "--log-level", "error")
	op.Env = append(os.Environ(), "KUBECONFIG="+api.Kubeconfig)
	op.Stderr = os.Stderr
	if err := op.Start(); err != nil {
		return err
	}
	defer func() { _ = op.Process.Kill(); _, _ = op.Process.Wait() }()
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	if err := waitFor(30*time.Second, func() error { _, _, err := requests(metricsURL); return err }); err != nil {
		return fmt.Errorf("operator metrics: %w", err)
	}

	fmt.Fprintf(os.Stderr, "creating %d EtcdClusters\n", n)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 20)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("c%03d", i)},
				Spec: v1alpha1.EtcdClusterSpec{Replicas: 3}}
			if err := c.Create(ctx, ec); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	created := time.Since(start)
	err = waitFor(10*time.Minute, func() error {
		var ecs v1alpha1.EtcdClusterList
		if err := c.List(ctx, &ecs, client.InNamespace("bench")); err != nil {
			return err
		}
		var sts appsv1.StatefulSetList
		if err := c.List(ctx, &sts, client.InNamespace("bench")); err != nil {
			return err
		}
		done := 0
		for _, ec := range ecs.Items {
			if ec.Status.ObservedGeneration == ec.Generation {
				done++
			}
		}
		fmt.Fprintf(os.Stderr, "\r%d of %d reconciled, %d StatefulSets", done, n, len(sts.Items))
		if done < n || len(sts.Items) < n {
			return fmt.Errorf("%d of %d reconciled", done, n)
		}
		return nil
	})
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	reconciled := time.Since(start)

	// At rest: let the last writes land, then count the operator's requests over the window.
	time.Sleep(10 * time.Second) // settling time before the measured window, not synchronisation
	total0, writes0, err := requests(metricsURL)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "counting requests at rest for %s\n", rest)
	time.Sleep(rest) // the measured window itself
	total1, writes1, err := requests(metricsURL)
	if err != nil {
		return err
	}
	hwm, _, err := proc.Memory(op.Process.Pid)
	if err != nil {
		return err
	}
	perClusterMin := (total1 - total0) / float64(n) / rest.Minutes()
	writesMin := (writes1 - writes0) / float64(n) / rest.Minutes()

	res := result.Result{
		Benchmark: "operator",
		Title:     fmt.Sprintf("One operator reconciling %d EtcdClusters on one kube-apiserver", n),
		Params:    map[string]any{"clusters": n, "members per cluster": 3, "rest window": rest.String()},
		Rows: []result.Row{
			result.Compare("time until every cluster is reconciled", "s", "steward operator", result.Seconds(reconciled), "", 0),
			result.Compare("operator peak RSS", "MiB", "steward operator", result.Round3(result.MiB(hwm)), "", 0),
			result.Compare("API requests per cluster per minute at rest", "req", "steward operator", result.Round3(perClusterMin), "", 0),
			result.Compare("API writes per cluster per minute at rest", "req", "steward operator", result.Round3(writesMin), "", 0).
				WithGoal("0", writesMin == 0),
		},
		Notes: []string{
			fmt.Sprintf("The %d EtcdClusters were created in %s (20 at a time); the time counts from the first create.", n, created.Round(time.Millisecond)),
			"No kubelet runs here, so no member pod starts: each cluster has its 7 kinds of owned objects and a status, and waits for its members.",
			"Requests are the operator's own (controller-runtime's rest_client_requests_total): list/watch traffic of its caches and the uncached reads; writes are POST, PUT, PATCH and DELETE.",
		},
	}
	return res.Print(os.Stdout)
}

// requests scrapes the operator's client request counters: all requests, and the writes.
func requests(url string) (total, writes float64, err error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		total += v
		for _, m := range []string{`method="POST"`, `method="PUT"`, `method="PATCH"`, `method="DELETE"`} {
			if strings.Contains(line, m) {
				writes += v
			}
		}
	}
	return total, writes, sc.Err()
}

func waitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond) // poll interval
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
