package restore

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/testutil"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// member is an embedded etcd with a client.
type member struct {
	e         *embed.Etcd
	cli       *clientv3.Client
	name      string
	peerURL   string
	clientURL string
}

// freeURL returns an http URL on a loopback port that is free now (testutil.FreePort).
func freeURL(tb testing.TB) string {
	return fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(tb))
}

// startMember starts a single-member etcd on dir. For a restored dir, name and peerURL must be
// the ones given to RestoreSnapshot.
func startMember(tb testing.TB, dir, name, peerURL string) *member {
	tb.Helper()
	clientURL := freeURL(tb)
	pu, _ := url.Parse(peerURL)
	cu, _ := url.Parse(clientURL)
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.InitialCluster = name + "=" + peerURL
	cfg.InitialClusterToken = "steward-test"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		tb.Fatalf("start etcd on %s: %v", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		tb.Fatalf("etcd on %s failed: %v", dir, err)
	case <-time.After(60 * time.Second):
		e.Close()
		tb.Fatalf("etcd on %s not ready after 60s", dir)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.Close()
		tb.Fatalf("client for %s: %v", clientURL, err)
	}
	m := &member{e: e, cli: cli, name: name, peerURL: peerURL, clientURL: clientURL}
	tb.Cleanup(m.stop)
	return m
}

func (m *member) stop() {
	if m.cli != nil {
		m.cli.Close()
		m.cli = nil
	}
	if m.e != nil {
		m.e.Close()
		<-m.e.Server.StopNotify()
		m.e = nil
	}
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	tb.Cleanup(cancel)
	return ctx
}
