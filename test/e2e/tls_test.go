package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/operator"
	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestTLS: a cluster with spec.tls serves clients and peers with mutual TLS of its own CA.
// The client certificate Secret named in the status works; plain text and TLS without a
// client certificate are refused, and the peer port refuses the client certificate. Backups
// run over TLS, a member lost with its volume is replaced over TLS, and the cluster scales
// 3→4→3 with the members' one certificate; no acknowledged write is lost.
func TestTLS(t *testing.T) {
	ns := namespace(t)
	storeSecret(t, ns)
	apply(t, ns, clusterYAML(ns, "sec", 3, "  tls: {enabled: true}\n"))
	ec := waitReady(t, ns, "sec", 3, 4*time.Minute)
	if ec.Status.ClientCertificateSecret != "sec-client-tls" || !strings.HasPrefix(ec.Status.Endpoints.Client, "https://") {
		t.Fatalf("status: client certificate Secret %q, client endpoint %q", ec.Status.ClientCertificateSecret, ec.Status.Endpoints.Client)
	}
	w := startWriter(t, ns, "sec", "tls", 100*time.Millisecond)

	// Refused: plain text, and TLS without a client certificate.
	noCert := clusterTLS(t, ns, "sec", "sec-client-tls")
	noCert.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tls.Certificate{}, nil }
	for what, tc := range map[string]*tls.Config{"plain text": nil, "TLS without a client certificate": noCert} {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{serviceEndpoint(t, ns, "sec")}, TLS: tc, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err = c.Put(ctx, "/refused", what)
		cancel()
		c.Close()
		if err == nil {
			t.Errorf("%s: a put was acknowledged", what)
		}
	}

	// The peer port takes the members' certificate, not the client one of the same CA.
	peer := fmt.Sprintf("https://%s:%d/members", memberPods(t, ns, "sec")["sec-0"].Status.PodIP, operator.PeerPort)
	peerGet := func(secret string) error {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: clusterTLS(t, ns, "sec", secret)}, Timeout: 5 * time.Second}
		resp, err := hc.Get(peer)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	}
	if err := peerGet("sec-server-tls"); err != nil {
		t.Fatalf("the members' certificate on the peer port: %v", err)
	}
	if err := peerGet("sec-client-tls"); err == nil {
		t.Fatal("the client certificate was answered on the peer port")
	}

	// One member lost with its volume: a new member joins over TLS.
	before := memberIDs(ec)
	losePods(t, ns, "sec", "sec-1")
	waitMemberReplaced(t, ns, "sec", "sec-1", before["sec-1"])

	// Scaled up and down: the new member serves with the members' one certificate.
	for _, n := range []int32{4, 3} {
		kubectl(t, ns, "scale", "ec/sec", fmt.Sprintf("--replicas=%d", n))
		waitReady(t, ns, "sec", n, 4*time.Minute)
	}
	w.Stop()
	acked := w.Acked()
	t.Logf("%d writes acknowledged, %d failed", len(acked), w.fails)

	// Backups over TLS: the revision after the last write is stored.
	c := etcdClient(t, ns, "sec")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	resp, err := c.Get(ctx, "tls/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("revision %d backed up", resp.Header.Revision), func() error {
		ec, err := getEC(ns, "sec")
		if err != nil {
			return err
		}
		if d := ec.Status.LastDeltaSnapshot; d == nil || d.Revision < resp.Header.Revision {
			return fmt.Errorf("last delta %+v", d)
		}
		return nil
	})
	assertKeysOnEveryMember(t, ns, "sec", acked)
}
