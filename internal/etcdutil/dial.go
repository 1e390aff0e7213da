package etcdutil

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/pki"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// RootUser is the etcd user Steward's clients authenticate as when etcd authentication is on.
const RootUser = "root"

// Dialer makes the etcd clients Steward uses: plain, or with TLS when TLSDir, a certificate
// directory (tls.crt, tls.key and ca.crt, as cert-manager writes them), is set, and as etcd's
// root user when PasswordFile is set. Every client of a cluster's members is made by one, so
// none is left plain-text or unauthenticated when the cluster has TLS or authentication.
type Dialer struct {
	TLSDir string
	// PasswordFile holds the root user's password (a mounted Secret key). It is read at every
	// dial, so a client made after the password changed uses the new one.
	PasswordFile string
	// InForceFile, with PasswordFile, is where the last password etcd took is kept, and tried
	// when etcd refuses PasswordFile's. A password changed while no client held the old one
	// (every member's sidecar down) is then still given to root: the leader's sidecar logs in
	// with the one in force and changes it.
	InForceFile string
	// TLS and Password, instead of TLSDir and PasswordFile, are the client's TLS configuration
	// and root's password held in memory (read from Secrets through the API server).
	TLS      *tls.Config
	Password string
	// Through, when set, carries every connection to a member's address (host:port) instead of
	// the network: a tunnel, such as a port-forward through the Kubernetes API server. TLS is
	// still verified against the host dialed.
	Through func(ctx context.Context, addr string) (net.Conn, error)
}

