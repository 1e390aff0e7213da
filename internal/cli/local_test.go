package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/local"
	"github.com/spf13/cobra"
)

// runLocal runs `steward local ARGS` and returns its standard output and error.
func runLocal(args ...string) (string, error) {
	cmd := NewRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs(append([]string{"local"}, args...))
	err := cmd.Execute()
	return out.String(), err
}

// stoppedCluster makes a local cluster in a new directory without starting it.
func stoppedCluster(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cluster")
	if _, err := local.Prepare(local.UpOptions{Dir: dir, Members: 3, Backup: "none"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLocalStatusOfStoppedCluster: the members of a stopped cluster are "stopped", and
// status, which still prints them, exits with the code for a cluster that is down.
func TestLocalStatusOfStoppedCluster(t *testing.T) {
	dir := stoppedCluster(t)
	out, err := runLocal("status", "--dir", dir, "-o", "json")
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != ExitDown {
		t.Fatalf("status of a stopped cluster: %v; want exit code %d", err, ExitDown)
	}
	var rep local.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status -o json: %v (exit %v)\n%s", err, exit, out)
	}
	if rep.Cluster.Health != local.HealthDown || len(rep.Members) != 3 {
		t.Fatalf("status: %s", out)
	}
	for _, m := range rep.Members {
		if m.Role != local.RoleStopped {
			t.Errorf("member %s of a stopped cluster: role %q, want %q", m.Name, m.Role, local.RoleStopped)
		}
	}
	if table, _ := runLocal("status", "--dir", dir); !strings.Contains(table, "stopped") || strings.Contains(table, "follower") {
		t.Errorf("status table of a stopped cluster:\n%s", table)
	}
}

// TestLocalUpRefusesFlagsOfNewCluster: on a directory that holds a cluster, the flags that
// only shape a new one are refused, naming the flag, before anything starts.
func TestLocalUpRefusesFlagsOfNewCluster(t *testing.T) {
	dir := stoppedCluster(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--base-port", "30000"}, "--base-port: " + dir + ` already holds the cluster "steward", whose cluster.json fixes its ports; leave --base-port out`},
		{[]string{"--name", "other"}, "--name: " + dir + ` already holds the cluster "steward", whose cluster.json fixes its name`},
	} {
		_, err := runLocal(append([]string{"up", "--detach", "--dir", dir}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("local up %v on an existing cluster: %v; want an error saying %q", c.args, err, c.want)
		}
	}
}

// TestOutputFlagOnEveryResult: every command that prints a result takes -o table|json.
func TestOutputFlagOnEveryResult(t *testing.T) {
	// The commands that print no result of their own: they run a process, or print a
	// confirmation, a stream or a file.
	noResult := map[string]bool{
		"steward etcd": true, "steward sidecar": true, "steward operator": true, "steward local fault": true,
		"steward kubectl backup": true, "steward kubectl restore": true, "steward kubectl hibernate": true,
		"steward kubectl destroy": true, "steward kubectl logs": true, "steward kubectl report": true,
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !c.HasSubCommands() && !c.Hidden && c.Name() != "help" && !noResult[c.CommandPath()] {
			if f := c.Flags().ShorthandLookup("o"); f == nil || f.Name != "output" {
				t.Errorf("%s has no -o table|json", c.CommandPath())
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRootCommand())
}
