// Package pki is a cluster's own certificate authority: every Steward cluster gets a CA of
// its own (an organisation-wide issuer would give every certificate it ever signed root on
// etcd), and its members leaf certificates for client, peer and sidecar traffic.
//
// Certificates are kept as cert-manager writes them, one directory per certificate:
// tls.crt, tls.key (0600) and ca.crt, the CAs to trust. A CA's own directory holds its
// certificate and key under the same names.
package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// File names inside a certificate directory, as cert-manager writes a Secret.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// Common names of the leaves Steward issues. Every member of a cluster carries MemberCN, and
// a member takes only peers that present its own certificate's common name: a client
// certificate of the same CA cannot pose as a peer.
const (
	MemberCN = "steward-member"
	ClientCN = "steward-client"
)

// Backdate is how long before its issue a certificate is valid from (clocks differ).
const Backdate = time.Minute

// Issued is when the PEM certificate was issued (nothing: it does not parse).
func Issued(certPEM []byte) time.Time {
	certs, err := ParseCerts(certPEM)
	if err != nil {
		return time.Time{}
	}
	return certs[0].NotBefore.Add(Backdate)
}

// Fingerprint is the SHA-256 of a certificate, as `openssl x509 -noout -fingerprint -sha256`
// prints it: upper-case hex bytes joined by colons.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}

// IssuerOf is the CA of caPEM (a bundle) that signed the first certificate of certPEM.
func IssuerOf(certPEM, caPEM []byte) (*x509.Certificate, error) {
	certs, err := ParseCerts(certPEM)
	if err != nil {
		return nil, err
	}
	cas, err := ParseCerts(caPEM)
	if err != nil {
		return nil, fmt.Errorf("ca.crt: %w", err)
	}
	for _, ca := range cas {
		if certs[0].CheckSignatureFrom(ca) == nil {
			return ca, nil
		}
	}
	return nil, errors.New("no CA of ca.crt signed the certificate")
}

// Default lifetimes: a leaf is renewed once less than a third of its lifetime is left, so a
// member restarted at any time in the last two thirds still has weeks in hand.
const (
	CAValidity   = 5 * 365 * 24 * time.Hour
	LeafValidity = 90 * 24 * time.Hour
)

// CA is a certificate authority with its key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM is Cert encoded.
	CertPEM []byte
}

// NewCA makes a self-signed CA named name, valid from now for validity.
func NewCA(name string, now time.Time, validity time.Duration) (CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return CA{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"steward"}},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return CA{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return CA{}, err
	}
	return CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Leaf names what a leaf certificate is for.
type Leaf struct {
	// CommonName is the certificate's subject; etcd takes it as the user name of a client.
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	// ClientOnly: the certificate authenticates a client and cannot serve. Otherwise it both
	// serves and dials, as a member's does: a member serves clients and peers and dials its
	// peers and its own etcd with the same certificate.
	ClientOnly bool
}

