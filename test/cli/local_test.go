// Package cli_test drives the steward binary the way a user does: `steward local up
// --detach`, a stock etcdctl, `steward local status -o json`, `steward local down`.
package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/testutil"
)

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// localCluster is a cluster started with `steward local up --detach`, stopped when the test ends.
type localCluster struct {
	t            *testing.T
	steward, dir string
	// up is what `local up` printed.
	up string
}

// upLocal starts a cluster in a new dir with the extra `local up` flags.
func upLocal(t *testing.T, flags ...string) *localCluster {
	t.Helper()
	c := &localCluster{t: t, steward: testutil.StewardBinary(t), dir: filepath.Join(t.TempDir(), "cluster")}
	c.up = run(t, c.steward, append([]string{"local", "up", "--detach", "--dir", c.dir}, flags...)...)
	t.Cleanup(func() {
		_ = exec.Command(c.steward, "local", "down", "--dir", c.dir).Run()
		if t.Failed() {
			logWarnings(t, c.dir)
		}
	})
	return c
}

// logWarnings logs the last warnings and errors of every process of the cluster in dir: what
// a failed test needs to be understood from CI's output alone.
func logWarnings(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) {
				if !strings.Contains(l, `"msg":"request stats"`) {
					lines = append(lines, l)
				}
			}
		}
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		if len(lines) > 0 {
			t.Logf("the last warnings of %s:\n%s", filepath.Base(path), strings.Join(lines, "\n"))
		}
	}
}

// status is `steward local status -o json`.
func (c *localCluster) status() local.Report {
	c.t.Helper()
	var rep local.Report
	if err := json.Unmarshal([]byte(run(c.t, c.steward, "local", "status", "--dir", c.dir, "-o", "json")), &rep); err != nil {
		c.t.Fatal(err)
	}
	return rep
}

func TestLocalUpDetachWithEtcdctl(t *testing.T) {
	steward := testutil.StewardBinary(t)
	etcdctl := testutil.Tool(t, "etcdctl")
	dir := filepath.Join(t.TempDir(), "cluster")

	out := run(t, steward, "local", "up", "--detach", "--members", "3", "--dir", dir, "--base-port", "25000")
	t.Cleanup(func() { _ = exec.Command(steward, "local", "down", "--dir", dir).Run() })
	if !strings.Contains(out, "is healthy (3 members)") {
		t.Fatalf("up output:\n%s", out)
	}

	var rep local.Report
	if err := json.Unmarshal([]byte(run(t, steward, "local", "status", "--dir", dir, "-o", "json")), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Members) != 3 || rep.Cluster.Leader == "" || rep.Cluster.ClusterID == "" || !rep.Supervisor.Running {
		t.Fatalf("status: %+v", rep)
	}
	var endpoints []string
	for _, m := range rep.Members {
		if !m.Healthy {
			t.Fatalf("member %s not healthy: %+v", m.Name, m)
		}
		endpoints = append(endpoints, m.ClientURL)
	}

	// A stock etcdctl puts through one member and reads through another.
	run(t, etcdctl, "--endpoints", endpoints[0], "put", "/greeting", "hello")
	if got := run(t, etcdctl, "--endpoints", endpoints[2], "get", "/greeting", "--print-value-only"); strings.TrimSpace(got) != "hello" {
		t.Fatalf("etcdctl get through %s: %q", endpoints[2], got)
	}
	// etcdctl's member list agrees with the status IDs (hex, as etcdctl prints them).
	list := run(t, etcdctl, "--endpoints", strings.Join(endpoints, ","), "member", "list")
	for _, m := range rep.Members {
		if !strings.Contains(list, m.ID+", started, "+m.Name+",") {
			t.Errorf("etcdctl member list has no %s %s:\n%s", m.Name, m.ID, list)
		}
	}

	out = run(t, steward, "local", "down", "--dir", dir)
	if !strings.Contains(out, "data kept") {
		t.Fatalf("down output: %s", out)
	}
	if err := exec.Command(steward, "local", "status", "--dir", dir, "-o", "json").Run(); err != nil {
		t.Fatalf("status of a stopped cluster should still answer: %v", err)
	}
	run(t, steward, "local", "down", "--dir", dir, "--purge")
	if _, ok, _ := local.ReadSpec(local.Dir(dir)); ok {
		t.Fatal("--purge left the cluster behind")
	}
}
