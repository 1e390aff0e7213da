package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/etcd-steward/steward/bench/internal/result"
)

// The comparison with an earlier build of Steward. Every benchmark compares Steward with a
// reference tool in the same run; that alone does not show Steward getting slower than it
// was. With a baseline, the runner builds the benchmark programs and the steward binary of
// an earlier commit in a temporary git worktree and runs each selected benchmark of the
// baseline right before the same benchmark of this tree, with the same flags, then compares
// each row's Steward figure with the baseline's.

// regressionThreshold: a figure worse than the baseline's by more than this fraction is a
// regression (a time 1.10× the baseline's, a rate 0.90× of it).
const regressionThreshold = 0.10

// rowCmp compares one row of this tree's result with the baseline's.
type rowCmp struct {
	// found is false when the baseline has no such row (or no result at all).
	found bool
	// base is the baseline's figure; ratio is ours/base (0 when base is 0).
	base, ratio float64
	// better is the row's direction (result.HigherBetter, result.LowerBetter or "").
	better string
	// regression: more than regressionThreshold worse than the baseline.
	regression bool
}

// isRegression says whether ratio = ours/baseline is more than regressionThreshold worse,
// given which way the figure is better. Without a direction nothing is a regression.
func isRegression(ratio float64, better string) bool {
	if ratio <= 0 || math.IsInf(ratio, 0) || math.IsNaN(ratio) {
		return false
	}
	switch better {
	case result.LowerBetter:
		return ratio > 1+regressionThreshold
	case result.HigherBetter:
		return ratio < 1-regressionThreshold
	}
	return false
}

// compareRow compares this tree's row with the baseline's.
func compareRow(cur, base result.Row) rowCmp {
	c := rowCmp{found: true, base: base.Ours, better: cur.Direction()}
	if c.better == "" {
		c.better = base.Direction()
	}
	if base.Ours != 0 {
		c.ratio = cur.Ours / base.Ours
		c.regression = isRegression(c.ratio, c.better)
	}
	return c
}

// rowKeys names each row by its measure and what ran (OursName), numbered when a result
// repeats the same pair, so that rows match between two builds even if one adds rows.
func rowKeys(rows []result.Row) []string {
	seen := map[string]int{}
	keys := make([]string, len(rows))
	for i, r := range rows {
		k := r.Measure + "\x00" + r.OursName
		seen[k]++
		keys[i] = fmt.Sprintf("%s\x00%d", k, seen[k])
	}
	return keys
}

// compareResults compares each row of cur with the baseline's row of the same measure (a row
// the baseline lacks is not found). The result has one entry per row of cur.
func compareResults(cur, base result.Result) []rowCmp {
	baseRows := map[string]result.Row{}
	for i, k := range rowKeys(base.Rows) {
		baseRows[k] = base.Rows[i]
	}
	out := make([]rowCmp, len(cur.Rows))
	for i, k := range rowKeys(cur.Rows) {
		if b, ok := baseRows[k]; ok && cur.Benchmark == base.Benchmark {
			out[i] = compareRow(cur.Rows[i], b)
		} else {
			out[i] = rowCmp{better: cur.Rows[i].Direction()}
		}
	}
	return out
}

// describe says in a few words how a row compares, for the console and the report.
func (c rowCmp) describe(unit string) string {
	switch {
	case !c.found:
		return "no baseline"
	case c.base == 0:
		return "baseline " + figure(0, unit)
	}
	s := fmt.Sprintf("%s× of %s", num(c.ratio), figure(c.base, unit))
	if c.regression {
		s = "**regression** " + s
	}
	return s
}

var reCommitLine = regexp.MustCompile("(?m)^- Commit: `([0-9a-f]{7,64})(-dirty)?`")

// recorded is a commit a section of the report records as the one it measured.
type recorded struct {
	mode, commit string
	dirty        bool
}

// recordedCommits finds the commit each generated section of a report records (the
// "- Commit: `HASH`" line the runner writes in a section's header), in file order: the quick
// and full runs' sections and those of runs of some benchmarks only ("full:heal").
func recordedCommits(doc string) []recorded {
	var out []recorded
	for _, m := range reSectionBegin.FindAllStringSubmatchIndex(doc, -1) {
		name := doc[m[2]:m[3]]
		_, end := markers(name)
		j := strings.Index(doc[m[1]:], end)
		if j < 0 {
			continue
		}
		if c := reCommitLine.FindStringSubmatch(doc[m[1] : m[1]+j]); c != nil {
			out = append(out, recorded{mode: name, commit: c[1], dirty: c[2] != ""})
		}
	}
	return out
}

// reSectionBegin matches a generated section's begin marker; its group is the section's name.
var reSectionBegin = regexp.MustCompile(`<!-- bench:((?:quick|full)(?::[a-z0-9,-]+)?):begin`)

// git runs git in dir and returns its trimmed stdout.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(b)), nil
}

