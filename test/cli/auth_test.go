package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/pki"
	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"
)

// TestLocalAuth: `steward local up --auth` turns etcd authentication on for a cluster made
// without it. etcdctl with the flags status prints logs in as root; without the password it is
// refused. Backups, a restore back in time, a password changed while the cluster was down,
// and the loss of every member's data (restored from the backups, after that change) all work
// logged in, and the root password stays the file's throughout. Applications log in as the
// application user, which cannot administer the cluster.
func TestLocalAuth(t *testing.T) {
	c := localcluster.Start(t, "--members", "3", "--base-port", "25300", "--sidecar-arg=--delta-period=1s")
	steward, dir, status := c.Steward, c.Dir, c.Report
	etcdctl := testutil.Tool(t, "etcdctl")
	plain := strings.Join(etcdctlArgs(t, status().Cluster.Etcdctl), " ")
	sh := func(cmd string) (string, error) {
		out, err := exec.Command("sh", "-c", etcdctl+" "+cmd).CombinedOutput()
		return string(out), err
	}
	ctl := func(args string) string { // its standard output alone: etcdctl logs retries on stderr
		t.Helper()
		cmd := etcdctlShell(etcdctl, status().Cluster.Etcdctl, args)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("etcdctl %s: %v\n%s%s", args, err, out, stderr.String())
		}
		return string(out)
	}
	acked := map[string]string{}
	put := func(k, v string) {
		ctl(fmt.Sprintf("put %s %s", k, v))
		acked[k] = v
	}
	put("/auth/before", "plain")

	// Turned on for the existing cluster.
	run(t, steward, "local", "down", "--dir", dir)
	run(t, steward, "local", "up", "--detach", "--dir", dir, "--auth")
	rep := status()
	if fi, err := os.Stat(rep.Cluster.RootPasswordFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the root password file %q: %v, %v: want a 0600 file", rep.Cluster.RootPasswordFile, fi, err)
	}
	if !strings.Contains(rep.Cluster.Etcdctl, "--user root") || strings.Contains(rep.Cluster.Etcdctl, "--password") {
		t.Fatalf("the etcdctl command line does not log in with the password from the environment: %s", rep.Cluster.Etcdctl)
	}
	testutil.Eventually(t, 60*time.Second, "a client without the password refused", func() error {
		if out, err := sh(plain + " --command-timeout 3s put /auth/refused x"); err == nil || !strings.Contains(out, "user name is empty") {
			return fmt.Errorf("etcdctl without a password: %v: %s", err, out)
		}
		return nil
	})
	if out, err := sh(plain + " --user root --password wrong --command-timeout 3s put /auth/refused x"); err == nil || !strings.Contains(out, "authentication failed") {
		t.Fatalf("etcdctl with a wrong password: %v: %s", err, out)
	}
	// Applications log in as the application user, which may read and write but not
	// administer the cluster.
	appPassword, err := os.ReadFile(rep.Cluster.AppPasswordFile)
	if err != nil || rep.Cluster.AppUser != "app" {
		t.Fatalf("the application user %q, its password file %q: %v", rep.Cluster.AppUser, rep.Cluster.AppPasswordFile, err)
	}
	asApp := plain + " --user app --password " + strings.TrimSpace(string(appPassword)) + " --command-timeout 3s "
	testutil.Eventually(t, 60*time.Second, "the application user writing", func() error {
		if out, err := sh(asApp + "put /auth/app x"); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	acked["/auth/app"] = "x"
	if out, err := sh(asApp + "user add mallory --new-user-password x"); err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("the application user making a user: %v: %s", err, out)
	}
	for i := range 10 {
		put(fmt.Sprintf("/auth/%02d", i), fmt.Sprintf("v%d", i))
	}

	// Backups and a restore back in time, logged in.
	var at struct {
		Header struct{ Revision int64 } `json:"header"`
	}
	if err := json.Unmarshal([]byte(ctl("get /auth/09 -w json")), &at); err != nil {
		t.Fatal(err)
	}
	ctl("put /auth/after x")
	testutil.Eventually(t, 60*time.Second, "the newest write backed up", func() error {
		if b := status().Backup; b == nil || !b.Ready || b.LatestDeltaRevision <= at.Header.Revision {
			return fmt.Errorf("backup %+v", b)
		}
		return nil
	})
	run(t, steward, "local", "restore", "--dir", dir, "--to-revision", fmt.Sprint(at.Header.Revision), "--timeout", "3m")
	if got := strings.TrimSpace(ctl("get /auth/after --print-value-only")); got != "" {
		t.Fatalf("after the restore to revision %d, /auth/after = %q: want none", at.Header.Revision, got)
	}
	// The data restored may hold another auth state (here: of the time before authentication
	// was on); the leader's sidecar turns it on again at once.
	refused := func(what string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, what+" refuses a client without a password", func() error {
			if out, err := sh(plain + " --command-timeout 3s get /auth/00"); err == nil {
				return fmt.Errorf("answered: %s", out)
			}
			return nil
		})
	}
	refused("the cluster restored back in time")

	// The password changed while the cluster was down: no sidecar holds the old one, so each
	// logs in with the one its member kept in force, and the leader's gives root the new one.
	oldPassword, err := os.ReadFile(rep.Cluster.RootPasswordFile)
	if err != nil {
		t.Fatal(err)
	}
	run(t, steward, "local", "down", "--dir", dir)
	if err := os.WriteFile(rep.Cluster.RootPasswordFile, []byte("changed-while-down\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, steward, "local", "up", "--detach", "--dir", dir)
	testutil.Eventually(t, 2*time.Minute, "root's password changed to the file's", func() error {
		if out, err := sh(plain + " --user root --password changed-while-down --command-timeout 3s put /auth/new-password x"); err != nil {
			return fmt.Errorf("etcdctl with the new password: %v: %s", err, out)
		}
		return nil
	})
	acked["/auth/new-password"] = "x"
	if out, err := sh(plain + " --user root --password " + strings.TrimSpace(string(oldPassword)) + " --command-timeout 3s get /auth/00"); err == nil || !strings.Contains(out, "authentication failed") {
		t.Fatalf("etcdctl with the old password after the change: %v: %s", err, out)
	}

	// Every member's data lost: the cluster is restored from its backups, and its sidecars
	// and clients still log in with the cluster's password.
	put("/auth/last", "kept")
	var last struct {
		Header struct{ Revision int64 } `json:"header"`
	}
	if err := json.Unmarshal([]byte(ctl("get /auth/last -w json")), &last); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the last write backed up", func() error {
		// By a delta, or by the full snapshot the password change calls for (auth changed).
		if b := status().Backup; b == nil || max(b.LatestDeltaRevision, b.LatestFullRevision) < last.Header.Revision {
			return fmt.Errorf("backup %+v", b)
		}
		return nil
	})
	for _, m := range []string{"m0", "m1", "m2"} {
		run(t, steward, "local", "fault", m, "wipe", "--dir", dir)
	}
	testutil.Eventually(t, 4*time.Minute, "every member a healthy voter again", func() error {
		rep := status()
		healthy := 0
		for _, m := range rep.Members {
			if m.Healthy && m.Role != "learner" {
				healthy++
			}
		}
		if healthy != 3 {
			return fmt.Errorf("%d of 3 members healthy voters; supervisor %s %s", healthy, rep.Supervisor.Phase, rep.Supervisor.Waiting)
		}
		return nil
	})
	for k, v := range acked {
		if got := strings.TrimSpace(ctl("get " + k + " --print-value-only")); got != v {
			t.Fatalf("after the restore from backups: %s = %q, want %q", k, got, v)
		}
	}
	refused("the cluster restored from its backups")
}

