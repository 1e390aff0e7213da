// Command restorebuilds measures `steward restore` (the CLI, its own process) of one delta-heavy
// history with several steward builds side by side, alternating in the same run: wall time,
// the replay phase (from the restore's own summary line), peak RSS (the kernel's maxrss of the
// exited process) and how much of the resident set was anonymous memory and how much file
// pages (the restored database's mmap, the binary), sampled from /proc/PID/status.
//
// The history is made once by a `steward local up` cluster of one member with backups to a
// file:// store: -keys keys, then a full snapshot (`steward backup save`), then -puts puts of
// new keys with -value-size values, which the sidecar captures as deltas. It is made by the
// -make build (make it with the oldest build compared: newer builds read older stores) and
// kept in -store, which later runs reuse (a history.json beside it records what it holds).
//
//	go build -o /tmp/new/steward ./cmd/steward
//	git worktree add --detach /tmp/old d8943ae && (cd /tmp/old && go build -o /tmp/old/steward ./cmd/steward)
//	flock /tmp/bench.lock go run ./bench/restorebuilds -store /tmp/rs/store -make /tmp/old/steward \
//	    -build old=/tmp/old/steward -build new=/tmp/new/steward -runs 3
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/bench/internal/program"
	"github.com/etcd-steward/steward/bench/internal/result"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
)

type buildFlag []string

func (b *buildFlag) String() string     { return strings.Join(*b, ",") }
func (b *buildFlag) Set(v string) error { *b = append(*b, v); return nil }

type build struct{ name, bin string }

type options struct {
	store, maker       string
	builds             []build
	keys, puts, vsize  int
	runs               int
	restoreArgs        []string
	keepRestored, keep bool
}

func main() {
	var o options
	var builds buildFlag
	var restoreArgs string
	p := program.New("restorebuilds bench")
	flag.StringVar(&o.store, "store", "", "directory of the file:// store holding the history; made if it does not hold one yet (default: in the work dir)")
	flag.StringVar(&o.maker, "make", "", "steward build that makes the history if -store holds none (default: the first -build)")
	flag.Var(&builds, "build", "NAME=PATH of a steward binary to restore with (repeatable; restores alternate between them in this order)")
	flag.IntVar(&o.keys, "keys", 20_000, "keys written before the full snapshot")
	flag.IntVar(&o.puts, "puts", 200_000, "puts of new keys after the full snapshot, captured as deltas")
	flag.IntVar(&o.vsize, "value-size", 256, "value bytes of every put")
	p.Rounds(&o.runs, "runs", 3, "restores with each build")
	flag.StringVar(&restoreArgs, "restore-args", "", "extra `steward restore` flags for every build, space-separated")
	p.WorkDir(&o.keep, "keep the work dir (and the restored data dirs) at the end")
	p.Check(func() error {
		for _, b := range builds {
			name, bin, ok := strings.Cut(b, "=")
			if !ok || name == "" || bin == "" {
				return fmt.Errorf("-build %q: want NAME=PATH", b)
			}
			abs, err := filepath.Abs(bin)
			if err != nil {
				return err
			}
			if _, err := os.Stat(abs); err != nil {
				return fmt.Errorf("-build %s: %w", name, err)
			}
			o.builds = append(o.builds, build{name, abs})
		}
		if len(o.builds) == 0 {
			return errors.New("give at least one -build NAME=PATH")
		}
		if o.maker == "" {
			o.maker = o.builds[0].bin
		}
		o.restoreArgs = strings.Fields(restoreArgs)
		return nil
	})
	p.Main(func(ctx context.Context, dir string) error {
		o.keepRestored = o.keep
		return run(ctx, o, dir)
	})
}

// history is what a store holds; history.json beside the store records it.
type history struct {
	Keys, Puts, ValueSize int
	Revision              int64 // the last put's
	SnapshotRevision      int64
	MadeBy                string
	Made                  time.Time
}

