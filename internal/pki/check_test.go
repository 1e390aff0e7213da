package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"strings"
	"testing"
	"time"
)

// issueWith signs a leaf as another issuer (cert-manager, say) might: with its own template.
func issueWith(t *testing.T, ca CA, tmpl *x509.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM
}

// chainCA is a CA signed by parent (nil: itself), with no limit on the chain below it, as
// an organisation's root and the intermediate of a cert-manager issuer are.
func chainCA(t *testing.T, name string, parent *CA, now time.Time) CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour * 24 * 365), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func TestCheckMemberAndClient(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	root, err := NewCA("users-ca", now.Add(-time.Hour), CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("another-ca", now.Add(-time.Hour), CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	orgRoot := chainCA(t, "organisation-root", nil, now)
	inter := chainCA(t, "issuer", &orgRoot, now)
	hosts := []string{"x-0.x-peer.ns.svc", "x-1.x-peer.ns.svc", "x-2.x-peer.ns.svc"}
	leaf := func(cn string, dns []string, usages ...x509.ExtKeyUsage) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, DNSNames: dns, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(90 * 24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usages}
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	good, goodKey := issueWith(t, root, leaf("etcd-peer", []string{"*.x-peer.ns.svc", "x-client.ns.svc"}, both...))
	chained, chainedKey := issueWith(t, inter, leaf("etcd-peer", []string{"*.x-peer.ns.svc"}, both...))
	chained = append(chained, inter.CertPEM...)
	explicit, explicitKey := issueWith(t, root, leaf("etcd-peer", hosts, both...))
	noEKU, noEKUKey := issueWith(t, root, leaf("etcd-peer", []string{"*.x-peer.ns.svc"})) // no extended usage: any
	serverOnly, serverOnlyKey := issueWith(t, root, leaf("etcd-peer", []string{"*.x-peer.ns.svc"}, x509.ExtKeyUsageServerAuth))
	noCN, noCNKey := issueWith(t, root, leaf("", []string{"*.x-peer.ns.svc"}, both...))
	twoOnly, twoOnlyKey := issueWith(t, root, leaf("etcd-peer", hosts[:2], both...))
	otherLeaf, otherKey := issueWith(t, other, leaf("etcd-peer", []string{"*.x-peer.ns.svc"}, both...))
	expired := leaf("etcd-peer", []string{"*.x-peer.ns.svc"}, both...)
	expired.NotAfter = now.Add(-time.Minute)
	old, oldKey := issueWith(t, root, expired)
	bundle := append(append([]byte{}, other.CertPEM...), root.CertPEM...)

	for _, tc := range []struct {
		name      string
		cert, key []byte
		ca        []byte
		want      string // in the error; "" for none
	}{
		{"issued by ca.crt's CA, wildcard names", good, goodKey, root.CertPEM, ""},
		{"through an intermediate in tls.crt", chained, chainedKey, orgRoot.CertPEM, ""},
		{"an intermediate not sent", chained[:len(chained)-len(inter.CertPEM)], chainedKey, orgRoot.CertPEM, "not issued by a CA of ca.crt"},
		{"every member named", explicit, explicitKey, root.CertPEM, ""},
		{"no extended usage allows every usage", noEKU, noEKUKey, root.CertPEM, ""},
		{"its CA one of two in ca.crt (a rollover)", otherLeaf, otherKey, bundle, ""},
		{"server auth only", serverOnly, serverOnlyKey, root.CertPEM, "may not be used for client auth"},
		{"no common name", noCN, noCNKey, root.CertPEM, "no common name"},
		{"a member not named", twoOnly, twoOnlyKey, root.CertPEM, "does not name the member x-2.x-peer.ns.svc"},
		{"another CA", otherLeaf, otherKey, root.CertPEM, "not issued by a CA of ca.crt"},
		{"expired", old, oldKey, root.CertPEM, "does not verify under ca.crt"},
		{"the key of another certificate", good, otherKey, root.CertPEM, "tls.key is not the key of tls.crt"},
		{"no ca.crt", good, goodKey, nil, "ca.crt: no PEM certificate"},
		{"no tls.crt", nil, goodKey, root.CertPEM, "tls.crt: no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cn, err := CheckMember(tc.cert, tc.key, tc.ca, hosts, now)
			if tc.want == "" && (err != nil || cn != "etcd-peer") {
				t.Fatalf("CheckMember: %q, %v; want the common name etcd-peer", cn, err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("CheckMember: %v; want an error with %q", err, tc.want)
			}
		})
	}

	client, clientKey := issueWith(t, root, leaf("app", nil, x509.ExtKeyUsageClientAuth))
	serverClient, serverClientKey := issueWith(t, root, leaf("app", nil, x509.ExtKeyUsageServerAuth))
	posing, posingKey := issueWith(t, root, leaf("etcd-peer", nil, x509.ExtKeyUsageClientAuth))
	for _, tc := range []struct {
		name      string
		cert, key []byte
		ca        []byte
		want      string
	}{
		{"a client of the members' CA", client, clientKey, root.CertPEM, ""},
		{"the members' common name", posing, posingKey, root.CertPEM, `the members' common name "etcd-peer"`},
		{"server auth only", serverClient, serverClientKey, root.CertPEM, "may not be used for client auth"},
		{"a CA the members do not trust", client, clientKey, other.CertPEM, "not issued by a CA of ca.crt"},
	} {
		t.Run("client: "+tc.name, func(t *testing.T) {
			err := CheckClient(tc.cert, tc.key, tc.ca, "etcd-peer", now)
			if tc.want == "" && err != nil {
				t.Fatalf("CheckClient: %v; want none", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("CheckClient: %v; want an error with %q", err, tc.want)
			}
		})
	}
}
