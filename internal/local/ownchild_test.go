package local

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/testutil"
)

// TestOwnChild: a process runs one of DIR's steward binaries when it runs DIR/bin/steward or a
// generation's binary an upgrade installed (DIR/bin/steward-gN); never another program, nor
// a binary of the same name elsewhere.
func TestOwnChild(t *testing.T) {
	dir := Dir(t.TempDir())
	other := t.TempDir()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	install := func(path string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		in, err := os.Open(sleep)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		exe  string
		want bool
	}{
		{install(dir.Binary("")), true},
		{install(dir.Binary("bin/steward-g3")), true},
		{install(filepath.Join(dir.Bin(), "sh")), false},
		{install(filepath.Join(other, "bin", "steward")), false},
		{sleep, false},
	} {
		cmd := exec.Command(tc.exe, "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Right after the exec, the kernel may still show the new process's command line
		// empty: ask once it shows one.
		testutil.Eventually(t, 10*time.Second, "the child's command line", func() error {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); err != nil || len(b) == 0 {
				return fmt.Errorf("%q, %v", b, err)
			}
			return nil
		})
		got := ownChild(dir, cmd.Process.Pid)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if got != tc.want {
			t.Errorf("ownChild(%s) = %t; want %t", tc.exe, got, tc.want)
		}
	}
}
