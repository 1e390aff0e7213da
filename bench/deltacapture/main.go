// Command deltacapture measures what continuous delta capture costs the cluster's writes:
// two real 3-member local clusters side by side, one with backups on (`--backup file://…`,
// the leader's sidecar watches every revision and stores deltas) and one with backups off
// (`--backup none`), driven in alternating phases by the same load: a fixed number of workers
// doing single puts with fixed key and value sizes (closed loop), and optionally a fixed
// rate (open loop) to compare latency and CPU at equal throughput.
//
//	go run ./bench/deltacapture -steward bin/steward -phase 20s -rounds 3
//
// Each round loads both clusters one after the other (the order alternates between rounds),
// so that machine noise falls on both. The last line of output is the JSON result (see
// bench/internal/result).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-steward/steward/bench/internal/load"
	"github.com/etcd-steward/steward/bench/internal/proc"
	"github.com/etcd-steward/steward/bench/internal/program"
	"github.com/etcd-steward/steward/bench/internal/result"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
)

type options struct {
	steward        string
	members        int
	workers, conns int
	valueSize      int
	keys           int
	phase, warmup  time.Duration
	rounds         int
	rate           float64
	sidecarArgs    []string
	keep           bool
}

func main() {
	var o options
	p := program.New("delta capture bench")
	p.Binary(&o.steward, "steward", "bin/steward", "steward binary")
	flag.IntVar(&o.members, "members", 3, "members of each cluster")
	flag.IntVar(&o.workers, "workers", 16, "concurrent puts (closed loop: each worker waits for its put)")
	flag.IntVar(&o.conns, "conns", 4, "client connections per cluster (the workers share them)")
	flag.IntVar(&o.valueSize, "value-size", 256, "value bytes of each put")
	flag.IntVar(&o.keys, "keys", 100_000, "key space the puts cycle over")
	flag.DurationVar(&o.phase, "phase", 20*time.Second, "duration of each measured phase")
	flag.DurationVar(&o.warmup, "warmup", 5*time.Second, "unmeasured load on each cluster before the first round")
	p.Rounds(&o.rounds, "rounds", 3, "rounds; each loads both clusters once")
	flag.Float64Var(&o.rate, "rate", 0, "if > 0, also run the rounds at this fixed rate (puts/s) and compare latency and CPU")
	p.List(&o.sidecarArgs, "sidecar-args", "extra sidecar flags for the backed-up cluster, comma-separated (e.g. --delta-period=5s)")
	p.WorkDir(&o.keep, "keep the clusters running and the work dir at the end")
	p.Check(func() error {
		if o.phase <= 0 {
			return errors.New("-phase must be positive")
		}
		return nil
	})
	p.Main(func(ctx context.Context, dir string) error { return run(ctx, o, dir) })
}

// target is one of the two clusters.
type target struct {
	name        string // "backups on" / "backups off"
	c           *localcluster.Cluster
	gen         *load.Generator
	etcdPIDs    []int
	sidecarPIDs []int
}

// phase is one measured load phase on one target.
type phase struct {
	load.Result
	etcdCPU, sidecarCPU time.Duration
}

func (p phase) String() string {
	return fmt.Sprintf("%s; CPU etcd %.2fs, sidecars %.2fs", p.Result.String(), p.etcdCPU.Seconds(), p.sidecarCPU.Seconds())
}

// cpuPer1k is CPU milliseconds per 1000 puts.
func (p phase) cpuPer1k(d time.Duration) float64 {
	return float64(d.Milliseconds()) * 1000 / float64(p.Puts)
}