// usages are the extended key usages of l's certificate.
func (l Leaf) usages() []x509.ExtKeyUsage {
	if l.ClientOnly {
		return []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
}

// ClientLeaf is the leaf of the client certificate Steward issues for a cluster's clients
// (etcdctl, Steward's commands, applications): it authenticates them and serves nothing.
func ClientLeaf() Leaf { return Leaf{CommonName: ClientCN, ClientOnly: true} }

// Issue signs a leaf certificate for l, valid from now for validity (never past the CA's
// own end), with the usages l needs.
func (ca CA) Issue(l Leaf, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.CommonName, Organization: []string{"steward"}},
		NotBefore:    now.Add(-Backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  l.usages(),
		DNSNames:     l.DNSNames,
		IPAddresses:  l.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// KeyPEM is the CA's key encoded, for its own directory.
func (ca CA) KeyPEM() ([]byte, error) { return encodeKey(ca.Key) }

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// WriteDir writes a certificate directory: tls.crt, tls.key (0600) and ca.crt, each
// replaced whole (a reader never sees half a file). The directory is 0700.
func WriteDir(dir string, certPEM, keyPEM, caPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// The CAs first, the key before its certificate: a reader that finds a new certificate
	// finds its key and its issuer trusted.
	for _, f := range []struct {
		name string
		data []byte
	}{{CAFile, caPEM}, {KeyFile, keyPEM}, {CertFile, certPEM}} {
		if err := writeAtomic(filepath.Join(dir, f.name), f.data); err != nil {
			return err
		}
	}
	return nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// LoadCA reads a CA's directory (its certificate and key).
func LoadCA(dir string) (CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		return CA{}, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil {
		return CA{}, err
	}
	ca, err := ParseCA(certPEM, keyPEM)
	if err != nil {
		return CA{}, fmt.Errorf("CA %s: %w", dir, err)
	}
	return ca, nil
}

// ParseCA reads a CA from its PEM certificate (tls.crt) and key (tls.key).
func ParseCA(certPEM, keyPEM []byte) (CA, error) {
	certs, err := ParseCerts(certPEM)
	if err != nil {
		return CA{}, fmt.Errorf("%s: %w", CertFile, err)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return CA{}, fmt.Errorf("%s holds no PEM key", KeyFile)
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return CA{}, fmt.Errorf("%s: %w", KeyFile, err)
	}
	if !certs[0].IsCA || !key.PublicKey.Equal(certs[0].PublicKey) {
		return CA{}, fmt.Errorf("%s is not a CA certificate of the key in %s", CertFile, KeyFile)
	}
	return CA{Cert: certs[0], Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certs[0].Raw})}, nil
}

// CommonName is the subject common name of the first certificate in the PEM file at path.
func CommonName(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	certs, err := ParseCerts(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return certs[0].Subject.CommonName, nil
}

// ParseCerts reads every certificate of a PEM bundle; none is an error.
func ParseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// Renewal says why a leaf must be issued again, or "" while it serves: it does not parse, is
// not signed by one of the trusted CAs, has another common name or other usages than l (a
// client's certificate that could also serve is replaced), does not name every DNS name and
// IP of l, or has less than a third of its lifetime left at now.
func Renewal(certPEM []byte, trusted []*x509.Certificate, l Leaf, now time.Time) string {
	certs, err := ParseCerts(certPEM)
	if err != nil {
		return "it does not parse: " + err.Error()
	}
	c := certs[0]
	pool := x509.NewCertPool()
	for _, ca := range trusted {
		pool.AddCert(ca)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		if errors.As(err, &x509.UnknownAuthorityError{}) {
			return "it is not issued by the cluster's current CA"
		}
		return "it is not valid under the cluster's CA: " + err.Error()
	}
	if c.Subject.CommonName != l.CommonName {
		return fmt.Sprintf("its common name is %q, not %q", c.Subject.CommonName, l.CommonName)
	}
	if want := l.usages(); !slices.Equal(c.ExtKeyUsage, want) {
		return fmt.Sprintf("its usages are %s, not %s", usageNames(c.ExtKeyUsage), usageNames(want))
	}
	for _, n := range l.DNSNames {
		if !slices.Contains(c.DNSNames, n) {
			return fmt.Sprintf("it does not name %s", n)
		}
	}
	for _, ip := range l.IPs {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return fmt.Sprintf("it does not name %s", ip)
		}
	}
	if left, life := c.NotAfter.Sub(now), c.NotAfter.Sub(c.NotBefore); left < life/3 {
		return fmt.Sprintf("it expires at %s, within a third of its lifetime", c.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

// ClientTLS is the TLS configuration of a client (or a member dialing its peers) whose
// certificate directory is dir: its certificate and key, and ca.crt as the CAs it trusts.
// The files are read again at every handshake, so a renewed certificate, and a CA added or
// dropped by a rollover, count from the next connection without making a new client.
func ClientTLS(dir string) (*tls.Config, error) {
	tc, err := ServerTrust(filepath.Join(dir, CAFile), "")
	if err != nil {
		return nil, err
	}
	if _, err := loadPair(dir); err != nil {
		return nil, fmt.Errorf("client certificate in %s: %w", dir, err)
	}
	tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return loadPair(dir) }
	return tc, nil
}

// ServerTrust is the TLS configuration of a client that verifies its server against the CAs
// in caPath, read again at every handshake (a rollover adds and drops CAs while clients run),
// and presents no certificate. serverName, when set, is the name the server's certificate
// must carry instead of the URL's host: a caller that dials a member over loopback names the
// member. A connection to a host given by IP address needs ForHost (the name is checked
// whatever the host: a connection with none to check is refused).
func ServerTrust(caPath, serverName string) (*tls.Config, error) {
	if _, err := certPool(caPath); err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName,
		// The server's chain and name are verified in VerifyConnection instead, against the
		// CAs caPath holds at this handshake (crypto/tls takes a fixed pool only).
		InsecureSkipVerify: true}
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		if cs.ServerName == "" {
			// With verification of its own, a handshake may leave the connection without the
			// name it was configured with (etcd's client does): that name is the one checked,
			// set on this configuration before it is used.
			cs.ServerName = tc.ServerName
		}
		return verifyServer(cs, caPath)
	}
	return tc, nil
}

// ForHost is tc, a client's TLS configuration (of ClientTLS, ServerTrust or TrustPEM), for one
// connection to host, the host of the address dialed: the server's certificate must name
// tc's ServerName when set, else host, an IP address included. crypto/tls keeps no IP address
// as the connection's server name (SNI carries none), so without it a server dialed by IP
// would have no name to check.
func ForHost(tc *tls.Config, host string) *tls.Config {
	c := tc.Clone()
	if c.ServerName == "" {
		c.ServerName = host
	}
	if verify := tc.VerifyConnection; verify != nil {
		name := c.ServerName
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			cs.ServerName = name
			return verify(cs)
		}
	}
	return c
}

