package local

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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
		got := ownChild(dir, cmd.Process.Pid)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if got != tc.want {
			t.Errorf("ownChild(%s) = %t; want %t", tc.exe, got, tc.want)
		}
	}
}
