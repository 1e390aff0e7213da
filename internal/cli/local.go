package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/local"
	"github.com/spf13/cobra"
)

func newLocalCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "local",
		Short: "Run a multi-member etcd cluster on this machine (no Kubernetes)",
	}
	cmd.AddCommand(newLocalUpCommand(), newLocalStatusCommand(), newLocalDownCommand(), newLocalFaultCommand(), newLocalScaleCommand())
	return cmd
}

func absDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--dir %s: %w", dir, err)
	}
	return abs, nil
}

func newLocalUpCommand() *cobra.Command {
	var (
		opts          local.UpOptions
		detach, child bool
		timeout       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local cluster (or the existing one in --dir) and supervise it",
		Long: `Start a local etcd cluster: each member is one ` + "`steward etcd`" + ` process and one ` + "`steward sidecar`" + `
process, children of this supervisor, which restarts them when they die. Waits until every
member is healthy, then prints the client endpoints and the status table.

Runs in the foreground (Ctrl-C stops the cluster gracefully) unless --detach is given.
On a directory that already holds a cluster, starts that cluster on its data.
Logs: DIR/logs/<member>-etcd.log and DIR/logs/<member>-sidecar.log.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := absDir(opts.Dir)
			if err != nil {
				return err
			}
			opts.Dir = dir
			opts.ReadyTimeout = timeout
			if !cmd.Flags().Changed("members") {
				opts.Members = 0 // keep an existing cluster's size; 3 for a new one
			}
			if detach {
				return detachUp(cmd, opts)
			}
			out := cmd.OutOrStdout()
			opts.Logf = humanLogf
			opts.OnReady = func(local.Spec) {
				if child {
					return // a detached supervisor's output goes to its log; the parent prints
				}
				printUpSummary(cmd.Context(), out, opts.Dir)
				fmt.Fprintln(out, "\nPress Ctrl-C to stop the cluster (data is kept).")
			}
			return local.Up(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Dir, "dir", "./steward-data", "directory holding the cluster's data, logs and state")
	f.IntVar(&opts.Members, "members", 3, "number of members of a new cluster")
	f.IntVar(&opts.BasePort, "base-port", 2379, "first port to try; members take the first free ports from here up")
	f.StringVar(&opts.Name, "name", "steward", "name of a new cluster")
	f.StringVar(&opts.Backup, "backup", "", "backup store URL (default file://DIR/backups for a new cluster; \"none\" turns backups off)")
	f.StringSliceVar(&opts.SidecarArgs, "sidecar-arg", nil, "extra flag for every sidecar, e.g. --sidecar-arg=--delta-period=1s (repeatable)")
	f.DurationVar(&opts.QuorumLossGrace, "quorum-loss-grace", 30*time.Second, "how long a quorum must be lost before it is recovered automatically")
	f.BoolVar(&detach, "detach", false, "run the supervisor in the background; return once the cluster is healthy")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for every member to become healthy")
	f.BoolVar(&child, "supervisor-child", false, "internal: this is the background supervisor started by --detach")
	_ = f.MarkHidden("supervisor-child")
	return cmd
}

// detachUp starts the supervisor as a background process and waits until it reports the
// cluster healthy, or reports why it did not.
func detachUp(cmd *cobra.Command, opts local.UpOptions) error {
	// Check here first so that bad input is reported directly, not via a log file.
	if _, err := local.Prepare(opts); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logPath := filepath.Join(opts.Dir, "logs", "supervisor.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	args := []string{"local", "up", "--supervisor-child", "--dir", opts.Dir, "--timeout", opts.ReadyTimeout.String(),
		"--quorum-loss-grace", opts.QuorumLossGrace.String()}
	if opts.Members != 0 {
		args = append(args, "--members", strconv.Itoa(opts.Members))
	}
	for _, a := range opts.SidecarArgs {
		args = append(args, "--sidecar-arg="+a)
	}
	child := exec.Command(self, args...)
	child.Stdout, child.Stderr = logFile, logFile
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		return fmt.Errorf("start the background supervisor: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()

	ctx := cmd.Context()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		st, _ := local.ReadState(opts.Dir)
		if st.SupervisorPID == child.Process.Pid {
			switch st.Phase {
			case local.PhaseReady:
				printUpSummary(ctx, cmd.OutOrStdout(), opts.Dir)
				fmt.Fprintf(cmd.OutOrStdout(), "\nSupervisor runs in the background (pid %d, log %s). Stop with: steward local down --dir %s\n", child.Process.Pid, logPath, opts.Dir)
				return nil
			case local.PhaseFailed:
				<-exited
				return errors.New(st.Error)
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the background supervisor exited (%v) before the cluster became healthy; %s ends with:\n%s", err, logPath, local.TailFile(logPath, 20))
		case <-ctx.Done():
			_ = child.Process.Signal(syscall.SIGTERM)
			<-exited
			return errors.New("interrupted; the background supervisor was stopped")
		case <-tick.C:
		}
	}
}

func printUpSummary(ctx context.Context, w io.Writer, dir string) {
	rep, err := local.Status(ctx, dir)
	if err != nil {
		fmt.Fprintln(w, "status:", err)
		return
	}
	var eps []string
	for _, m := range rep.Members {
		eps = append(eps, m.ClientURL)
	}
	fmt.Fprintf(w, "Cluster %q is healthy (%d members).\nClient endpoints: %s\n\n", rep.Cluster.Name, len(rep.Members), strings.Join(eps, ","))
	_ = printStatusTable(w, rep)
}

func newLocalStatusCommand() *cobra.Command {
	var (
		dir string
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the local cluster's members as etcd reports them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := absDir(dir)
			if err != nil {
				return err
			}
			rep, err := local.Status(cmd.Context(), dir)
			if err != nil {
				return err
			}
			if out.format == "json" {
				return out.print(cmd.OutOrStdout(), rep, nil)
			}
			return printStatusTable(cmd.OutOrStdout(), rep)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "./steward-data", "directory of the local cluster")
	out.register(cmd)
	return cmd
}

func printStatusTable(w io.Writer, rep local.Report) error {
	var o outputFlag
	err := o.print(w, rep, func(t *table) {
		t.header("NAME", "ID", "ROLE", "HEALTHY", "REVISION", "DB SIZE", "CLIENT URL", "ETCD PID", "SIDECAR PID")
		for _, m := range rep.Members {
			t.row(m.Name, m.ID, m.Role, strconv.FormatBool(m.Healthy), strconv.FormatInt(m.Revision, 10),
				humanBytes(m.DBSize), m.ClientURL, strconv.Itoa(m.EtcdPID), strconv.Itoa(m.SidecarPID))
		}
	})
	if err != nil {
		return err
	}
	sup := "stopped"
	if rep.Supervisor.Running {
		sup = fmt.Sprintf("running (pid %d, %s)", rep.Supervisor.PID, rep.Supervisor.Phase)
	}
	fmt.Fprintf(w, "\ncluster %s  id %s  size %d  leader %s  supervisor %s\n", rep.Cluster.Name, orDash(rep.Cluster.ClusterID), rep.Cluster.Size, orDash(rep.Cluster.Leader), sup)
	if d := rep.Supervisor.Recovery; d != nil {
		fmt.Fprintf(w, "recovery  directive %d  phase %s  seed %s (%s)  %s\n", d.Epoch, d.Phase, orDash(d.Seed), orDash(d.Mode), d.Reason)
	}
	if rep.Supervisor.Waiting != "" {
		fmt.Fprintf(w, "waiting  %s\n", rep.Supervisor.Waiting)
	}
	if rep.Supervisor.Stuck != "" {
		fmt.Fprintf(w, "STUCK  %s\n", rep.Supervisor.Stuck)
	}
	if b := rep.Backup; b != nil {
		fmt.Fprintf(w, "backup  ready %t  full rev %d (%s)  delta rev %d (%s)  store %s\n", b.Ready,
			b.LatestFullRevision, ago(b.LatestFullTime), b.LatestDeltaRevision, ago(b.LatestDeltaTime), b.Store)
		if b.ReadyReason != "" {
			fmt.Fprintf(w, "backup  not ready: %s\n", b.ReadyReason)
		} else if b.LastError != "" {
			fmt.Fprintf(w, "backup  last error: %s\n", b.LastError)
		}
	}
	return nil
}

func newLocalScaleCommand() *cobra.Command {
	var (
		dir     string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "scale N",
		Short: "Change the number of members of the running cluster, without downtime",
		Long: `Scale the running local cluster to N members. Up: new members join one at a time as
learners and are promoted once caught up. Down: the highest members leave, each handing over
leadership first if it leads; their data is removed. Waits until the cluster is healthy.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[0])
			if err != nil {
				return fmt.Errorf("size %q is not a number", args[0])
			}
			dir, err := absDir(dir)
			if err != nil {
				return err
			}
			if err := local.Scale(cmd.Context(), dir, n, timeout); err != nil {
				return err
			}
			rep, err := local.Status(cmd.Context(), dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Scaled to %d members.\n\n", n)
			return printStatusTable(cmd.OutOrStdout(), rep)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "./steward-data", "directory of the local cluster")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the new size to be healthy")
	return cmd
}

func newLocalFaultCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "fault MEMBER kill|wipe|corrupt|swap [OTHER]",
		Short: "Inject a fault into a member, to watch it heal (demos and tests)",
		Long: `Inject a fault into a running local cluster:

  kill      kill -9 the member's etcd
  wipe      delete the member's data, then kill -9 its etcd
  corrupt   damage the member's database file, then kill -9 its etcd
  swap      swap the data dirs of MEMBER and OTHER, then kill -9 both

The supervisor restarts the process; the sidecar detects the damage and heals the member.`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := absDir(dir)
			if err != nil {
				return err
			}
			other := ""
			if len(args) == 3 {
				other = args[2]
			}
			if err := local.Fault(dir, args[0], args[1], other); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "injected %s into %s; watch it heal with `steward local status --dir %s`\n", args[1], args[0], dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "./steward-data", "directory of the local cluster")
	return cmd
}

func newLocalDownCommand() *cobra.Command {
	var opts local.DownOptions
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the local cluster gracefully (data is kept unless --purge)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := absDir(opts.Dir)
			if err != nil {
				return err
			}
			opts.Dir = dir
			if err := local.Down(cmd.Context(), opts); err != nil {
				return err
			}
			if opts.Purge {
				fmt.Fprintf(cmd.OutOrStdout(), "Stopped; removed %s.\n", dir)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "Stopped; data kept in %s (start again with `steward local up --dir %s`).\n", dir, dir)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&opts.Dir, "dir", "./steward-data", "directory of the local cluster")
	cmd.Flags().BoolVar(&opts.Purge, "purge", false, "also delete the directory with all data, logs and backups")
	return cmd
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
