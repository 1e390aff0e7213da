package kubeview_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/etcdproc"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// apiProxy passes connections to the API server while it is up; down, it cuts every
// connection and every new one at once: an API server the members cannot reach.
type apiProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	up    bool
	conns map[net.Conn]bool
}

func newAPIProxy(t *testing.T, target string) *apiProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{ln: ln, target: target, up: true, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.setUp(false) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pass(c)
		}
	}()
	return p
}

func (p *apiProxy) pass(c net.Conn) {
	p.mu.Lock()
	if !p.up {
		p.mu.Unlock()
		c.Close()
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(s, c); s.Close() }()
	_, _ = io.Copy(c, s)
	c.Close()
}

// setUp lets connections through, or cuts them all.
func (p *apiProxy) setUp(up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = up
	if !up {
		for c := range p.conns {
			c.Close()
		}
		p.conns = map[net.Conn]bool{}
	}
}

// TestMembersStartWhileTheAPIServerIsDown: a member restarts while the API server cannot be
// reached, for longer than a minute. It restarts on its own valid data and serves all along;
// a new member (a scale-up) waits for the API server, touching nothing. Neither sidecar exits:
// once the API server is back, the restarted member reports and the new one joins.
func TestMembersStartWhileTheAPIServerIsDown(t *testing.T) {
	c := needAPI(t)
	ns, ms := newCluster(t, c, 2)
	setMembers(t, c, ns, 1) // c-1 comes later, as a scale-up

	// The members reach the API server through a proxy the test cuts.
	apiURL, err := url.Parse(api.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newAPIProxy(t, apiURL.Host)
	kc, err := os.ReadFile(ms[0].kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	proxied := filepath.Join(t.TempDir(), "proxied.kubeconfig")
	if err := os.WriteFile(proxied, bytes.ReplaceAll(kc, []byte(apiURL.Host), []byte(proxy.ln.Addr().String())), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		m.kubeconfig = proxied
	}

	ms[0].start(t, ns)
	testutil.Eventually(t, 90*time.Second, "c-0 serving and reporting", func() error {
		r, err := reportOf(t, c, ns, "c-0")
		if err != nil {
			return err
		}
		if !r.Serving || !r.Formed {
			return fmt.Errorf("c-0 reports serving=%v formed=%v (case %s: %s)", r.Serving, r.Formed, r.Case, r.Reason)
		}
		return nil
	})
	ep := fmt.Sprintf("http://127.0.0.1:%d", ms[0].client)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := cli.Put(ctx, "before-the-outage", "1"); err != nil {
		t.Fatal(err)
	}

	// The API server becomes unreachable; c-0 restarts, and c-1 is started as a new member
	// (the ConfigMap lists it, but its sidecar cannot read that).
	ms[0].stop()
	proxy.setUp(false)
	setMembers(t, c, ns, 2)
	restarted := time.Now()
	ms[0].start(t, ns)
	ms[1].start(t, ns)

	sidecarAPI := sidecarapi.NewClient(sidecarapi.NewFile(ms[1].tokenFile), nil)
	read := func() error {
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		defer gcancel()
		resp, err := cli.Get(gctx, "before-the-outage")
		if err != nil {
			return fmt.Errorf("c-0 does not serve: %w", err)
		}
		if len(resp.Kvs) != 1 {
			return fmt.Errorf("c-0 lacks the key written before the outage")
		}
		return nil
	}
	joinWaits := func() error {
		var st etcdproc.InitStatus
		if err := sidecarAPI.GetJSON(ctx, fmt.Sprintf("http://127.0.0.1:%d/v1/init", ms[1].sidecar), &st); err != nil {
			return fmt.Errorf("c-1's sidecar: %w", err)
		}
		if st.State != etcdproc.InitRunning || st.Case != "ViewUnavailableWait" {
			return fmt.Errorf("c-1's initialisation %s, case %s: %s", st.State, st.Case, st.Message)
		}
		if entries, err := os.ReadDir(ms[1].dataDir); err == nil && len(entries) > 0 {
			return fmt.Errorf("c-1 wrote into its data dir while it waits: %v", entries)
		}
		return nil
	}
	testutil.Eventually(t, 60*time.Second, "c-0 restarted and serving while the API server is down, c-1 waiting", func() error {
		if err := read(); err != nil {
			return err
		}
		return joinWaits()
	})
	// Longer than the minute after which a sidecar used to give up on the API server: c-0
	// serves and c-1 waits, every time they are asked.
	testutil.Throughout(t, 75*time.Second-time.Since(restarted), "c-0 serving and c-1 waiting through the outage", func() error {
		if err := read(); err != nil {
			return err
		}
		return joinWaits()
	})

	proxy.setUp(true)
	testutil.Eventually(t, 120*time.Second, "c-0 reporting again, c-1 joined and promoted", func() error {
		r, err := reportOf(t, c, ns, "c-0")
		if err != nil {
			return err
		}
		if !r.Serving || r.At.Before(restarted) {
			return fmt.Errorf("c-0's report: serving=%v at %s (restarted at %s)", r.Serving, r.At, restarted)
		}
		r1, err := reportOf(t, c, ns, "c-1")
		if err != nil {
			return err
		}
		if !r1.Serving || r1.Learner {
			return fmt.Errorf("c-1: serving=%v learner=%v, case %s: %s", r1.Serving, r1.Learner, r1.Case, r1.Reason)
		}
		return nil
	})
}
