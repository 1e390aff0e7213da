package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/bench/internal/result"
)

// replayOutput is bench/replay's output format (its fmt.Printf lines).
const replayOutput = `replay bench: 100000 revisions (reference 100000), 100000 keys, 256-byte values, 2 CPUs
storage replay:  100000 revisions, 108000 events in 1.462s = 68379 rev/s (snapshot restore 41ms, peak heap 61 MiB)
client Txn replay (embedded etcd, fsync off): 100000 revisions in 34.63s = 2887 rev/s
speed-up: 23.7x
verified: HashKV at revision 100001 equal (1a2b3c4d)
`

func TestParseReplay(t *testing.T) {
	res, err := parseReplay(replayOutput)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 {
		t.Fatalf("want 2 rows, got %+v", res.Rows)
	}
	if abs := res.Rows[1]; abs.Ours != 68379 || abs.Met == nil || *abs.Met {
		t.Errorf("absolute row %+v: 68,379/s misses 100k/s", abs)
	}
	r := res.Rows[0]
	if r.Ours != 68379 || r.Reference != 2887 || r.Met == nil || !*r.Met {
		t.Errorf("row %+v", r)
	}
	if got := r.Ratio; got < 23.6 || got > 23.7 {
		t.Errorf("ratio %v, want 68379/2887", got)
	}
	if res.Params["revisions"] != int64(100000) || !strings.Contains(strings.Join(res.Notes, " "), "HashKV") {
		t.Errorf("params %v notes %v", res.Params, res.Notes)
	}
	if _, err := parseReplay("something else"); err == nil {
		t.Error("parsing unrelated output succeeded")
	}
}

// restoreOutput is bench/restore's output format (its fmt.Printf lines).
const restoreOutput = `restore bench: 256.0 MiB database, 32768-byte values, 3 runs each, 2 CPUs, etcdutl /x/bin/etcdutl
snapshot: 257.3 MiB at revision 8001, made in 12s
stored as a full snapshot: 130.2 MiB (zstd) in 2.1s
run 1: etcdutl 1.2s, steward 1.8s (download 1s; heap in use grew by at most 9 MiB)
run 2: etcdutl 1.1s, steward 1.65s (download 1s; heap in use grew by at most 8 MiB)
best of 2: steward Restore 1.65s (156 MiB/s of database), etcdutl snapshot restore 1.1s (234 MiB/s); ratio 1.50x; heap growth during steward's restore at most 9 MiB
`

func TestParseRestore(t *testing.T) {
	res, err := parseRestore(restoreOutput)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Rows[0]
	if r.Ours != 1.65 || r.Reference != 1.1 || r.Ratio < 1.49 || r.Ratio > 1.51 {
		t.Errorf("row %+v", r)
	}
	if !strings.Contains(r.Spread, "1.50–1.50") || res.Params["snapshot"] != "257.3 MiB" {
		t.Errorf("spread %q params %v", r.Spread, res.Params)
	}
	if _, err := parseRestore(replayOutput); err == nil {
		t.Error("parsing replay output as restore output succeeded")
	}
}

func TestResultLineWins(t *testing.T) {
	var sb strings.Builder
	sb.WriteString("progress line\n")
	want := result.Result{Benchmark: "x", Rows: []result.Row{result.Compare("m", "u", "a", 2, "b", 4)}}
	if err := want.Print(&sb); err != nil {
		t.Fatal(err)
	}
	got, ok, err := result.Parse(sb.String())
	if err != nil || !ok || got.Benchmark != "x" || got.Rows[0].Ratio != 0.5 {
		t.Fatalf("Parse = %+v, %v, %v", got, ok, err)
	}
	if _, ok, _ := result.Parse(replayOutput); ok {
		t.Error("found a result line in text output")
	}
}

func TestWriteSectionKeepsTheRest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := writeSection(path, "quick", "first\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	doc := string(b) + "\n## Findings\n\nhand-written\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(path, "full", "full one\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(path, "quick", "second\n"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	s := string(b)
	for _, want := range []string{"# Benchmarks", "second\n", "full one\n", "hand-written"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "first\n") || strings.Count(s, "bench:quick:begin") != 1 {
		t.Errorf("quick section not replaced:\n%s", s)
	}
}

// TestPartialRunKeepsTheFullRun: a run of some benchmarks only writes a section of its own and
// leaves the figures of the whole run's section as they are.
func TestPartialRunKeepsTheFullRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	whole := options{full: true}
	heal := options{full: true, only: map[string]bool{"heal": true}}
	healAndDelta := options{full: true, only: map[string]bool{"heal": true, "delta": true}}
	for _, w := range []struct {
		o       options
		section string
	}{{whole, "every benchmark\n"}, {heal, "heal only\n"}, {healAndDelta, "heal and delta\n"}, {heal, "heal again\n"}} {
		if err := writeSection(path, sectionName(w.o), w.section); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(path)
	s := string(b)
	for _, want := range []string{"every benchmark\n", "heal again\n", "heal and delta\n", "bench:full:delta,heal:begin"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "heal only\n") || strings.Count(s, "bench:full:heal:begin") != 1 || strings.Count(s, "bench:full:begin") != 1 {
		t.Errorf("the heal-only section not replaced, or the sections mixed up:\n%s", s)
	}
}

func TestNum(t *testing.T) {
	for x, want := range map[float64]string{0.273: "0.27", 12.34: "12.3", 221.2: "221", 68379: "68,379", 1234567: "1,234,567"} {
		if got := num(x); got != want {
			t.Errorf("num(%v) = %q, want %q", x, got, want)
		}
	}
}