// Config is the client configuration for endpoints.
func (d Dialer) Config(endpoints []string, dialTimeout time.Duration) (clientv3.Config, error) {
	c := clientv3.Config{Endpoints: endpoints, DialTimeout: dialTimeout, Logger: zap.NewNop(),
		// Members restart often (healing, rolling updates): a connection to one that was down
		// for a minute tries again within seconds, not after gRPC's default backoff of up to 2 min.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second}})}}
	tc := d.TLS
	if d.TLSDir != "" {
		var err error
		if tc, err = pki.ClientTLS(d.TLSDir); err != nil {
			return c, err
		}
	}
	if tc != nil {
		// clientv3 makes its transport credentials of c.TLS; the last ones given win, and these
		// verify each member's certificate against the host dialed, an IP address included.
		c.TLS = tc
		c.DialOptions = append(c.DialOptions, grpc.WithTransportCredentials(hostTLS{tc}))
	}
	if d.PasswordFile != "" {
		pw, err := ReadPassword(d.PasswordFile)
		if err != nil {
			return c, err
		}
		c.Username, c.Password = RootUser, pw
	} else if d.Password != "" {
		c.Username, c.Password = RootUser, d.Password
	}
	if d.Through != nil {
		c.DialOptions = append(c.DialOptions, grpc.WithContextDialer(d.Through))
	}
	return c, nil
}

// New makes a client of endpoints. Without a password it connects lazily. With one, it logs
// in at once, which needs a member that serves; etcd's login is a raft request, so an
// election in progress is waited out within dialTimeout.
func (d Dialer) New(endpoints []string, dialTimeout time.Duration) (*clientv3.Client, error) {
	c, err := d.Config(endpoints, dialTimeout)
	if err != nil {
		return nil, err
	}
	return d.login(c, dialTimeout)
}

// login makes the client of c. With InForceFile, a password etcd refuses is followed by the
// one last in force, and the password etcd took is kept there. (While authentication is off,
// etcd takes any: the one kept is then the file's, which turning authentication on gives root.)
func (d Dialer) login(c clientv3.Config, dialTimeout time.Duration) (*clientv3.Client, error) {
	cli, err := newClient(c, dialTimeout)
	if d.InForceFile == "" || c.Password == "" {
		return cli, err
	}
	if RefusedLogin(err) {
		old, rerr := ReadPassword(d.InForceFile)
		if rerr != nil || old == c.Password {
			return nil, err
		}
		c.Password = old
		if cli, err = newClient(c, dialTimeout); err != nil {
			return nil, err
		}
	}
	if err == nil {
		keepInForce(d.InForceFile, c.Password)
	}
	return cli, err
}

// keepInForce writes password to path (0600) unless it holds it already. A failure only
// costs the fallback, and the next login tries again.
func keepInForce(path, password string) {
	if have, err := ReadPassword(path); err == nil && have == password {
		return
	}
	_ = datadir.WriteFileAtomic(path, []byte(password+"\n"), 0o600)
}

func newClient(c clientv3.Config, dialTimeout time.Duration) (*clientv3.Client, error) {
	deadline := time.Now().Add(dialTimeout)
	for {
		cli, err := clientv3.New(c)
		if err == nil || !duringElection(err) || time.Now().After(deadline) {
			return cli, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// duringElection says whether err is etcd refusing a raft request while it has no leader.
func duringElection(err error) bool {
	err = rpctypes.Error(err)
	for _, e := range []error{rpctypes.ErrLeaderChanged, rpctypes.ErrNoLeader, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeout} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// RefusedLogin says whether err is etcd refusing Steward's login: a root password that is
// not root's.
func RefusedLogin(err error) bool {
	return err != nil && errors.Is(rpctypes.Error(err), rpctypes.ErrAuthFailed)
}

// refusedAsUser says whether err is etcd refusing a request for its user: for a client that
// logs in as root, a sign that it is not logged in.
func refusedAsUser(err error) bool {
	err = rpctypes.Error(err)
	return errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrUserNotFound)
}

// ReadPassword reads a password file (see Password).
func ReadPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the root password: %w", err)
	}
	return Password(b, "the root password file "+path)
}

// Password is a password as a file or a Secret holds it (from names which): without the line
// end an editor, `echo` or the operator's Secret leaves. An empty password is an error (etcd
// refuses it for a user that logs in).
func Password(b []byte, from string) (string, error) {
	b = bytes.TrimRight(b, "\r\n")
	if len(b) == 0 {
		return "", fmt.Errorf("%s is empty: put the password in it", from)
	}
	return string(b), nil
}

// Conn keeps one long-lived client of endpoints: made on first use, and made again after etcd
// refused its login or refused it as its user (a login that merely timed out, clientv3 tries
// again). A client logs in again, with the password it was made with, whenever etcd's auth
// state changes; once root's password has changed, only a new client, which reads the password
// file again, gets in. A client made while authentication was off holds no token: with TLS,
// etcd then takes its certificate's name for the user and refuses root's requests as that
// user's ("permission denied" or "user name not found", which root never gets), where clientv3
// logs in again only on "user name is empty". One loop owns a Conn: it is not safe for
// concurrent use.
type Conn struct {
	dialer    Dialer
	endpoints []string
	timeout   time.Duration
	cli       *clientv3.Client
	refused   *atomic.Bool
}

// Conn returns a Conn of endpoints whose clients d makes.
func (d Dialer) Conn(endpoints []string, dialTimeout time.Duration) *Conn {
	return &Conn{dialer: d, endpoints: endpoints, timeout: dialTimeout}
}

// Client is the client, made now if there is none or etcd refused its login.
func (c *Conn) Client() (*clientv3.Client, error) {
	if c.cli != nil && c.refused.Load() {
		c.Reset()
	}
	if c.cli != nil {
		return c.cli, nil
	}
	cfg, err := c.dialer.Config(c.endpoints, c.timeout)
	if err != nil {
		return nil, err
	}
	refused := new(atomic.Bool)
	// Inside clientv3's own retries: it sees the login a stale token calls for.
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if RefusedLogin(err) || (cfg.Username != "" && refusedAsUser(err)) {
				refused.Store(true)
			}
			return err
		}))
	cli, err := c.dialer.login(cfg, c.timeout)
	if err != nil {
		return nil, err
	}
	c.cli, c.refused = cli, refused
	return cli, nil
}

// Reset closes the client; the next Client makes a new one.
func (c *Conn) Reset() {
	if c.cli != nil {
		c.cli.Close()
		c.cli = nil
	}
}
