package localcluster

import (
	"context"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/testutil"
)

// T is a cluster of a test: its helpers fail the test instead of returning errors.
type T struct {
	*Cluster
	t testing.TB
}

// Start starts a cluster in a new temporary dir with the steward binary of this tree and
// the extra `local up` flags. The cluster is stopped when the test ends; if the test failed,
// the last warnings of its processes are logged first.
func Start(t testing.TB, flags ...string) *T {
	t.Helper()
	steward := testutil.StewardBinary(t)
	dir := filepath.Join(t.TempDir(), "cluster")
	c, err := Up(context.Background(), steward, dir, Options{Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command(steward, "local", "down", "--dir", dir).Run()
		if t.Failed() {
			LogWarnings(t, dir)
		}
	})
	return &T{Cluster: c, t: t}
}

// Report is `steward local status -o json`.
func (c *T) Report() local.Report {
	c.t.Helper()
	st, err := c.Status(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	return st.Report
}

// StatusTable is `steward local status` as a table, whether the cluster is healthy, degraded
// or down.
func (c *T) StatusTable() string {
	c.t.Helper()
	out, err := StatusRun(context.Background(), c.Steward, "--dir", c.Dir)
	if err != nil {
		c.t.Fatalf("steward local status --dir %s: %v\n%s", c.Dir, err, out)
	}
	return string(out)
}

// MustRun runs a command and returns what it printed (standard output and error); it fails
// the test if the command fails.
func MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// LogWarnings logs the last warnings and errors of every process of the cluster in dir.
func LogWarnings(t testing.TB, dir string) {
	t.Helper()
	warnings := Warnings(dir, 20)
	names := make([]string, 0, len(warnings))
	for n := range warnings {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("the last warnings of %s:\n%s", n, strings.Join(warnings[n], "\n"))
	}
}
