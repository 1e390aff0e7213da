package cli

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/pki"
)

// TestSidecarHTTP: `steward etcd` calls an http sidecar in plain text, and an https one only
// with the CAs to trust; every wrong combination is one error that names the flag to fix.
func TestSidecarHTTP(t *testing.T) {
	ca, err := pki.NewCA("t", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url, ca, name string
		tls           bool
		err           string
	}{
		{url: "http://127.0.0.1:2381"},
		{url: "https://127.0.0.1:2381", ca: caFile, name: "m-0.c-peer.ns.svc", tls: true},
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
			if tr, ok := hc.Transport.(*http.Transport); !ok || tr.TLSClientConfig == nil || tr.TLSClientConfig.ServerName != tc.name {
				t.Errorf("%+v: transport %+v; want TLS verifying %q", tc, hc.Transport, tc.name)
			}
		}
	}
}
