package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is one child the supervisor keeps running, restarting it with backoff when it
// dies, as a kubelet does.
type process struct {
	member string
	kind   string // "etcd" or "sidecar"
	bin    string
	args   []string
	log    string
	// stopGrace is how long a SIGTERM may take before SIGKILL.
	stopGrace time.Duration
	logf      func(format string, args ...any)

	mu       sync.Mutex
	pid      int
	starts   int
	lastExit string
	// restarting marks a stop the supervisor asked for: no crash, no backoff.
	restarting bool
}

// Backoff bounds between restarts of a crashed process.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
	// A process that ran this long is considered healthy again: its backoff resets.
	stableAfter = 60 * time.Second
)

// restart stops the running process gracefully; run starts it again.
func (p *process) restart() {
	p.mu.Lock()
	pid := p.pid
	if pid > 0 {
		p.restarting = true
	}
	p.mu.Unlock()
	if pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
}

func (p *process) snapshot() (pid, starts int, lastExit string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid, p.starts, p.lastExit
}

// run keeps the process running until ctx ends, then stops it with SIGTERM (SIGKILL after
// stopGrace). It returns once the process is gone.
func (p *process) run(ctx context.Context) {
	backoff := minBackoff
	for ctx.Err() == nil {
		started := time.Now()
		err := p.runOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		p.lastExit = err.Error()
		asked := p.restarting
		p.restarting = false
		p.mu.Unlock()
		if asked {
			p.logf("%s %s restarted by the supervisor", p.member, p.kind)
			continue
		}
		if time.Since(started) > stableAfter {
			backoff = minBackoff
		}
		p.logf("%s %s exited (%v); restarting in %s (log: %s)", p.member, p.kind, err, backoff, p.log)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

func (p *process) runOnce(ctx context.Context) error {
	logFile, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log %s: %w", p.log, err)
	}
	defer logFile.Close()
	p.mu.Lock()
	p.starts++
	attempt := p.starts
	p.mu.Unlock()
	fmt.Fprintf(logFile, "--- steward local: starting %s %s (start %d) at %s ---\n", p.member, p.kind, attempt, time.Now().UTC().Format(time.RFC3339))

	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group: a Ctrl-C in the terminal reaches only the supervisor, which stops
	// the members in order. Pdeathsig: children do not outlive a killed supervisor.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start %s: %w", p.bin, err)
	}
	p.mu.Lock()
	p.pid = cmd.Process.Pid
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.pid = 0
		p.mu.Unlock()
	}()

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			return fmt.Errorf("exited with status 0")
		}
		return err
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		return err
	case <-time.After(p.stopGrace):
		p.logf("%s %s did not stop within %s; killing it", p.member, p.kind, p.stopGrace)
		_ = cmd.Process.Kill()
		return <-done
	}
}