func run(ctx context.Context, o options, dir string) (err error) {
	fmt.Printf("delta capture bench: two %d-member clusters in %s; %d workers, %d-byte values over %d keys; %d rounds of %v\n",
		o.members, dir, o.workers, o.valueSize, o.keys, o.rounds, o.phase)
	off := &target{name: "backups off"}
	on := &target{name: "backups on"}
	storeURL := "file://" + filepath.Join(dir, "store")
	for _, t := range []struct {
		t      *target
		sub    string
		backup string
		args   []string
	}{{off, "off", "none", nil}, {on, "on", storeURL, o.sidecarArgs}} {
		c, upErr := localcluster.Up(ctx, o.steward, filepath.Join(dir, t.sub), localcluster.Options{Timeout: 3 * time.Minute, Members: o.members, Backup: t.backup, SidecarArgs: t.args})
		if upErr != nil {
			return upErr
		}
		t.t.c = c
		defer c.PurgeOnReturn(o.keep, &err) // err: run's result, not a variable of the loop
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		t.t.etcdPIDs, t.t.sidecarPIDs = st.PIDs()
		g, err := load.New(load.Config{Endpoints: st.Endpoints(), Conns: o.conns, Workers: o.workers,
			Prefix: "/bench/delta/", Keys: o.keys, ValueSize: o.valueSize, Seed: 7})
		if err != nil {
			return err
		}
		defer g.Close()
		t.t.gen = g
	}
	if err := waitBackupReady(ctx, on.c, 2*time.Minute); err != nil {
		return err
	}

	for _, t := range []*target{off, on} {
		r := t.gen.Run(ctx, o.warmup, nil)
		fmt.Printf("warm-up %s: %s\n", t.name, r)
	}
	closedOff, closedOn, err := rounds(ctx, o, off, on, 0)
	if err != nil {
		return err
	}
	var rateOff, rateOn []phase
	if o.rate > 0 {
		if rateOff, rateOn, err = rounds(ctx, o, off, on, o.rate); err != nil {
			return err
		}
	}
	backupNote, err := backupState(ctx, on.c)
	if err != nil {
		return err
	}
	fmt.Println(backupNote)
	res := report(o, closedOff, closedOn, rateOff, rateOn, backupNote)
	return res.Print(os.Stdout)
}

// rounds runs o.rounds rounds on both targets, alternating which goes first, at a fixed rate
// if rate > 0.
func rounds(ctx context.Context, o options, off, on *target, rate float64) (offs, ons []phase, err error) {
	mode := "closed loop"
	if rate > 0 {
		mode = fmt.Sprintf("fixed rate %.0f/s", rate)
	}
	for i := 0; i < o.rounds; i++ {
		order := []*target{off, on}
		if i%2 == 1 {
			order = []*target{on, off}
		}
		for _, t := range order {
			p, err := measure(ctx, t, o.phase, rate)
			if err != nil {
				return nil, nil, err
			}
			fmt.Printf("round %d (%s) %s: %s\n", i+1, mode, t.name, p)
			// A rare timeout on an overloaded machine is reported, not fatal; more is a failure.
			if p.Errors > p.Puts/100 {
				return nil, nil, fmt.Errorf("%s: %d of %d puts failed, first: %w", t.name, p.Errors, p.Puts+p.Errors, p.FirstError)
			}
			if t == off {
				offs = append(offs, p)
			} else {
				ons = append(ons, p)
			}
		}
	}
	return offs, ons, nil
}

func measure(ctx context.Context, t *target, d time.Duration, rate float64) (phase, error) {
	e0, err1 := proc.TotalCPU(t.etcdPIDs)
	s0, err2 := proc.TotalCPU(t.sidecarPIDs)
	if err := errors.Join(err1, err2); err != nil {
		return phase{}, fmt.Errorf("%s: a member process is gone (restarted?): %w", t.name, err)
	}
	t.gen.SetRate(rate)
	r := t.gen.Run(ctx, d, nil)
	e1, err1 := proc.TotalCPU(t.etcdPIDs)
	s1, err2 := proc.TotalCPU(t.sidecarPIDs)
	if err := errors.Join(err1, err2); err != nil {
		return phase{}, fmt.Errorf("%s: a member process is gone (restarted?): %w", t.name, err)
	}
	return phase{Result: r, etcdCPU: e1 - e0, sidecarCPU: s1 - s0}, nil
}

