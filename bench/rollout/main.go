// Command rollout measures what a rolling restart of a 3-member cluster does to its writers
// (issue 15, "Benchmark"): `steward local upgrade` with the leader last after moving its
// leadership (the default) against the same rollout with the leader restarted as it leads
// (`--leader-update restart`: the cluster elects another). Both restart the followers first,
// one at a time, each healthy and caught up before the next.
//
//	go run ./bench/rollout -steward bin/steward -rounds 3
//
// It starts a real 3-member local cluster (`steward local up`, backups off) with -size of
// data, and for each rollout changes one etcd flag (snapshot-count) so every member restarts.
// Writers put at -rate per second (open loop, 16 writers bound to the three endpoints); the
// measures are the longest time no write succeeded, the longest one writer waited, the
// failed writes and the latency p99, while the rollout ran. The methods alternate in order
// across -rounds.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-steward/steward/bench/internal/load"
	"github.com/etcd-steward/steward/bench/internal/program"
	"github.com/etcd-steward/steward/bench/internal/result"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
)

type options struct {
	steward string
	size    int64
	rate    float64
	rounds  int
}

func main() {
	var o options
	p := program.New("rollout benchmark")
	p.Binary(&o.steward, "steward", "bin/steward", "steward binary")
	p.Size(&o.size, "size", "64MiB", "data written before the rollouts")
	flag.Float64Var(&o.rate, "rate", 100, "writes per second during each rollout")
	flag.IntVar(&o.rounds, "rounds", 2, "rounds; each rolls the cluster with both methods")
	p.WorkDir(nil, "")
	p.Main(func(ctx context.Context, dir string) error { return run(ctx, o, dir) })
}

func run(ctx context.Context, o options, dir string) error {
	start := time.Now()
	c, err := localcluster.Up(ctx, o.steward, filepath.Join(dir, "cluster"), localcluster.Options{Timeout: 3 * time.Minute, Members: 3, Backup: "none",
		SidecarArgs: []string{"--defrag-schedule=off"}})
	if err != nil {
		return err
	}
	defer c.Purge(context.Background()) //nolint:errcheck
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	eps := st.Endpoints()
	fill := load.Config{Endpoints: eps, Conns: 4, Workers: 32, ValueSize: 4096, Seed: 1, Prefix: "data/"}
	fmt.Printf("writing %s\n", result.Human(o.size))
	if _, err := load.Fill(ctx, fill, eps[0], o.size, 30*time.Minute); err != nil {
		return err
	}

	methods := []struct{ name, leaderUpdate string }{
		{"steward local upgrade: leader last, after moving leadership", "moveLeader"},
		{"steward local upgrade --leader-update restart: leader last, restarted as it leads", "restart"},
	}
	results := make([][]load.Disruption, len(methods))
	n := 0
	for r := 0; r < o.rounds; r++ {
		for k := range methods {
			i := (k + r) % len(methods) // alternate which goes first
			n++
			var out []byte
			d, err := load.During(ctx, eps, o.rate, func(ctx context.Context) (err error) {
				// A new snapshot-count each time: every member runs an outdated spec.
				out, err = localcluster.Run(ctx, o.steward, "local", "upgrade", "--dir", c.Dir, "--skip-snapshot",
					"--leader-update", methods[i].leaderUpdate, "--set-flag", fmt.Sprintf("snapshot-count=%d", 10000+n))
				return err
			})
			if err != nil {
				return fmt.Errorf("%s: %w", methods[i].name, err)
			}
			fmt.Printf("round %d, %s: %s; %s\n  %s\n", r+1, methods[i].name, d.Took.Round(time.Millisecond), d,
				strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "\n  "))
			results[i] = append(results[i], d)
		}
	}

	ms := func(f func(load.Disruption) time.Duration) func(load.Disruption) float64 {
		return func(d load.Disruption) float64 { return float64(f(d).Microseconds()) / 1000 }
	}
	rounds := result.Rounds[load.Disruption]{OursName: methods[0].name, RefName: methods[1].name, Ours: results[0], Ref: results[1]}
	res := result.Result{Benchmark: "rollout", Title: fmt.Sprintf("Rolling restart of a 3-member cluster holding %s, under %g writes/s", result.Human(o.size), o.rate),
		Params: map[string]any{"size": result.Human(o.size), "rate": o.rate, "rounds": o.rounds}}
	row := func(measure, unit string, f func(load.Disruption) float64, goal string, met func(o, r float64) bool) {
		res.Rows = append(res.Rows, rounds.Row(measure, unit, f, goal, met))
	}
	row("longest time with no successful write", "ms", ms(func(d load.Disruption) time.Duration { return d.Stall }), "shorter than restarting the leader as it leads", func(o, r float64) bool { return o < r })
	row("longest wait of one writer", "ms", ms(func(d load.Disruption) time.Duration { return d.Gap }), "", nil)
	row("failed writes", "writes", func(d load.Disruption) float64 { return float64(d.Failed) }, "", nil)
	row("write latency p99", "ms", ms(func(d load.Disruption) time.Duration { return d.P99 }), "", nil)
	row("time to roll all three", "s", func(d load.Disruption) float64 { return d.Took.Seconds() }, "", nil)
	res.Notes = append(res.Notes, "Medians over the rounds; each rollout changes etcd's snapshot-count, so every member restarts on a new spec; no full snapshot first (--skip-snapshot).",
		"The writers put 256 B values at a fixed rate, each bound to one member's endpoint (as a controller's client is): a writer bound to a restarting member waits for it; the longest time with no successful write is what every client saw at once (an election).")
	fmt.Printf("the run took %s\n", time.Since(start).Round(time.Second))
	return res.Print(os.Stdout)
}
