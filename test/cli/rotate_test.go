package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/etcdutil"
	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
)

// TestLocalCARotation: `steward local rotate-ca` rolls a TLS cluster onto a new CA while a
// client writes every 100 ms: no more writes fail than one leader election's worth, none
// acknowledged is lost, the old CA is trusted nowhere afterwards, and a client holding the
// old CA's certificate is refused.
func TestLocalCARotation(t *testing.T) {
	c := localcluster.Start(t, "--members", "3", "--base-port", "25500", "--tls", "--backup", "none")
	etcdctl := testutil.Tool(t, "etcdctl")
	rep := c.Report()
	pkiDir := filepath.Join(c.Dir, "pki")
	oldCA, err := os.ReadFile(filepath.Join(pkiDir, "ca", "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	oldClient := filepath.Join(t.TempDir(), "old-client")
	copyDir(t, rep.Cluster.ClientTLSDir, oldClient)

	// A client made once, before the rollover, as an application's would be.
	var eps []string
	for _, m := range rep.Members {
		eps = append(eps, m.ClientURL)
	}
	cli, err := etcdutil.Dialer{TLSDir: rep.Cluster.ClientTLSDir}.New(eps, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var (
		mu     sync.Mutex
		acked  = map[string]string{}
		failed []string
	)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			k, v := fmt.Sprintf("/rotate/%05d", i), fmt.Sprint(i)
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := cli.Put(pctx, k, v)
			cancel()
			mu.Lock()
			if err == nil {
				acked[k] = v
			} else if ctx.Err() == nil {
				failed = append(failed, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
			}
			mu.Unlock()
		}
	}()
	cmd := exec.Command(c.Steward, "local", "rotate-ca", "--dir", c.Dir, "-o", "json")
	var progress strings.Builder
	cmd.Stderr = &progress
	out, err := cmd.Output()
	stop()
	<-done
	if err != nil {
		t.Fatalf("rotate-ca: %v\n%s", err, progress.String())
	}
	t.Logf("rotate-ca:\n%s", progress.String())
	var res local.RotateCAResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("rotate-ca -o json: %v\n%s", err, out)
	}
	if len(res.Restarted) != 6 || res.OldCA == "" || res.OldCA == res.NewCA {
		t.Fatalf("rotate-ca: %+v: want every member restarted twice and a new CA", res)
	}
	// One leader election's worth of writes at 100 ms (etcd's election timeout is 1 s).
	if len(failed) > 10 {
		t.Fatalf("%d writes failed during the rollover (of %d acknowledged):\n%s", len(failed), len(acked), strings.Join(failed, "\n"))
	}
	t.Logf("%d writes acknowledged, %d failed during the rollover", len(acked), len(failed))
	if len(acked) < 20 {
		t.Fatalf("only %d writes acknowledged", len(acked))
	}

	newCA, err := os.ReadFile(filepath.Join(pkiDir, "ca", "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if string(newCA) == string(oldCA) {
		t.Fatal("the CA is unchanged")
	}
	for _, sub := range []string{"ca.next", "ca.old"} {
		if _, err := os.Stat(filepath.Join(pkiDir, sub)); err == nil {
			t.Fatalf("pki/%s is left after the rollover", sub)
		}
	}
	for _, d := range []string{"m0", "m1", "m2", "client"} {
		if b, err := os.ReadFile(filepath.Join(pkiDir, d, "ca.crt")); err != nil || string(b) != string(newCA) {
			t.Fatalf("pki/%s/ca.crt does not trust the new CA alone (%v)", d, err)
		}
	}
	// Every acknowledged write, through the new certificates; the old client is refused.
	flags := etcdctlArgs(t, c.Report().Cluster.Etcdctl)
	got := run(t, etcdctl, append(flags, "get", "--prefix", "/rotate/", "-w", "json")...)
	var resp struct {
		Kvs []struct{ Key, Value []byte } `json:"kvs"`
	}
	if err := json.Unmarshal([]byte(got), &resp); err != nil {
		t.Fatal(err)
	}
	have := map[string]string{}
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = string(kv.Value)
	}
	for k, v := range acked {
		if have[k] != v {
			t.Fatalf("acknowledged %s=%s, the cluster holds %q", k, v, have[k])
		}
	}
	old := []string{"--endpoints", rep.Members[0].ClientURL, "--cacert", filepath.Join(oldClient, "ca.crt"), "--cert", filepath.Join(oldClient, "tls.crt"),
		"--key", filepath.Join(oldClient, "tls.key"), "--dial-timeout", "2s", "--command-timeout", "3s", "get", "/rotate/00000"}
	if out, err := exec.Command(etcdctl, old...).CombinedOutput(); err == nil {
		t.Fatalf("a client of the old CA was answered: %s", out)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
