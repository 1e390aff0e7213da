package pki

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestIssuedLeafServesAndDials(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("steward-test", now, CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	leaf := Leaf{CommonName: "m0", DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}}
	certPEM, keyPEM, err := ca.Issue(leaf, now, LeafValidity)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "m0")
	if err := WriteDir(dir, certPEM, keyPEM, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{KeyFile: 0o600, CertFile: 0o600, CAFile: 0o600} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v %v, want mode %v", name, fi, err, want)
		}
	}
	// A server with the leaf that requires a client certificate of the same CA.
	serverCert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}()
	cfg, err := ClientTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", ln.Addr().String(), ForHost(cfg, "127.0.0.1"))
	if err != nil {
		t.Fatalf("a client with the cluster's certificate: %v", err)
	}
	buf := make([]byte, 2)
	if _, err := c.Read(buf); err != nil || string(buf) != "ok" {
		t.Fatalf("read %q: %v", buf, err)
	}
	c.Close()

	// Another CA's certificate is refused by the server, and the client refuses a server of
	// another CA.
	other, _ := NewCA("other", now, CAValidity)
	ocert, okey, _ := other.Issue(leaf, now, LeafValidity)
	odir := filepath.Join(t.TempDir(), "other")
	if err := WriteDir(odir, ocert, okey, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	ocfg, err := ClientTLS(odir)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := tls.Dial("tcp", ln.Addr().String(), ForHost(ocfg, "127.0.0.1")); err == nil {
		// TLS 1.3 reports the server's refusal of the client certificate on the first read.
		if _, err = c.Read(buf); err == nil {
			t.Fatal("a client certificate of another CA was accepted")
		}
		c.Close()
	}
	if err := WriteDir(odir, certPEM, keyPEM, other.CertPEM); err != nil {
		t.Fatal(err)
	}
	ocfg, _ = ClientTLS(odir)
	if _, err := tls.Dial("tcp", ln.Addr().String(), ForHost(ocfg, "127.0.0.1")); err == nil {
		t.Fatal("a client trusting another CA accepted the server")
	}
}

