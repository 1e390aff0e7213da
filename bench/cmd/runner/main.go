// Command runner runs every Steward benchmark, each a separate program under bench/ that
// measures Steward side by side with its reference in the same run, collects their results
// and writes docs/benchmarks.md. `make bench` runs it with quick sizes, `make bench FULL=1`
// with the sizes the issues ask for.
//
//	go run ./bench/cmd/runner [-full] [-only snapshot,delta] [-out docs/benchmarks.md]
//
// A benchmark reports by printing one JSON line (bench/internal/result); for programs that
// print text instead (bench/replay), the runner has a parser for their output. Each run
// rewrites only its own section of the output file (quick or full; a run with -only, the
// section of that selection), between markers, and keeps everything else in the file, so
// hand-written analysis stays.
//
// Each benchmark is also run, right before, as built from an earlier commit (-baseline REV;
// default: the newest commit the report records; none: off) in a temporary git worktree, and
// each Steward figure is compared with the baseline's: more than 10% worse is a regression,
// and the runner then exits non-zero unless -allow-regressions (baseline.go).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/bench/internal/result"
)

// benchmark is one program the runner runs.
type benchmark struct {
	name string // for -only
	pkg  string // Go package, relative to the module root
	// args gives the program's flags for a quick or full run.
	args func(full bool, t tools) []string
	// parse extracts the result from the program's output; nil: the JSON result line only.
	parse func(output string) (result.Result, error)
	// todo, if set, skips the benchmark with this note (it is not ready to run).
	todo string
}

type tools struct{ steward, etcdctl, etcdutl string }

var benchmarks = []benchmark{
	{
		name: "snapshot",
		pkg:  "./bench/snapshot",
		args: func(full bool, t tools) []string {
			size := "256MiB"
			if full {
				size = "1GiB"
			}
			return []string{"-steward", t.steward, "-etcdctl", t.etcdctl, "-size", size, "-repeat", "3"}
		},
	},
	{
		name: "delta",
		pkg:  "./bench/deltacapture",
		args: func(full bool, t tools) []string {
			if full {
				return []string{"-steward", t.steward, "-phase", "30s", "-rounds", "10", "-rate", "800"}
			}
			return []string{"-steward", t.steward, "-phase", "10s", "-rounds", "8", "-rate", "800"}
		},
	},
	{
		name: "replay",
		pkg:  "./bench/replay",
		args: func(full bool, _ tools) []string {
			if full {
				return []string{"-n", "1000000"}
			}
			return []string{"-n", "100000"}
		},
		parse: parseReplay,
	},
	{
		name: "restore",
		pkg:  "./bench/restore",
		args: func(full bool, t tools) []string {
			if full {
				return []string{"-etcdutl", t.etcdutl, "-size", "1GiB", "-runs", "3"}
			}
			return []string{"-etcdutl", t.etcdutl, "-size", "256MiB", "-runs", "3"}
		},
		parse: parseRestore,
	},
	{
		name: "heal",
		pkg:  "./bench/heal",
		args: func(full bool, t tools) []string {
			if full {
				return []string{"-steward", t.steward, "-size", "100MiB", "-revisions", "100000", "-rounds", "5"}
			}
			return []string{"-steward", t.steward, "-size", "20MiB", "-revisions", "10000", "-rounds", "3"}
		},
	},
	{
		name: "operator",
		pkg:  "./bench/operator",
		args: func(full bool, t tools) []string {
			return []string{"-steward", t.steward, "-clusters", "200", "-rest", "60s"}
		},
	},
	{
		name: "defrag",
		pkg:  "./bench/defrag",
		args: func(full bool, t tools) []string {
			if full {
				return []string{"-steward", t.steward, "-etcdctl", t.etcdctl, "-size", "1GiB", "-rounds", "2"}
			}
			return []string{"-steward", t.steward, "-etcdctl", t.etcdctl, "-size", "128MiB", "-rounds", "2"}
		},
	},
	{
		name: "rollout",
		pkg:  "./bench/rollout",
		args: func(full bool, t tools) []string {
			if full {
				return []string{"-steward", t.steward, "-size", "1GiB", "-rounds", "3"}
			}
			return []string{"-steward", t.steward, "-size", "64MiB", "-rounds", "2"}
		},
	},
	{
		name: "tls",
		pkg:  "./bench/tls",
		args: func(full bool, t tools) []string {
			if full {
				return []string{"-steward", t.steward, "-duration", "30s", "-rounds", "3"}
			}
			return []string{"-steward", t.steward, "-duration", "15s", "-rounds", "2"}
		},
	},
	{
		name: "restore-drill",
		pkg:  "./bench/drill",
		args: func(full bool, t tools) []string {
			if full {
				return []string{"-steward", t.steward, "-etcdctl", t.etcdctl, "-etcdutl", t.etcdutl, "-size", "1GiB", "-rounds", "2"}
			}
			return []string{"-steward", t.steward, "-etcdctl", t.etcdctl, "-etcdutl", t.etcdutl, "-size", "64MiB", "-rounds", "2"}
		},
	},
	{
		name: "listing",
		pkg:  "./bench/listing",
		args: func(full bool, _ tools) []string {
			if full {
				return []string{"-n", "500000", "-rounds", "3", "-fileblob-n", "20000"}
			}
			return []string{"-n", "100000", "-rounds", "2", "-fileblob-n", "10000"}
		},
	},
	{
		name: "validate",
		pkg:  "./bench/validate",
		args: func(full bool, t tools) []string {
			if full {
				return []string{"-steward", t.steward, "-etcdutl", t.etcdutl, "-size", "1GiB", "-rounds", "3"}
			}
			return []string{"-steward", t.steward, "-etcdutl", t.etcdutl, "-size", "100MiB", "-rounds", "3"}
		},
	},
}

