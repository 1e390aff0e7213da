package testutil

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// FreePort returns a TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// EmbeddedEtcd starts a one-member etcd in this process on a temporary data dir and returns
// it with a client talking to it only. Both are closed when the test ends.
func EmbeddedEtcd(t testing.TB) (*embed.Etcd, *clientv3.Client, string) {
	t.Helper()
	e, c, ep, _ := EtcdOn(t, t.TempDir())
	return e, c, ep
}

// EtcdOn starts a one-member etcd named "test" in this process on data dir dir (new, or one
// it served before) and returns it with a client talking to it only and a function that
// stops both (called when the test ends, if not before).
func EtcdOn(t testing.TB, dir string) (*embed.Etcd, *clientv3.Client, string, func()) {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "test"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	clientURL, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)))
	peerURL, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*clientURL}, []url.URL{*clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peerURL}, []url.URL{*peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var c *clientv3.Client
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if c != nil {
				c.Close()
			}
			e.Close()
		})
	}
	t.Cleanup(stop)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		t.Fatal("embedded etcd did not start")
	}
	c, err = clientv3.New(clientv3.Config{Endpoints: []string{clientURL.String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return e, c, clientURL.String(), stop
}

// ClusterMember is one member of a Cluster, with a client talking to it only.
type ClusterMember struct {
	Etcd     *embed.Etcd
	Client   *clientv3.Client
	Endpoint string
}

// Cluster starts an n-member etcd cluster in this process, on loopback ports and temporary
// data dirs, and returns its members once every one serves; all stop when the test ends.
func Cluster(t testing.TB, n int) []ClusterMember {
	t.Helper()
	cfgs := make([]*embed.Config, n)
	var initial []string
	for i := range cfgs {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = t.TempDir()
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		clientURL, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)))
		peerURL, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)))
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*clientURL}, []url.URL{*clientURL}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peerURL}, []url.URL{*peerURL}
		initial = append(initial, cfg.Name+"="+peerURL.String())
		cfgs[i] = cfg
	}
	ms := make([]ClusterMember, n)
	for i, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			t.Fatalf("start member %s: %v", cfg.Name, err)
		}
		t.Cleanup(e.Close)
		ms[i] = ClusterMember{Etcd: e, Endpoint: cfg.AdvertiseClientUrls[0].String()}
	}
	deadline := time.After(60 * time.Second)
	for i := range ms {
		select {
		case <-ms[i].Etcd.Server.ReadyNotify():
		case err := <-ms[i].Etcd.Err():
			t.Fatalf("member %s failed: %v", cfgs[i].Name, err)
		case <-deadline:
			t.Fatalf("member %s did not serve within 60s", cfgs[i].Name)
		}
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{ms[i].Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		ms[i].Client = c
	}
	return ms
}