func run(ctx context.Context, o options, dir string) error {
	if o.store == "" {
		o.store = filepath.Join(dir, "store")
	}
	o.store, _ = filepath.Abs(o.store)
	h, err := ensureHistory(ctx, o, dir)
	if err != nil {
		return err
	}
	fmt.Printf("history: %d keys, full snapshot at revision %d, then %d puts of %d-byte values up to revision %d (made by %s)\n",
		h.Keys, h.SnapshotRevision, h.Puts, h.ValueSize, h.Revision, h.MadeBy)

	// Each binary is run from a copy written here: how much of a binary is resident once it
	// runs depends on how its file came to be in the page cache (a binary the linker just wrote
	// maps in larger pieces than a copy: 10-20 MiB more of the same binary was resident), so
	// every build's file is made the same way.
	for i, b := range o.builds {
		cp := filepath.Join(dir, "bin", b.name)
		if err := copyFile(b.bin, cp); err != nil {
			return err
		}
		o.builds[i].bin = cp
	}
	idle := map[string]int64{}
	for _, b := range o.builds {
		m, err := measure(ctx, b.bin, []string{"version"}, nil)
		if err != nil {
			return fmt.Errorf("%s version: %w", b.name, err)
		}
		idle[b.name] = m.maxRSS
		fmt.Printf("%s: `steward version` peak RSS %s\n", b.name, mib(m.maxRSS))
	}

	samples := map[string][]sample{}
	for i := 1; i <= o.runs; i++ {
		for _, b := range o.builds {
			out := filepath.Join(dir, fmt.Sprintf("restored-%s-%d", b.name, i))
			args := append([]string{"restore", "--store", "file://" + o.store, "--data-dir", filepath.Join(out, "m.etcd"),
				"--name", "restored", "--initial-advertise-peer-urls", "http://127.0.0.1:2380", "-o", "json"}, o.restoreArgs...)
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			m, err := measure(ctx, b.bin, args, os.Stderr)
			if err != nil {
				return fmt.Errorf("%s restore (run %d): %w", b.name, i, err)
			}
			var res struct {
				Revision  int64 `json:"revision"`
				Revisions int64 `json:"revisions"`
				Events    int64 `json:"events"`
				Trimmed   int64 `json:"trimmed"`
			}
			if err := json.Unmarshal(m.stdout, &res); err != nil {
				return fmt.Errorf("%s restore (run %d): output: %w: %s", b.name, i, err, m.stdout)
			}
			if res.Revision != h.Revision {
				return fmt.Errorf("%s restore (run %d): restored revision %d, want %d", b.name, i, res.Revision, h.Revision)
			}
			s := sample{sampleMem: m.sampleMem, wall: m.wall, maxRSS: m.maxRSS, cpu: m.cpu, replay: m.replay}
			samples[b.name] = append(samples[b.name], s)
			fmt.Printf("run %d %-10s %7.2fs replay %6s cpu %6.2fs peak RSS %s (at the peak: anon %s, file %s; max anon %s, max file %s); %d revisions, %d events, %d skipped\n",
				i, b.name, m.wall.Seconds(), roundOrDash(m.replay), m.cpu.Seconds(), mib(m.maxRSS), mib(m.anonAtPeak), mib(m.fileAtPeak), mib(m.maxAnon), mib(m.maxFile),
				res.Revisions, res.Events, res.Trimmed)
			if !o.keepRestored {
				if err := os.RemoveAll(out); err != nil {
					return err
				}
			}
		}
	}

	rep := result.Result{
		Benchmark: "restore-builds",
		Title:     fmt.Sprintf("steward restore of %d keys + %d delta revisions, by build", h.Keys, h.Puts),
		Params: map[string]any{"keys": h.Keys, "puts": h.Puts, "valueSize": h.ValueSize, "runs": o.runs,
			"builds": o.builds[0].name + func() string {
				var s string
				for _, b := range o.builds[1:] {
					s += "," + b.name
				}
				return s
			}()},
	}
	ref := o.builds[0].name
	fmt.Printf("\n%-10s %-20s %-20s %-20s %-24s %-22s %-22s %s\n", "build", "wall s (min–max)", "replay s", "CPU s", "peak RSS MiB", "anon at peak", "file at peak", "idle RSS")
	for _, b := range o.builds {
		ss := samples[b.name]
		fmt.Printf("%-10s %-20s %-20s %-20s %-24s %-22s %-22s %s\n", b.name,
			spread(ss, func(s sample) float64 { return s.wall.Seconds() }),
			spread(ss, func(s sample) float64 { return s.replay.Seconds() }),
			spread(ss, func(s sample) float64 { return s.cpu.Seconds() }),
			spread(ss, func(s sample) float64 { return float64(s.maxRSS) / (1 << 20) }),
			spread(ss, func(s sample) float64 { return float64(s.anonAtPeak) / (1 << 20) }),
			spread(ss, func(s sample) float64 { return float64(s.fileAtPeak) / (1 << 20) }),
			mib(idle[b.name]))
		if b.name == ref {
			continue
		}
		rs := samples[ref]
		wall := func(s sample) float64 { return s.wall.Seconds() }
		replay := func(s sample) float64 { return s.replay.Seconds() }
		peak := func(s sample) float64 { return result.MiB(s.maxRSS) }
		cpu := func(s sample) float64 { return s.cpu.Seconds() }
		rep.Rows = append(rep.Rows,
			result.Compare("restore wall time", "s", b.name, median(ss, wall), ref, median(rs, wall)).WithSpread("%s s", spread(ss, wall)),
			result.Compare("replay phase", "s", b.name, median(ss, replay), ref, median(rs, replay)).WithSpread("%s s", spread(ss, replay)),
			result.Compare("restore CPU time", "s", b.name, median(ss, cpu), ref, median(rs, cpu)).WithSpread("%s s", spread(ss, cpu)),
			result.Compare("peak RSS", "MiB", b.name, median(ss, peak), ref, median(rs, peak)).WithSpread("%s MiB", spread(ss, peak)),
		)
	}
	rep.Notes = append(rep.Notes, "medians of the runs; restores alternate between the builds in one run; peak RSS is the exited process's maxrss")
	return rep.Print(os.Stdout)
}

