package sidecarapi

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/pki"
)

// TestTLSListener: with TLS one port serves the API over TLS only, and the open endpoints
// also in plain text. A plain-text request to any other endpoint is refused before its token
// is looked at; a client of another CA is refused at the handshake; a connection that sends
// nothing holds up no other; a renewed certificate is served from the next connection.
func TestTLSListener(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("sidecar-test", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	issue := func() []byte {
		cert, key, err := ca.Issue(pki.Leaf{CommonName: pki.MemberCN, IPs: []net.IP{net.ParseIP("127.0.0.1")}}, now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := pki.WriteDir(dir, cert, key, ca.CertPEM); err != nil {
			t.Fatal(err)
		}
		c, _ := pki.ParseCerts(cert)
		return c[0].Raw
	}
	first := issue()

	const token = "a-token-of-the-cluster-that-is-long-enough-0123"
	var reads atomic.Int32
	routes := []Route{
		{Method: "GET", Path: "/healthz", Access: Open, Handler: func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }},
		{Method: "GET", Path: "/v1/report", Access: Read, Handler: func(w http.ResponseWriter, _ *http.Request) {
			reads.Add(1)
			_, _ = io.WriteString(w, "member data")
		}},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := pki.ServingTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(NewHandler(routes, Static{List: []string{token}}, true))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(TLSListener(ln, tc)) }()
	addr := ln.Addr().String()

	trust, err := pki.ServerTrust(filepath.Join(dir, pki.CAFile), "")
	if err != nil {
		t.Fatal(err)
	}
	// Within the wait for a silent connection's first byte: one must not hold up the others.
	trusting := HTTPClient(trust, sniffTimeout/2)
	trusting.Transport.(*http.Transport).DisableKeepAlives = true
	ctx := context.Background()
	secure := NewClient(Static{List: []string{token}}, trusting)

	// A silent connection is open throughout.
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	body, err := secure.Call(ctx, "GET", "https://"+addr+"/v1/report")
	if err != nil || string(body) != "member data" {
		t.Fatalf("over TLS with the token: %q, %v", body, err)
	}
	if _, err := NewClient(Static{List: []string{"not-the-token-but-long-enough-0123456789abc"}}, trusting).Call(ctx, "GET", "https://"+addr+"/v1/report"); StatusCode(err) != http.StatusUnauthorized {
		t.Fatalf("over TLS with a wrong token: %v; want 401", err)
	}
	if body, err := NewClient(Static{List: []string{token}}, nil).Call(ctx, "GET", "http://"+addr+"/healthz"); err != nil || string(body) != "ok" {
		t.Fatalf("plain /healthz: %q, %v", body, err)
	}
	before := reads.Load()
	_, err = NewClient(Static{List: []string{token}}, nil).Call(ctx, "GET", "http://"+addr+"/v1/report")
	if StatusCode(err) != http.StatusForbidden || !strings.Contains(err.Error(), "over TLS only") || !strings.Contains(err.Error(), "rotate it") {
		t.Fatalf("plain /v1/report with the token: %v; want 403 saying TLS only and to rotate the token", err)
	}
	if reads.Load() != before {
		t.Fatal("a plain-text request reached the handler")
	}

	other, err := pki.NewCA("another", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherTrust, err := pki.TrustPEM(other.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewClient(Static{List: []string{token}}, HTTPClient(otherTrust, 10*time.Second)).Call(ctx, "GET", "https://"+addr+"/v1/report")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("a client trusting another CA: %v; want an unknown authority", err)
	}

	renewed := issue()
	resp, err := trusting.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.TLS.PeerCertificates[0].Raw; string(got) == string(first) || string(got) != string(renewed) {
		t.Fatal("the next connection after a renewal is not served the renewed certificate")
	}

	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve after Close: %v", err)
	}
}

// TestHTTPClientVerifiesTheIPDialed: a sidecar dialed by IP address must present a
// certificate that names that address; one of the cluster's CA that names another is refused.
func TestHTTPClientVerifiesTheIPDialed(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("sidecar-test", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key, err := ca.Issue(pki.Leaf{CommonName: pki.MemberCN, DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.2")}}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteDir(dir, cert, key, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	tc, err := pki.ServingTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	go func() { _ = srv.Serve(TLSListener(ln, tc)) }()
	t.Cleanup(func() { srv.Close() })
	trust, err := pki.ServerTrust(filepath.Join(dir, pki.CAFile), "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = HTTPClient(trust, 10*time.Second).Get("https://" + ln.Addr().String() + "/")
	var hostErr x509.HostnameError
	if !errors.As(err, &hostErr) {
		t.Fatalf("a sidecar at 127.0.0.1 whose certificate names 127.0.0.2 and localhost: %v; want refused for the name", err)
	}
}
