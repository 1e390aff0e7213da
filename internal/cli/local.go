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

	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/maintenance"
	"github.com/etcd-steward/steward/internal/units"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newLocalCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "local",
		Short: "Run a multi-member etcd cluster on this machine (no Kubernetes)",
	}
	cmd.AddCommand(newLocalUpCommand(), newLocalStatusCommand(), newLocalDownCommand(), newLocalFaultCommand(), newLocalScaleCommand(), newLocalRestoreCommand(), newLocalUpgradeCommand(), newLocalRotateCACommand())
	return cmd
}

// dirFlag gives a `local` subcommand its --dir flag, made absolute before the command runs:
// every subcommand opens the cluster directory the same way.
func dirFlag(cmd *cobra.Command, dir *string, usage string) {
	cmd.Flags().StringVar(dir, "dir", "./steward-data", usage)
	cmd.PreRunE = func(*cobra.Command, []string) error {
		abs, err := filepath.Abs(*dir)
		if err != nil {
			return fmt.Errorf("--dir %s: %w", *dir, err)
		}
		*dir = abs
		return nil
	}
}

func newLocalUpCommand() *cobra.Command {
	var (
		opts          local.UpOptions
		detach, child bool
		timeout       time.Duration
		out           outputFlag
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local cluster (or the existing one in --dir) and supervise it",
		Long: `Start a local etcd cluster: each member is one ` + "`steward etcd`" + ` process and one ` + "`steward sidecar`" + `
process, children of this supervisor, which restarts them when they die. Waits until every
member is healthy, then prints the client endpoints and the status table.

Runs in the foreground (Ctrl-C stops the cluster gracefully) unless --detach is given.
On a directory that already holds a cluster, starts that cluster on its data; the flags that
only shape a new cluster are refused there, as its cluster.json fixes what they choose:
--base-port, a --name other than the cluster's, --tls on a cluster made without it.
Logs: DIR/logs/<member>-etcd.log and DIR/logs/<member>-sidecar.log, each rotated at 50 MB
(the 4 older files kept beside it, compressed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			opts.ReadyTimeout = timeout
			// local.Up takes 0 as not given; given here, 0 is refused, not taken as that.
			f := cmd.Flags()
			if err := refuseNewClusterFlags(f, opts); err != nil {
				return err
			}
			switch {
			case !f.Changed("members"):
				opts.Members = 0 // keep an existing cluster's size; 3 for a new one
			case opts.Members == 0:
				return fmt.Errorf("--members 0: %w; leave --members out to keep an existing cluster's size (3 for a new one)", local.CheckSize(0))
			}
			if f.Changed("base-port") && opts.BasePort == 0 {
				return errors.New("--base-port 0: ports are 1 to 65535; leave --base-port out to start from 2379")
			}
			if detach {
				return detachUp(cmd, opts, out)
			}
			opts.Logf = humanLogf
			opts.OnReady = func(local.Spec) {
				if child {
					return // a detached supervisor's output goes to its log; the parent prints
				}
				printUpSummary(cmd.Context(), cmd.OutOrStdout(), opts.Dir, out)
				if !out.json() {
					fmt.Fprintln(cmd.OutOrStdout(), "\nPress Ctrl-C to stop the cluster (data is kept).")
				}
			}
			return local.Up(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	dirFlag(cmd, &opts.Dir, "directory holding the cluster's data, logs and state")
	f.IntVar(&opts.Members, "members", 3, "number of members of a new cluster")
	f.IntVar(&opts.BasePort, "base-port", 2379, "first port a new cluster tries; members take the first free ports from here up")
	f.StringVar(&opts.Name, "name", "steward", "name of a new cluster")
	f.StringVar(&opts.Backup, "backup", "", "backup store URL (default file://DIR/backups for a new cluster; \"none\" turns backups off)")
	f.BoolVar(&opts.Auth, "auth", false, "turn etcd authentication on: a root user whose password is generated in DIR/auth/root-password, with which every Steward client logs in, and tokens etcd signs with the key pair generated in DIR/auth/token-key, valid on every member (also for a cluster made without it; it cannot be turned off)")
	f.BoolVar(&opts.TLS, "tls", false, "make a new cluster's client and peer traffic mutual TLS of its own CA, generated under DIR/pki ('steward local status' prints an etcdctl command line)")
	f.BoolVar(&opts.EncryptBackups, "encrypt-backups", false, "encrypt the cluster's backups (AES-256-GCM) from now on, with a key generated into DIR/backup-keys (keep a copy elsewhere: backups cannot be restored without it)")
	f.StringSliceVar(&opts.SidecarArgs, "sidecar-arg", nil, "extra flag for every sidecar, e.g. --sidecar-arg=--delta-period=1s (repeatable)")
	f.DurationVar(&opts.QuorumLossGrace, "quorum-loss-grace", 30*time.Second, "how long a quorum must be lost before it is recovered automatically (not waited out when the voters' sidecars report that too much data is gone for a quorum ever to return)")
	f.BoolVar(&detach, "detach", false, "run the supervisor in the background; return once the cluster is healthy")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for every member to become healthy")
	f.BoolVar(&child, "supervisor-child", false, "internal: this is the background supervisor started by --detach")
	_ = f.MarkHidden("supervisor-child")
	out.register(cmd)
	return cmd
}

// refuseNewClusterFlags refuses, on a directory that already holds a cluster, the flags given
// that only shape a new cluster: its cluster.json fixes them.
func refuseNewClusterFlags(f *pflag.FlagSet, opts local.UpOptions) error {
	spec, ok, err := local.ReadSpec(local.Dir(opts.Dir))
	if err != nil || !ok {
		return err
	}
	fixed := func(flag, what string) error {
		return fmt.Errorf("--%s: %s already holds the cluster %q, whose cluster.json fixes its %s; leave --%s out to start it, or give another --dir for a new cluster",
			flag, opts.Dir, spec.Name, what, flag)
	}
	switch {
	case f.Changed("base-port"):
		return fixed("base-port", "ports")
	case f.Changed("name") && opts.Name != spec.Name:
		return fixed("name", "name")
	}
	return nil
}

// detachUp starts the supervisor as a background process and waits until it reports the
// cluster healthy, or reports why it did not, with a progress line whenever the members waited
// for change.
func detachUp(cmd *cobra.Command, opts local.UpOptions, out outputFlag) error {
	// Check here first so that bad input is reported directly, not via a log file.
	if _, err := local.Prepare(opts); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logPath := local.Dir(opts.Dir).SupervisorLog()
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
	progress := progressLines(cmd)
	progress(fmt.Sprintf("started the supervisor in the background (pid %d, log %s); waiting for the members to become healthy", child.Process.Pid, logPath))
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	lastWaiting := ""
	for {
		st, _ := local.ReadState(local.Dir(opts.Dir))
		if st.SupervisorPID == child.Process.Pid {
			if w := waitingFor(st); w != lastWaiting && st.Phase != local.PhaseReady {
				progress(w)
				lastWaiting = w
			}
			switch st.Phase {
			case local.PhaseReady:
				printUpSummary(ctx, cmd.OutOrStdout(), opts.Dir, out)
				if !out.json() {
					fmt.Fprintf(cmd.OutOrStdout(), "\nSupervisor runs in the background (pid %d, log %s). Stop with: steward local down --dir %s\n", child.Process.Pid, logPath, opts.Dir)
				}
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

// waitingFor is a progress line of a starting cluster: which members are not healthy yet.
func waitingFor(st local.State) string {
	var waiting []string
	for _, m := range st.Members {
		if !m.Ready {
			waiting = append(waiting, m.Name)
		}
	}
	switch {
	case len(st.Members) == 0:
		return "starting the members"
	case len(waiting) == 0:
		return "every member is healthy; recording the cluster they formed"
	}
	return fmt.Sprintf("waiting for %s to become healthy (%d of %d are)", strings.Join(waiting, ", "), len(st.Members)-len(waiting), len(st.Members))
}

// printUpSummary prints the cluster `local up` made healthy: its status, or in a table also
// its endpoints.
func printUpSummary(ctx context.Context, w io.Writer, dir string, out outputFlag) {
	rep, err := local.Status(ctx, local.Dir(dir))
	if err != nil {
		fmt.Fprintln(w, "status:", err)
		return
	}
	if out.json() {
		_ = out.print(w, rep, nil)
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
		Short: "Show the local cluster's members as etcd reports them; the exit code says whether it is healthy",
		Long: `Show the local cluster's members as etcd reports them (a member's role is leader, follower
or learner as it says itself; stopped when its etcd does not run; unreachable when it runs but
does not answer), the supervisor, any recovery in progress and the backups.

Exit codes: 0 healthy (every member healthy); 1 an error (no cluster in --dir, say);
3 degraded (the cluster serves, a quorum of its voters healthy, but a member is not, or a
recovery is in progress); 4 down (the supervisor is stopped, or no quorum of the voters is
healthy). The status is printed in every case but the error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			rep, err := local.Status(cmd.Context(), local.Dir(dir))
			if err != nil {
				return err
			}
			if out.json() {
				err = out.print(cmd.OutOrStdout(), rep, nil)
			} else {
				err = printStatusTable(cmd.OutOrStdout(), rep)
			}
			if err != nil {
				return err
			}
			return healthExit(rep, dir)
		},
	}
	dirFlag(cmd, &dir, "directory of the local cluster")
	out.register(cmd)
	return cmd
}