type sampleMem struct {
	anonAtPeak, fileAtPeak int64 // RssAnon and RssFile+RssShmem when VmRSS was highest
	maxAnon, maxFile       int64
}

type sample struct {
	sampleMem
	wall, cpu, replay time.Duration
	maxRSS            int64
}

type measured struct {
	sampleMem
	wall, cpu, replay time.Duration
	maxRSS            int64
	stdout            []byte
}

var replayLine = regexp.MustCompile(`(?m)^replay .*\(([0-9.]+[a-zµ]+)\)\s*$`)

// measure runs bin args to its end, sampling its memory every 10 ms.
func measure(ctx context.Context, bin string, args []string, echo *os.File) (measured, error) {
	var m measured
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return m, err
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		var peak int64
		for {
			if rss, anon, file, err := statusMem(cmd.Process.Pid); err == nil {
				if rss > peak {
					peak, m.anonAtPeak, m.fileAtPeak = rss, anon, file
				}
				m.maxAnon, m.maxFile = max(m.maxAnon, anon), max(m.maxFile, file)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	err := cmd.Wait()
	m.wall = time.Since(start)
	close(done)
	wg.Wait()
	if echo != nil && stderr.Len() > 0 {
		echo.Write(stderr.Bytes())
	}
	if err != nil {
		return m, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		m.maxRSS = ru.Maxrss << 10
	}
	m.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if sm := replayLine.FindSubmatch(stderr.Bytes()); sm != nil {
		m.replay, _ = time.ParseDuration(string(sm[1]))
	}
	m.stdout = stdout.Bytes()
	return m, nil
}

// statusMem reads VmRSS, RssAnon and RssFile+RssShmem of pid.
func statusMem(pid int) (rss, anon, file int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			rss = n << 10
		case "RssAnon":
			anon = n << 10
		case "RssFile", "RssShmem":
			file += n << 10
		}
	}
	return rss, anon, file, nil
}

// ensureHistory makes the history in o.store unless history.json says it holds it.
func ensureHistory(ctx context.Context, o options, dir string) (history, error) {
	var h history
	meta := o.store + ".history.json"
	if b, err := os.ReadFile(meta); err == nil {
		if err := json.Unmarshal(b, &h); err != nil {
			return h, fmt.Errorf("%s: %w", meta, err)
		}
		if h.Keys != o.keys || h.Puts != o.puts || h.ValueSize != o.vsize {
			return h, fmt.Errorf("%s holds %d keys + %d puts of %d bytes, not the %d + %d of %d asked for: give another -store",
				o.store, h.Keys, h.Puts, h.ValueSize, o.keys, o.puts, o.vsize)
		}
		return h, nil
	}
	if _, err := os.Stat(o.store); err == nil {
		return h, fmt.Errorf("%s exists without %s: remove it or give another -store", o.store, meta)
	}
	t0 := time.Now()
	h, err := makeHistory(ctx, o, filepath.Join(dir, "cluster"))
	if err != nil {
		return h, fmt.Errorf("make the history: %w", err)
	}
	fmt.Printf("history made in %v\n", time.Since(t0).Round(time.Second))
	b, _ := json.MarshalIndent(h, "", "  ")
	return h, os.WriteFile(meta, b, 0o644)
}

