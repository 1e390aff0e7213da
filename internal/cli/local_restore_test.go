package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestLocalRestoreRefusesBadFlags: contradictory flags and a directory without a cluster are
// errors that say what to do, before anything is asked of a supervisor.
func TestLocalRestoreRefusesBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cancel", "--to-revision", "5"}, "--cancel takes no target"},
		{[]string{"--to-revision", "5", "--to-time", "2026-11-23T12:00:00Z"}, "not both"},
		{[]string{"--to-time", "yesterday"}, "use RFC 3339"},
		{[]string{"--to-revision", "-3"}, "a revision is positive"},
		{[]string{"-o", "yaml"}, "unknown output format"},
		{[]string{"--to-revision", "5"}, "no local cluster in " + dir},
		{[]string{"--cancel"}, "is not running"},
	} {
		cmd := NewRootCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"local", "restore", "--dir", dir}, c.args...))
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("local restore %v: %v; want an error saying %q", c.args, err, c.want)
		}
	}
}