func waitBackupReady(ctx context.Context, c *localcluster.Cluster, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := "no status"
	for time.Now().Before(deadline) {
		st, err := c.Status(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case st.Backup == nil:
			return fmt.Errorf("the cluster in %s reports no backup configuration", c.Dir)
		case st.Backup.Ready:
			return nil
		default:
			last = fmt.Sprintf("not ready; last error %q", st.Backup.LastError)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("backups of the cluster in %s not ready after %v: %s", c.Dir, timeout, last)
}

// backupState checks that delta capture kept up: it waits (up to a minute) until the stored
// deltas reach the revision the cluster had when the load stopped, and reports how long that took.
func backupState(ctx context.Context, c *localcluster.Cluster) (string, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return "", err
	}
	li := st.LeaderIndex()
	if li < 0 || st.Backup == nil {
		return "", fmt.Errorf("the backed-up cluster has no leader or no backup status")
	}
	rev := st.Members[li].Revision
	start := time.Now()
	for {
		if st.Backup.LatestDeltaRevision >= rev {
			lag := time.Since(start)
			return fmt.Sprintf("backups kept up: stored deltas reached revision %d %v after the load stopped (failures %d)",
				rev, lag.Round(100*time.Millisecond), st.Backup.Failures), nil
		}
		if time.Since(start) > time.Minute {
			return "", fmt.Errorf("stored deltas at revision %d a minute after the load stopped at %d (last error %q)", st.Backup.LatestDeltaRevision, rev, st.Backup.LastError)
		}
		time.Sleep(200 * time.Millisecond)
		if st, err = c.Status(ctx); err != nil {
			return "", err
		}
	}
}

func report(o options, off, on, rateOff, rateOn []phase, backupNote string) result.Result {
	rates := func(ps []phase) []float64 {
		var out []float64
		for _, p := range ps {
			out = append(out, p.Rate())
		}
		return out
	}
	paired := func(a, b []phase, f func(p phase) float64) result.Stats {
		var out []float64
		for i := range a {
			out = append(out, f(a[i])/f(b[i]))
		}
		return result.Summarise(out)
	}
	med := func(ps []phase, f func(p phase) float64) float64 {
		var xs []float64
		for _, p := range ps {
			xs = append(xs, f(p))
		}
		return result.Summarise(xs).Median
	}
	p99 := func(p phase) float64 { return float64(p.P99) / 1e6 }
	p50 := func(p phase) float64 { return float64(p.P50) / 1e6 }
	cpuAll := func(p phase) float64 { return p.cpuPer1k(p.etcdCPU + p.sidecarCPU) }
	cpuSide := func(p phase) float64 { return p.cpuPer1k(p.sidecarCPU) }
	cpuEtcd := func(p phase) float64 { return p.cpuPer1k(p.etcdCPU) }

	sOn, sOff := result.Summarise(rates(on)), result.Summarise(rates(off))
	ratio := paired(on, off, phase.Rate)
	res := result.Result{
		Benchmark: "delta-capture-overhead",
		Title:     fmt.Sprintf("Write throughput of a %d-member cluster, delta capture on vs off", o.members),
		Params: map[string]any{
			"members":   o.members,
			"workers":   o.workers,
			"conns":     o.conns,
			"valueSize": o.valueSize,
			"keys":      o.keys,
			"phase":     o.phase.String(),
			"rounds":    o.rounds,
			"store":     "file://",
		},
	}
	if len(o.sidecarArgs) > 0 {
		res.Params["sidecarArgs"] = strings.Join(o.sidecarArgs, " ")
	}
	row := result.Compare("write throughput (closed loop)", "puts/s", "backups on", sOn.Median, "backups off", sOff.Median)
	row.Ratio = ratio.Median
	res.Rows = append(res.Rows, row.WithGoal("ratio ≥ 0.95", ratio.Median >= 0.95).
		WithSpread("per-round ratio %.3f–%.3f over %d rounds, ratio of the totals %.3f; on %.0f–%.0f (±%.1f%%), off %.0f–%.0f (±%.1f%%)",
			ratio.Min, ratio.Max, ratio.N, total(on)/total(off), sOn.Min, sOn.Max, sOn.StdDevPercent, sOff.Min, sOff.Max, sOff.StdDevPercent))
	lat := result.Compare("put latency p99 (closed loop)", "ms", "backups on", med(on, p99), "backups off", med(off, p99))
	res.Rows = append(res.Rows, lat.WithSpread("median of %d phases each; per-round ratio %s", len(on), rangeOf(paired(on, off, p99))))
	cpu := result.Compare("cluster CPU per 1000 puts (etcd + sidecars)", "CPU ms", "backups on", med(on, cpuAll), "backups off", med(off, cpuAll))
	res.Rows = append(res.Rows, cpu.WithSpread("sidecars alone: on %.1f, off %.1f CPU ms per 1000 puts; etcd alone: on %.0f, off %.0f",
		med(on, cpuSide), med(off, cpuSide), med(on, cpuEtcd), med(off, cpuEtcd)))
	if len(rateOn) > 0 {
		mode := fmt.Sprintf("(fixed rate %.0f/s)", o.rate)
		a := result.Compare("achieved rate "+mode, "puts/s", "backups on", med(rateOn, phase.Rate), "backups off", med(rateOff, phase.Rate))
		res.Rows = append(res.Rows, a)
		for _, l := range []struct {
			name string
			f    func(phase) float64
		}{{"put latency p50 " + mode, p50}, {"put latency p99 " + mode, p99}} {
			r := result.Compare(l.name, "ms", "backups on", med(rateOn, l.f), "backups off", med(rateOff, l.f))
			res.Rows = append(res.Rows, r.WithSpread("medians of %d phases each; per-round ratio %s", len(rateOn), rangeOf(paired(rateOn, rateOff, l.f))))
		}
		c := result.Compare("cluster CPU per 1000 puts "+mode, "CPU ms", "backups on", med(rateOn, cpuAll), "backups off", med(rateOff, cpuAll))
		res.Rows = append(res.Rows, c.WithSpread("sidecars alone: on %.1f, off %.1f CPU ms per 1000 puts; etcd alone: on %.0f, off %.0f",
			med(rateOn, cpuSide), med(rateOff, cpuSide), med(rateOn, cpuEtcd), med(rateOff, cpuEtcd)))
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("Both clusters run at the same time on the same machine; each round loads one, then the other (order alternating), %v each, after a %v warm-up of each. The throughput ratio is the median of the per-round ratios on/off; the other rows compare medians.", o.phase, o.warmup),
		fmt.Sprintf("Load: %d workers over %d clients (all members' endpoints), each doing one Put of a %d-byte value (random hex) at a time, keys of fixed size cycling over %d keys.", o.workers, o.conns, o.valueSize, o.keys),
		"CPU is user+system time of the members' etcd and sidecar processes over the phase (/proc/PID/stat); the load generator's own CPU is not counted.",
		backupNote)
	var errs [2]int64
	for i, ps := range [][]phase{append(on, rateOn...), append(off, rateOff...)} {
		for _, p := range ps {
			errs[i] += p.Errors
		}
	}
	if errs[0]+errs[1] > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("Failed puts (timeouts under load), not counted: %d with backups on, %d off.", errs[0], errs[1]))
	}
	return res
}

// total is the overall rate of the phases: all puts over all their time.
func total(ps []phase) float64 {
	var puts int64
	var d time.Duration
	for _, p := range ps {
		puts += p.Puts
		d += p.Elapsed
	}
	return float64(puts) / d.Seconds()
}

func rangeOf(s result.Stats) string { return fmt.Sprintf("%.2f–%.2f", s.Min, s.Max) }