// TestServerDialedByIPMustNameIt: a server dialed by IP address is verified against that
// address, as one dialed by name is against the name: a certificate of the cluster's CA that
// does not name the IP is refused, and a connection with no name to check at all is refused.
func TestServerDialedByIPMustNameIt(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("steward-test", now, CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	caPath := filepath.Join(t.TempDir(), CAFile)
	if err := os.WriteFile(caPath, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	serve := func(l Leaf) string {
		certPEM, keyPEM, err := ca.Issue(l, now, LeafValidity)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		return ln.Addr().String()
	}
	named := serve(Leaf{CommonName: MemberCN, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	elsewhere := serve(Leaf{CommonName: MemberCN, DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.2")}})
	trust, err := ServerTrust(caPath, "")
	if err != nil {
		t.Fatal(err)
	}
	dial := func(addr string, tc *tls.Config) error {
		c, err := tls.Dial("tcp", addr, tc)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(named, ForHost(trust, "127.0.0.1")); err != nil {
		t.Errorf("a server whose certificate names the IP dialed: %v", err)
	}
	var hostErr x509.HostnameError
	if err := dial(elsewhere, ForHost(trust, "127.0.0.1")); !errors.As(err, &hostErr) {
		t.Errorf("a server whose certificate names other hosts than the IP dialed: %v; want refused for the name", err)
	}
	if err := dial(named, trust); err == nil || !strings.Contains(err.Error(), "no name to verify") {
		t.Errorf("a server dialed by IP with no name bound: %v; want refused", err)
	}
	// A name given (a member dialed over loopback under its own name) is the one checked.
	byName, err := ServerTrust(caPath, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(elsewhere, ForHost(byName, "127.0.0.1")); err != nil {
		t.Errorf("a server named by ServerTrust's server name: %v", err)
	}
	if err := dial(named, ForHost(byName, "127.0.0.1")); !errors.As(err, &hostErr) {
		t.Errorf("a server that does not carry ServerTrust's server name: %v; want refused for the name", err)
	}
}

func TestLoadCA(t *testing.T) {
	now := time.Now()
	ca, _ := NewCA("steward-test", now, CAValidity)
	dir := t.TempDir()
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteDir(dir, ca.CertPEM, key, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	got, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Cert.Equal(ca.Cert) || !got.Key.Equal(ca.Key) {
		t.Fatal("the CA read back differs")
	}
	other, _ := NewCA("other", now, CAValidity)
	if err := os.WriteFile(filepath.Join(dir, CertFile), other.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(dir); err == nil || !strings.Contains(err.Error(), "not a CA certificate of the key") {
		t.Fatalf("a CA certificate with another CA's key: %v", err)
	}
}

// TestLeafUsages: the client certificate authenticates a client and serves nothing; a
// member's certificate does both, as it serves clients and peers and dials its peers.
func TestLeafUsages(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("steward-test", now, CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, tc := range []struct {
		name   string
		leaf   Leaf
		serves bool
	}{
		{"the client's", ClientLeaf(), false},
		{"a member's", Leaf{CommonName: MemberCN, DNSNames: []string{"localhost"}}, true},
	} {
		certPEM, _, err := ca.Issue(tc.leaf, now, LeafValidity)
		if err != nil {
			t.Fatal(err)
		}
		certs, err := ParseCerts(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		verify := func(u x509.ExtKeyUsage) error {
			_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{u}})
			return err
		}
		if err := verify(x509.ExtKeyUsageClientAuth); err != nil {
			t.Errorf("%s certificate as a client: %v", tc.name, err)
		}
		var invalid x509.CertificateInvalidError
		switch err := verify(x509.ExtKeyUsageServerAuth); {
		case tc.serves && err != nil:
			t.Errorf("%s certificate as a server: %v", tc.name, err)
		case !tc.serves && (!errors.As(err, &invalid) || invalid.Reason != x509.IncompatibleUsage):
			t.Errorf("%s certificate as a server: %v; want refused for its usage", tc.name, err)
		}
	}
}

func TestRenewal(t *testing.T) {
	now := time.Now()
	ca, _ := NewCA("steward-test", now, CAValidity)
	other, _ := NewCA("other", now, CAValidity)
	leaf := Leaf{CommonName: "m0", DNSNames: []string{"m0.local"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}}
	good, _, _ := ca.Issue(leaf, now, LeafValidity)
	foreign, _, _ := other.Issue(leaf, now, LeafValidity)
	narrow, _, _ := ca.Issue(Leaf{CommonName: "m0", DNSNames: []string{"m0.local"}}, now, LeafValidity)
	renamed, _, _ := ca.Issue(Leaf{CommonName: "m1", DNSNames: leaf.DNSNames, IPs: leaf.IPs}, now, LeafValidity)
	client, _, _ := ca.Issue(ClientLeaf(), now, LeafValidity)
	// A client certificate as Steward issued it before client certificates were client-only.
	servingClient, _, _ := ca.Issue(Leaf{CommonName: ClientCN}, now, LeafValidity)
	for _, tc := range []struct {
		name    string
		cert    []byte
		trusted []*x509.Certificate
		leaf    Leaf
		at      time.Time
		want    string // a part of the reason; "" when it serves
	}{
		{"fresh", good, []*x509.Certificate{ca.Cert}, leaf, now, ""},
		{"two thirds of its life on", good, []*x509.Certificate{ca.Cert}, leaf, now.Add(LeafValidity * 2 / 3).Add(-time.Hour), ""},
		{"less than a third left", good, []*x509.Certificate{ca.Cert}, leaf, now.Add(LeafValidity * 2 / 3).Add(time.Hour), "within a third"},
		{"expired", good, []*x509.Certificate{ca.Cert}, leaf, now.Add(LeafValidity + time.Hour), "not valid"},
		{"another CA's", foreign, []*x509.Certificate{ca.Cert}, leaf, now, "not issued by the cluster's current CA"},
		{"either CA trusted during a rollover", foreign, []*x509.Certificate{ca.Cert, other.Cert}, leaf, now, ""},
		{"another common name", renamed, []*x509.Certificate{ca.Cert}, leaf, now, `its common name is "m1", not "m0"`},
		{"a name it lacks", narrow, []*x509.Certificate{ca.Cert}, leaf, now, "does not name 127.0.0.1"},
		{"a client's", client, []*x509.Certificate{ca.Cert}, ClientLeaf(), now, ""},
		{"a client's that can serve", servingClient, []*x509.Certificate{ca.Cert}, ClientLeaf(), now, "its usages are server auth and client auth, not client auth"},
		{"a member's that cannot serve", client, []*x509.Certificate{ca.Cert}, Leaf{CommonName: ClientCN}, now, "its usages are client auth, not server auth and client auth"},
		{"garbage", []byte("not a certificate"), []*x509.Certificate{ca.Cert}, leaf, now, "does not parse"},
	} {
		got := Renewal(tc.cert, tc.trusted, tc.leaf, tc.at)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: Renewal = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestFingerprintAndIssuer: the fingerprint is openssl's (SHA-256 of the DER, upper-case hex
// bytes joined by colons), and IssuerOf finds, in a bundle, the CA that signed a leaf.
func TestFingerprintAndIssuer(t *testing.T) {
	now := time.Now()
	a, err := NewCA("a", now, CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewCA("b", now, CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(a.Cert.Raw)
	want := strings.ToUpper(hex.EncodeToString(sum[:1]))
	if fp := Fingerprint(a.Cert); len(fp) != 32*3-1 || !strings.HasPrefix(fp, want+":") || strings.ToLower(strings.ReplaceAll(fp, ":", "")) != hex.EncodeToString(sum[:]) {
		t.Fatalf("fingerprint %s", fp)
	}
	leaf, _, err := a.Issue(Leaf{CommonName: MemberCN}, now, LeafValidity)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := IssuerOf(leaf, append(append([]byte{}, b.CertPEM...), a.CertPEM...)); err != nil || !got.Equal(a.Cert) {
		t.Fatalf("issuer %v, %v", got, err)
	}
	if _, err := IssuerOf(leaf, b.CertPEM); err == nil {
		t.Fatal("an issuer found in a bundle without it")
	}
}
