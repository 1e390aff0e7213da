package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup/snapshotter"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/testutil"
)

// TestSidecarAPIToken: `steward local up` makes the cluster's token once (0600) and every
// member runs with it: etcd initialises through its sidecar, the status reads the backup
// leader's sidecar, a follower's sidecar forwards an on-demand full snapshot to the leader's
// with its own token. A request without the token is refused. A cluster dir without a token
// (made by an older steward) gets one on its next up. Neither the token nor the backup
// store's secret key appears in any output of the scenario (a member healed on the way):
// logs, files, the status, the sidecars' reports and metrics.
func TestSidecarAPIToken(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var supervisorLog strings.Builder
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(&supervisorLog, format+"\n", args...)
	}
	s3 := testutil.FakeS3(t, "backups")
	s3Secret := "s3-secret-" + fmt.Sprint(time.Now().UnixNano())
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3Secret)
	r := startClusterWith(t, UpOptions{Dir: dir, Members: 3, BasePort: 22500, Logf: logf, Backup: s3.StoreURL("backups", "c"),
		SidecarArgs: []string{"--full-snapshot-min-interval=1s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	fi, err := os.Stat(Dir(dir).Token())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v, %v; want mode 0600", Dir(dir).Token(), fi, err)
	}
	toks, err := sidecarapi.ReadTokenFile(Dir(dir).Token())
	if err != nil {
		t.Fatal(err)
	}
	token := toks[0]

	sc, err := SidecarClient(Dir(dir), r.spec, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range r.spec.Members {
		url := r.spec.SidecarURL(m) + "/v1/report"
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %s", url, resp.Status)
		}
		var rep map[string]any
		if err := sc.GetJSON(ctx, url, &rep); err != nil {
			t.Errorf("GET %s with the cluster's token: %v", url, err)
		}
	}

	// The status finds the backup leader through the authenticated API.
	var leader string
	testutil.Eventually(t, time.Minute, "status names the backup leader", func() error {
		rep, err := Status(ctx, Dir(dir))
		if err != nil {
			return err
		}
		if rep.Backup == nil || rep.Backup.Leader == "" {
			return fmt.Errorf("backup %+v", rep.Backup)
		}
		leader = rep.Backup.Leader
		return nil
	})
	// A follower's sidecar forwards a full snapshot to the leader's with the cluster's token.
	var follower MemberSpec
	for _, m := range r.spec.Members {
		if m.Name != leader {
			follower = m
			break
		}
	}
	testutil.Eventually(t, time.Minute, "a full snapshot through follower "+follower.Name, func() error {
		b, err := sc.Call(ctx, http.MethodPost, r.spec.SidecarURL(follower)+"/v1/snapshots/full")
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), `"revision"`) {
			return fmt.Errorf("answer %s", b)
		}
		var res snapshotter.FullResult
		return sc.GetJSON(ctx, r.spec.SidecarURL(follower)+"/v1/snapshots/latest", &res)
	})
	// A member healed: its recovery is logged too.
	if err := Fault(Dir(dir), "m2", FaultWipe, ""); err != nil {
		t.Fatal(err)
	}
	healthyVoters(t, ctx, dir, 2*time.Minute)
	var outputs strings.Builder // what a user or a scraper reads besides the logs
	rep, err := Status(ctx, Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&outputs, "%+v\n", rep)
	for _, m := range r.spec.Members {
		for _, path := range []string{"/v1/report", "/v1/backup", "/v1/init"} {
			if b, err := sc.Call(ctx, http.MethodGet, r.spec.SidecarURL(m)+path); err == nil {
				outputs.Write(b)
			}
		}
		resp, err := http.Get(r.spec.SidecarURL(m) + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		outputs.Write(b)
	}
	if outputs.Len() < 1000 || !strings.Contains(outputs.String(), "steward_") {
		t.Fatalf("only %d bytes of status, reports and metrics", outputs.Len())
	}

	// A wrong token's error names the file it came from.
	wrong := filepath.Join(t.TempDir(), "other-cluster-token")
	if _, err := sidecarapi.EnsureTokenFile(wrong); err != nil {
		t.Fatal(err)
	}
	_, err = sidecarapi.FileClient(wrong, nil).Call(ctx, http.MethodGet, r.spec.SidecarURL(follower)+"/v1/report")
	if sidecarapi.StatusCode(err) != http.StatusUnauthorized || !strings.Contains(err.Error(), wrong) {
		t.Fatalf("another cluster's token: %v", err)
	}
	r.stop()

	// An older cluster dir has no token: the next up makes one, and the members use it.
	if err := os.Remove(Dir(dir).Token()); err != nil {
		t.Fatal(err)
	}
	r = startClusterWith(t, UpOptions{Dir: dir, Logf: logf})
	toks2, err := sidecarapi.ReadTokenFile(Dir(dir).Token())
	if err != nil {
		t.Fatal(err)
	}
	if toks2[0] == token {
		t.Fatal("the token did not change")
	}
	if sc, err = SidecarClient(Dir(dir), r.spec, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Call(ctx, http.MethodGet, r.spec.SidecarURL(r.spec.Members[0])+"/v1/report"); err != nil {
		t.Fatalf("after the token was made anew: %v", err)
	}
	r.stop()

	mu.Lock()
	logs := supervisorLog.String()
	mu.Unlock()
	if !strings.Contains(logs, "generated the sidecar API token in "+Dir(dir).Token()) {
		t.Errorf("the supervisor's log does not say where the token is:\n%s", logs)
	}
	// No output holds a secret: the supervisor's log, every file of the cluster dir but the
	// token's own (every member's etcd and sidecar log, the spec, the state, the data), the
	// status, the reports and the metrics.
	logs += outputs.String()
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path == Dir(dir).Token() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		logs += string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) < 1000 {
		t.Fatalf("only %d bytes of logs", len(logs))
	}
	for what, secret := range map[string]string{"the first sidecar API token": token, "the second sidecar API token": toks2[0], "the S3 secret key": s3Secret} {
		if i := strings.Index(logs, secret); i >= 0 {
			t.Errorf("an output holds %s: ...%s...", what, logs[max(i-200, 0):i])
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("ran out of time")
	}
}
