// Command defrag measures what defragmenting a cluster does to its writers (issue 15,
// "Benchmark"): Steward's round (followers one at a time, the leader last after its
// leadership moved: `maintenance.Defragment`, as `steward defrag --all` and the leader's
// sidecar run it) against `etcdctl defrag --cluster`, which defragments every member in
// member-list order, the leader in place.
//
//	go run ./bench/defrag -steward bin/steward -etcdctl bin/etcdctl -size 1GiB -rounds 2
//
// It starts a real 3-member local cluster (`steward local up`, backups off, the sidecars'
// scheduled defragmentation off) and, before every measured defragmentation, makes each
// member's database about half free pages: it writes -size/2 of values under one prefix and
// -size/2 under another (once), deletes the first, compacts, and waits until every member
// counts the pages free. While each defragmentation runs, writers put at -rate per second
// (open loop, latency from the scheduled start), 16 writers spread over the three members'
// endpoints; the measure is the write latency p99, the failed writes and the longest time one
// writer waited between two successful writes, from the first defragmentation to the last. The two methods alternate in order across -rounds.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-steward/steward/bench/internal/load"
	"github.com/etcd-steward/steward/bench/internal/program"
	"github.com/etcd-steward/steward/bench/internal/result"
	"github.com/etcd-steward/steward/internal/maintenance"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

type options struct {
	steward, etcdctl string
	size             int64
	valueSize        int
	rate             float64
	rounds           int
	keep             bool
}

func main() {
	var o options
	p := program.New("defrag benchmark")
	p.Binary(&o.steward, "steward", "bin/steward", "steward binary")
	p.Binary(&o.etcdctl, "etcdctl", "bin/etcdctl", "etcdctl binary (the reference)")
	p.Size(&o.size, "size", "64MiB", "database size before the deletion (half of it becomes free pages)")
	flag.IntVar(&o.valueSize, "value-size", 4096, "value size of the fill")
	flag.Float64Var(&o.rate, "rate", 200, "writes per second during each defragmentation")
	flag.IntVar(&o.rounds, "rounds", 1, "rounds; each defragments with both methods")
	p.WorkDir(&o.keep, "leave the cluster (and the work dir) to look at it afterwards")
	p.Main(func(ctx context.Context, dir string) error { return run(ctx, o, dir) })
}

// measured is what the writers saw during one defragmentation.
type measured struct {
	load.Disruption
	detail string
}

