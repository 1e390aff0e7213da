package member

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/backup/agent"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/testutil"
)

// login makes a client of ep logged in as user with password, and says whether etcd took it.
// The dial bounds a bcrypt check on each side, slow under the race detector on a loaded
// machine; a refusal comes at once whatever the bound.
func login(ep, user, password string) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, Username: user, Password: password, DialTimeout: 30 * time.Second})
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
	// BackupReady needs the newest round within 2 delta periods: 300 ms rounds lag more than
	// that under a loaded CI machine with the race detector, where every login is slow too.
	a, _ := startBackupsDialing(t, agent.Config{DeltaPeriod: 2 * time.Second}, dial, s, ep)
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

// TestAuthPasswordChangedWhileEverySidecarWasDown: every login that etcd takes keeps its
// password beside the data dir. A password changed while no client held the old one is
// refused, and the one kept is tried next: the leader's sidecar, logged in with it, gives root
// the new one, and from then on the new one logs in and is kept. Without the kept one, the
// member would be locked out.
func TestAuthPasswordChangedWhileEverySidecarWasDown(t *testing.T) {
	ctx := context.Background()
	pwFile := filepath.Join(t.TempDir(), "root-password")
	writePassword(t, pwFile, "first-password")
	inForce := InForcePasswordPath(filepath.Join(t.TempDir(), "data"))
	dial := etcdutil.Dialer{PasswordFile: pwFile, InForceFile: inForce}
	_, _, ep := testutil.EmbeddedEtcd(t)
	kept := func() string {
		t.Helper()
		fi, err := os.Stat(inForce)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the password in force: %v, %v; want a 0600 file", fi, err)
		}
		pw, err := etcdutil.ReadPassword(inForce)
		if err != nil {
			t.Fatal(err)
		}
		return pw
	}

	cli, err := dial.New([]string{ep}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := (&authKeeper{file: pwFile}).ensure(ctx, cli, "t1", time.Now()); err != nil || out != authEnabled {
		t.Fatalf("ensure on a new cluster: %v, %v", out, err)
	}
	cli.Close()
	conn := dial.Conn([]string{ep}, 5*time.Second)
	if _, err := conn.Client(); err != nil {
		t.Fatal(err)
	}
	conn.Reset()
	if got := kept(); got != "first-password" {
		t.Fatalf("kept %q after a login with first-password", got)
	}

	// Every client closed (every sidecar down); the password changes; a sidecar starts.
	writePassword(t, pwFile, "second-password")
	if _, err := (etcdutil.Dialer{PasswordFile: pwFile}).New([]string{ep}, 5*time.Second); !etcdutil.RefusedLogin(err) {
		t.Fatalf("a client of the new password before root has it, without the kept one: %v; want refused", err)
	}
	cli, err = conn.Client()
	if err != nil {
		t.Fatalf("the Conn after the change, with the password in force kept: %v", err)
	}
	if cli.Password != "first-password" {
		t.Fatalf("logged in with %q; want the one in force", cli.Password)
	}
	if out, err := (&authKeeper{file: pwFile}).ensure(ctx, cli, "t2", time.Now()); err != nil || out != authPasswordChanged {
		t.Fatalf("ensure of a restarted leader's sidecar: %v, %v; want the root password changed", out, err)
	}
	if err := login(ep, etcdutil.RootUser, "second-password"); err != nil {
		t.Fatalf("root with the new password: %v", err)
	}
	if err := login(ep, etcdutil.RootUser, "first-password"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("root with the old password: %v; want %v", err, rpctypes.ErrAuthFailed)
	}
	conn.Reset()
	if cli, err = conn.Client(); err != nil || cli.Password != "second-password" {
		t.Fatalf("the Conn made again: %v; want logged in with second-password", err)
	}
	if got := kept(); got != "second-password" {
		t.Fatalf("kept %q after a login with second-password", got)
	}
	conn.Reset()

	// Changed twice while away: neither is root's, and the refusal stands.
	writePassword(t, pwFile, "third-password")
	if err := os.WriteFile(inForce, []byte("not-roots\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dial.New([]string{ep}, 5*time.Second); !etcdutil.RefusedLogin(err) {
		t.Fatalf("neither password root's: %v; want refused", err)
	}
}

// TestAppUserKept: with authentication on, the leader's sidecar keeps the application user:
// made with its file's password and a role that may read and write its prefix only; a new
// password in the file replaces the old one; the user and its permission are put back when
// removed. The user can neither leave its prefix nor do what only root may (manage users,
// turn authentication off).
func TestAppUserKept(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	pwFile, appFile := filepath.Join(dir, "root-password"), filepath.Join(dir, "app-password")
	writePassword(t, pwFile, "root-pw")
	writePassword(t, appFile, "app-pw-1")
	_, _, ep := testutil.EmbeddedEtcd(t)
	dial := etcdutil.Dialer{PasswordFile: pwFile}
	k := &authKeeper{file: pwFile, app: AppUser{Name: "app", Prefix: "/registry/", PasswordFile: appFile}}
	cli, err := dial.New([]string{ep}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := k.ensure(ctx, cli, "t1", time.Now()); err != nil || out != authEnabled {
		t.Fatalf("ensure: %v, %v", out, err)
	}
	cli.Close()
	if cli, err = dial.New([]string{ep}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	now := time.Now()
	if changed, err := k.ensureApp(ctx, cli, "t1", now); err != nil || !changed {
		t.Fatalf("ensureApp on a cluster without the user: %v, %v", changed, err)
	}
	asApp := func(password string) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: []string{ep}, Username: "app", Password: password, DialTimeout: 5 * time.Second})
	}
	app, err := asApp("app-pw-1")
	if err != nil {
		t.Fatalf("the application user logging in: %v", err)
	}
	if _, err := app.Put(ctx, "/registry/pods/a", "v"); err != nil {
		t.Errorf("a put under the prefix: %v", err)
	}
	if _, err := app.Get(ctx, "/registry/", clientv3.WithPrefix()); err != nil {
		t.Errorf("a read under the prefix: %v", err)
	}
	if _, err := app.Put(ctx, "/elsewhere", "v"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("a put outside the prefix: %v; want %v", err, rpctypes.ErrPermissionDenied)
	}
	if _, err := app.UserAdd(ctx, "mallory", "pw"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("the application user making a user: %v; want %v", err, rpctypes.ErrPermissionDenied)
	}
	if _, err := app.AuthDisable(ctx); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("the application user turning authentication off: %v; want %v", err, rpctypes.ErrPermissionDenied)
	}
	app.Close()

	// A rotated password reaches etcd at the next pass, without waiting for the interval.
	writePassword(t, appFile, "app-pw-2")
	if changed, err := k.ensureApp(ctx, cli, "t1", now.Add(time.Second)); err != nil || !changed {
		t.Fatalf("ensureApp after the file changed: %v, %v", changed, err)
	}
	if _, err := asApp("app-pw-1"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Errorf("the old password: %v; want %v", err, rpctypes.ErrAuthFailed)
	}
	if app, err = asApp("app-pw-2"); err != nil {
		t.Fatalf("the new password: %v", err)
	}
	app.Close()

	// Nothing changed, under a new leadership: the check writes nothing (every write moves
	// etcd's auth revision, for which the backup leader takes a full snapshot).
	authRev := func() uint64 {
		t.Helper()
		st, err := cli.AuthStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.AuthRevision
	}
	before := authRev()
	if changed, err := k.ensureApp(ctx, cli, "t2", now.Add(time.Second)); err != nil || changed {
		t.Fatalf("ensureApp with nothing to do: %v, %v", changed, err)
	}
	if after := authRev(); after != before {
		t.Fatalf("a check with nothing to do moved the auth revision from %d to %d", before, after)
	}
	// A permission widened by hand is narrowed back.
	if _, err := cli.RoleGrantPermission(ctx, "app", "/elsewhere", "", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	if changed, err := k.ensureApp(ctx, cli, "t3", now.Add(2*time.Second)); err != nil || !changed {
		t.Fatalf("ensureApp after a permission was widened: %v, %v", changed, err)
	}
	if app, err = asApp("app-pw-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Put(ctx, "/elsewhere", "v"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("a put outside the prefix after the widened permission was taken back: %v", err)
	}
	app.Close()

	// Removed by hand, the user and its role come back at the next check.
	if _, err := cli.UserDelete(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RoleDelete(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if changed, err := k.ensureApp(ctx, cli, "t1", now.Add(2*authCheckInterval)); err != nil || !changed {
		t.Fatalf("ensureApp after the user was removed: %v, %v", changed, err)
	}
	if app, err = asApp("app-pw-2"); err != nil {
		t.Fatalf("the user made again: %v", err)
	}
	defer app.Close()
	if _, err := app.Put(ctx, "/registry/pods/b", "v"); err != nil {
		t.Errorf("a put under the prefix after the role was made again: %v", err)
	}
}

// TestAppUserRefused: an application user that could not be kept is refused at start.
func TestAppUserRefused(t *testing.T) {
	for _, c := range []struct {
		u    AppUser
		root string
		want string
	}{
		{AppUser{Name: "app", PasswordFile: "/p"}, "", "needs etcd authentication"},
		{AppUser{Name: "app"}, "/r", "--app-password-file"},
		{AppUser{Name: "root", PasswordFile: "/p"}, "/r", "root is Steward's own user"},
	} {
		if err := c.u.check(c.root); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v with root password file %q: %v, want an error saying %q", c.u, c.root, err, c.want)
		}
	}
	if err := (AppUser{}).check(""); err != nil {
		t.Errorf("no application user: %v", err)
	}
}

// TestAppUserEveryKey: without a prefix the application user may read and write every key.
func TestAppUserEveryKey(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	pwFile, appFile := filepath.Join(dir, "root-password"), filepath.Join(dir, "app-password")
	writePassword(t, pwFile, "root-pw")
	writePassword(t, appFile, "app-pw")
	_, _, ep := testutil.EmbeddedEtcd(t)
	dial := etcdutil.Dialer{PasswordFile: pwFile}
	k := &authKeeper{file: pwFile, app: AppUser{Name: "app", PasswordFile: appFile}}
	for _, step := range []func(*clientv3.Client) error{
		func(cli *clientv3.Client) error { _, err := k.ensure(ctx, cli, "t1", time.Now()); return err },
		func(cli *clientv3.Client) error { _, err := k.ensureApp(ctx, cli, "t1", time.Now()); return err },
	} {
		cli, err := dial.New([]string{ep}, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		err = step(cli)
		cli.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	app, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, Username: "app", Password: "app-pw", DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	for _, key := range []string{"a", "/registry/x", "\x00first", "\xff\xfflast"} {
		if _, err := app.Put(ctx, key, "v"); err != nil {
			t.Errorf("put %q: %v", key, err)
		}
	}
	if r, err := app.Get(ctx, "", clientv3.WithFromKey()); err != nil || r.Count != 4 {
		t.Errorf("a read of every key: %v, %v", r, err)
	}
}