// healthExit is the exit `local status` ends with: nil for a healthy cluster, else an
// ExitError whose code says degraded or down.
func healthExit(rep local.Report, dir string) error {
	switch rep.Cluster.Health {
	case local.HealthDown:
		return &ExitError{Code: ExitDown, Message: fmt.Sprintf("the cluster in %s is down", dir)}
	case local.HealthDegraded:
		return &ExitError{Code: ExitDegraded, Message: fmt.Sprintf("the cluster in %s is degraded", dir)}
	}
	return nil
}

func printStatusTable(w io.Writer, rep local.Report) error {
	tableOutput := outputFlag{format: "table"}
	err := tableOutput.print(w, rep, func(t *table) {
		t.header("NAME", "ID", "ROLE", "HEALTHY", "REVISION", "DB SIZE", "CLIENT URL", "ETCD PID", "SIDECAR PID")
		for _, m := range rep.Members {
			t.row(m.Name, m.ID, m.Role, strconv.FormatBool(m.Healthy), strconv.FormatInt(m.Revision, 10),
				units.Bytes(m.DBSize), m.ClientURL, strconv.Itoa(m.EtcdPID), strconv.Itoa(m.SidecarPID))
		}
	})
	if err != nil {
		return err
	}
	sup := "stopped"
	if rep.Supervisor.Running {
		sup = fmt.Sprintf("running (pid %d, %s)", rep.Supervisor.PID, rep.Supervisor.Phase)
	}
	fmt.Fprintf(w, "\ncluster %s  %s  id %s  size %d  leader %s  supervisor %s\n", rep.Cluster.Name, rep.Cluster.Health, orDash(rep.Cluster.ClusterID), rep.Cluster.Size, orDash(rep.Cluster.Leader), sup)
	fmt.Fprintf(w, "client  %s\n", rep.Cluster.Etcdctl)
	if d := rep.Cluster.ClientTLSDir; d != "" {
		fmt.Fprintf(w, "tls  mutual TLS of the cluster's own CA: give `steward` commands --tls-dir %s\n", d)
	}
	if p := rep.Cluster.RootPasswordFile; p != "" {
		fmt.Fprintf(w, "auth etcd authentication: user root, password in %s; give `steward` commands --password-file %s\n", p, p)
	}
	if p := rep.Cluster.AppPasswordFile; p != "" {
		fmt.Fprintf(w, "app  applications log in as %s, password in %s (every key; no administration)\n", rep.Cluster.AppUser, p)
	}
	if d := rep.Supervisor.Recovery; d != nil {
		fmt.Fprintf(w, "recovery  directive %d  phase %s  seed %s (%s)  %s\n", d.Epoch, d.Phase, orDash(d.Seed), orDash(d.Mode), d.Reason)
		if t := d.Restore; t != nil {
			fmt.Fprintf(w, "restore  to %s of timeline %d (cancel with `steward local restore --cancel` while its seed has not restored it)\n", t.Point(), t.Timeline)
		}
		if len(d.Founders) > 0 {
			fmt.Fprintf(w, "founders  %s (restored: %s)\n", strings.Join(d.Founders, ", "), orDash(strings.Join(d.Restored, ", ")))
		}
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
		if r := b.Recoverable; r != nil {
			fmt.Fprintf(w, "backup  recoverable: %s\n", recoverable(r.Timeline, r.FirstRevision, r.LastRevision, r.FirstTime, r.LastTime))
		}
		if b.EncryptionKeys != "" {
			fmt.Fprintf(w, "backup  encrypted: give `steward backup` and `steward restore` --encryption-keys %s\n", b.EncryptionKeys)
		}
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
		out     outputFlag
	)
	cmd := &cobra.Command{
		Use:   "scale N",
		Short: "Change the number of members of the running cluster, without downtime",
		Long: `Scale the running local cluster to N members. Up: new members join one at a time as
learners and are promoted once caught up. Down: the highest members leave, each handing over
leadership first if it leads; their data is removed. Waits until the cluster is healthy.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			n, err := strconv.Atoi(args[0])
			if err != nil {
				return fmt.Errorf("size %q is not a number", args[0])
			}
			if err := local.Scale(cmd.Context(), local.Dir(dir), n, timeout, progressLines(cmd)); err != nil {
				return err
			}
			rep, err := local.Status(cmd.Context(), local.Dir(dir))
			if err != nil {
				return err
			}
			if out.json() {
				return out.print(cmd.OutOrStdout(), rep, nil)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Scaled to %d members.\n\n", n)
			return printStatusTable(cmd.OutOrStdout(), rep)
		},
	}
	dirFlag(cmd, &dir, "directory of the local cluster")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the new size to be healthy")
	out.register(cmd)
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
			other := ""
			if len(args) == 3 {
				other = args[2]
			}
			if err := local.Fault(local.Dir(dir), args[0], args[1], other); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "injected %s into %s; watch it heal with `steward local status --dir %s`\n", args[1], args[0], dir)
			return nil
		},
	}
	dirFlag(cmd, &dir, "directory of the local cluster")
	return cmd
}

func newLocalRestoreCommand() *cobra.Command {
	var (
		opts         local.RestoreOptions
		toTime       string
		cancelIt     bool
		out          outputFlag
		timelineFlag uint32
	)
	cmd := &cobra.Command{
		Use:   "restore [--to-revision R | --to-time T] [--timeline N]",
		Short: "Restore the running cluster back in time from its own backups, as one operation",
		Long: `Restore the running local cluster to a point of its own backups (its own timelines; another
cluster's timelines on the same store are never used):

  1. the target is checked against the backup store (a revision the timeline covers, a time
     after its first backup); a bad target, no backup store, a cluster that is not running or a
     restore already in progress is an error, and nothing is changed;
  2. the backup leader takes a full snapshot, stored before anything else happens: the present
     stays restorable (steward restore --timeline <old> restores it);
  3. every member is stopped; one member moves its data aside (kept beside its data dir) and
     restores the target; it starts alone as a new cluster (a new cluster ID);
  4. the others move their data aside and rejoin it as learners, one at a time, and are promoted;
  5. the backups continue on a new timeline.

Waits, printing each step, until every member serves the restored cluster, then prints the
restored revision, the timeline the backups continue on and the new cluster ID. Clients see
the cluster unavailable from step 3 until the restored member serves, and revisions go back
to the target's (watchers must re-list).

A member killed, or the supervisor restarted, during the restore does not change the target:
the restore goes on (in a new epoch if need be) until the target is reached. If the backup store
cannot be read while the member restores, it retries; 'steward local status' says what it waits
for. --cancel withdraws a restore whose seed has not restored the target yet (a store that
cannot be read, say), so the members restart on their own data: only while a majority of them
still holds it (the seed has moved its data aside); otherwise it is refused and says why.`,
		Example: `  steward local restore --to-revision 1234
  steward local restore --to-time 2026-11-23T12:00:00Z
  steward local restore --timeline 1 --to-revision 1234 -o json
  steward local restore --cancel`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Timeline = timelineFlag
			if err := out.check(); err != nil {
				return err
			}
			progress := progressLines(cmd)
			if cancelIt {
				if cmd.Flags().Changed("to-revision") || toTime != "" || timelineFlag != 0 {
					return errors.New("--cancel takes no target: it withdraws the restore in progress")
				}
				epoch, err := local.CancelRestore(cmd.Context(), local.Dir(opts.Dir), opts.Timeout, progress)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Restore cancelled (directive %d): every member serves its own data again.\n", epoch)
				return nil
			}
			if toTime != "" {
				t, err := time.Parse(time.RFC3339Nano, toTime)
				if err != nil {
					return fmt.Errorf("--to-time %q: use RFC 3339, e.g. 2026-11-23T12:00:00Z", toTime)
				}
				opts.ToTime = t
			}
			if opts.ToRevision < 0 {
				return fmt.Errorf("--to-revision %d: a revision is positive", opts.ToRevision)
			}
			if opts.ToRevision > 0 && !opts.ToTime.IsZero() {
				return errors.New("give --to-revision or --to-time, not both")
			}
			opts.Progress = progress
			res, err := local.Restore(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res, func(t *table) {
				t.header("RESTORED REVISION", "TIMELINE", "CLUSTER ID", "PREVIOUS CLUSTER ID", "SEED", "TOOK")
				t.row(strconv.FormatInt(res.Revision, 10), strconv.FormatUint(uint64(res.Timeline), 10), res.ClusterID, orDash(res.PreviousClusterID),
					res.Seed, res.Duration.Round(100*time.Millisecond).String())
				t.row("")
				t.row(fmt.Sprintf("restored %s of timeline %d; backups continue on timeline %d", res.Target.Point(), res.Target.Timeline, res.Timeline))
				t.row(fmt.Sprintf("before it: full snapshot %s (revision %d, timeline %d) keeps the present restorable", res.Snapshot.Key, res.Snapshot.Revision, res.Snapshot.Timeline))
				if res.TargetAfterEnd != "" {
					t.row("WARNING: " + res.TargetAfterEnd)
				}
			})
		},
	}
	f := cmd.Flags()
	dirFlag(cmd, &opts.Dir, "directory of the local cluster")
	f.Int64Var(&opts.ToRevision, "to-revision", 0, "restore exactly this revision (default: the newest)")
	f.StringVar(&toTime, "to-time", "", "restore the newest revision the backups prove existed at this time (RFC 3339)")
	f.Uint32Var(&timelineFlag, "timeline", 0, "restore from this timeline of the cluster (default: its newest, or the one of --to-time)")
	f.BoolVar(&cancelIt, "cancel", false, "withdraw the restore in progress, while its seed has not restored the target")
	f.DurationVar(&opts.Timeout, "timeout", 10*time.Minute, "how long to wait for the cluster to serve again")
	out.register(cmd)
	return cmd
}

func newLocalUpgradeCommand() *cobra.Command {
	var (
		opts         local.UpgradeOptions
		setFlags     []string
		leaderUpdate string
		out          outputFlag
	)
	cmd := &cobra.Command{
		Use:   "upgrade [--binary PATH] [--set-flag NAME=VALUE ...] [--unset-flag NAME ...]",
		Short: "Change what the members run (steward binary, etcd flags) and roll them onto it one at a time",
		Long: `Change the running local cluster's specification, the steward binary its members run and
the extra etcd flags they start with, and restart the members onto it one at a time:

  1. the input is checked: the binary must be a steward executable whose etcd is the cluster's
     minor version or the next (etcd upgrades one minor version at a time; downgrades need etcd's
     downgrade procedure, not supported); flags must be etcd's and not ones Steward sets itself;
     every member must be a healthy voter and no recovery or restore in progress. Bad input
     changes nothing;
  2. the backup leader takes a full snapshot the store holds (unless --skip-snapshot);
  3. the new specification is recorded (cluster.json, a new generation): members started from
     now on run it, and a supervisor restart keeps it;
  4. followers restart one at a time, each healthy and caught up before the next; the leader
     last, after its leadership moved to an updated member (--leader-update moveLeader), or
     restarted as it leads (restart). While a recovery or restore is in progress it waits.

An interrupted upgrade (Ctrl-C, a supervisor restart) is completed by running the command again.
Run without --binary or flags it completes an unfinished upgrade, else restarts every member
(a rolling restart). A member that does not come back healthy within --wait-timeout stops the
rollout there, with the other members untouched; the error says how to go back (run upgrade
again with the previous binary and flags: the member that is down restarts first).`,
		Example: `  steward local upgrade --binary ./steward-v0.2.0
  steward local upgrade --set-flag quota-backend-bytes=4294967296 --set-flag snapshot-count=50000
  steward local upgrade --unset-flag snapshot-count -o json
  steward local upgrade            # a rolling restart, or completes an interrupted upgrade`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			var err error
			if opts.Leader, err = maintenance.ParseLeaderUpdate(leaderUpdate); err != nil {
				return fmt.Errorf("--leader-update: %w", err)
			}
			if opts.SetFlags, err = etcdproc.ParseFlags(setFlags); err != nil {
				return fmt.Errorf("--set-flag: %w", err)
			}
			if opts.Binary != "" {
				if opts.Binary, err = filepath.Abs(opts.Binary); err != nil {
					return err
				}
			}
			opts.Progress = progressLines(cmd)
			res, err := local.Upgrade(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res, func(t *table) {
				t.header("GENERATION", "RESTARTED (IN ORDER)", "LEADERSHIP MOVES", "TOOK")
				var moves []string
				for _, m := range res.LeaderMoves {
					moves = append(moves, m.From+"->"+m.To)
				}
				t.row(strconv.FormatInt(res.Generation, 10), orDash(strings.Join(res.Restarted, ",")), orDash(strings.Join(moves, ",")),
					res.Duration.Round(100*time.Millisecond).String())
				t.row("")
				t.row(fmt.Sprintf("members run %s with etcd flags [%s]", res.Binary, strings.Join(etcdproc.FlagList(res.EtcdFlags), " ")))
				if res.Snapshot != nil {
					t.row(fmt.Sprintf("before it: full snapshot %s (revision %d, timeline %d)", res.Snapshot.Key, res.Snapshot.Revision, res.Snapshot.Timeline))
				}
			})
		},
	}
	f := cmd.Flags()
	dirFlag(cmd, &opts.Dir, "directory of the local cluster")
	f.StringVar(&opts.Binary, "binary", "", "the steward executable the members run from now on (copied into DIR/bin)")
	f.StringArrayVar(&setFlags, "set-flag", nil, "set an extra etcd flag, NAME=VALUE with etcd's flag name, e.g. snapshot-count=50000 (repeatable)")
	f.StringArrayVar(&opts.UnsetFlags, "unset-flag", nil, "remove an extra etcd flag set earlier: etcd's default applies again (repeatable)")
	f.StringVar(&leaderUpdate, "leader-update", string(maintenance.LeaderMoveLeader), "how the leader, last, restarts: moveLeader (hand leadership to an updated member first) or restart (the cluster elects another)")
	f.BoolVar(&opts.SkipSnapshot, "skip-snapshot", false, "do not take a full snapshot before the first restart")
	f.DurationVar(&opts.WaitTimeout, "wait-timeout", 5*time.Minute, "how long to wait for a restarted member (or the cluster) to be healthy before the rollout stops")
	out.register(cmd)
	return cmd
}

