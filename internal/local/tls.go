package local

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/pki"
)

// The cluster's own CA and certificates (`steward local up --tls`), under DIR/pki: the CA in
// pki/ca, each member's in pki/<member>, and pki/client for etcdctl and Steward's commands.
const (
	pkiDir       = "pki"
	caDir        = "ca"
	clientCertCN = "steward-client"
)

// certCheckInterval is how often a running supervisor renews the certificates due.
const certCheckInterval = time.Hour

// MemberTLSDir is the certificate directory of member name, "" when the cluster is plain text.
func MemberTLSDir(dir string, spec Spec, name string) string {
	if !spec.TLS {
		return ""
	}
	return filepath.Join(dir, pkiDir, name)
}

// ClientTLSDir is the certificate directory of the cluster's clients (etcdctl, `steward`
// commands), "" when the cluster is plain text.
func ClientTLSDir(dir string, spec Spec) string {
	if !spec.TLS {
		return ""
	}
	return filepath.Join(dir, pkiDir, "client")
}

// dialer makes clients of the members of the cluster in dir.
func dialer(dir string, spec Spec) etcdutil.Dialer {
	return etcdutil.Dialer{TLSDir: ClientTLSDir(dir, spec)}
}

// EtcdctlFlags are the flags etcdctl needs to reach the cluster (its endpoints, and with TLS
// the client certificate).
func EtcdctlFlags(dir string, spec Spec) string {
	flags := "--endpoints " + strings.Join(spec.ClientURLs(), ",")
	if d := ClientTLSDir(dir, spec); d != "" {
		flags += fmt.Sprintf(" --cacert %s --cert %s --key %s", filepath.Join(d, pki.CAFile), filepath.Join(d, pki.CertFile), filepath.Join(d, pki.KeyFile))
	}
	return flags
}

// ensureCerts makes the cluster's CA once, and issues each member's certificate and the
// client certificate where missing or due for renewal (pki.Renewal: less than a third of its
// lifetime left, another CA's, or missing a name). etcd reads its certificate again at every
// handshake: a renewed one is used without a restart. Nothing is done for a plain-text cluster.
func ensureCerts(dir string, spec Spec, now time.Time, logf func(string, ...any)) error {
	if !spec.TLS {
		return nil
	}
	ca, err := ensureCA(filepath.Join(dir, pkiDir, caDir), spec.Name, now, logf)
	if err != nil {
		return err
	}
	leaves := map[string]pki.Leaf{"client": {CommonName: clientCertCN}}
	for _, m := range spec.Members {
		leaves[m.Name] = memberLeaf(spec, m.Name)
	}
	for name, leaf := range leaves {
		d := filepath.Join(dir, pkiDir, name)
		cert, err := os.ReadFile(filepath.Join(d, pki.CertFile))
		why := "it does not exist yet"
		switch {
		case err == nil:
			if why = pki.Renewal(cert, []*x509.Certificate{ca.Cert}, leaf, now); why == "" {
				continue
			}
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		certPEM, keyPEM, err := ca.Issue(leaf, now, pki.LeafValidity)
		if err != nil {
			return fmt.Errorf("issue the certificate of %s: %w", name, err)
		}
		if err := pki.WriteDir(d, certPEM, keyPEM, ca.CertPEM); err != nil {
			return fmt.Errorf("write the certificate of %s: %w", name, err)
		}
		logf("certificate of %s issued in %s (%s)", name, d, why)
	}
	return nil
}

// memberLeaf is what a member's certificate names: the cluster's host, and localhost.
func memberLeaf(spec Spec, name string) pki.Leaf {
	l := pki.Leaf{CommonName: name, DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}}
	if ip := net.ParseIP(spec.Host); ip != nil {
		if !ip.Equal(l.IPs[0]) {
			l.IPs = append(l.IPs, ip)
		}
	} else if spec.Host != "localhost" {
		l.DNSNames = append(l.DNSNames, spec.Host)
	}
	return l
}

// ensureCA reads the cluster's CA from caPath, or makes it there (key 0600, directory 0700).
func ensureCA(caPath, name string, now time.Time, logf func(string, ...any)) (pki.CA, error) {
	ca, err := pki.LoadCA(caPath)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return ca, err
	}
	if ca, err = pki.NewCA(name+"-ca", now, pki.CAValidity); err != nil {
		return pki.CA{}, err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return pki.CA{}, err
	}
	if err := pki.WriteDir(caPath, ca.CertPEM, key, ca.CertPEM); err != nil {
		return pki.CA{}, fmt.Errorf("write the cluster's CA: %w", err)
	}
	logf("the cluster's own CA made in %s", caPath)
	return ca, nil
}
