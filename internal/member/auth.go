package member

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/etcd-steward/steward/internal/etcdutil"
	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// InForcePasswordPath is where a member with etcd authentication keeps the root password etcd
// last took (etcdutil.Dialer.InForceFile): beside its data dir, on the same volume, which
// holds root's password hash anyway; outside it, so that it is never taken for member data.
func InForcePasswordPath(dataDir string) string {
	return filepath.Join(filepath.Dir(filepath.Clean(dataDir)), "root-password-in-force")
}

// authCheckInterval is how often the leader's sidecar checks that etcd authentication is still
// on while the root password file is unchanged. AuthStatus is a raft request in etcd: not
// one every maintenance pass.
const authCheckInterval = time.Minute

// authKeeper keeps etcd authentication on (RootPasswordFile) from the leader's sidecar, and
// the application user (AppUser).
type authKeeper struct {
	file string
	// ensured is the password last found in force, when, and under which leadership (see
	// ensure).
	ensured   string
	checkedAt time.Time
	term      string

	app AppUser
	// appEnsured is the application user's password last set, when, and under which
	// leadership (see ensureApp).
	appEnsured   string
	appCheckedAt time.Time
	appTerm      string
}

// AppUser is etcd's user for applications: a user and a role of the same name that may read
// and write the keys under Prefix (every key when empty), with the password of PasswordFile.
// It cannot manage users, members or the cluster's maintenance: root is kept for Steward.
type AppUser struct {
	Name, Prefix, PasswordFile string
}

// authOutcome says what ensure did.
type authOutcome int

const (
	authUnchanged authOutcome = iota
	// authEnabled: the root user was made (or given the password) and authentication turned on.
	authEnabled
	// authPasswordChanged: the root password was changed to the file's; clients made before
	// still hold the old one and must be made again.
	authPasswordChanged
)

// ensure makes etcd's authentication on with the root password of the file, through cli, a
// client logged in as root with the password the file held when cli was made (or, while
// authentication is off, logged in as nobody).
//   - Authentication off: the root user is made (or, if it exists, given the password: while
//     authentication is off anyone may), granted the root role, and authentication turned on.
//   - Authentication on and the file changed since cli logged in: cli still holds the old
//     password, so it can change root's password to the new one. A sidecar that starts after
//     the change logs in with the password this member last saw in force (InForcePasswordPath),
//     and does the same.
//
// term names the leadership ensure runs under (cluster, leader and raft term). A new one, as
// after a restore, whose data may hold another auth state, is checked at once.
func (k *authKeeper) ensure(ctx context.Context, cli *clientv3.Client, term string, now time.Time) (authOutcome, error) {
	want, err := etcdutil.ReadPassword(k.file)
	if err != nil {
		return authUnchanged, err
	}
	if want == k.ensured && term == k.term && now.Sub(k.checkedAt) < authCheckInterval {
		return authUnchanged, nil
	}
	k.term = term
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return authUnchanged, fmt.Errorf("read whether etcd authentication is on: %w", err)
	}
	if st.Enabled {
		if cli.Password == want {
			k.ensured, k.checkedAt = want, now
			return authUnchanged, nil
		}
		if _, err := cli.UserChangePassword(ctx, etcdutil.RootUser, want); err != nil {
			return authUnchanged, fmt.Errorf("change the root password to the one of %s: %w", k.file, err)
		}
		k.ensured, k.checkedAt = want, now
		return authPasswordChanged, nil
	}
	if _, err := cli.UserAdd(ctx, etcdutil.RootUser, want); errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		_, err = cli.UserChangePassword(ctx, etcdutil.RootUser, want)
		if err != nil {
			return authUnchanged, fmt.Errorf("give the existing root user the password of %s: %w", k.file, err)
		}
	} else if err != nil {
		return authUnchanged, fmt.Errorf("make the root user: %w", err)
	}
	if _, err := cli.UserGrantRole(ctx, etcdutil.RootUser, etcdutil.RootUser); err != nil {
		return authUnchanged, fmt.Errorf("grant the root role to the root user: %w", err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return authUnchanged, fmt.Errorf("turn etcd authentication on: %w", err)
	}
	k.ensured, k.checkedAt = want, now
	return authEnabled, nil
}

