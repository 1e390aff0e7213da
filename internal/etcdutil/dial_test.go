package etcdutil

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/pki"
	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// TestDialerVerifiesTheIPDialed: a member dialed by IP address must present a certificate
// that names that address. One etcd serves on 127.0.0.1 and 127.0.0.2 with a certificate of
// the cluster's CA that names 127.0.0.2 only: the client gets through at 127.0.0.2 and is
// refused at 127.0.0.1. A client of etcd's own (clientv3) with the client certificate's
// configuration and a server name set gets through by that name, which is checked.
func TestDialerVerifiesTheIPDialed(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("steward-test", now, pki.CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(dir string, l pki.Leaf) {
		certPEM, keyPEM, err := ca.Issue(l, now, pki.LeafValidity)
		if err != nil {
			t.Fatal(err)
		}
		if err := pki.WriteDir(dir, certPEM, keyPEM, ca.CertPEM); err != nil {
			t.Fatal(err)
		}
	}
	serverDir, clientDir := filepath.Join(t.TempDir(), "member"), filepath.Join(t.TempDir(), "client")
	issue(serverDir, pki.Leaf{CommonName: pki.MemberCN, IPs: []net.IP{net.ParseIP("127.0.0.2")}, DNSNames: []string{"member.example"}})
	issue(clientDir, pki.ClientLeaf())

	cfg := embed.NewConfig()
	cfg.Dir, cfg.Name = t.TempDir(), "test"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	unnamed, _ := url.Parse(fmt.Sprintf("https://127.0.0.1:%d", testutil.FreePort(t)))
	named, _ := url.Parse(fmt.Sprintf("https://127.0.0.2:%d", testutil.FreePort(t)))
	peer, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*unnamed, *named}, []url.URL{*named}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ClientTLSInfo.CertFile = filepath.Join(serverDir, pki.CertFile)
	cfg.ClientTLSInfo.KeyFile = filepath.Join(serverDir, pki.KeyFile)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		t.Fatal("etcd did not start")
	}

	read := func(c *clientv3.Client, err error) error {
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = c.Get(ctx, "k")
		return err
	}
	get := func(endpoint string) error {
		return read(Dialer{TLSDir: clientDir}.New([]string{endpoint}, 3*time.Second))
	}
	if err := get(named.String()); err != nil {
		t.Errorf("the member at the IP its certificate names: %v", err)
	}
	if err := get(unnamed.String()); err == nil {
		t.Error("the member at an IP its certificate does not name was answered")
	}

	byName := func(serverName string) error {
		tc, err := pki.ClientTLS(clientDir)
		if err != nil {
			return err
		}
		tc.ServerName = serverName
		return read(clientv3.New(clientv3.Config{Endpoints: []string{unnamed.Host}, TLS: tc, DialTimeout: 3 * time.Second, Logger: zap.NewNop()}))
	}
	if err := byName("member.example"); err != nil {
		t.Errorf("clientv3 with the server name the certificate carries: %v", err)
	}
	if err := byName("other.example"); err == nil {
		t.Error("clientv3 with a server name the certificate does not carry was answered")
	}
}
