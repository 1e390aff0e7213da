package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"
)

// CheckMember says why a member certificate that someone else issued (a cert-manager
// Certificate's Secret: tls.crt, tls.key, ca.crt) cannot serve the members named hosts at now,
// or nil when it can; it returns the certificate's common name. One certificate serves every
// member, as a server and as a client of its peers, so it needs both usages and a common
// name, by which peers are told apart from clients.
func CheckMember(certPEM, keyPEM, caPEM []byte, hosts []string, now time.Time) (commonName string, err error) {
	roots, err := pool(caPEM)
	if err != nil {
		return "", err
	}
	c, err := checkLeaf(certPEM, keyPEM, roots, now, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return "", err
	}
	if c.Subject.CommonName == "" {
		return "", errors.New("tls.crt has no common name: a member takes as peers only certificates of its own common name, so that a client certificate cannot pose as one; give the certificate a common name (Steward's own is " + MemberCN + ")")
	}
	for _, h := range hosts {
		if err := c.VerifyHostname(h); err != nil {
			return "", fmt.Errorf("tls.crt does not name the member %s (it names %v): add *.%s to its DNS names", h, c.DNSNames, parent(h))
		}
	}
	return c.Subject.CommonName, nil
}

// CheckClient says why a client certificate cannot reach members that trust membersCA and
// take peers of the common name memberCN, or nil when it can. A client certificate of the
// members' common name would be taken as a peer.
func CheckClient(certPEM, keyPEM, membersCA []byte, memberCN string, now time.Time) error {
	roots, err := pool(membersCA)
	if err != nil {
		return fmt.Errorf("the members' %w", err)
	}
	c, err := checkLeaf(certPEM, keyPEM, roots, now, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	if c.Subject.CommonName == memberCN {
		return fmt.Errorf("tls.crt has the members' common name %q: a client of it would be taken as a peer; give it another", memberCN)
	}
	return nil
}

func pool(caPEM []byte) (*x509.CertPool, error) {
	cas, err := ParseCerts(caPEM)
	if err != nil {
		return nil, fmt.Errorf("ca.crt: %w", err)
	}
	p := x509.NewCertPool()
	for _, c := range cas {
		p.AddCert(c)
	}
	return p, nil
}

// checkLeaf parses the pair and verifies its chain under roots at now for each usage.
func checkLeaf(certPEM, keyPEM []byte, roots *x509.CertPool, now time.Time, usages ...x509.ExtKeyUsage) (*x509.Certificate, error) {
	certs, err := ParseCerts(certPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.crt: %w", err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("tls.key is not the key of tls.crt: %w", err)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	for _, u := range usages {
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{u}})
		var invalid x509.CertificateInvalidError
		switch {
		case err == nil:
		case errors.As(err, &x509.UnknownAuthorityError{}):
			return nil, errors.New("tls.crt is not issued by a CA of ca.crt: put its issuing CA in ca.crt")
		case errors.As(err, &invalid) && invalid.Reason == x509.IncompatibleUsage:
			return nil, fmt.Errorf("tls.crt may not be used for %s: give the certificate the usages server auth and client auth", usageName(u))
		default:
			return nil, fmt.Errorf("tls.crt does not verify under ca.crt at %s: %w", now.UTC().Format(time.RFC3339), err)
		}
	}
	return certs[0], nil
}

func usageName(u x509.ExtKeyUsage) string {
	switch u {
	case x509.ExtKeyUsageServerAuth:
		return "server auth"
	case x509.ExtKeyUsageClientAuth:
		return "client auth"
	}
	return fmt.Sprintf("extended key usage %d", u)
}

// usageNames names usages, joined by " and " ("none" when empty).
func usageNames(usages []x509.ExtKeyUsage) string {
	if len(usages) == 0 {
		return "none"
	}
	names := make([]string, len(usages))
	for i, u := range usages {
		names[i] = usageName(u)
	}
	return strings.Join(names, " and ")
}

// parent is host without its first label.
func parent(host string) string {
	_, rest, _ := strings.Cut(host, ".")
	return rest
}
