package member

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/testutil"
)

// login makes a client of ep logged in as user with password, and says whether etcd took it.
func login(ep, user, password string) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, Username: user, Password: password, DialTimeout: 5 * time.Second})
	if err == nil {
		c.Close()
	}
	return err
}

func writePassword(t *testing.T, path, pw string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAuthKeptAndRestoredWithOwnPassword: the leader's sidecar turns authentication on with the
// file's root password; a client without it is refused; backups run logged in as root; a new
// password in the file is given to root through the client that still holds the old one; and
// a restore gives root the restoring cluster's password, whatever the backup holds, keeping the
// other users and authentication on.
func TestAuthKeptAndRestoredWithOwnPassword(t *testing.T) {
	ctx := context.Background()
	pwFile := filepath.Join(t.TempDir(), "root-password")
	writePassword(t, pwFile, "first-password")
	dial := etcdutil.Dialer{PasswordFile: pwFile}
	_, plain, ep := testutil.EmbeddedEtcd(t)

	root, err := dial.New([]string{ep}, 5*time.Second)
	if err != nil {
		t.Fatalf("a root client while authentication is still off: %v", err)
	}
	defer root.Close()
	k := &authKeeper{file: pwFile}
	now := time.Now()
	if out, err := k.ensure(ctx, root, "t1", now); err != nil || out != authEnabled {
		t.Fatalf("ensure on a new cluster: %v, %v; want authentication turned on", out, err)
	}
	if _, err := plain.Get(ctx, "/k"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("a client without a password after authentication is on: %v; want %v", err, rpctypes.ErrUserEmpty)
	}
	if err := login(ep, etcdutil.RootUser, "wrong"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("root with a wrong password: %v; want %v", err, rpctypes.ErrAuthFailed)
	}
	// The client made before authentication was on logs in on its own.
	if _, err := root.UserAdd(ctx, "alice", "alice-password"); err != nil {
		t.Fatal(err)
	}
	if out, err := k.ensure(ctx, root, "t1", now.Add(2*authCheckInterval)); err != nil || out != authUnchanged {
		t.Fatalf("ensure again: %v, %v; want nothing to do", out, err)
	}

	s := openTestStore(t)
	a, _ := startBackupsDialing(t, BackupConfig{}, dial, s, ep)
	if _, err := root.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	waitStored(t, a, root, ep, 1)

	writePassword(t, pwFile, "second-password")
	if out, err := k.ensure(ctx, root, "t1", now.Add(3*authCheckInterval)); err != nil || out != authPasswordChanged {
		t.Fatalf("ensure after the file changed: %v, %v; want the root password changed", out, err)
	}
	if err := login(ep, etcdutil.RootUser, "second-password"); err != nil {
		t.Fatalf("root with the new password: %v", err)
	}
	if err := login(ep, etcdutil.RootUser, "first-password"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("root with the old password: %v; want %v", err, rpctypes.ErrAuthFailed)
	}
	// The backup loop's clients, logged in with the old password, are made again with the new.
	if _, err := root.Put(ctx, "/k", "after the change"); err == nil {
		t.Fatal("a client of the old password still writes after the change")
	}
	root2, err := dial.New([]string{ep}, 5*time.Second)
	if err != nil {
		t.Fatalf("a client made after the change: %v", err)
	}
	defer root2.Close()
	if out, err := k.ensure(ctx, root2, "t1", now.Add(4*authCheckInterval)); err != nil || out != authUnchanged {
		t.Fatalf("ensure with a client of the new password: %v, %v; want nothing to do", out, err)
	}
	if _, err := root2.Put(ctx, "/k", "after the change"); err != nil {
		t.Fatal(err)
	}
	waitStored(t, a, root2, ep, 1)

	// The backup holds root with the first or second password; the restored cluster has its own.
	peer := fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t))
	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := restore.Restore(ctx, restore.Options{Store: s, DataDir: dir, Name: "test", InitialCluster: "test=" + peer,
		PeerURLs: []string{peer}, RootPassword: "restored-password"}); err != nil {
		t.Fatal(err)
	}
	_, rplain, rep, _ := testutil.EtcdOn(t, dir)
	if _, err := rplain.Get(ctx, "/k"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("the restored cluster answers a client without a password: %v; want %v (authentication stays on)", err, rpctypes.ErrUserEmpty)
	}
	for _, pw := range []string{"first-password", "second-password"} {
		if err := login(rep, etcdutil.RootUser, pw); !errors.Is(err, rpctypes.ErrAuthFailed) {
			t.Fatalf("the restored root with the backed-up password %q: %v; want %v", pw, err, rpctypes.ErrAuthFailed)
		}
	}
	if err := login(rep, etcdutil.RootUser, "restored-password"); err != nil {
		t.Fatalf("the restored root with the restoring cluster's password: %v", err)
	}
	if err := login(rep, "alice", "alice-password"); err != nil {
		t.Fatalf("alice after the restore: %v", err)
	}
}

// TestAuthTurnedOnOverAnExistingRoot: a root user made while authentication is off (by hand, or
// by a restore of a backup without authentication) is given the file's password before
// authentication goes on, so Steward's clients are never locked out.
func TestAuthTurnedOnOverAnExistingRoot(t *testing.T) {
	ctx := context.Background()
	_, plain, ep := testutil.EmbeddedEtcd(t)
	if _, err := plain.UserAdd(ctx, etcdutil.RootUser, "someone-elses"); err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(t.TempDir(), "root-password")
	writePassword(t, pwFile, "ours")
	root, err := etcdutil.Dialer{PasswordFile: pwFile}.New([]string{ep}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	k := &authKeeper{file: pwFile}
	now := time.Now()
	if out, err := k.ensure(ctx, root, "t1", now); err != nil || out != authEnabled {
		t.Fatalf("ensure: %v, %v", out, err)
	}
	if _, err := root.Put(ctx, "/k", "v"); err != nil {
		t.Fatalf("root's client after authentication went on: %v", err)
	}
	if err := login(ep, etcdutil.RootUser, "someone-elses"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("the earlier root password: %v; want %v", err, rpctypes.ErrAuthFailed)
	}

	// Turned off behind the keeper's back (as a restore of data without authentication
	// does): within its interval, the same leadership is not asked again; a new one is.
	if _, err := root.AuthDisable(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := k.ensure(ctx, root, "t1", now.Add(time.Second)); err != nil || out != authUnchanged {
		t.Fatalf("ensure under the same leadership within the interval: %v, %v; want nothing asked", out, err)
	}
	if out, err := k.ensure(ctx, root, "t2", now.Add(2*time.Second)); err != nil || out != authEnabled {
		t.Fatalf("ensure under a new leadership: %v, %v; want authentication turned on again", out, err)
	}
	if _, err := plain.Get(ctx, "/k"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("a client without a password: %v; want %v", err, rpctypes.ErrUserEmpty)
	}
}
