package local

import (
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/pki"
)

// TestEnsureCerts: the CA is made once; each member and the client get a certificate; one
// due for renewal (less than a third of its lifetime left) is issued again with a new key,
// under the same CA, and a fresh one is left alone; a member added later gets one.
func TestEnsureCerts(t *testing.T) {
	dir := t.TempDir()
	spec := Spec{Name: "c", Host: "127.0.0.1", TLS: true, Members: []MemberSpec{{Name: "m0"}, {Name: "m1"}}}
	now := time.Now()
	logf := func(string, ...any) {}
	if err := ensureCerts(Dir(dir), spec, now, logf); err != nil {
		t.Fatal(err)
	}
	read := func(name, file string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "pki", name, file))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ca := read("ca", pki.CertFile)
	certs := map[string][]byte{}
	for _, n := range []string{"m0", "m1", "client"} {
		certs[n] = read(n, pki.CertFile)
		cas, _ := pki.ParseCerts(ca)
		if why := pki.Renewal(certs[n], []*x509.Certificate{cas[0]}, memberLeaf(spec), now); n != "client" && why != "" {
			t.Fatalf("%s: %s", n, why)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "pki", "ca")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("pki/ca: %v %v, want a 0700 directory", fi, err)
	}

	// Nothing is due a day later: nothing changes.
	if err := ensureCerts(Dir(dir), spec, now.Add(24*time.Hour), logf); err != nil {
		t.Fatal(err)
	}
	for n, c := range certs {
		if !pki.SameKey(read(n, pki.CertFile), c) {
			t.Fatalf("%s was issued again while fresh", n)
		}
	}
	// 70 of 90 days on, with a member added: every leaf is issued again, the CA kept.
	spec.Members = append(spec.Members, MemberSpec{Name: "m2"})
	later := now.Add(70 * 24 * time.Hour)
	if err := ensureCerts(Dir(dir), spec, later, logf); err != nil {
		t.Fatal(err)
	}
	if string(read("ca", pki.CertFile)) != string(ca) {
		t.Fatal("the CA was made again")
	}
	cas, _ := pki.ParseCerts(ca)
	for _, n := range []string{"m0", "m1", "m2"} {
		c := read(n, pki.CertFile)
		if pki.SameKey(c, certs[n]) {
			t.Fatalf("%s was not renewed 70 days on", n)
		}
		if why := pki.Renewal(c, []*x509.Certificate{cas[0]}, memberLeaf(spec), later); why != "" {
			t.Fatalf("%s renewed: %s", n, why)
		}
	}
}

// TestTLSIsChosenWhenTheClusterIsMade: --tls on a cluster made without it is refused, naming
// the flag and what to do, and changes nothing.
func TestTLSIsChosenWhenTheClusterIsMade(t *testing.T) {
	dir := t.TempDir()
	spec, err := Prepare(UpOptions{Dir: dir, Members: 1, BasePort: 23900, Backup: "none"})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(Dir(dir).Spec())
	_, err = Prepare(UpOptions{Dir: dir, TLS: true})
	if err == nil || !strings.Contains(err.Error(), "--tls: the cluster in "+dir+" was made without TLS") || !strings.Contains(err.Error(), "without --tls") {
		t.Fatalf("--tls on a plain-text cluster: %v", err)
	}
	after, _ := os.ReadFile(Dir(dir).Spec())
	if string(before) != string(after) || spec.TLS {
		t.Fatal("the refused --tls changed the cluster's spec")
	}
	if _, err := os.Stat(filepath.Join(dir, "pki")); err == nil {
		t.Fatal("the refused --tls made a CA")
	}
}

// TestEtcdctlCommandKeepsThePasswordOutOfArgv runs the etcdctl command line status prints in
// a shell, with an etcdctl that records what it was given: the root password reaches it in
// its environment, never in its arguments (which every user of the machine can list), and the
// line itself does not hold it.
func TestEtcdctlCommandKeepsThePasswordOutOfArgv(t *testing.T) {
	dir := Dir(t.TempDir())
	spec := Spec{Name: "c", Host: "127.0.0.1", TLS: true, Auth: true, Members: []MemberSpec{{Name: "m0", ClientPort: 2379}}}
	const password = "the-root-password-0123456789"
	if err := os.MkdirAll(filepath.Dir(RootPasswordPath(dir, spec)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(RootPasswordPath(dir, spec), []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	line := EtcdctlCommand(dir, spec)
	if strings.Contains(line, password) {
		t.Fatalf("the command line holds the password: %s", line)
	}
	bin, got := t.TempDir(), t.TempDir()
	fake := `#!/bin/sh
printf '%s\n' "$@" > ` + filepath.Join(got, "argv") + `
printf '%s' "$ETCDCTL_PASSWORD" > ` + filepath.Join(got, "password") + `
`
	if err := os.WriteFile(filepath.Join(bin, "etcdctl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", line+" get /k")
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sh -c %q: %v\n%s", line, err, out)
	}
	argv, err := os.ReadFile(filepath.Join(got, "argv"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(argv), password) {
		t.Errorf("etcdctl's arguments hold the password:\n%s", argv)
	}
	for _, want := range []string{"--user\nroot\n", "--cert\n" + filepath.Join(ClientTLSDir(dir, spec), pki.CertFile) + "\n", "get\n/k\n"} {
		if !strings.Contains(string(argv), want) {
			t.Errorf("etcdctl's arguments lack %q:\n%s", want, argv)
		}
	}
	if pw, err := os.ReadFile(filepath.Join(got, "password")); err != nil || string(pw) != password {
		t.Errorf("ETCDCTL_PASSWORD = %q (%v), want the file's password", pw, err)
	}
}
