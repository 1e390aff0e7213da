// Command runner runs every Steward benchmark, each a separate program under bench/ that
// measures Steward side by side with its reference in the same run, collects their results
// and writes docs/benchmarks.md. `make bench` runs it with quick sizes, `make bench FULL=1`
// with the sizes the issues ask for.
//
//	go run ./bench/cmd/runner [-full] [-only snapshot,delta] [-out docs/benchmarks.md]
//
// A benchmark reports by printing one JSON line (bench/internal/result); for programs that
// print text instead (bench/replay), the runner has a parser for their output. Each run
// rewrites only its own section of the output file (quick or full), between markers, and
// keeps everything else in the file, so hand-written analysis stays.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
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
	if o.command == "" {
		o.command = "go run ./bench/cmd/runner " + strings.Join(os.Args[1:], " ")
	}
	if o.timeout == 0 {
		o.timeout = 30 * time.Minute
		if o.full {
			o.timeout = 2 * time.Hour
		}
	}
	if err := run(context.Background(), o); err != nil {
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
	m := machineInfo(ctx, o.tools)
	start := time.Now()
	fmt.Printf("bench: %s mode, work dir %s\n", mode(o.full), o.work)

	var outs []outcome
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
			out = runOne(ctx, o, b)
		}
		if out.skipped != "" {
			fmt.Printf("bench: %s: %s\n", b.name, out.skipped)
		} else if out.err != nil {
			fmt.Printf("bench: %s FAILED after %v: %v (log %s)\n", b.name, out.took.Round(time.Second), out.err, out.log)
		} else {
			fmt.Printf("bench: %s done in %v\n", b.name, out.took.Round(time.Second))
		}
		outs = append(outs, out)
	}
	m.loadEnd = loadAvg()
	// The binaries are big; the logs stay for reading.
	bins, _ := filepath.Glob(filepath.Join(o.work, "bench-*"))
	for _, b := range append(bins, filepath.Join(o.work, "steward")) {
		os.Remove(b)
	}
	section := render(o, m, start, time.Since(start), outs)
	if err := writeSection(o.out, mode(o.full), section); err != nil {
		return err
	}
	fmt.Printf("bench: wrote the %s section of %s (logs in %s)\n", mode(o.full), o.out, filepath.Join(o.work, "logs"))
	var failed []string
	for _, out := range outs {
		if out.err != nil {
			failed = append(failed, out.b.name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("benchmarks failed: %s (their errors are in %s)", strings.Join(failed, ", "), o.out)
	}
	return nil
}

func mode(full bool) string {
	if full {
		return "full"
	}
	return "quick"
}

func hasGoFiles(pkg string) bool {
	m, _ := filepath.Glob(filepath.Join(pkg, "*.go"))
	return len(m) > 0
}

func goBuild(ctx context.Context, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
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
	logFile, err := os.Create(out.log)
	if err != nil {
		out.err = err
		return out
	}
	defer logFile.Close()
	args := b.args(o.full, o.tools)
	fmt.Fprintf(logFile, "$ %s %s\n", b.pkg, strings.Join(args, " "))
	fmt.Printf("bench: %s: %s %s\n", b.name, b.pkg, strings.Join(args, " "))
	rctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, bin, args...)
	cmd.WaitDelay = 30 * time.Second
	var stdout bytes.Buffer
	console := &prefixWriter{w: os.Stdout, prefix: "  [" + b.name + "] "}
	var mu sync.Mutex // stdout and stderr go to the same console and log
	cmd.Stdout = lockedWriter(&mu, io.MultiWriter(&stdout, logFile, console))
	cmd.Stderr = lockedWriter(&mu, io.MultiWriter(logFile, console))
	runErr := cmd.Run()
	if rctx.Err() != nil {
		runErr = fmt.Errorf("did not finish within %v", o.timeout)
	}
	if runErr != nil {
		out.err = fmt.Errorf("%w; output ends with:\n%s", runErr, tail(out.log, 8))
		return out
	}
	res, ok, err := result.Parse(stdout.String())
	switch {
	case err != nil:
		out.err = err
	case ok:
		out.res = res
	case b.parse != nil:
		out.res, out.err = b.parse(stdout.String())
	default:
		out.err = errors.New("the program printed no JSON result line (see bench/internal/result)")
	}
	return out
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
	res.Rows = append(res.Rows, row.WithSpread("%s", spread))
	res.Rows = append(res.Rows, result.Row{Measure: "heap growth during restore", Unit: "MiB", OursName: "restore.Restore", Ours: float64(atoi(m[7]))})
	res.Notes = append(res.Notes, "Steward streams the zstd object from the store, verifies it and restores with etcdutl's library; the reference restores the plain snapshot file with the stock etcdutl binary. Runs alternate on a warm page cache; see bench/restore/main.go.")
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
