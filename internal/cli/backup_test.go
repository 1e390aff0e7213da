package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/store"
	"github.com/etcd-steward/steward/internal/testutil"
)

// TestBackupListShowsTimelines: `backup list` shows each timeline with its cluster, revision
// and time ranges and what it can restore, in JSON and in the table.
func TestBackupListShowsTimelines(t *testing.T) {
	ctx := context.Background()
	url := "file://" + t.TempDir()
	s, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	put := func(tl uint32, cluster uint64, kind backup.Kind, first, last int64, at time.Time) {
		key := backup.FullKey(tl, first, at)
		if kind == backup.KindDelta {
			key = backup.DeltaKey(tl, first, last)
		}
		hdr := backup.Header{Kind: kind, Timeline: tl, ClusterID: cluster, FirstRev: first, LastRev: last, Created: at}
		if _, err := backup.WriteObject(ctx, s, key, hdr, func(*backup.ObjectWriter) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	put(1, 0xa, backup.KindFull, 100, 100, t0)
	put(1, 0xa, backup.KindDelta, 101, 200, t0.Add(time.Minute))
	put(2, 0xb, backup.KindFull, 50, 50, t0.Add(time.Hour))

	run := func(args ...string) string {
		cmd := NewRootCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"backup", "list", "--store", url}, args...))
		if err := cmd.ExecuteContext(ctx); err != nil {
			t.Fatalf("backup list %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	var v listView
	if err := json.Unmarshal([]byte(run("-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Timelines) != 2 || len(v.Objects) != 3 {
		t.Fatalf("list: %+v", v)
	}
	tl1, tl2 := v.Timelines[0], v.Timelines[1]
	if tl1.Timeline != 1 || tl1.ClusterID != "a" || tl1.Revisions != (backup.Range{From: 100, To: 200}) || !tl1.From.Equal(t0) ||
		tl1.To.Before(tl1.From) || tl1.Objects != 2 || len(tl1.Coverage) != 1 || tl1.Coverage[0] != (backup.Range{From: 100, To: 200}) {
		t.Fatalf("timeline 1: %+v", tl1)
	}
	if tl2.Timeline != 2 || tl2.ClusterID != "b" || tl2.Revisions != (backup.Range{From: 50, To: 50}) || !tl2.From.Equal(t0.Add(time.Hour)) {
		t.Fatalf("timeline 2: %+v", tl2)
	}
	table := run()
	for _, want := range []string{"TIMELINE  CLUSTER  REVISIONS", "1         a        100-200", "2         b        50 ", backup.DeltaKey(1, 101, 200)} {
		if !strings.Contains(table, want) {
			t.Errorf("table does not show %q:\n%s", want, table)
		}
	}
}

// TestBackupVerifyRestore: `backup verify --restore --endpoints` restores the newest revision
// and reports the HashKV it shares with the live member, in JSON and in the table; the drill's
// flags need --restore.
func TestBackupVerifyRestore(t *testing.T) {
	ctx := context.Background()
	_, cli, ep := testutil.EmbeddedEtcd(t)
	for i := range 20 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/k/%d", i%3), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	url := "file://" + dir
	run := func(args ...string) (string, error) {
		cmd := NewRootCommand()
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs(append([]string{"backup"}, args...))
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}
	if out, err := run("save", "--store", url, "--endpoints", ep); err != nil {
		t.Fatalf("backup save: %v\n%s", err, out)
	}
	scratch := t.TempDir()
	out, err := run("verify", "--store", url, "--restore", "--endpoints", ep, "--scratch-dir", scratch, "-o", "json")
	if err != nil {
		t.Fatalf("backup verify --restore: %v\n%s", err, out)
	}
	var v verifyView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "/k/0")
	if err != nil {
		t.Fatal(err)
	}
	d := v.Drill
	if !v.OK || d == nil || v.DrillError != "" || d.Timeline != 1 || d.Revision != resp.Header.Revision || d.Hash != d.LiveHash || d.LiveEndpoint != ep {
		t.Fatalf("verify --restore: %s", out)
	}
	// Steward's JSON conventions: cluster IDs in hex, as etcd prints them; durations as strings.
	var raw struct {
		Timelines []struct {
			ClusterID any `json:"clusterID"`
		} `json:"timelines"`
		Drill struct {
			Duration any `json:"duration"`
			Restore  struct {
				ClusterID any `json:"clusterID"`
				Duration  any `json:"duration"`
			} `json:"restore"`
		} `json:"drill"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	hexID := fmt.Sprintf("%x", resp.Header.ClusterId)
	if len(raw.Timelines) != 1 || raw.Timelines[0].ClusterID != hexID || raw.Drill.Restore.ClusterID != hexID {
		t.Errorf("verify -o json: cluster IDs %v and %v, want %q (hex)", raw.Timelines, raw.Drill.Restore.ClusterID, hexID)
	}
	for _, d := range []any{raw.Drill.Duration, raw.Drill.Restore.Duration} {
		if s, ok := d.(string); !ok || s == "" {
			t.Errorf("verify -o json: duration %v (%T), want a duration string such as \"1.5s\"", d, d)
		}
	}
	if left, _ := os.ReadDir(scratch); len(left) > 0 {
		t.Errorf("scratch dir holds %d entries after the drill", len(left))
	}
	out, err = run("verify", "--store", url, "--restore", "--endpoints", ep, "--scratch-dir", scratch)
	if err != nil || !strings.Contains(out, fmt.Sprintf("drill: timeline 1 restored to revision %d", d.Revision)) ||
		!strings.Contains(out, fmt.Sprintf("%d, equal to live member %s's", d.Hash, ep)) {
		t.Errorf("verify --restore table (err %v):\n%s", err, out)
	}
	if _, err := run("verify", "--store", url, "--timeline", "1"); err == nil || !strings.Contains(err.Error(), "--restore") {
		t.Errorf("verify --timeline without --restore: err = %v, want one asking for --restore", err)
	}

	// A damaged chain is not drilled: the verification already failed.
	fulls, _ := filepath.Glob(filepath.Join(dir, "v1", "timeline", "*", "full", "*"))
	if len(fulls) != 1 {
		t.Fatalf("full snapshots in the store: %v", fulls)
	}
	b, err := os.ReadFile(fulls[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(fulls[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = run("verify", "--store", url, "--restore", "--endpoints", ep, "-o", "json")
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 2 {
		t.Fatalf("verify --restore of a damaged chain: err = %v, want exit code 2", err)
	}
	v = verifyView{}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.OK || v.Drill != nil || !strings.HasPrefix(v.DrillError, "not run") {
		t.Errorf("verify --restore of a damaged chain: %s", out)
	}
}

// TestBackupListMissingStore: `backup list` of a file:// store that does not exist (a
// mistyped --store) says so and creates nothing.
func TestBackupListMissingStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mistyped", "dir")
	cmd := NewRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"backup", "list", "--store", "file://" + dir})
	err := cmd.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "does not exist at this machine: create it or fix --store") {
		t.Fatalf("backup list of a missing store = %v, want an error saying it does not exist\n%s", err, out.String())
	}
	if _, err := os.Stat(filepath.Dir(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("backup list created %s (%v)", filepath.Dir(dir), err)
	}
}
