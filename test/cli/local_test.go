// Package cli_test drives the steward binary the way a user does: `steward local up
// --detach`, a stock etcdctl, `steward local status -o json`, `steward local down`.
package cli_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
)

// run runs a command, fails the test if it fails, and returns what it printed.
var run = localcluster.MustRun

// etcdctlShell runs the etcdctl command line `steward local status` prints, followed by args,
// in sh, with the stock etcdctl at path etcdctl first on the PATH.
func etcdctlShell(etcdctl, line, args string) *exec.Cmd {
	cmd := exec.Command("sh", "-c", line+" "+args)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(etcdctl)+string(os.PathListSeparator)+os.Getenv("PATH"))
	return cmd
}

// etcdctlArgs are the arguments of the etcdctl command line status prints for a cluster
// without authentication, which sets no environment: the line split on spaces, etcdctl left out.
func etcdctlArgs(t *testing.T, line string) []string {
	t.Helper()
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "etcdctl" {
		t.Fatalf("the etcdctl command line does not start with etcdctl: %s", line)
	}
	return f[1:]
}

func TestLocalUpDetachWithEtcdctl(t *testing.T) {
	etcdctl := testutil.Tool(t, "etcdctl")
	c := localcluster.Start(t, "--members", "3", "--base-port", "25000")
	steward, dir := c.Steward, c.Dir
	// Progress lines while it waits, then the summary.
	if !strings.Contains(c.Output, "started the supervisor in the background") || !strings.Contains(c.Output, "is healthy (3 members)") {
		t.Fatalf("up output:\n%s", c.Output)
	}

	rep := c.Report()
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

	out := run(t, steward, "local", "down", "--dir", dir)
	if !strings.Contains(out, "stopping the supervisor") || !strings.Contains(out, "data kept") {
		t.Fatalf("down output: %s", out)
	}
	// The status of a stopped cluster still answers, with its members stopped, and exits 4.
	stopped, err := exec.Command(steward, "local", "status", "--dir", dir, "-o", "json").Output()
	var exit *exec.ExitError
	var st local.Report
	if !errors.As(err, &exit) || exit.ExitCode() != 4 || json.Unmarshal(stopped, &st) != nil || st.Cluster.Health != local.HealthDown {
		t.Fatalf("status of a stopped cluster: %v, %s; want exit code 4 and the status", err, stopped)
	}
	for _, m := range st.Members {
		if m.Role != local.RoleStopped {
			t.Errorf("member %s of a stopped cluster: role %q", m.Name, m.Role)
		}
	}
	run(t, steward, "local", "down", "--dir", dir, "--purge")
	if _, ok, _ := local.ReadSpec(local.Dir(dir)); ok {
		t.Fatal("--purge left the cluster behind")
	}
}
