// Package cluster drives a real `steward local` cluster for benchmarks through the steward
// binary (up --detach, status -o json, down --purge), the way a user would.
package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Cluster is a running local cluster.
type Cluster struct {
	Steward string // the steward binary
	Dir     string
}

// Options for Up.
type Options struct {
	Members int
	// Backup is the store URL, or "none" to switch backups off.
	Backup string
	// SidecarArgs are extra sidecar flags.
	SidecarArgs []string
	// TLS makes the cluster with mutual TLS of its own CA (`steward local up --tls`).
	TLS bool
	// Timeout bounds the wait for the cluster to become healthy.
	Timeout time.Duration
}

// Up starts a new local cluster in dir (which must not hold one) and waits until it is healthy.
func Up(ctx context.Context, steward, dir string, o Options) (*Cluster, error) {
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Minute
	}
	args := []string{"local", "up", "--detach", "--dir", dir, "--members", strconv.Itoa(o.Members),
		"--timeout", o.Timeout.String()}
	if o.Backup != "" {
		args = append(args, "--backup", o.Backup)
	}
	if o.TLS {
		args = append(args, "--tls")
	}
	for _, a := range o.SidecarArgs {
		args = append(args, "--sidecar-arg="+a)
	}
	if _, err := Run(ctx, steward, args...); err != nil {
		return nil, fmt.Errorf("start a %d-member cluster in %s: %w", o.Members, dir, err)
	}
	return &Cluster{Steward: steward, Dir: dir}, nil
}

// Down stops the cluster and removes its directory.
func (c *Cluster) Down(ctx context.Context) error {
	if _, err := Run(ctx, c.Steward, "local", "down", "--dir", c.Dir, "--purge"); err != nil {
		return fmt.Errorf("stop the cluster in %s: %w", c.Dir, err)
	}
	return nil
}

// Status is the part of `steward local status -o json` the benchmarks read.
type Status struct {
	Cluster struct {
		Leader       string `json:"leader"`
		ClientTLSDir string `json:"clientTLSDir"`
	} `json:"cluster"`
	Members []struct {
		Name       string `json:"name"`
		ClientURL  string `json:"clientURL"`
		Role       string `json:"role"`
		Healthy    bool   `json:"healthy"`
		Revision   int64  `json:"revision"`
		DBSize     int64  `json:"dbSize"`
		EtcdPID    int    `json:"etcdPid"`
		SidecarPID int    `json:"sidecarPid"`
	} `json:"members"`
	Backup *struct {
		Ready               bool   `json:"ready"`
		LatestFullRevision  int64  `json:"latestFullRevision"`
		LatestDeltaRevision int64  `json:"latestDeltaRevision"`
		Leader              string `json:"leader"`
		Failures            int64  `json:"failures"`
		LastError           string `json:"lastError"`
	} `json:"backup"`
}

// Status runs `steward local status -o json`.
func (c *Cluster) Status(ctx context.Context) (Status, error) {
	out, err := Run(ctx, c.Steward, "local", "status", "--dir", c.Dir, "-o", "json")
	if err != nil {
		return Status{}, fmt.Errorf("status of the cluster in %s: %w", c.Dir, err)
	}
	var st Status
	if err := json.Unmarshal(out, &st); err != nil {
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

// SidecarURL returns the sidecar API URL of member name, from DIR/cluster.json.
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

// Run runs a command (steward, etcdctl) to its end and returns its standard output; the
// error carries its output.
func Run(ctx context.Context, bin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()+"\n"+stdout.String()))
	}
	return stdout.Bytes(), nil
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
