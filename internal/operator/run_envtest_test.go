package operator

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// TestOperatorWaitsForTheAPIServer starts `steward operator` while its API server does not
// answer, as the kubelet restarts it during an upgrade of the control plane: it must stay up,
// its health probes passing, rather than exit into the kubelet's crash-loop back-off; and
// lead as soon as the API server answers.
func TestOperatorWaitsForTheAPIServer(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	api := newGate(t, restConfig.Host)
	health := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	logPath := filepath.Join(t.TempDir(), "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(testutil.StewardBinary(t), "operator", "--member-image=steward:test", "--namespace="+ns,
		"--leader-election-namespace="+ns, "--metrics-bind-address=0", "--health-probe-bind-address="+health)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigThrough(t, api.addr))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	// A test of its own would see the exit only at its deadline.
	running := func() {
		select {
		case err := <-exited:
			out, _ := os.ReadFile(logPath)
			t.Fatalf("the operator exited (%v):\n%s", err, out)
		default:
		}
	}
	healthy := func() error {
		running()
		resp, err := http.Get("http://" + health + "/healthz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz: %s", resp.Status)
		}
		return nil
	}

	testutil.Eventually(t, time.Minute, "the operator's /healthz answering while the API server does not", healthy)
	// Longer than the kubelet's probes' three failures would take at a short period.
	testutil.Throughout(t, 6*time.Second, "the operator up and healthy while the API server does not answer", healthy)

	back := time.Now()
	api.open()
	testutil.Eventually(t, time.Minute, "the operator leading once the API server answers", func() error {
		running()
		var lease coordinationv1.Lease
		if err := get(t, ns, "steward-operator.etcd.steward.dev", &lease); err != nil {
			return err
		}
		// The namespace is the test's own: a holder is this operator.
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return fmt.Errorf("the leader Lease has no holder")
		}
		return nil
	})
	t.Logf("the operator led %s after the API server answered", time.Since(back).Round(100*time.Millisecond))
}

// gate stands between a client and the API server: closed, nothing listens at its address
// (connections are refused, as by an API server that is away); open, it forwards them.
type gate struct {
	t      *testing.T
	addr   string
	target string
}

func newGate(t *testing.T, apiURL string) *gate {
	t.Helper()
	u, err := url.Parse(apiURL)
	if err != nil {
		t.Fatal(err)
	}
	return &gate{t: t, addr: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)), target: u.Host}
}

func (g *gate) open() {
	g.t.Helper()
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.forward(c)
		}
	}()
}

func (g *gate) forward(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", g.target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// kubeconfigThrough is the suite's admin kubeconfig with the API server at addr.
func kubeconfigThrough(t *testing.T, addr string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(u.Host, "127.0.0.1:") {
			t.Fatalf("the suite's API server at %s: the gate's address would not match its certificate", c.Server)
		}
		u.Host = addr
		c.Server = u.String()
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
