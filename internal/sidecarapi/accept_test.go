package sidecarapi

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/testutil"
)

// TestListenerSurvivesRunningOutOfFiles: a flood of idle connections that takes a sidecar's
// every file descriptor makes accept fail (EMFILE); once the flood ends, the API answers again.
// The server runs in a child process whose file limit is low, so that it really runs out.
func TestListenerSurvivesRunningOutOfFiles(t *testing.T) {
	if os.Getenv("STEWARD_TEST_FD_CHILD") != "" {
		fdChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestListenerSurvivesRunningOutOfFiles$")
	cmd.Env = append(os.Environ(), "STEWARD_TEST_FD_CHILD=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the child printed no address: %v", err)
	}
	addr := strings.TrimSpace(line)

	// Three times the child's file limit in idle connections: its accepts run out of files.
	var flood []net.Conn
	for range 3 * fdChildLimit {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d of the flood: %v", len(flood), err)
		}
		flood = append(flood, c)
	}
	testutil.Eventually(t, 3*sniffTimeout, "the child's accepts out of files", func() error {
		if err := healthz(addr, 300*time.Millisecond); err == nil {
			return errors.New("it still answers")
		}
		return nil
	})
	for _, c := range flood {
		_ = c.Close()
	}
	testutil.Eventually(t, 4*sniffTimeout, "the API answering once the flood ended", func() error {
		return healthz(addr, 2*time.Second)
	})
}

// fdChildLimit is the child's file limit.
const fdChildLimit = 64

// healthz asks the server at addr for /healthz in plain text.
func healthz(addr string, timeout time.Duration) error {
	c := &http.Client{Timeout: timeout}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		return fmt.Errorf("%s: %q", resp.Status, body)
	}
	return nil
}

// fdChild serves /healthz through TLSListener with a file limit of fdChildLimit, printing its
// address, until it is killed.
func fdChild() {
	lim := syscall.Rlimit{Cur: fdChildLimit, Max: fdChildLimit}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintln(os.Stderr, "setrlimit:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	routes := []Route{{Method: "GET", Path: "/healthz", Access: Open, Handler: func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }}}
	srv := NewServer(NewHandler(routes, Static{}, true))
	fmt.Println(ln.Addr().String())
	err = srv.Serve(TLSListener(ln, &tls.Config{}))
	fmt.Fprintln(os.Stderr, "the server ended:", err)
	os.Exit(1)
}
