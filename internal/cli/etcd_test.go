package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/pki"
)

// TestSidecarHTTP: `steward etcd` calls an http sidecar in plain text, and an https one only
// with the CAs to trust, verifying the name given (the URL's host is loopback); every wrong
// combination is one error that names the flag to fix.
func TestSidecarHTTP(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("t", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.Leaf{CommonName: pki.MemberCN, DNSNames: []string{"m-0.c-peer.ns.svc"}}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	defer srv.Close()
	for _, tc := range []struct {
		url, ca, name string
		tls, refused  bool
		err           string
	}{
		{url: "http://127.0.0.1:2381"},
		{url: srv.URL, ca: caFile, name: "m-0.c-peer.ns.svc", tls: true},
		{url: srv.URL, ca: caFile, name: "m-1.c-peer.ns.svc", tls: true, refused: true},
		{url: "http://127.0.0.1:2381", ca: caFile, err: "need an https --sidecar URL"},
		{url: "http://127.0.0.1:2381", name: "m-0", err: "need an https --sidecar URL"},
		{url: "https://127.0.0.1:2381", err: "needs --sidecar-ca"},
		{url: "https://127.0.0.1:2381", ca: caFile + ".missing", err: "--sidecar-ca: open"},
		{url: "127.0.0.1:2381", err: "is not an http or https URL"},
		{url: "ftp://127.0.0.1:2381", err: "is not an http or https URL"},
	} {
		hc, err := sidecarHTTP(tc.url, tc.ca, tc.name)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: %v; want an error with %q", tc, err, tc.err)
			}
		case err != nil:
			t.Errorf("%+v: %v", tc, err)
		case !tc.tls && hc.Transport != nil:
			t.Errorf("%+v: a transport of its own for plain text", tc)
		case tc.tls:
			resp, err := hc.Get(tc.url)
			if err == nil {
				resp.Body.Close()
			}
			var hostErr x509.HostnameError
			switch {
			case tc.refused && !errors.As(err, &hostErr):
				t.Errorf("%+v: %v; want refused for the name", tc, err)
			case !tc.refused && err != nil:
				t.Errorf("%+v: %v", tc, err)
			}
		}
	}
}
