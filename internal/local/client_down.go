package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// DownOptions configure Down.
type DownOptions struct {
	Dir string
	// Purge removes DIR after the cluster stopped.
	Purge bool
	// Timeout bounds the wait for a graceful stop.
	Timeout time.Duration
	// Progress, if set, receives a line as the stop moves on.
	Progress func(string)
}

// Down stops the cluster in dir gracefully (the supervisor stops etcd members, then
// sidecars) and waits until it has. Data is kept unless Purge is set.
func Down(ctx context.Context, opts DownOptions) error {
	dir := Dir(opts.Dir)
	if opts.Timeout == 0 {
		opts.Timeout = 90 * time.Second
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	if _, ok, err := ReadSpec(dir); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("no local cluster in %s: nothing to stop", dir)
	}
	if pid, running := dir.SupervisorRunning(); running {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return fmt.Errorf("signal supervisor pid %d: %w", pid, err)
		}
		progress(fmt.Sprintf("stopping the supervisor (pid %d): the etcd members first, then their sidecars", pid))
		start := time.Now()
		lastSaid := start
		deadline := start.Add(opts.Timeout)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, still := dir.SupervisorRunning(); !still {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("supervisor pid %d did not stop within %s; see %s", pid, opts.Timeout, dir.Logs())
			}
			if time.Since(lastSaid) >= 5*time.Second {
				progress(fmt.Sprintf("still stopping (%s)", time.Since(start).Round(time.Second)))
				lastSaid = time.Now()
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
	}
	// A supervisor killed with SIGKILL may leave members behind: stop those of this DIR.
	if st, err := ReadState(dir); err == nil {
		for _, m := range st.Members {
			for _, pid := range []int{m.EtcdPID, m.SidecarPID} {
				if ownChild(dir, pid) {
					_ = syscall.Kill(pid, syscall.SIGTERM)
				}
			}
		}
	}
	if opts.Purge {
		progress("removing " + dir.String())
		if err := os.RemoveAll(dir.String()); err != nil {
			return fmt.Errorf("purge %s: %w", dir, err)
		}
	}
	return nil
}

// ownChild reports whether pid runs one of this DIR's steward binaries: DIR/bin/steward, or
// the binary of a generation an upgrade installed beside it (DIR/bin/steward-gN).
func ownChild(dir Dir, pid int) bool {
	if pid <= 0 {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	exe, err := filepath.Abs(strings.SplitN(string(cmdline), "\x00", 2)[0])
	if err != nil {
		return false
	}
	bin, err := filepath.Abs(dir.Bin())
	return err == nil && filepath.Dir(exe) == bin && strings.HasPrefix(filepath.Base(exe), filepath.Base(dir.Binary("")))
}
