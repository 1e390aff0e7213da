package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/testutil"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
)

// TestLocalEncryptedBackups: `steward local up --encrypt-backups` generates a key (0600) and
// the sidecars encrypt with it: no value written reaches the store in the clear, status says
// which keys to give, `backup verify --restore` proves the chain with them, and without them
// the chain is refused naming the key.
func TestLocalEncryptedBackups(t *testing.T) {
	c := localcluster.Start(t, "--members", "1", "--base-port", "25100", "--encrypt-backups", "--sidecar-arg=--delta-period=1s")
	steward, dir, status := c.Steward, c.Dir, c.Report
	etcdctl := testutil.Tool(t, "etcdctl")

	keys := filepath.Join(dir, "backup-keys")
	fi, err := os.Stat(filepath.Join(keys, "k1"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the generated key: %v, %v: want a 0600 file", fi, err)
	}
	rep := status()
	ep := rep.Members[0].ClientURL
	for i := range 20 {
		run(t, etcdctl, "--endpoints", ep, "put", fmt.Sprintf("/secret/%d", i), fmt.Sprintf("the-plaintext-%d", i))
	}
	put := run(t, etcdctl, "--endpoints", ep, "put", "/last", "x", "-w", "json")
	var hdr struct {
		Header struct{ Revision int64 } `json:"header"`
	}
	if err := json.Unmarshal([]byte(put), &hdr); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the backups at the newest revision", func() error {
		b := status().Backup
		if b == nil || !b.Ready || b.LatestDeltaRevision < hdr.Header.Revision {
			return fmt.Errorf("backup %+v, want ready at revision %d", b, hdr.Header.Revision)
		}
		if b.EncryptionKeys != keys {
			return fmt.Errorf("status names keys %q, want %q", b.EncryptionKeys, keys)
		}
		return nil
	})
	if table := c.StatusTable(); !strings.Contains(table, "--encryption-keys "+keys) {
		t.Fatalf("status does not say which keys to give:\n%s", table)
	}
	if err := filepath.WalkDir(filepath.Join(dir, "backups"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte("the-plaintext")) {
			t.Errorf("%s holds a value in the clear", p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	store := "file://" + filepath.Join(dir, "backups")
	out := run(t, steward, "backup", "verify", "--store", store, "--encryption-keys", keys, "--restore", "--endpoints", ep)
	if !strings.Contains(out, "OK") || !strings.Contains(out, "equal to live member") {
		t.Fatalf("verify with the keys:\n%s\nwant the chain OK and the drill's HashKV equal to the member's", out)
	}
	cmd := exec.Command(steward, "backup", "verify", "--store", store)
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), `"k1"`) {
		t.Fatalf("verify without the keys: %v\n%s\nwant it refused, naming key k1", err, b)
	}
}
