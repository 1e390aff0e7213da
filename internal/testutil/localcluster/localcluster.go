// Package localcluster starts and drives `steward local` clusters through the steward binary,
// the way a user does: `local up --detach`, `local status -o json`, `local down`. It is the one
// harness of the CLI tests (test/cli) and of the benchmarks (bench/): the benchmarks use the
// context-and-error API (Up, Run), the tests Start, MustRun and Report, which fail the test.
package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/local"
)

// Cluster is a local cluster in Dir, run by the steward binary Steward.
type Cluster struct {
	Steward string
	Dir     string
	// Output is what `steward local up` printed (standard output and error).
	Output string
}

// Options are the `steward local up` flags of a new cluster. Zero values leave steward's
// defaults.
type Options struct {
	Members  int
	BasePort int
	// Backup is the store URL, or "none" to switch backups off.
	Backup string
	// TLS makes the cluster with mutual TLS of its own CA (`--tls`).
	TLS bool
	// SidecarArgs are extra sidecar flags (`--sidecar-arg`).
	SidecarArgs []string
	// Timeout bounds the wait for the cluster to become healthy (`--timeout`).
	Timeout time.Duration
	// Flags are further `local up` flags, given as they are after the others.
	Flags []string
}

// args are the `local up` flags of o.
func (o Options) args() []string {
	var args []string
	if o.Members > 0 {
		args = append(args, "--members", strconv.Itoa(o.Members))
	}
	if o.BasePort > 0 {
		args = append(args, "--base-port", strconv.Itoa(o.BasePort))
	}
	if o.Backup != "" {
		args = append(args, "--backup", o.Backup)
	}
	if o.TLS {
		args = append(args, "--tls")
	}
	for _, a := range o.SidecarArgs {
		args = append(args, "--sidecar-arg="+a)
	}
	if o.Timeout > 0 {
		args = append(args, "--timeout", o.Timeout.String())
	}
	return append(args, o.Flags...)
}

// Up starts a cluster in dir (a new one, or the one dir holds) with `steward local up
// --detach`, which returns once the cluster is healthy.
func Up(ctx context.Context, steward, dir string, o Options) (*Cluster, error) {
	args := append([]string{"local", "up", "--detach", "--dir", dir}, o.args()...)
	cmd := exec.CommandContext(ctx, steward, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("start the cluster in %s: %s %s: %w: %s", dir, filepath.Base(steward), strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return &Cluster{Steward: steward, Dir: dir, Output: out.String()}, nil
}

// Stop stops the cluster and keeps its data (`steward local down`).
func (c *Cluster) Stop(ctx context.Context) error {
	if _, err := Run(ctx, c.Steward, "local", "down", "--dir", c.Dir); err != nil {
		return fmt.Errorf("stop the cluster in %s: %w", c.Dir, err)
	}
	return nil
}

// Purge stops the cluster and removes its directory (`steward local down --purge`).
func (c *Cluster) Purge(ctx context.Context) error {
	if _, err := Run(ctx, c.Steward, "local", "down", "--dir", c.Dir, "--purge"); err != nil {
		return fmt.Errorf("stop the cluster in %s: %w", c.Dir, err)
	}
	return nil
}

// PurgeOnReturn purges the cluster unless keep is set, and makes a failure to do so *err
// unless it already holds one: `defer c.PurgeOnReturn(keep, &err)` in a function that
// returns err.
func (c *Cluster) PurgeOnReturn(keep bool, err *error) {
	if keep {
		return
	}
	if perr := c.Purge(context.Background()); perr != nil && *err == nil {
		*err = perr
	}
}

// Status is `steward local status -o json`, with the accessors the benchmarks use.
type Status struct {
	local.Report
}

// StatusRun runs `steward local status ARGS` and returns what it printed. Its exit code says
// degraded (3) or down (4) and it prints the status all the same: only another failure is an
// error.
func StatusRun(ctx context.Context, steward string, args ...string) ([]byte, error) {
	out, err := Run(ctx, steward, append([]string{"local", "status"}, args...)...)
	var exit *exec.ExitError
	if errors.As(err, &exit) && (exit.ExitCode() == 3 || exit.ExitCode() == 4) {
		err = nil
	}
	return out, err
}

// Status runs `steward local status -o json` (see StatusRun).
func (c *Cluster) Status(ctx context.Context) (Status, error) {
	out, err := StatusRun(ctx, c.Steward, "--dir", c.Dir, "-o", "json")
	if err != nil {
		return Status{}, fmt.Errorf("status of the cluster in %s: %w", c.Dir, err)
	}
	var st Status
	if err := json.Unmarshal(out, &st.Report); err != nil {
		return Status{}, fmt.Errorf("status of the cluster in %s: unexpected output: %w", c.Dir, err)
	}
	return st, nil
}

// Endpoints lists the members' client URLs.
func (st Status) Endpoints() []string {
	var eps []string
	for _, m := range st.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// LeaderIndex is the index of the leader in Members, or -1.
func (st Status) LeaderIndex() int {
	for i, m := range st.Members {
		if m.Role == "leader" {
			return i
		}
	}
	return -1
}

// PIDs lists the etcd and sidecar process ids of every member.
func (st Status) PIDs() (etcd, sidecar []int) {
	for _, m := range st.Members {
		etcd = append(etcd, m.EtcdPID)
		sidecar = append(sidecar, m.SidecarPID)
	}
	return etcd, sidecar
}

// SidecarURL returns the sidecar API URL (plain http) of member name, from DIR/cluster.json.
func (c *Cluster) SidecarURL(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "cluster.json"))
	if err != nil {
		return "", err
	}
	var spec struct {
		Host    string `json:"host"`
		Members []struct {
			Name        string `json:"name"`
			SidecarPort int    `json:"sidecarPort"`
		} `json:"members"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return "", fmt.Errorf("%s/cluster.json: %w", c.Dir, err)
	}
	for _, m := range spec.Members {
		if m.Name == name {
			return fmt.Sprintf("http://%s:%d", spec.Host, m.SidecarPort), nil
		}
	}
	return "", fmt.Errorf("member %s is not in %s/cluster.json", name, c.Dir)
}

// WaitBackupCurrent waits until the stored deltas reach the raft leader's revision and
// returns how long that took.
func (c *Cluster) WaitBackupCurrent(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	var last string
	for time.Since(start) < timeout {
		st, err := c.Status(ctx)
		if err == nil && st.Backup != nil {
			if li := st.LeaderIndex(); li >= 0 {
				rev := st.Members[li].Revision
				if st.Backup.LatestDeltaRevision >= rev {
					return time.Since(start), nil
				}
				last = fmt.Sprintf("stored deltas reach revision %d of %d (last error: %q)", st.Backup.LatestDeltaRevision, rev, st.Backup.LastError)
			}
		} else if err != nil {
			last = err.Error()
		}
		time.Sleep(500 * time.Millisecond)
	}
	return 0, fmt.Errorf("backups did not catch up within %v: %s", timeout, last)
}

// Run runs a command (steward, etcdctl) to its end and returns its standard output; the
// error carries its output too.
func Run(ctx context.Context, bin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()+"\n"+stdout.String()))
	}
	return stdout.Bytes(), nil
}

// Warnings returns the last n warnings and errors of each process log of the cluster in dir,
// by log file name: what a failure needs to be understood from its output alone. etcd's
// "request stats" warnings are left out.
func Warnings(dir string, n int) map[string][]string {
	out := map[string][]string{}
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
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		if len(lines) > 0 {
			out[filepath.Base(path)] = lines
		}
	}
	return out
}