// ensureApp makes the application user, its role and its permission, or puts them back, and
// gives the user the password of its file, through cli, logged in as root. It runs again when
// the file changes, under a new leadership, and every authCheckInterval, and writes only what
// differs: every write to etcd's users and roles moves its auth revision, for which the
// backup leader takes a full snapshot.
func (k *authKeeper) ensureApp(ctx context.Context, cli *clientv3.Client, term string, now time.Time) (changed bool, err error) {
	u := k.app
	if u.Name == "" {
		return false, nil
	}
	want, err := etcdutil.ReadPassword(u.PasswordFile)
	if err != nil {
		return false, err
	}
	if want == k.appEnsured && term == k.appTerm && now.Sub(k.appCheckedAt) < authCheckInterval {
		return false, nil
	}
	user, err := cli.UserGet(ctx, u.Name)
	switch {
	case errors.Is(err, rpctypes.ErrUserNotFound):
		if _, err := cli.UserAdd(ctx, u.Name, want); err != nil {
			return false, fmt.Errorf("make the application user %s: %w", u.Name, err)
		}
		changed = true
	case err != nil:
		return false, fmt.Errorf("read the application user %s: %w", u.Name, err)
	default:
		// etcd's password cannot be read: a login with the file's says whether it is in force.
		if _, err := cli.Authenticate(ctx, u.Name, want); errors.Is(err, rpctypes.ErrAuthFailed) {
			if _, err := cli.UserChangePassword(ctx, u.Name, want); err != nil {
				return false, fmt.Errorf("give the application user %s the password of %s: %w", u.Name, u.PasswordFile, err)
			}
			changed = true
		} else if err != nil {
			return false, fmt.Errorf("check the application user's password: %w", err)
		}
	}
	key, end := appKeyRange(u.Prefix)
	role, err := cli.RoleGet(ctx, u.Name)
	if errors.Is(err, rpctypes.ErrRoleNotFound) {
		if _, err := cli.RoleAdd(ctx, u.Name); err != nil {
			return false, fmt.Errorf("make the application role %s: %w", u.Name, err)
		}
		role, changed = &clientv3.AuthRoleGetResponse{}, true
	} else if err != nil {
		return false, fmt.Errorf("read the application role %s: %w", u.Name, err)
	}
	if !grantsOnly(role.Perm, key, end) {
		for _, p := range role.Perm {
			if _, err := cli.RoleRevokePermission(ctx, u.Name, string(p.Key), string(p.RangeEnd)); err != nil {
				return false, fmt.Errorf("take a permission the application role %s should not hold: %w", u.Name, err)
			}
		}
		if _, err := cli.RoleGrantPermission(ctx, u.Name, key, end, clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			return false, fmt.Errorf("let the application role %s read and write %q: %w", u.Name, u.Prefix, err)
		}
		changed = true
	}
	if user == nil || !slices.Contains(user.Roles, u.Name) {
		if _, err := cli.UserGrantRole(ctx, u.Name, u.Name); err != nil {
			return false, fmt.Errorf("grant the application role to the user %s: %w", u.Name, err)
		}
		changed = true
	}
	k.appEnsured, k.appCheckedAt, k.appTerm = want, now, term
	return changed, nil
}

// grantsOnly: perms are exactly read and write of [key, end).
func grantsOnly(perms []*authpb.Permission, key, end string) bool {
	return len(perms) == 1 && perms[0].PermType == authpb.READWRITE && string(perms[0].Key) == key && string(perms[0].RangeEnd) == end
}

// check refuses an application user that could not be kept: without authentication, without
// a password file, or named as the user Steward keeps for itself.
func (u AppUser) check(rootPasswordFile string) error {
	switch {
	case u.Name == "":
		return nil
	case rootPasswordFile == "":
		return fmt.Errorf("--app-user %s: an application user needs etcd authentication (--root-password-file)", u.Name)
	case u.PasswordFile == "":
		return fmt.Errorf("--app-user %s: give its password's file with --app-password-file", u.Name)
	case u.Name == etcdutil.RootUser:
		return fmt.Errorf("--app-user %s: root is Steward's own user; name the application user otherwise (e.g. app)", u.Name)
	}
	return nil
}

// appKeyRange is the range of keys under prefix: every key for "" (from the smallest key to
// the end), as etcdctl's --prefix gives it.
func appKeyRange(prefix string) (key, end string) {
	if prefix == "" {
		return "\x00", "\x00"
	}
	return prefix, clientv3.GetPrefixRangeEnd(prefix)
}

// keepAuth runs authKeeper.ensure on the leader and logs what it did. It says whether cli
// must be made again: it holds a password that is no longer root's, or no token at all.
func (s *Sidecar) keepAuth(ctx context.Context, cli *clientv3.Client, term string) (redial bool) {
	if s.auth == nil {
		return false
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := s.auth.ensure(actx, cli, term, time.Now())
	if err != nil {
		s.metrics.authErrors.Inc()
		s.lg.Warn("etcd authentication is not as configured", zap.Error(err))
		return false
	}
	if out == authUnchanged {
		// A client that just turned authentication on, or whose password just changed, holds
		// no valid token: the application user waits for the next pass.
		if changed, err := s.auth.ensureApp(actx, cli, term, time.Now()); err != nil {
			s.metrics.authErrors.Inc()
			s.lg.Warn("etcd's application user is not as configured", zap.Error(err))
		} else if changed {
			s.lg.Info("etcd's application user was made, or given the password of its file", zap.String("user", s.auth.app.Name),
				zap.String("file", s.auth.app.PasswordFile))
		}
	}
	switch out {
	case authEnabled:
		// cli logged in while authentication was off, and holds no token.
		s.lg.Info("etcd authentication turned on: the root user logs in with the password of the root password file")
		return true
	case authPasswordChanged:
		s.lg.Info("the root password was changed to the one of the root password file")
		return true
	}
	return false
}

// authRefused logs, at most every few minutes, that etcd refused the root password of the
// file, and the one this member last saw in force: root's password was changed by someone
// else, or twice while this member was away, so no Steward client of this member can log in.
func (s *Sidecar) authRefused(err error, last *time.Time) {
	if s.auth == nil || !etcdutil.RefusedLogin(err) {
		return
	}
	s.metrics.authErrors.Inc()
	if time.Since(*last) < 5*time.Minute {
		return
	}
	*last = time.Now()
	s.lg.Error("etcd refuses the root password of the root password file, and the one this member last saw in force: "+
		"backups and healing cannot reach this member. Root's password was changed other than through the file, or changed "+
		"twice while this member was away: put root's password in the file (etcdctl user passwd root, logged in as root)",
		zap.String("file", s.auth.file))
}