// ServingTLS is the TLS configuration of a server whose certificate directory is dir. The
// certificate is read again at every handshake, so a renewal counts from the next connection.
// Clients are not asked for certificates: the server authenticates its callers otherwise.
func ServingTLS(dir string) (*tls.Config, error) {
	if _, err := loadPair(dir); err != nil {
		return nil, fmt.Errorf("server certificate in %s: %w", dir, err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return loadPair(dir) }}, nil
}

func loadPair(dir string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// TrustPEM is the TLS configuration of a client that verifies its server against the CAs in
// caPEM, as crypto/tls does, and presents no certificate.
func TrustPEM(caPEM []byte) (*tls.Config, error) {
	roots, err := pool(caPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}, nil
}

// verifyServer verifies a server's certificate chain and name as crypto/tls would, with the
// CAs in caPath as roots. A connection without a name to check (a host given by IP address,
// not bound by ForHost) is refused: the chain alone would let any certificate of the CAs pose
// as any member.
func verifyServer(cs tls.ConnectionState, caPath string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the server sent no certificate")
	}
	if cs.ServerName == "" {
		return errors.New("no name to verify the server's certificate against: a server dialed by IP address is verified against that address only through pki.ForHost")
	}
	roots, err := certPool(caPath)
	if err != nil {
		return err
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: cs.ServerName})
	return err
}

func certPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// SameKey reports whether two PEM certificates carry the same public key (a re-issue keeps
// neither: each issue makes a new key).
func SameKey(a, b []byte) bool {
	ca, err1 := ParseCerts(a)
	cb, err2 := ParseCerts(b)
	return err1 == nil && err2 == nil && bytes.Equal(ca[0].RawSubjectPublicKeyInfo, cb[0].RawSubjectPublicKeyInfo)
}
