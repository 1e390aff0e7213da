package testutil

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// FreePort returns a loopback port that is free now, for a server the test starts next. It
// comes from below the kernel's ephemeral range (32768 and up on Linux): a port from that
// range, released, may be taken by any outgoing connection on the machine before the server
// binds it. Ports are not handed out twice in one process; fixed-port tests use 21000 and up.
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		p := 15000 + rand.IntN(6000)
		if portsGiven[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		portsGiven[p] = true
		return p
	}
	t.Fatal("no free loopback port in 15000-20999")
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

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
	// Stop stops the member (a test's fault); it may be called again, as the cleanup does.
	Stop func()
}

// Cluster starts an n-member etcd cluster in this process, on loopback ports and temporary
// data dirs, and returns its members once every one serves; all stop when the test ends.
// configure, if given, adjusts each member's configuration (its name and advertised URLs
// included; Endpoint is where it listens).
func Cluster(t testing.TB, n int, configure ...func(*embed.Config)) []ClusterMember {
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
		for _, f := range configure {
			f(cfg)
		}
		initial = append(initial, cfg.Name+"="+cfg.AdvertisePeerUrls[0].String())
		cfgs[i] = cfg
	}
	ms := make([]ClusterMember, n)
	for i, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			t.Fatalf("start member %s: %v", cfg.Name, err)
		}
		stop := sync.OnceFunc(e.Close)
		t.Cleanup(stop)
		ms[i] = ClusterMember{Etcd: e, Endpoint: cfg.ListenClientUrls[0].String(), Stop: stop}
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

// Filled is what FillUntilNoSpace wrote: the newest acknowledged value of each key, and the
// write that raised the NOSPACE alarm (etcd may have applied it all the same, then answered
// NOSPACE: after a recovery its key holds either value).
type Filled struct {
	Acked                  map[string]string
	FailedKey, FailedValue string
}

// FillUntilNoSpace overwrites a few keys with 64 KiB values through cli until the history
// fills the backend quota and etcd answers NOSPACE: the live data stays small.
func FillUntilNoSpace(t testing.TB, cli *clientv3.Client) Filled {
	t.Helper()
	value := strings.Repeat("v", 64<<10)
	f := Filled{Acked: map[string]string{}}
	for i := 0; i <= 10000; i++ {
		k, v := fmt.Sprintf("key%d", i%8), fmt.Sprintf("%d:%s", i, value)
		_, err := cli.Put(context.Background(), k, v)
		if errors.Is(err, rpctypes.ErrNoSpace) {
			f.FailedKey, f.FailedValue = k, v
			return f
		}
		if err != nil {
			t.Fatal(err)
		}
		f.Acked[k] = v
	}
	t.Fatal("no NOSPACE after 10000 writes")
	return f
}

// Check fails t unless every key holds its newest acknowledged value (or, for the key whose
// write raised the alarm, that write's).
func (f Filled) Check(t testing.TB, cli *clientv3.Client) {
	t.Helper()
	for k, v := range f.Acked {
		resp, err := cli.Get(context.Background(), k)
		if err != nil {
			t.Fatalf("read %s: %v", k, err)
		}
		if len(resp.Kvs) != 1 || (string(resp.Kvs[0].Value) != v && (k != f.FailedKey || string(resp.Kvs[0].Value) != f.FailedValue)) {
			t.Fatalf("%s does not hold its newest acknowledged value", k)
		}
	}
}

// Write puts n values tagged tag over 10 keys and returns the revision.
func Write(t *testing.T, cli *clientv3.Client, tag string, n int) int64 {
	t.Helper()
	var rev int64
	for i := range n {
		r, err := cli.Put(context.Background(), fmt.Sprintf("/k/%d", i%10), fmt.Sprintf("%s-%d", tag, i))
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	return rev
}

// KeyState is what a restore must reproduce of a key.
type KeyState struct {
	Value                string
	Create, Mod, Version int64
}

// State reads every key of the member, and its revision.
func State(t *testing.T, cli *clientv3.Client) (map[string]KeyState, int64) {
	t.Helper()
	r, err := cli.Get(context.Background(), "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]KeyState{}
	for _, kv := range r.Kvs {
		out[string(kv.Key)] = KeyState{Value: string(kv.Value), Create: kv.CreateRevision, Mod: kv.ModRevision, Version: kv.Version}
	}
	return out, r.Header.Revision
}

// ClusterIDOf is the cluster ID of the member at ep.
func ClusterIDOf(t *testing.T, cli *clientv3.Client, ep string) uint64 {
	t.Helper()
	st, err := cli.Status(context.Background(), ep)
	if err != nil {
		t.Fatal(err)
	}
	return st.Header.ClusterId
}

// SameState fails the test unless got and want hold the same keys, each in the same state.
func SameState(t *testing.T, what string, got, want map[string]KeyState) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Fatalf("%s:\n got %v\nwant %v", what, got, want)
	}
}
