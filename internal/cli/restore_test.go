package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/restore/restoretest"
)

// TestRestoreClusterID: on a store two clusters share, `steward restore` without --cluster-id
// or --timeline is refused, naming both clusters; with --cluster-id it reads that cluster's
// own timeline holding the time; with --timeline, that timeline.
func TestRestoreClusterID(t *testing.T) {
	url, cs := restoretest.TwoClusters(t)
	run := func(args ...string) (restore.Result, error) {
		cmd := NewRootCommand()
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs(append([]string{"restore", "--dry-run", "-o", "json", "--store", url}, args...))
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			return restore.Result{}, err
		}
		var res restore.Result
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out.String())
		}
		return res, nil
	}
	at := cs[0].Time.Format(time.RFC3339Nano)
	_, err := run("--to-time", at)
	for _, c := range cs {
		if err == nil || !strings.Contains(err.Error(), "several clusters") || !strings.Contains(err.Error(), strconv.FormatUint(c.ID, 16)) {
			t.Fatalf("without --cluster-id: %v; want it refused, naming cluster %x", err, c.ID)
		}
	}
	res, err := run("--to-time", at, "--timeline", strconv.FormatUint(uint64(cs[1].Timeline), 10))
	if err != nil || res.Timeline != cs[1].Timeline {
		t.Fatalf("with --timeline: timeline %d (%v), want %d", res.Timeline, err, cs[1].Timeline)
	}
	res, err = run("--to-time", at, "--cluster-id", strconv.FormatUint(cs[0].ID, 16))
	if err != nil || res.Timeline != cs[0].Timeline || res.Target != cs[0].Revision {
		t.Fatalf("with --cluster-id: revision %d of timeline %d (%v), want %d of %d", res.Target, res.Timeline, err, cs[0].Revision, cs[0].Timeline)
	}
	if _, err := run("--to-time", at, "--cluster-id", "zz"); err == nil || !strings.Contains(err.Error(), `--cluster-id "zz"`) {
		t.Fatalf("a malformed --cluster-id: %v", err)
	}
	if _, err := run("--cluster-id", "1"); err == nil || !strings.Contains(err.Error(), "holds no backups of this cluster (cluster IDs 1); timelines of other clusters in this store: 1 (cluster") {
		t.Fatalf("a cluster without timelines: %v", err)
	}
}