type localStatus struct {
	Members []struct {
		ClientURL string `json:"clientURL"`
		Revision  int64  `json:"revision"`
	} `json:"members"`
	Backup *struct {
		LatestFullRevision  int64 `json:"latestFullRevision"`
		LatestDeltaRevision int64 `json:"latestDeltaRevision"`
	} `json:"backup"`
}

func status(ctx context.Context, steward, dir string) (localStatus, error) {
	var st localStatus
	out, err := localcluster.StatusRun(ctx, steward, "--dir", dir, "-o", "json")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("local status: %w", err)
	}
	if len(st.Members) == 0 || st.Backup == nil {
		return st, fmt.Errorf("local status: no member or no backup: %s", out)
	}
	return st, nil
}

func makeHistory(ctx context.Context, o options, dir string) (h history, err error) {
	h = history{Keys: o.keys, Puts: o.puts, ValueSize: o.vsize, MadeBy: o.maker, Made: time.Now().UTC()}
	// One member; everything kept; no scheduled full snapshot in the middle of the puts.
	c, err := localcluster.Up(ctx, o.maker, dir, localcluster.Options{
		Members: 1, BasePort: 24790, Backup: "file://" + o.store,
		SidecarArgs: []string{"--retention=", "--full-schedule=@yearly"},
	})
	if err != nil {
		return h, err
	}
	defer c.PurgeOnReturn(false, &err)
	st, err := status(ctx, o.maker, dir)
	if err != nil {
		return h, err
	}
	ep := st.Members[0].ClientURL
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		return h, err
	}
	defer cli.Close()

	// The snapshot's keys in transactions of 100 (fast, so the delta being captured still runs
	// when the puts begin: the first delta holds the snapshot's events too, which the restore
	// skips).
	if err := putMany(ctx, cli, 0, o.keys, o.vsize, 100); err != nil {
		return h, err
	}
	if _, err := localcluster.Run(ctx, o.maker, "backup", "save", "--endpoints", ep, "--store", "file://"+o.store); err != nil {
		return h, err
	}
	if st, err = status(ctx, o.maker, dir); err != nil {
		return h, err
	}
	h.SnapshotRevision = st.Members[0].Revision
	fmt.Printf("%d keys written; full snapshot at revision %d\n", o.keys, h.SnapshotRevision)
	t0 := time.Now()
	if err := putMany(ctx, cli, o.keys, o.puts, o.vsize, 1); err != nil {
		return h, err
	}
	fmt.Printf("%d puts in %v\n", o.puts, time.Since(t0).Round(time.Millisecond))
	resp, err := cli.Get(ctx, "x")
	if err != nil {
		return h, err
	}
	h.Revision = resp.Header.Revision
	deadline := time.Now().Add(5 * time.Minute)
	for {
		st, err := status(ctx, o.maker, dir)
		if err == nil && st.Backup.LatestDeltaRevision >= h.Revision {
			break
		}
		if time.Now().After(deadline) {
			return h, fmt.Errorf("the deltas did not reach revision %d within 5 minutes (%v, %+v)", h.Revision, err, st.Backup)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return h, nil
}

// putMany puts keys from..from+n-1 with random lowercase values, perTxn in a transaction
// (one revision), 16 requests at a time.
func putMany(ctx context.Context, cli *clientv3.Client, from, n, vsize, perTxn int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(from), uint64(w)))
			v := make([]byte, vsize)
			for {
				i := int(next.Add(int64(perTxn))) - perTxn
				if i >= n {
					return
				}
				var ops []clientv3.Op
				for k := i; k < min(i+perTxn, n); k++ {
					for j := range v {
						v[j] = byte('a' + rnd.IntN(26))
					}
					ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/bench/%08d", from+k), string(v)))
				}
				if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func copyFile(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", from, err)
	}
	return out.Close()
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func roundOrDash(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func spread(ss []sample, f func(sample) float64) string {
	if len(ss) == 0 {
		return "-"
	}
	var vs []float64
	for _, s := range ss {
		vs = append(vs, f(s))
	}
	sort.Float64s(vs)
	return fmt.Sprintf("%.2f (%.2f–%.2f)", vs[len(vs)/2], vs[0], vs[len(vs)-1])
}

func median(ss []sample, f func(sample) float64) float64 {
	var vs []float64
	for _, s := range ss {
		vs = append(vs, f(s))
	}
	sort.Float64s(vs)
	if len(vs) == 0 {
		return 0
	}
	return vs[len(vs)/2]
}