// TestLocalAuthTokenEveryMember: a token a client logs in for at one member is taken by the
// other members, also once they restarted: etcd signs it with the cluster's key, which every
// member has, kept in the cluster's directory (0600). etcd's simple tokens live only in each
// member's memory: a restarted member refuses those issued before.
func TestLocalAuthTokenEveryMember(t *testing.T) {
	c := localcluster.Start(t, "--members", "3", "--base-port", "25600", "--auth", "--backup", "none")
	// Healthy means healthy: the summary `up` prints says nothing of a lost quorum (the
	// supervisor counts the members as serving voters once their clients have logged in).
	if strings.Contains(c.Output, "quorum lost") {
		t.Errorf("local up --auth printed a lost quorum for a healthy cluster:\n%s", c.Output)
	}
	rep := c.Report()
	password, err := os.ReadFile(rep.Cluster.RootPasswordFile)
	if err != nil {
		t.Fatal(err)
	}
	keyDir := filepath.Join(c.Dir, "auth", "token-key")
	for _, f := range []string{pki.TokenKeyFile, pki.TokenPublicKeyFile} {
		if fi, err := os.Stat(filepath.Join(keyDir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the token signing key file %s: %v, %v: want a 0600 file", f, fi, err)
		}
	}
	endpoints := localcluster.Status{Report: rep}.Endpoints()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	at := func(endpoint string) *clientv3.Client {
		t.Helper()
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	// A token names the auth store's revision it was issued at; any change of users or roles
	// after it makes etcd refuse it as old (etcd's client then logs in again by itself). The
	// leader's sidecar makes the application user once authentication is on: log in after.
	appPassword, err := os.ReadFile(rep.Cluster.AppPasswordFile)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the application user made", func() error {
		_, err := at(endpoints[0]).Authenticate(ctx, rep.Cluster.AppUser, strings.TrimSpace(string(appPassword)))
		return err
	})
	login, err := at(endpoints[0]).Authenticate(ctx, "root", strings.TrimSpace(string(password)))
	if err != nil {
		t.Fatalf("logging in at %s: %v", endpoints[0], err)
	}
	// The token as etcd's client sends it, to a member that did not issue it.
	withToken := metadata.NewOutgoingContext(ctx, metadata.Pairs(rpctypes.TokenFieldNameGRPC, login.Token))
	useElsewhere := func(when string) {
		t.Helper()
		for _, ep := range endpoints[1:] {
			if _, err := at(ep).Put(withToken, "/token/"+when, ep); err != nil {
				t.Fatalf("%s: a put at %s with the token issued by %s: %v", when, ep, endpoints[0], err)
			}
		}
	}
	useElsewhere("issued")

	run(t, c.Steward, "local", "down", "--dir", c.Dir)
	run(t, c.Steward, "local", "up", "--detach", "--dir", c.Dir)
	useElsewhere("restarted")
}
