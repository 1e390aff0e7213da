package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLeaderElectionNamespace: out of a cluster, the leader-election Lease goes in the
// kubeconfig context's namespace, "default" when it names none; POD_NAMESPACE comes first.
func TestLeaderElectionNamespace(t *testing.T) {
	if _, err := os.Stat(serviceAccountNamespace); err == nil {
		t.Skip("runs in a pod: the service account names the namespace")
	}
	kubeconfig := func(ns string) string {
		p := filepath.Join(t.TempDir(), "kubeconfig")
		cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: ctx, context: {cluster: c, user: u, namespace: "` + ns + `"}}]
current-context: ctx
`
		if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ podNamespace, contextNamespace, want string }{
		{"", "team-a", "team-a"},
		{"", "", "default"},
		{"operators", "team-a", "operators"},
	} {
		t.Setenv("POD_NAMESPACE", c.podNamespace)
		t.Setenv("KUBECONFIG", kubeconfig(c.contextNamespace))
		if got, err := leaderElectionNamespace(); err != nil || got != c.want {
			t.Errorf("POD_NAMESPACE %q, context namespace %q: %q, %v; want %q", c.podNamespace, c.contextNamespace, got, err, c.want)
		}
	}
}
