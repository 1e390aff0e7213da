package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/testutil"
)

// TestLocalUpRefusesBadFlags: `steward local up` refuses a size of 0, a first port that is
// not a port and a backup store of an unknown scheme at once, with one error naming the flag,
// and writes nothing.
func TestLocalUpRefusesBadFlags(t *testing.T) {
	steward := testutil.StewardBinary(t)
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--members", "0"}, "--members 0: a local cluster has 1 to 9 members"},
		{[]string{"--base-port", "0"}, "--base-port 0: ports are 1 to 65535"},
		{[]string{"--base-port", "-1"}, "--base-port -1: ports are 1 to 65535"},
		{[]string{"--base-port", "65536"}, "--base-port 65536: ports are 1 to 65535"},
		{[]string{"--backup", "ftp://host/backups"}, `--backup: store URL ftp://host/backups: unknown scheme "ftp": use one of file://`},
	} {
		dir := filepath.Join(t.TempDir(), "cluster")
		// Should it start a cluster after all, it is stopped and removed.
		t.Cleanup(func() { _ = exec.Command(steward, "local", "down", "--dir", dir, "--purge").Run() })
		args := append([]string{"local", "up", "--detach", "--timeout", "30s", "--dir", dir}, tc.flags...)
		out, err := exec.Command(steward, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("steward %s: %v\n%s\nwant an error with %q", strings.Join(args, " "), err, out, tc.want)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("steward %s wrote %s (%v)", strings.Join(args, " "), dir, err)
		}
	}
}
