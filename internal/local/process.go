package local

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
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
	// exited, if set, is called when the process exits without being asked to.
	exited func()
	// stopped, if set, is called when a hold is confirmed: the process is stopped.
	stopped func()

	mu       sync.Mutex
	pid      int
	starts   int
	lastExit string
	// restarting marks a stop the supervisor asked for: no crash, no backoff.
	restarting bool
	// held: the supervisor keeps the process stopped (fenced) until it is released.
	held, release chan struct{}
	// stoppedSince is when a held process was confirmed stopped (zero while it runs).
	stoppedSince time.Time
	wake         chan struct{}
}

// hold stops the process (SIGTERM, SIGKILL after grace) and keeps it stopped until release.
// It returns at once; fenced reports when the stop is confirmed.
func (p *process) hold(grace time.Duration) {
	p.mu.Lock()
	if p.held != nil {
		p.mu.Unlock()
		return
	}
	p.held, p.release = make(chan struct{}), make(chan struct{})
	pid := p.pid
	if pid > 0 {
		p.restarting = true
	}
	wake := p.wakeLocked()
	p.mu.Unlock()
	select { // a run loop waiting out a backoff reaches its hold at once
	case wake <- struct{}{}:
	default:
	}
	if pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		time.AfterFunc(grace, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.pid == pid && p.held != nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
}

// unhold lets a held process start again.
func (p *process) unhold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.release)
		p.held, p.release, p.stoppedSince = nil, nil, time.Time{}
	}
}

// fenced reports whether the process is held and confirmed stopped, and since when.
func (p *process) fenced() (bool, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held != nil && p.pid == 0 && !p.stoppedSince.IsZero(), p.stoppedSince
}

// waitReleased blocks while the process is held; false if ctx ended.
func (p *process) waitReleased(ctx context.Context) bool {
	p.mu.Lock()
	release := p.release
	confirmed := release != nil && p.pid == 0 && p.stoppedSince.IsZero()
	if confirmed {
		p.stoppedSince = time.Now()
	}
	p.mu.Unlock()
	if confirmed && p.stopped != nil {
		p.stopped()
	}
	if release == nil {
		return true
	}
	select {
	case <-ctx.Done():
		return false
	case <-release:
		return true
	}
}

// Backoff between restarts of a crashed process: the first crash after a stable run
// restarts at once (a member that lost its data heals sooner), a second crash in a row waits
// minBackoff, and each further one twice as long, up to maxBackoff.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
	// A process that ran this long is considered healthy again: its backoff resets. A crash
	// loop is shorter: a process that cannot start exits within a second or two.
	stableAfter = 10 * time.Second
)

// nextBackoff is the wait after a crash that follows a wait of last (0: the first crash).
func nextBackoff(last time.Duration) time.Duration {
	if last == 0 {
		return minBackoff
	}
	return min(last*2, maxBackoff)
}

func (p *process) snapshot() (pid, starts int, lastExit string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid, p.starts, p.lastExit
}

// run keeps the process running until ctx ends, then stops it with SIGTERM (SIGKILL after
// stopGrace). It returns once the process is gone.
func (p *process) run(ctx context.Context) {
	var backoff time.Duration // none before the first restart after a stable run
	for ctx.Err() == nil {
		if !p.waitReleased(ctx) {
			return
		}
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
			if p.isHeld() {
				p.logf("%s %s stopped and held by the supervisor", p.member, p.kind)
			} else {
				p.logf("%s %s restarted by the supervisor", p.member, p.kind)
			}
			continue
		}
		if time.Since(started) > stableAfter {
			backoff = 0
		}
		p.logf("%s %s exited (%v); restarting in %s (log: %s)", p.member, p.kind, err, backoff, p.log)
		if p.exited != nil {
			p.exited()
		}
		p.mu.Lock()
		wake := p.wakeLocked()
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		case <-wake:
		}
		backoff = nextBackoff(backoff)
	}
}

func (p *process) runOnce(ctx context.Context) error {
	logFile := rotatedLog(p.log)
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
	if p.held != nil {
		// Held between the loop's check and the start: the fence wins.
		p.restarting = true
		_ = cmd.Process.Kill()
	}
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

// wakeLocked returns the channel that interrupts a backoff wait.
func (p *process) wakeLocked() chan struct{} {
	if p.wake == nil {
		p.wake = make(chan struct{}, 1)
	}
	return p.wake
}

func (p *process) isHeld() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held != nil
}

// Limits of a process's log: rotated at logMaxMB, with logBackups older files kept beside it,
// compressed, so a long-running cluster's logs stay bounded.
const (
	logMaxMB   = 50
	logBackups = 4
)

// rotatedLog is the writer of a process's log at path: appended to, rotated (path renamed
// with the time, then compressed) once it reaches logMaxMB.
func rotatedLog(path string) *lumberjack.Logger {
	return &lumberjack.Logger{Filename: path, MaxSize: logMaxMB, MaxBackups: logBackups, Compress: true}
}
