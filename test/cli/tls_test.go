package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/pki"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
)

// TestLocalTLS: `steward local up --tls` makes the cluster's own CA and serves clients and
// peers with mutual TLS: etcdctl with the flags status prints works, a plain-text client and a
// client without a certificate are refused, backups run over TLS, and a member whose data is
// wiped is replaced as a learner over TLS with every acknowledged write kept; scaling and a
// restore back in time work over TLS.
func TestLocalTLS(t *testing.T) {
	c := localcluster.Start(t, "--members", "3", "--base-port", "25200", "--tls", "--sidecar-arg=--delta-period=1s")
	steward, dir, status := c.Steward, c.Dir, c.Report
	etcdctl := testutil.Tool(t, "etcdctl")

	for _, f := range []string{"ca/tls.key", "m0/tls.key", "client/tls.key"} {
		if fi, err := os.Stat(filepath.Join(dir, "pki", f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("pki/%s: %v, %v: want a 0600 file", f, fi, err)
		}
	}
	rep := status()
	if !rep.Cluster.TLS || !strings.HasPrefix(rep.Members[0].ClientURL, "https://") {
		t.Fatalf("status: TLS %t, client URL %s", rep.Cluster.TLS, rep.Members[0].ClientURL)
	}
	if table := c.StatusTable(); !strings.Contains(table, "client  "+rep.Cluster.Etcdctl) {
		t.Fatalf("status does not print the etcdctl command line:\n%s", table)
	}
	flags := etcdctlArgs(t, rep.Cluster.Etcdctl)
	ctl := func(args ...string) string { return run(t, etcdctl, append(append([]string{}, flags...), args...)...) }
	acked := map[string]string{}
	for i := range 20 {
		k, v := fmt.Sprintf("/tls/%02d", i), fmt.Sprintf("v%d", i)
		ctl("put", k, v)
		acked[k] = v
	}

	// Refused: plain text on the TLS port, and TLS without a client certificate.
	port := strings.TrimPrefix(rep.Members[0].ClientURL, "https://127.0.0.1:")
	for name, args := range map[string][]string{
		"plain text":              {"--endpoints", "http://127.0.0.1:" + port},
		"no client certificate":   {"--endpoints", rep.Members[0].ClientURL, "--cacert", filepath.Join(dir, "pki", "client", "ca.crt")},
		"server of an unknown CA": {"--endpoints", rep.Members[0].ClientURL},
	} {
		out, err := exec.Command(etcdctl, append(args, "--command-timeout", "3s", "--dial-timeout", "2s", "get", "/tls/00")...).CombinedOutput()
		if err == nil {
			t.Errorf("%s: etcdctl was answered: %s", name, out)
		}
	}

	// The peer port takes the members' certificates only: the client certificate, of the same
	// CA, does not pass as a peer.
	peerGet := func(certDir string) error {
		tc, err := pki.ClientTLS(certDir)
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ForHost(tc, "127.0.0.1")}, Timeout: 5 * time.Second}
		resp, err := hc.Get(rep.Members[0].PeerURL + "/members")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	}
	if err := peerGet(filepath.Join(dir, "pki", "m1")); err != nil {
		t.Fatalf("a member's certificate on the peer port: %v", err)
	}
	if err := peerGet(filepath.Join(dir, "pki", "client")); err == nil {
		t.Fatal("the client certificate was answered on the peer port")
	}

	// Steward's own commands reach it with the client certificate, and not without.
	if rep.Cluster.ClientTLSDir != filepath.Join(dir, "pki", "client") {
		t.Fatalf("status names the client certificates %q", rep.Cluster.ClientTLSDir)
	}
	eps := strings.Join([]string{rep.Members[0].ClientURL, rep.Members[1].ClientURL, rep.Members[2].ClientURL}, ",")
	run(t, steward, "defrag", "--endpoints", eps, "--tls-dir", rep.Cluster.ClientTLSDir, "--wait", "10s")
	if out, err := exec.Command(steward, "defrag", "--endpoints", eps, "--wait", "5s").CombinedOutput(); err == nil {
		t.Fatalf("steward defrag without the client certificate was answered: %s", out)
	}

	// Backups run over TLS.
	testutil.Eventually(t, 60*time.Second, "the backups ready", func() error {
		if b := status().Backup; b == nil || !b.Ready {
			return fmt.Errorf("backup %+v", b)
		}
		return nil
	})

	// The sidecar API is served over TLS with the member's certificate (the status above read
	// the backups through it), and refuses a request in plain text before looking at its
	// token; only the open endpoints answer plain text, for probes and Prometheus.
	sidecar := status().Members[1].SidecarURL
	if !strings.HasPrefix(sidecar, "https://") {
		t.Fatalf("status names the sidecar API %s; want https", sidecar)
	}
	spec, _, err := local.ReadSpec(local.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	secure, err := local.SidecarClient(local.Dir(dir), spec, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := secure.Call(t.Context(), http.MethodGet, sidecar+"/v1/report"); err != nil {
		t.Fatalf("the sidecar API over TLS with the token: %v", err)
	}
	plain := "http://" + strings.TrimPrefix(sidecar, "https://")
	if _, err := sidecarapi.FileClient(local.Dir(dir).Token(), nil).Call(t.Context(), http.MethodGet, plain+"/v1/report"); sidecarapi.StatusCode(err) != http.StatusForbidden {
		t.Fatalf("the sidecar API in plain text with the token: %v; want 403", err)
	}
	for _, u := range []string{plain + "/healthz", plain + "/metrics"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s; want 200", u, resp.Status)
		}
	}
	other, err := pki.NewCA("another", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherTrust, err := pki.TrustPEM(other.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sidecarapi.FileClient(local.Dir(dir).Token(), sidecarapi.HTTPClient(otherTrust, 5*time.Second)).Call(t.Context(), http.MethodGet, sidecar+"/v1/report"); err == nil {
		t.Fatal("a client trusting another CA took the sidecar's certificate")
	}

	// Scaled up and down: the new member gets its certificate and joins over TLS.
	run(t, steward, "local", "scale", "4", "--dir", dir, "--timeout", "2m")
	if _, err := os.Stat(filepath.Join(dir, "pki", "m3", "tls.crt")); err != nil {
		t.Fatalf("the member added by scaling has no certificate: %v", err)
	}
	if n := len(status().Members); n != 4 {
		t.Fatalf("%d members after scaling to 4", n)
	}
	run(t, steward, "local", "scale", "3", "--dir", dir, "--timeout", "2m")

	// Restored back in time over TLS: the cluster holds what it held at the revision.
	var at struct {
		Header struct{ Revision int64 } `json:"header"`
	}
	if err := json.Unmarshal([]byte(ctl("get", "/tls/19", "-w", "json")), &at); err != nil {
		t.Fatal(err)
	}
	ctl("put", "/tls/after", "x")
	testutil.Eventually(t, 60*time.Second, "the newest write backed up", func() error {
		if b := status().Backup; b == nil || b.LatestDeltaRevision <= at.Header.Revision {
			return fmt.Errorf("backup %+v", b)
		}
		return nil
	})
	run(t, steward, "local", "restore", "--dir", dir, "--to-revision", fmt.Sprint(at.Header.Revision), "--timeout", "3m")
	if got := strings.TrimSpace(ctl("get", "/tls/after", "--print-value-only")); got != "" {
		t.Fatalf("after the restore to revision %d, /tls/after = %q: want none", at.Header.Revision, got)
	}

	// A member's data wiped: it rejoins as a new member over TLS.
	before := map[string]string{}
	for _, m := range status().Members {
		before[m.Name] = m.ID
	}
	run(t, steward, "local", "fault", "m1", "wipe", "--dir", dir)
	testutil.Eventually(t, 90*time.Second, "m1 replaced and every member healthy", func() error {
		rep := status()
		healthy := 0
		for _, m := range rep.Members {
			if m.Healthy && m.Role != "learner" {
				healthy++
			}
			if m.Name == "m1" && (m.ID == "" || m.ID == before["m1"]) {
				return fmt.Errorf("m1 has ID %q (was %s)", m.ID, before["m1"])
			}
		}
		if healthy != 3 {
			return fmt.Errorf("%d of 3 members healthy voters", healthy)
		}
		return nil
	})
	m1 := ""
	for _, m := range status().Members {
		if m.Name == "m1" {
			m1 = m.ClientURL
		}
	}
	for k, v := range acked {
		// The certificate flags, with m1 alone as the endpoint: read from its own data.
		got := strings.TrimSpace(run(t, etcdctl, append(append([]string{"--endpoints", m1}, flags[2:]...), "--consistency", "s", "get", k, "--print-value-only")...))
		if got != v {
			t.Fatalf("m1 after its replacement: %s = %q, want %q", k, got, v)
		}
	}
}