func run(ctx context.Context, o options, dir string) error {
	start := time.Now()
	c, err := localcluster.Up(ctx, o.steward, filepath.Join(dir, "cluster"), localcluster.Options{Timeout: 3 * time.Minute, Members: 3, Backup: "none",
		SidecarArgs: []string{"--defrag-schedule=off"}})
	if err != nil {
		return err
	}
	if !o.keep {
		defer c.Purge(context.Background()) //nolint:errcheck
	}
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	eps := st.Endpoints()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()

	half := o.size / 2
	fillCfg := load.Config{Endpoints: eps, Conns: 4, Workers: 32, ValueSize: o.valueSize, Seed: 1}
	fillCfg.Prefix = "keep/"
	fmt.Printf("filling %s under keep/\n", result.Human(half))
	if _, err := load.Fill(ctx, fillCfg, eps[0], half, 30*time.Minute); err != nil {
		return err
	}

	methods := []struct {
		name string
		run  func(context.Context) (string, error)
	}{
		{"steward: leader last, after moving leadership", func(ctx context.Context) (string, error) {
			res, err := maintenance.Defragment(ctx, cli, maintenance.Options{Policy: maintenance.Policy{All: true}, MemberTimeout: 30 * time.Minute})
			var parts []string
			for _, m := range res.Members {
				p := fmt.Sprintf("%s %s→%s in %s", m.Name, result.Human(m.Before), result.Human(m.After), m.Duration.Round(time.Millisecond))
				if m.MovedTo != "" {
					p += " (leadership moved to " + m.MovedTo + ")"
				}
				parts = append(parts, p)
			}
			return strings.Join(parts, "; "), err
		}},
		{"etcdctl defrag --cluster: leader in place", func(ctx context.Context) (string, error) {
			cmd := exec.CommandContext(ctx, o.etcdctl, "defrag", "--cluster", "--endpoints", strings.Join(eps, ","), "--command-timeout", "30m")
			out, err := cmd.CombinedOutput()
			return strings.TrimSpace(strings.ReplaceAll(string(out), "\n", "; ")), err
		}},
	}
	results := make([][]measured, len(methods))
	for r := 0; r < o.rounds; r++ {
		for k := range methods {
			i := (k + r) % len(methods) // alternate which goes first
			if err := fragment(ctx, cli, fillCfg, eps, half); err != nil {
				return err
			}
			var m measured
			d, err := load.During(ctx, eps, o.rate, func(ctx context.Context) (err error) {
				m.detail, err = methods[i].run(ctx)
				if err != nil {
					err = errors.New(m.detail + ": " + err.Error())
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("%s: %w", methods[i].name, err)
			}
			m.Disruption = d
			fmt.Printf("round %d, %s: %s; %s\n  %s\n", r+1, methods[i].name, m.Took.Round(time.Millisecond), m.Disruption, m.detail)
			results[i] = append(results[i], m)
		}
	}

	ms := func(f func(measured) time.Duration) func(measured) float64 {
		return func(m measured) float64 { return float64(f(m).Microseconds()) / 1000 }
	}
	rounds := result.Rounds[measured]{OursName: methods[0].name, RefName: methods[1].name, Ours: results[0], Ref: results[1]}
	res := result.Result{Benchmark: "defrag", Title: fmt.Sprintf("Defragmentation of a 3-member cluster with %s databases, half of it free pages, under %g writes/s", result.Human(o.size), o.rate),
		Params: map[string]any{"dbSize": result.Human(o.size), "valueSize": o.valueSize, "rate": o.rate, "rounds": o.rounds}}
	row := func(measure, unit string, f func(measured) float64, goal string, met func(o, r float64) bool) {
		res.Rows = append(res.Rows, rounds.Row(measure, unit, f, goal, met))
	}
	row("longest time with no successful write", "ms", ms(func(m measured) time.Duration { return m.Stall }), "shorter than in place", func(o, r float64) bool { return o < r })
	row("longest wait of one writer", "ms", ms(func(m measured) time.Duration { return m.Gap }), "", nil)
	row("write latency p99", "ms", ms(func(m measured) time.Duration { return m.P99 }), "", nil)
	row("write latency max", "ms", ms(func(m measured) time.Duration { return m.Max }), "", nil)
	row("failed writes", "writes", func(m measured) float64 { return float64(m.Failed) }, "none", func(o, _ float64) bool { return o == 0 })
	row("time to defragment all three", "s", func(m measured) float64 { return m.Took.Seconds() }, "", nil)
	res.Notes = append(res.Notes, "Medians over the rounds; the writers put "+result.Human(int64(o.valueSize))+" values at a fixed rate through all three members' endpoints, latency measured from each write's scheduled start.",
		"The longest time with no successful write is what every client saw at once (a leader that stops its raft loop while it defragments in place stalls the whole cluster); the longest wait of one writer (each is bound to one member's endpoint, as a client such as a controller is) waited between two successful writes while the defragmentation ran: in place, the writers on the leader wait for its whole defragmentation.")
	fmt.Printf("the run took %s\n", time.Since(start).Round(time.Second))
	return res.Print(os.Stdout)
}

// fragment brings every member's database to about twice half, half of it free: half of
// new values under drop/, deleted and compacted away.
func fragment(ctx context.Context, cli *clientv3.Client, cfg load.Config, eps []string, half int64) error {
	members, err := maintenance.Observe(ctx, cli)
	if err != nil {
		return err
	}
	var size int64
	for _, m := range members {
		size = max(size, m.DBSize)
	}
	cfg.Prefix, cfg.Seed = "drop/", uint64(time.Now().UnixNano())
	fmt.Printf("fragmenting: writing %s under drop/, then deleting it\n", result.Human(half))
	if _, err := load.Fill(ctx, cfg, eps[0], size+half, 30*time.Minute); err != nil {
		return err
	}
	del, err := cli.Delete(ctx, "drop/", clientv3.WithPrefix())
	if err != nil {
		return err
	}
	if _, err := maintenance.Compact(ctx, cli, del.Header.Revision, 0); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		// Pages a compaction freed count as free once a later write commits.
		if _, err := cli.Put(ctx, "tick", time.Now().String()); err != nil {
			return err
		}
		members, err := maintenance.Observe(ctx, cli)
		if err != nil {
			return err
		}
		ready := true
		for _, m := range members {
			if m.Fragmented() < 0.4 {
				ready = false
			}
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("members not fragmented after 5 min: %+v", members)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
