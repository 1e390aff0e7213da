package local

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/datadir"
	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/pki"
)

// The cluster's own CA and certificates (`steward local up --tls`), under DIR/pki (Dir.PKI):
// the CA in pki/ca, each member's in pki/<member>, and pki/client for etcdctl and Steward's
// commands.
const (
	caDir = "ca"
	// A CA rollover (RotateCA) keeps the coming CA in ca.next, then the going one in ca.old:
	// both are trusted (in every ca.crt) while either exists.
	caNextDir = "ca.next"
	caOldDir  = "ca.old"
)

// certCheckInterval is how often a running supervisor renews the certificates due.
const certCheckInterval = time.Hour

// MemberTLSDir is the certificate directory of member name, "" when the cluster is plain text.
func MemberTLSDir(dir Dir, spec Spec, name string) string {
	if !spec.TLS {
		return ""
	}
	return dir.PKI(name)
}

// ClientTLSDir is the certificate directory of the cluster's clients (etcdctl, `steward`
// commands), "" when the cluster is plain text.
func ClientTLSDir(dir Dir, spec Spec) string {
	if !spec.TLS {
		return ""
	}
	return dir.PKI("client")
}

// Dialer makes clients of the members of the cluster in dir: with TLS, the client
// certificate; with etcd authentication, logged in as root.
func Dialer(dir Dir, spec Spec) etcdutil.Dialer {
	return etcdutil.Dialer{TLSDir: ClientTLSDir(dir, spec), PasswordFile: RootPasswordPath(dir, spec)}
}

// EtcdctlCommand is a shell command line of etcdctl that reaches the cluster, for a user to
// append a command to: its endpoints, with TLS the client certificate, with authentication
// the root user. The shell reads root's password from its file into etcdctl's environment
// (ETCDCTL_PASSWORD): it is never printed, and never in etcdctl's arguments, which every user
// of the machine can list.
func EtcdctlCommand(dir Dir, spec Spec) string {
	cmd := "etcdctl --endpoints " + strings.Join(spec.ClientURLs(), ",")
	if d := ClientTLSDir(dir, spec); d != "" {
		cmd += fmt.Sprintf(" --cacert %s --cert %s --key %s", filepath.Join(d, pki.CAFile), filepath.Join(d, pki.CertFile), filepath.Join(d, pki.KeyFile))
	}
	if p := RootPasswordPath(dir, spec); p != "" {
		cmd = fmt.Sprintf(`ETCDCTL_PASSWORD="$(cat %s)" %s --user %s`, p, cmd, etcdutil.RootUser)
	}
	return cmd
}

// ensureCerts makes the cluster's CA once, and issues each member's certificate and the
// client certificate where missing or due for renewal (pki.Renewal: less than a third of its
// lifetime left, not of the cluster's current CA, or missing a name). Every ca.crt is kept
// equal to the CAs the cluster trusts (the current one, and during a rollover the coming or
// the going one). etcd reads its certificate again at every handshake, and Steward's clients
// their ca.crt: a renewed leaf is used without a restart. Nothing is done without TLS.
func ensureCerts(dir Dir, spec Spec, now time.Time, logf func(string, ...any)) error {
	if !spec.TLS {
		return nil
	}
	ca, err := ensureCA(dir, spec.Name, now, logf)
	if err != nil {
		return err
	}
	trusted, err := trustBundle(dir)
	if err != nil {
		return err
	}
	leaves := map[string]pki.Leaf{"client": pki.ClientLeaf()}
	for _, m := range spec.Members {
		leaves[m.Name] = memberLeaf(spec)
	}
	for name, leaf := range leaves {
		d := dir.PKI(name)
		cert, err := os.ReadFile(filepath.Join(d, pki.CertFile))
		why := "it does not exist yet"
		switch {
		case err == nil:
			if why = pki.Renewal(cert, []*x509.Certificate{ca.Cert}, leaf, now); why == "" {
				if err := ensureTrust(d, trusted); err != nil {
					return err
				}
				continue
			}
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		certPEM, keyPEM, err := ca.Issue(leaf, now, pki.LeafValidity)
		if err != nil {
			return fmt.Errorf("issue the certificate of %s: %w", name, err)
		}
		if err := pki.WriteDir(d, certPEM, keyPEM, trusted); err != nil {
			return fmt.Errorf("write the certificate of %s: %w", name, err)
		}
		logf("certificate of %s issued in %s (%s)", name, d, why)
	}
	return nil
}

// trustBundle is the CAs the cluster trusts: its current CA, and the coming and going ones of
// a rollover in progress.
func trustBundle(dir Dir) ([]byte, error) {
	var out []byte
	for _, sub := range []string{caDir, caNextDir, caOldDir} {
		b, err := os.ReadFile(filepath.Join(dir.PKI(sub), pki.CertFile))
		if errors.Is(err, fs.ErrNotExist) && sub != caDir {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}

// ensureTrust makes the certificate directory d trust exactly the CAs in trusted.
func ensureTrust(d string, trusted []byte) error {
	p := filepath.Join(d, pki.CAFile)
	if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, trusted) {
		return nil
	}
	if err := datadir.WriteFileAtomic(p, trusted, 0o600); err != nil {
		return fmt.Errorf("write the CAs %s trusts: %w", d, err)
	}
	return nil
}

// memberLeaf is what a member's certificate names: the cluster's host, and localhost.
func memberLeaf(spec Spec) pki.Leaf {
	l := pki.Leaf{CommonName: pki.MemberCN, DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}}
	if ip := net.ParseIP(spec.Host); ip != nil {
		if !ip.Equal(l.IPs[0]) {
			l.IPs = append(l.IPs, ip)
		}
	} else if spec.Host != "localhost" {
		l.DNSNames = append(l.DNSNames, spec.Host)
	}
	return l
}

// ensureCA reads the cluster's current CA (DIR/pki/ca), or makes it there once (key 0600,
// directory 0700). A CA is made only for a cluster that never had one: never during a
// rollover.
func ensureCA(dir Dir, name string, now time.Time, logf func(string, ...any)) (pki.CA, error) {
	caPath := dir.PKI(caDir)
	ca, err := pki.LoadCA(caPath)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return ca, err
	}
	for _, sub := range []string{caNextDir, caOldDir} {
		if _, err := os.Stat(dir.PKI(sub)); err == nil {
			return pki.CA{}, fmt.Errorf("the cluster's CA %s is missing while a rollover keeps %s: finish it with `steward local rotate-ca --dir %s`", caPath, sub, dir)
		}
	}
	ca, err = newCA(caPath, name, now)
	if err != nil {
		return pki.CA{}, err
	}
	logf("the cluster's own CA made in %s", caPath)
	return ca, nil
}

// newCA makes a CA for cluster name and writes it to caPath.
func newCA(caPath, name string, now time.Time) (pki.CA, error) {
	ca, err := pki.NewCA(name+"-ca", now, pki.CAValidity)
	if err != nil {
		return pki.CA{}, err
	}
	return ca, writeCA(caPath, ca)
}

func writeCA(caPath string, ca pki.CA) error {
	key, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	if err := pki.WriteDir(caPath, ca.CertPEM, key, ca.CertPEM); err != nil {
		return fmt.Errorf("write the CA %s: %w", caPath, err)
	}
	return nil
}