func newLocalRotateCACommand() *cobra.Command {
	var (
		opts local.RotateCAOptions
		out  outputFlag
	)
	cmd := &cobra.Command{
		Use:   "rotate-ca",
		Short: "Roll a cluster made with --tls onto a new CA of its own, without downtime",
		Long: `Replace the running cluster's own CA (DIR/pki/ca) with a new one, with no failed writes beyond
a leadership move. etcd reads the CAs it trusts only when it starts, so:

  1. a new CA is made and every certificate directory trusts both (ca.crt); the members
     restart one at a time, the leader last after moving leadership;
  2. the new CA becomes current and every certificate (members, client) is issued again by it;
     etcd and Steward's clients take them at the next connection;
  3. the old CA is dropped from every ca.crt and the members restart again onto the new one.

Clients outside Steward read DIR/pki/client again (etcdctl does at every run). An interrupted
rollover is finished by running the command again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			opts.Progress = progressLines(cmd)
			res, err := local.RotateCA(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res, func(t *table) {
				t.header("NEW CA (SHA-256)", "RESTARTED (IN ORDER)", "TOOK")
				t.row(res.NewCA, orDash(strings.Join(res.Restarted, ",")), res.Duration.Round(100*time.Millisecond).String())
			})
		},
	}
	dirFlag(cmd, &opts.Dir, "directory of the local cluster")
	cmd.Flags().DurationVar(&opts.WaitTimeout, "wait-timeout", 5*time.Minute, "how long to wait for a restarted member (or the cluster) to be healthy before the rollover stops")
	out.register(cmd)
	return cmd
}

func newLocalDownCommand() *cobra.Command {
	var (
		opts local.DownOptions
		out  outputFlag
	)
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the local cluster gracefully (data is kept unless --purge)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			opts.Progress = progressLines(cmd)
			if err := local.Down(cmd.Context(), opts); err != nil {
				return err
			}
			res := struct {
				Dir    string `json:"dir"`
				Purged bool   `json:"purged"`
			}{opts.Dir, opts.Purge}
			return out.print(cmd.OutOrStdout(), res, func(t *table) {
				if opts.Purge {
					t.row(fmt.Sprintf("Stopped; removed %s.", opts.Dir))
				} else {
					t.row(fmt.Sprintf("Stopped; data kept in %s (start again with `steward local up --dir %s`).", opts.Dir, opts.Dir))
				}
			})
		},
	}
	dirFlag(cmd, &opts.Dir, "directory of the local cluster")
	cmd.Flags().BoolVar(&opts.Purge, "purge", false, "also delete the directory with all data, logs and backups")
	out.register(cmd)
	return cmd
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}

// recoverable says what a restore reaches of one timeline: every revision from first to last,
// every point in time from firstAt on.
func recoverable(timeline uint32, first, last int64, firstAt, lastAt time.Time) string {
	return fmt.Sprintf("revisions %d-%d of timeline %d, %s to %s", first, last, timeline, firstAt.UTC().Format(time.RFC3339), lastAt.UTC().Format(time.RFC3339))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