type options struct {
	full    bool
	only    map[string]bool
	out     string
	tools   tools
	work    string
	command string
	timeout time.Duration
	// commit is the working tree's commit, "-dirty" when it has changes (recorded in the report).
	commit string
	// base is the baseline checked out for this run (nil: no comparison).
	base *baseline
	// baseline is the commit to compare with ("" until resolved; "none": no comparison).
	baseline         string
	allowRegressions bool
	// extra are flags appended to a benchmark's own (-args NAME=FLAGS), for both builds.
	extra map[string][]string
}

// extraArgs is the repeatable -args NAME=FLAGS flag.
type extraArgs map[string][]string

func (e extraArgs) String() string { return "" }

func (e extraArgs) Set(v string) error {
	name, flags, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(name) == "" {
		return errors.New("want NAME=FLAGS, e.g. replay='-n 20000 -ref-n 2000'")
	}
	name = strings.TrimSpace(name)
	e[name] = append(e[name], strings.Fields(flags)...)
	return nil
}

func main() {
	var o options
	var only string
	flag.BoolVar(&o.full, "full", false, "the sizes the issues ask for (1 GiB database, 1M revisions, longer phases); default: quick sizes (~10 min)")
	flag.StringVar(&only, "only", "", "comma-separated benchmarks to run (snapshot, delta, replay, restore, heal, operator, validate); default: all")
	flag.StringVar(&o.out, "out", "docs/benchmarks.md", "report to write (only this run's section is replaced)")
	flag.StringVar(&o.tools.steward, "steward", "", "steward binary (default: built from ./cmd/steward into the work dir)")
	flag.StringVar(&o.tools.etcdctl, "etcdctl", "bin/etcdctl", "stock etcdctl (make tools)")
	flag.StringVar(&o.tools.etcdutl, "etcdutl", "bin/etcdutl", "stock etcdutl (make tools)")
	flag.StringVar(&o.work, "work", "", "work dir for binaries and logs (default: a new temp dir)")
	flag.StringVar(&o.command, "command", "", "the command line to record in the report (default: this program's)")
	flag.DurationVar(&o.timeout, "timeout", 0, "limit per benchmark (default 30m quick, 2h full)")
	flag.StringVar(&o.baseline, "baseline", "", "commit to compare with: its benchmark programs and steward, built in a temporary git worktree, run right before this tree's; a figure more than 10% worse is a regression (default: the newest commit the -out report records; none: no comparison)")
	flag.BoolVar(&o.allowRegressions, "allow-regressions", false, "exit 0 even when a figure regressed against the baseline (they are still reported)")
	o.extra = extraArgs{}
	flag.Var(extraArgs(o.extra), "args", "NAME=FLAGS: more flags for benchmark NAME, after its quick or full ones (repeatable), e.g. -args replay='-n 20000 -ref-n 2000'")
	flag.Parse()
	if only != "" {
		o.only = map[string]bool{}
		known := map[string]bool{}
		for _, b := range benchmarks {
			known[b.name] = true
		}
		for _, n := range strings.Split(only, ",") {
			n = strings.TrimSpace(n)
			if !known[n] {
				fail(fmt.Errorf("-only: no benchmark %q (have snapshot, delta, replay, restore, heal, operator, listing, validate)", n))
			}
			o.only[n] = true
		}
	}
	for n := range o.extra {
		if !slices.ContainsFunc(benchmarks, func(b benchmark) bool { return b.name == n }) {
			fail(fmt.Errorf("-args: no benchmark %q", n))
		}
	}
	if o.command == "" {
		args := make([]string, len(os.Args)-1)
		for i, a := range os.Args[1:] {
			if strings.ContainsAny(a, " \t'\"") {
				a = strconv.Quote(a)
			}
			args[i] = a
		}
		o.command = "go run ./bench/cmd/runner " + strings.Join(args, " ")
	}
	if o.timeout == 0 {
		o.timeout = 30 * time.Minute
		if o.full {
			o.timeout = 2 * time.Hour
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench runner:", err)
	os.Exit(1)
}

// outcome is what one benchmark run produced.
type outcome struct {
	b       benchmark
	res     result.Result
	err     error
	skipped string
	took    time.Duration
	log     string
	// base is the baseline's run of the same benchmark (nil: no comparison in this run);
	// cmp compares each row of res with it.
	base *baseOutcome
	cmp  []rowCmp
}

// baseOutcome is what the baseline's build of a benchmark produced.
type baseOutcome struct {
	res  result.Result
	took time.Duration
	log  string
	// none says why there is no baseline to compare with (the baseline lacks the benchmark,
	// its program does not accept the flags, it failed…).
	none string
}

func run(ctx context.Context, o options) error {
	if b, err := os.ReadFile("go.mod"); err != nil || !bytes.Contains(b, []byte("module github.com/etcd-steward/steward")) {
		return errors.New("run from the root of the steward module (where go.mod is), e.g. with `make bench`")
	}
	if o.work == "" {
		w, err := os.MkdirTemp("", "steward-bench-")
		if err != nil {
			return err
		}
		o.work = w
	}
	if err := os.MkdirAll(filepath.Join(o.work, "logs"), 0o755); err != nil {
		return err
	}
	for _, p := range []*string{&o.tools.etcdctl, &o.tools.etcdutl} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	if o.tools.steward == "" {
		o.tools.steward = filepath.Join(o.work, "steward")
		if err := goBuild(ctx, o.tools.steward, "./cmd/steward"); err != nil {
			return err
		}
	} else if abs, err := filepath.Abs(o.tools.steward); err == nil {
		o.tools.steward = abs
	}
	o.commit = treeCommit(ctx)
	var bl *baseline
	switch o.baseline {
	case "none":
		fmt.Println("bench: no baseline (-baseline none)")
	case "":
		rev, why, err := defaultBaseline(ctx, o.out)
		if err != nil {
			return err
		}
		if rev == "" {
			fmt.Printf("bench: no baseline: %s (pass -baseline REV to compare with a commit)\n", why)
			break
		}
		if bl, err = setupBaseline(ctx, o, rev, why); err != nil {
			return err
		}
	default:
		var err error
		if bl, err = setupBaseline(ctx, o, o.baseline, "-baseline "+o.baseline); err != nil {
			return err
		}
	}
	defer bl.remove()
	if bl != nil {
		fmt.Printf("bench: baseline %s (%s), worktree %s\n", short(bl.commit), bl.why, bl.dir)
		if bl.unusable != "" {
			fmt.Printf("bench: no baseline for any benchmark: %s\n", bl.unusable)
		}
	}
	o.base = bl
	m := machineInfo(ctx, o.tools)
	start := time.Now()
	fmt.Printf("bench: %s mode, work dir %s\n", mode(o.full), o.work)

	var outs []outcome
	var regressions []string
	for _, b := range benchmarks {
		if o.only != nil && !o.only[b.name] {
			continue
		}
		out := outcome{b: b}
		switch {
		case b.todo != "":
			out.skipped = b.todo
		case !hasGoFiles(b.pkg):
			out.skipped = fmt.Sprintf("%s does not exist in this tree: skipped", b.pkg)
		default:
			var base *baseOutcome
			if bl != nil {
				// The baseline first, then this tree's, one right after the other.
				base = runBaseline(ctx, o, bl, b)
			}
			out = runOne(ctx, o, b)
			out.base = base
		}
		if out.skipped != "" {
			fmt.Printf("bench: %s: %s\n", b.name, out.skipped)
		} else if out.err != nil {
			fmt.Printf("bench: %s FAILED after %v: %v (log %s)\n", b.name, out.took.Round(time.Second), out.err, out.log)
		} else {
			fmt.Printf("bench: %s done in %v\n", b.name, out.took.Round(time.Second))
		}
		if out.base != nil && out.err == nil && out.skipped == "" {
			regressions = append(regressions, reportComparison(&out, bl)...)
		}
		outs = append(outs, out)
		if ctx.Err() != nil {
			break
		}
	}
	m.loadEnd = loadAvg()
	// The binaries are big; the logs stay for reading.
	bins, _ := filepath.Glob(filepath.Join(o.work, "bench-*"))
	for _, b := range append(bins, filepath.Join(o.work, "steward")) {
		os.Remove(b)
	}
	section := render(o, m, start, time.Since(start), outs)
	if err := writeSection(o.out, sectionName(o), section); err != nil {
		return err
	}
	fmt.Printf("bench: wrote the %s section of %s (logs in %s)\n", sectionName(o), o.out, filepath.Join(o.work, "logs"))
	var failed []string
	for _, out := range outs {
		if out.err != nil {
			failed = append(failed, out.b.name)
		}
	}
	var errs []error
	if len(failed) > 0 {
		errs = append(errs, fmt.Errorf("benchmarks failed: %s (their errors are in %s)", strings.Join(failed, ", "), o.out))
	}
	if len(regressions) > 0 {
		msg := fmt.Sprintf("%d regression(s) against %s: %s", len(regressions), short(bl.commit), strings.Join(regressions, "; "))
		if o.allowRegressions {
			fmt.Printf("bench: %s (allowed by -allow-regressions)\n", msg)
		} else {
			errs = append(errs, errors.New(msg+" (-allow-regressions to accept)"))
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// reportComparison compares out with its baseline run, prints the comparison and returns the
// regressions found, one phrase each.
func reportComparison(out *outcome, bl *baseline) (regressions []string) {
	if out.base.none != "" {
		fmt.Printf("bench: %s: no baseline: %s\n", out.b.name, out.base.none)
		return nil
	}
	out.cmp = compareResults(out.res, out.base.res)
	for i, c := range out.cmp {
		r := out.res.Rows[i]
		label := r.Measure
		if r.OursName != "" {
			label += " (" + r.OursName + ")"
		}
		d := strings.ReplaceAll(c.describe(r.Unit), "**", "")
		if c.regression {
			fmt.Printf("bench: %s: REGRESSION vs %s: %s: %s is %s\n", out.b.name, short(bl.commit), label, figure(r.Ours, r.Unit), strings.TrimPrefix(d, "regression "))
			regressions = append(regressions, fmt.Sprintf("%s %s %s× of the baseline's", out.b.name, r.Measure, num(c.ratio)))
		} else {
			fmt.Printf("bench: %s vs %s: %s: %s is %s\n", out.b.name, short(bl.commit), label, figure(r.Ours, r.Unit), d)
		}
	}
	return regressions
}

// runBaseline builds and runs the baseline's program of b with the same flags as this tree's.
func runBaseline(ctx context.Context, o options, bl *baseline, b benchmark) *baseOutcome {
	bo := &baseOutcome{log: filepath.Join(o.work, "logs", b.name+".baseline.log")}
	start := time.Now()
	defer func() { bo.took = time.Since(start) }()
	at := short(bl.commit)
	if bl.unusable != "" {
		bo.none = bl.unusable
		return bo
	}
	if !hasGoFiles(filepath.Join(bl.dir, b.pkg)) {
		bo.none = fmt.Sprintf("%s has no %s", at, b.pkg)
		return bo
	}
	bin := filepath.Join(bl.bins, "bench-"+b.name)
	if err := goBuildIn(ctx, bl.dir, bin, b.pkg); err != nil {
		bo.none = fmt.Sprintf("%s did not build at %s: %s", b.pkg, at, firstLine(err.Error()))
		return bo
	}
	t := o.tools
	t.steward = bl.steward
	args := benchArgs(o, b, t)
	if usage, _ := exec.CommandContext(ctx, bin, "-h").CombinedOutput(); len(usage) > 0 {
		if unknown := unknownFlags(args, usageFlags(string(usage))); len(unknown) > 0 {
			bo.none = fmt.Sprintf("%s's %s does not accept %s", at, b.pkg, strings.Join(unknown, ", "))
			return bo
		}
	}
	fmt.Printf("bench: %s@%s: %s %s\n", b.name, at, b.pkg, strings.Join(args, " "))
	stdout, err := runProgram(ctx, o, bin, bl.dir, args, bo.log, "  ["+b.name+"@base] ")
	if err != nil {
		if flagsRejected(tail(bo.log, 20)) {
			bo.none = fmt.Sprintf("%s's %s does not accept the flags: %s", at, b.pkg, firstLine(err.Error()))
		} else {
			bo.none = fmt.Sprintf("the baseline's run failed (log %s): %s", bo.log, firstLine(err.Error()))
		}
		return bo
	}
	bo.res, err = parseOutput(b, stdout)
	if err != nil {
		bo.none = "the baseline's output: " + firstLine(err.Error())
	}
	return bo
}

// benchArgs are b's flags for this run: its quick or full ones, then any -args.
func benchArgs(o options, b benchmark, t tools) []string {
	return append(b.args(o.full, t), o.extra[b.name]...)
}

func mode(full bool) string {
	if full {
		return "full"
	}
	return "quick"
}

// sectionName is the report section a run writes: its mode's, or for a run of some
// benchmarks only (-only) a section of its own for that selection ("full:heal"), so that it
// never replaces the figures of the benchmarks it did not run.
func sectionName(o options) string {
	if o.only == nil {
		return mode(o.full)
	}
	names := slices.Sorted(maps.Keys(o.only))
	return mode(o.full) + ":" + strings.Join(names, ",")
}

func hasGoFiles(pkg string) bool {
	m, _ := filepath.Glob(filepath.Join(pkg, "*.go"))
	return len(m) > 0
}

func goBuild(ctx context.Context, out, pkg string) error { return goBuildIn(ctx, "", out, pkg) }

// goBuildIn builds pkg of the module in dir ("": the current directory).
func goBuildIn(ctx context.Context, dir, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// runOne builds and runs one benchmark, streaming its output to the console and its log.
func runOne(ctx context.Context, o options, b benchmark) (out outcome) {
	out = outcome{b: b, log: filepath.Join(o.work, "logs", b.name+".log")}
	start := time.Now()
	defer func() { out.took = time.Since(start) }()
	bin := filepath.Join(o.work, "bench-"+b.name)
	if err := goBuild(ctx, bin, b.pkg); err != nil {
		out.err = err
		return out
	}
	args := benchArgs(o, b, o.tools)
	fmt.Printf("bench: %s: %s %s\n", b.name, b.pkg, strings.Join(args, " "))
	stdout, err := runProgram(ctx, o, bin, "", args, out.log, "  ["+b.name+"] ")
	if err != nil {
		out.err = err
		return out
	}
	out.res, out.err = parseOutput(b, stdout)
	return out
}

// runProgram runs a benchmark program in dir, streaming its output to the console (each
// line prefixed) and to its log, and returns its stdout.
func runProgram(ctx context.Context, o options, bin, dir string, args []string, log, prefix string) (string, error) {
	logFile, err := os.Create(log)
	if err != nil {
		return "", err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "$ %s %s\n", bin, strings.Join(args, " "))
	rctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, bin, args...)
	cmd.Dir = dir
	cmd.WaitDelay = 30 * time.Second
	var stdout bytes.Buffer
	console := &prefixWriter{w: os.Stdout, prefix: prefix}
	var mu sync.Mutex // stdout and stderr go to the same console and log
	cmd.Stdout = lockedWriter(&mu, io.MultiWriter(&stdout, logFile, console))
	cmd.Stderr = lockedWriter(&mu, io.MultiWriter(logFile, console))
	runErr := cmd.Run()
	if rctx.Err() != nil && ctx.Err() == nil {
		runErr = fmt.Errorf("did not finish within %v", o.timeout)
	}
	if runErr != nil {
		return "", fmt.Errorf("%w; output ends with:\n%s", runErr, tail(log, 8))
	}
	return stdout.String(), nil
}

// parseOutput extracts b's result from its program's stdout.
func parseOutput(b benchmark, stdout string) (result.Result, error) {
	res, ok, err := result.Parse(stdout)
	switch {
	case err != nil:
		return res, err
	case ok:
		return res, nil
	case b.parse != nil:
		return b.parse(stdout)
	}
	return res, errors.New("the program printed no JSON result line (see bench/internal/result)")
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func lockedWriter(mu *sync.Mutex, w io.Writer) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return w.Write(p)
	})
}

// prefixWriter prefixes each line, and keeps JSON result lines off the console.
type prefixWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		line := p.buf[:i]
		if !bytes.HasPrefix(line, []byte(`{"benchmark"`)) {
			fmt.Fprintf(p.w, "%s%s\n", p.prefix, line)
		}
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// parseReplay reads bench/replay's text output (it prints no JSON result line).
func parseReplay(out string) (result.Result, error) {
	var (
		reHead   = regexp.MustCompile(`replay bench: (\d+) revisions \(reference (\d+)\), (\d+) keys, (\d+)-byte values`)
		reOurs   = regexp.MustCompile(`storage replay:\s+(\d+) revisions, (\d+) events in (\S+) = (\d+) rev/s \(snapshot restore (\S+), peak heap (\d+) MiB\)`)
		reRef    = regexp.MustCompile(`client Txn replay \(([^)]*)\): (\d+) revisions in (\S+) = (\d+) rev/s`)
		reVerify = regexp.MustCompile(`verified: (.*)`)
	)
	res := result.Result{Benchmark: "delta-replay", Title: "Delta replay: storage-layer replay vs client Txn replay", Params: map[string]any{}}
	if m := reHead.FindStringSubmatch(out); m != nil {
		res.Params["revisions"], res.Params["referenceRevisions"] = atoi(m[1]), atoi(m[2])
		res.Params["keys"], res.Params["valueSize"] = atoi(m[3]), atoi(m[4])
	}
	mo := reOurs.FindStringSubmatch(out)
	if mo == nil {
		return res, errors.New("bench/replay output has no \"storage replay:\" line")
	}
	ours := float64(atoi(mo[4]))
	res.Params["peakHeap"] = mo[6] + " MiB"
	mr := reRef.FindStringSubmatch(out)
	if mr == nil {
		res.Rows = append(res.Rows, result.Row{Measure: "replay rate", Unit: "revisions/s", OursName: "restore.Replay (storage layer)", Ours: ours})
		res.Notes = append(res.Notes, "The client-Txn reference was not run (-ref-n 0).")
		return res, nil
	}
	ref := float64(atoi(mr[4]))
	row := result.Compare("replay rate", "revisions/s", "restore.Replay (storage layer)", ours, "client Txn per revision, "+mr[1], ref)
	res.Rows = append(res.Rows, row.WithGoal("ratio ≥ 10", row.Ratio >= 10).WithSpread("one run each; storage replay %s, reference %s", mo[3], mr[3]))
	abs := result.Row{Measure: "storage replay rate", Unit: "revisions/s", OursName: "restore.Replay", Ours: ours}
	res.Rows = append(res.Rows, abs.WithGoal("≥ 100,000/s (for 1M revisions)", ours >= 100_000))
	if mv := reVerify.FindStringSubmatch(out); mv != nil {
		res.Notes = append(res.Notes, "Results checked equal: "+mv[1]+".")
	} else {
		res.Notes = append(res.Notes, "Results were not compared (the reference replayed fewer revisions).")
	}
	res.Notes = append(res.Notes, "Both replay the same generated events (95% puts, 3% deletes, 2% 4-put transactions) onto the same restored snapshot; see bench/replay/README.md.")
	return res, nil
}

// parseRestore reads bench/restore's text output (it prints no JSON result line).
func parseRestore(out string) (result.Result, error) {
	var (
		reHead  = regexp.MustCompile(`restore bench: (.+?) database, (\d+)-byte values, (\d+) runs each`)
		reSnap  = regexp.MustCompile(`snapshot: (.+?) at revision (\d+)`)
		reStore = regexp.MustCompile(`stored as a full snapshot: (.+?) \(zstd\)`)
		reRuns  = regexp.MustCompile(`run \d+: etcdutl (\S+), steward (\S+)`)
		reBest  = regexp.MustCompile(`best of (\d+): steward Restore (\S+) \(([\d.]+) MiB/s of database\), etcdutl snapshot restore (\S+) \(([\d.]+) MiB/s\); ratio ([\d.]+)x; heap growth during steward's restore at most (\d+) MiB`)
	)
	res := result.Result{Benchmark: "full-restore", Title: "Full restore from a file:// store vs etcdutl snapshot restore", Params: map[string]any{}}
	if m := reHead.FindStringSubmatch(out); m != nil {
		res.Params["requestedSize"], res.Params["valueSize"], res.Params["runs"] = m[1], atoi(m[2]), atoi(m[3])
	}
	if m := reSnap.FindStringSubmatch(out); m != nil {
		res.Params["snapshot"] = m[1]
		res.Title = "Full restore of a " + m[1] + " snapshot from a file:// store vs etcdutl snapshot restore"
	}
	if m := reStore.FindStringSubmatch(out); m != nil {
		res.Params["stored"] = m[1] + " (zstd)"
	}
	m := reBest.FindStringSubmatch(out)
	if m == nil {
		return res, errors.New("bench/restore output has no \"best of N: steward Restore …\" line (its format changed? update parseRestore)")
	}
	ours, err1 := time.ParseDuration(m[2])
	ref, err2 := time.ParseDuration(m[4])
	if err := errors.Join(err1, err2); err != nil {
		return res, fmt.Errorf("bench/restore: %w", err)
	}
	var ratios []float64
	for _, r := range reRuns.FindAllStringSubmatch(out, -1) {
		e, err1 := time.ParseDuration(r[1])
		st, err2 := time.ParseDuration(r[2])
		if err1 == nil && err2 == nil && e > 0 {
			ratios = append(ratios, st.Seconds()/e.Seconds())
		}
	}
	row := result.Compare("restore time (best of "+m[1]+")", "s", "restore.Restore from the store", result.Seconds(ours), "etcdutl snapshot restore of the file", result.Seconds(ref))
	spread := fmt.Sprintf("steward %s MiB/s, etcdutl %s MiB/s of database", m[3], m[5])
	if len(ratios) > 0 {
		st := result.Summarise(ratios)
		spread += fmt.Sprintf("; per-run time ratio %.2f–%.2f over %d runs", st.Min, st.Max, st.N)
	}
	res.Rows = append(res.Rows, row.WithGoal("ratio ≤ 1.0", row.Ratio <= 1.0).WithSpread("%s", spread))
	res.Rows = append(res.Rows, result.Row{Measure: "heap growth during restore", Unit: "MiB", OursName: "restore.Restore", Ours: float64(atoi(m[7]))})
	res.Notes = append(res.Notes, "Steward streams the zstd object from the store straight into the member's database, verifying it on the way, then writes the new member's membership, WAL and raft snapshot as etcdutl does; the reference restores the plain snapshot file with the stock etcdutl binary. Runs alternate on a warm page cache; see bench/restore/main.go.")
	return res, nil
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// machine describes where the benchmarks ran.
type machine struct {
	cores                       int
	memory, cpu, kernel         string
	goVersion, etcd, etcdctl    string
	loadStart, loadEnd, started string
}

func machineInfo(ctx context.Context, t tools) machine {
	m := machine{cores: runtime.NumCPU(), loadStart: loadAvg(), started: time.Now().UTC().Format("2006-01-02 15:04 MST")}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if mm := regexp.MustCompile(`MemTotal:\s+(\d+) kB`).FindSubmatch(b); mm != nil {
			m.memory = fmt.Sprintf("%.1f GiB", float64(atoi(string(mm[1])))/(1<<20))
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if mm := regexp.MustCompile(`model name\s*:\s*(.*)`).FindSubmatch(b); mm != nil {
			m.cpu = strings.TrimSpace(string(mm[1]))
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if b, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output(); err == nil {
		m.goVersion = strings.TrimSpace(string(b))
	}
	if b, err := exec.CommandContext(ctx, t.steward, "version", "-o", "json").Output(); err == nil {
		var v struct{ Etcd string }
		if json.Unmarshal(b, &v) == nil {
			m.etcd = v.Etcd
		}
	}
	if b, err := exec.CommandContext(ctx, t.etcdctl, "version").Output(); err == nil {
		m.etcdctl = strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "etcdctl version: ")
	}
	return m
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
