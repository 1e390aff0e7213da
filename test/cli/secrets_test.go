package cli_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
)

// TestSecretsNeverAppear runs a whole scenario on a cluster with every secret Steward keeps
// (the sidecar API token, the backup encryption key, the CA's and the members' TLS keys, etcd's
// root password and the application user's):
// bootstrap, writes, backups, a failed and a refused request, a member wiped and replaced,
// and every command a user runs on it. Then it reads everything the scenario printed or
// served (each command's output, every process log, the sidecars' metrics and API answers)
// and looks for each secret, in the forms it is kept in and decoded.
func TestSecretsNeverAppear(t *testing.T) {
	c := localcluster.Start(t, "--members", "3", "--base-port", "25400", "--tls", "--auth", "--encrypt-backups", "--sidecar-arg=--delta-period=1s")
	steward, dir := c.Steward, c.Dir
	etcdctl := testutil.Tool(t, "etcdctl")
	var outputs bytes.Buffer
	outputs.WriteString(c.Output)
	say := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		fmt.Fprintf(&outputs, "$ %s %s\n%s\n", filepath.Base(name), strings.Join(args, " "), out)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// `local status` exits 3 while a member is not healthy (being replaced), printing all the same.
	sayStatus := func(args ...string) string {
		t.Helper()
		out, err := localcluster.StatusRun(context.Background(), steward, append([]string{"--dir", dir}, args...)...)
		fmt.Fprintf(&outputs, "$ steward local status --dir %s %s\n%s\n", dir, strings.Join(args, " "), out)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	status := func() local.Report {
		var rep local.Report
		if err := json.Unmarshal([]byte(sayStatus("-o", "json")), &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := status()
	// The command line reads the password from its file in the shell (`steward local status`
	// never prints it).
	path := "PATH=" + filepath.Dir(etcdctl) + string(os.PathListSeparator) + os.Getenv("PATH")
	for i := range 10 {
		say("env", path, "sh", "-c", fmt.Sprintf("%s put /k/%d v", rep.Cluster.Etcdctl, i))
	}
	line := strings.Fields(rep.Cluster.Etcdctl)
	at := slices.Index(line, "etcdctl")
	tlsOnly := strings.Join(line[at+1:at+9], " ") // --endpoints, --cacert, --cert, --key
	// With client certificates, etcd takes the certificate's common name for the user, which
	// has no role: refused all the same, once the leader's sidecar has turned authentication on.
	testutil.Eventually(t, 60*time.Second, "a client with the client certificate and no password refused", func() error {
		if out, err := exec.Command("sh", "-c", etcdctl+" "+tlsOnly+" put /k/x v").CombinedOutput(); err == nil || !strings.Contains(string(out), "permission denied") {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	testutil.Eventually(t, 60*time.Second, "the backups ready", func() error {
		if b := status().Backup; b == nil || !b.Ready {
			return fmt.Errorf("backup %+v", b)
		}
		return nil
	})
	store := "file://" + filepath.Join(dir, "backups")
	keys := filepath.Join(dir, "backup-keys")
	say(steward, "backup", "list", "--store", store, "--encryption-keys", keys)
	say(steward, "backup", "verify", "--store", store, "--encryption-keys", keys, "--restore", "--scratch-dir", t.TempDir(),
		"--endpoints", rep.Members[0].ClientURL, "--tls-dir", rep.Cluster.ClientTLSDir, "--password-file", rep.Cluster.RootPasswordFile)
	say(steward, "local", "fault", "m2", "wipe", "--dir", dir)
	testutil.Eventually(t, 90*time.Second, "every member healthy again", func() error {
		for _, m := range status().Members {
			if !m.Healthy || m.Role == "learner" {
				return fmt.Errorf("member %s healthy %t, %s", m.Name, m.Healthy, m.Role)
			}
		}
		return nil
	})
	sayStatus()
	// Refused requests: a wrong token, and a wrong encryption key.
	bad := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(bad, []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(steward, "backup", "verify", "--store", store, "--encryption-keys", bad).CombinedOutput(); err == nil {
		t.Fatalf("verify with a wrong key passed:\n%s", out)
	} else {
		fmt.Fprintf(&outputs, "%s\n", out)
	}
	token, err := os.ReadFile(local.Dir(dir).Token())
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := local.ReadSpec(local.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := local.SidecarClient(local.Dir(dir), spec, 10*time.Second) // its HTTP client trusts the cluster's CAs
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range spec.Members {
		base := spec.SidecarURL(m)
		for _, p := range []struct{ path, token string }{{"/metrics", ""}, {"/v1/report", string(token)}, {"/v1/backup", string(token)},
			{"/v1/config", string(token)}, {"/v1/init", string(token)}, {"/v1/report", "wrong-token"}} {
			req, _ := http.NewRequest("GET", base+p.path, nil)
			if p.token != "" {
				req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(strings.Split(p.token, "\n")[0]))
			}
			resp, err := sc.HTTP.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fmt.Fprintf(&outputs, "GET %s%s: %d\n%s\n", m.Name, p.path, resp.StatusCode, b)
		}
	}
	// Every log the processes wrote.
	if err := filepath.WalkDir(filepath.Join(dir, "logs"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		fmt.Fprintf(&outputs, "== %s\n%s\n", p, b)
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// The secrets, as kept and decoded.
	secrets := map[string]string{}
	for i, line := range strings.Split(strings.TrimSpace(string(token)), "\n") {
		secrets[fmt.Sprintf("API token line %d", i+1)] = strings.TrimSpace(line)
	}
	k1, err := os.ReadFile(filepath.Join(keys, "k1"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(k1)))
	if err != nil {
		t.Fatal(err)
	}
	secrets["backup key (base64)"] = strings.TrimSpace(string(k1))
	secrets["backup key (hex)"] = hex.EncodeToString(raw)
	secrets["backup key (raw)"] = string(raw)
	for _, name := range []string{"ca", "m0", "m1", "m2", "client"} {
		b, err := os.ReadFile(filepath.Join(dir, "pki", name, "tls.key"))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		if block == nil {
			t.Fatalf("pki/%s/tls.key holds no PEM block", name)
		}
		body := base64.StdEncoding.EncodeToString(block.Bytes)
		secrets["TLS key of "+name+" (PEM body)"] = body[len(body)/2 : len(body)/2+32]
		secrets["TLS key of "+name+" (hex)"] = hex.EncodeToString(block.Bytes)[:48]
	}
	pw, err := os.ReadFile(rep.Cluster.RootPasswordFile)
	if err != nil {
		t.Fatalf("the root password file named by the status: %v", err)
	}
	secrets["root password"] = strings.TrimSpace(string(pw))
	apw, err := os.ReadFile(rep.Cluster.AppPasswordFile)
	if err != nil {
		t.Fatalf("the application user's password file named by the status: %v", err)
	}
	secrets["application user's password"] = strings.TrimSpace(string(apw))
	if outputs.Len() < 10000 {
		t.Fatalf("the scenario printed only %d bytes: nothing to search", outputs.Len())
	}
	for what, s := range secrets {
		if len(s) < 16 {
			t.Fatalf("%s is too short to search for (%d bytes)", what, len(s))
		}
		if i := bytes.Index(outputs.Bytes(), []byte(s)); i >= 0 {
			from := max(0, i-200)
			t.Errorf("the %s appears in the scenario's output:\n...%s", what, outputs.Bytes()[from:i])
		}
	}
	t.Logf("searched %d bytes of output for %d secrets", outputs.Len(), len(secrets))
}