// treeCommit is the commit the working tree is at, with "-dirty" when tracked files differ
// from it; "" outside a git repository.
func treeCommit(ctx context.Context) string {
	head, err := git(ctx, ".", "rev-parse", "HEAD")
	if err != nil {
		return ""
	}
	if st, err := git(ctx, ".", "status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
		head += "-dirty"
	}
	return head
}

// defaultBaseline is the newest commit a report records (by commit time), with how it was
// chosen; "" when it records none.
func defaultBaseline(ctx context.Context, path string) (rev, why string, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", path + " does not exist", nil
	}
	if err != nil {
		return "", "", err
	}
	recs := recordedCommits(string(b))
	if len(recs) == 0 {
		return "", path + " records no commit yet", nil
	}
	var best recorded
	var bestTime string
	for _, r := range recs {
		t, err := git(ctx, ".", "show", "-s", "--format=%ct", r.commit+"^{commit}")
		if err != nil {
			continue // not in this repository (yet)
		}
		if len(t) > len(bestTime) || (len(t) == len(bestTime) && t > bestTime) {
			best, bestTime = r, t
		}
	}
	if bestTime == "" {
		return "", fmt.Sprintf("%s records commits this repository does not have (%s)", path, recs[0].commit), nil
	}
	why = fmt.Sprintf("the commit the %s section of %s records", best.mode, path)
	if best.dirty {
		why += " (it was measured with uncommitted changes, which the baseline lacks)"
	}
	return best.commit, why, nil
}

// baseline is an earlier commit checked out in a temporary worktree, with its steward binary.
type baseline struct {
	rev, commit, why string
	dir              string // the worktree
	bins             string // where its binaries go
	steward          string
	// unusable, if set, says why no benchmark has a baseline (e.g. steward did not build).
	unusable string
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// setupBaseline resolves rev and checks it out with `git worktree add --detach` in a temp dir.
func setupBaseline(ctx context.Context, o options, rev, why string) (*baseline, error) {
	commit, err := git(ctx, ".", "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil {
		return nil, fmt.Errorf("-baseline %s: not a commit of this repository", rev)
	}
	dir, err := os.MkdirTemp("", "steward-bench-baseline-")
	if err != nil {
		return nil, err
	}
	os.Remove(dir) // git worktree add wants to create it
	if _, err := git(ctx, ".", "worktree", "add", "--detach", dir, commit); err != nil {
		return nil, err
	}
	bl := &baseline{rev: rev, commit: commit, why: why, dir: dir, bins: filepath.Join(o.work, "baseline")}
	if err := os.MkdirAll(bl.bins, 0o755); err != nil {
		bl.remove()
		return nil, err
	}
	// The Kubernetes binaries (make kube-tools) are a reference, not Steward: the baseline's
	// benchmarks use this tree's, as they do its etcdctl and etcdutl.
	if k8s, err := filepath.Abs(filepath.Join("bin", "k8s")); err == nil {
		if _, err := os.Stat(k8s); err == nil {
			if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err == nil {
				os.Symlink(k8s, filepath.Join(dir, "bin", "k8s"))
			}
		}
	}
	bl.steward = filepath.Join(bl.bins, "steward")
	if err := goBuildIn(ctx, dir, bl.steward, "./cmd/steward"); err != nil {
		bl.unusable = fmt.Sprintf("steward did not build at %s: %v", short(commit), firstLine(err.Error()))
	}
	return bl, nil
}

// remove deletes the worktree and the baseline's binaries.
func (bl *baseline) remove() {
	if bl == nil {
		return
	}
	ctx := context.Background()
	if _, err := git(ctx, ".", "worktree", "remove", "--force", bl.dir); err != nil {
		fmt.Fprintf(os.Stderr, "bench: removing the baseline worktree: %v\n", err)
		os.RemoveAll(bl.dir)
		git(ctx, ".", "worktree", "prune")
	}
	os.RemoveAll(bl.bins)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// reUsageFlag matches a flag in a Go program's -h output ("  -name value").
var reUsageFlag = regexp.MustCompile(`(?m)^\s+-([A-Za-z0-9][A-Za-z0-9_.-]*)`)

// usageFlags lists the flags a Go program's usage text (-h) names.
func usageFlags(usage string) map[string]bool {
	fl := map[string]bool{}
	for _, m := range reUsageFlag.FindAllStringSubmatch(usage, -1) {
		fl[m[1]] = true
	}
	return fl
}

// unknownFlags lists the flags in args that the usage's flag set lacks.
func unknownFlags(args []string, accepted map[string]bool) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "" || (name[0] >= '0' && name[0] <= '9') {
			continue // a negative number, the value of the flag before
		}
		if !accepted[name] {
			out = append(out, "-"+name)
		}
	}
	return out
}

// flagsRejected says whether a failed run is Go's flag package refusing the command line.
func flagsRejected(output string) bool {
	return strings.Contains(output, "flag provided but not defined") || strings.Contains(output, "invalid value \"")
}
