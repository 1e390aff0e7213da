// Package testutil has helpers shared by steward's integration tests: building the steward
// binary once, and polling with deadlines.
package testutil

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// StewardBinary builds cmd/steward once per test process and returns its path.
func StewardBinary(t testing.TB) string {
	t.Helper()
	p, err := BuildSteward()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BuildSteward is StewardBinary for a TestMain, which has no testing.TB.
func BuildSteward() (string, error) {
	buildOnce.Do(func() {
		removeStaleBinaries()
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("steward-test-bin-%d", os.Getpid()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "steward")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/etcd-steward/steward/cmd/steward")
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build steward: %v\n%s", err, out)
		}
	})
	return binPath, buildErr
}

// removeStaleBinaries deletes the binaries of test processes that have ended (a test process
// has no hook at its exit to remove its own).
func removeStaleBinaries() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "steward-test-bin-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "steward-test-bin-"))
		if err != nil {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			_ = os.RemoveAll(d)
		}
	}
}

// RepoRoot is the module root.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Tool returns the path of a binary built by `make tools` into bin/ (etcdctl, etcdutl,
// promtool). If it is missing the test is skipped, unless STEWARD_REQUIRE_TOOLS is set (as
// `make test` does).
func Tool(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(RepoRoot(), "bin", name)
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("STEWARD_REQUIRE_TOOLS") != "" {
			t.Fatalf("%s is missing; run `make tools`", p)
		}
		t.Skipf("%s is missing; run `make tools` (or `make test`, which builds it)", p)
	}
	return p
}

// Poll calls cond every interval until it returns nil, or returns cond's last error once
// timeout has passed.
func Poll(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval) // poll interval, not synchronisation
	}
}

// Eventually polls cond until it returns nil or timeout passes, then fails the test with
// cond's last error.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Poll(timeout, 100*time.Millisecond, cond); err != nil {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}

// Throughout polls cond every second for the whole of d and fails the test at the first
// error: what must hold across a time window is checked across it, not once at its end.
func Throughout(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	for deadline := time.Now().Add(d); ; {
		if err := cond(); err != nil {
			t.Fatalf("%s: broken after %s of %s: %v", what, (d - time.Until(deadline)).Round(time.Second), d, err)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Second) // poll interval, not synchronisation
	}
}

// CopyDir copies the tree at src to dst (a data dir of a stopped member, say).
func CopyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}
