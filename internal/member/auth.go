package member

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/etcdutil"
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

// authKeeper keeps etcd authentication on (RootPasswordFile) from the leader's sidecar.
type authKeeper struct {
	file string
	// ensured is the password last found in force, when, and under which leadership (see
	// ensure).
	ensured   string
	checkedAt time.Time
	term      string
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
