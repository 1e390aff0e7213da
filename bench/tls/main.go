// Command tls measures what mutual TLS costs a cluster's writers (issue 13, "Benchmark"):
// the same 3-member `steward local` cluster made with `--tls` (client and peer traffic mutual
// TLS of its own CA) and without, one after the other in one run.
//
//	go run ./bench/tls -steward bin/steward -duration 20s -rounds 2
//
// Each round starts a cluster (backups off, so that only etcd's traffic is measured), warms
// it up, and runs two phases through all three members' endpoints: -workers writers putting
// as fast as they go (throughput), then a fixed -rate of puts (latency p50 and p99, from each
// put's scheduled start). The two modes alternate which goes first across rounds; the rows
// are medians over the rounds, TLS as Steward's figure and plain text as the reference.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/bench/internal/load"
	"github.com/etcd-steward/steward/bench/internal/program"
	"github.com/etcd-steward/steward/bench/internal/result"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
)

type options struct {
	steward   string
	duration  time.Duration
	rounds    int
	workers   int
	rate      float64
	valueSize int
}

func main() {
	var o options
	p := program.New("tls benchmark")
	p.Binary(&o.steward, "steward", "bin/steward", "steward binary")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "length of each phase")
	flag.IntVar(&o.rounds, "rounds", 2, "rounds; each measures both modes")
	flag.IntVar(&o.workers, "workers", 32, "concurrent writers of the throughput phase")
	flag.Float64Var(&o.rate, "rate", 500, "puts per second of the latency phase")
	flag.IntVar(&o.valueSize, "value-size", 1024, "value size")
	p.WorkDir(nil, "")
	p.Main(func(ctx context.Context, dir string) error { return run(ctx, o, dir) })
}

// measured is one mode's round.
type measured struct {
	throughput, latency load.Result
}

func run(ctx context.Context, o options, dir string) error {
	start := time.Now()
	modes := []struct {
		name string
		tls  bool
	}{{"mutual TLS (local up --tls)", true}, {"plain text", false}}
	results := make([][]measured, len(modes))
	for r := 0; r < o.rounds; r++ {
		for k := range modes {
			i := (k + r) % len(modes) // alternate which goes first
			m, err := measure(ctx, o, filepath.Join(dir, fmt.Sprintf("r%d-%d", r, i)), modes[i].tls)
			if err != nil {
				return fmt.Errorf("%s: %w", modes[i].name, err)
			}
			fmt.Printf("round %d, %s:\n  throughput: %s\n  latency:    %s\n", r+1, modes[i].name, m.throughput, m.latency)
			results[i] = append(results[i], m)
		}
	}
	rounds := result.Rounds[measured]{OursName: modes[0].name, RefName: modes[1].name, Ours: results[0], Ref: results[1]}
	res := result.Result{Benchmark: "tls", Title: fmt.Sprintf("Writes to a 3-member cluster with mutual TLS and without (%s values)", result.Human(int64(o.valueSize))),
		Params: map[string]any{"duration": o.duration.String(), "rounds": o.rounds, "workers": o.workers, "rate": o.rate, "valueSize": o.valueSize}}
	ms := func(f func(load.Result) time.Duration) func(measured) float64 {
		return func(m measured) float64 { return float64(f(m.latency).Microseconds()) / 1000 }
	}
	res.Rows = append(res.Rows,
		rounds.Row("write throughput", "puts/s", func(m measured) float64 { return m.throughput.Rate() }, "", nil),
		rounds.Row(fmt.Sprintf("write latency p50 at %g puts/s", o.rate), "ms", ms(func(r load.Result) time.Duration { return r.P50 }), "", nil),
		rounds.Row(fmt.Sprintf("write latency p99 at %g puts/s", o.rate), "ms", ms(func(r load.Result) time.Duration { return r.P99 }), "", nil),
		rounds.Row("failed writes", "writes", func(m measured) float64 { return float64(m.throughput.Errors + m.latency.Errors) }, "none", func(o, _ float64) bool { return o == 0 }),
	)
	res.Notes = append(res.Notes, fmt.Sprintf("Medians over %d rounds; every round starts a new cluster of each mode, backups off, and warms it up for 3 s. Throughput: %d writers over 4 connections spread over the three members, as fast as they go, for %s. Latency: %g puts/s for %s, measured from each put's scheduled start.",
		o.rounds, o.workers, o.duration, o.rate, o.duration),
		"Both modes run on this one machine: the TLS cost measured is the CPU of encryption and handshakes, with no network in between.")
	fmt.Printf("the run took %s\n", time.Since(start).Round(time.Second))
	return res.Print(os.Stdout)
}

// measure starts a cluster in dir, runs the two phases against it and stops it.
func measure(ctx context.Context, o options, dir string, tls bool) (measured, error) {
	c, err := localcluster.Up(ctx, o.steward, dir, localcluster.Options{Timeout: 3 * time.Minute, Members: 3, Backup: "none", TLS: tls})
	if err != nil {
		return measured{}, err
	}
	defer c.Purge(context.Background()) //nolint:errcheck
	st, err := c.Status(ctx)
	if err != nil {
		return measured{}, err
	}
	if tls != (st.Cluster.ClientTLSDir != "") {
		return measured{}, fmt.Errorf("the cluster in %s: TLS %t asked, client certificates %q", dir, tls, st.Cluster.ClientTLSDir)
	}
	g, err := load.New(load.Config{Endpoints: st.Endpoints(), TLSDir: st.Cluster.ClientTLSDir, Conns: 4, Workers: o.workers,
		Prefix: "bench/", Keys: 10000, ValueSize: o.valueSize, Seed: 1})
	if err != nil {
		return measured{}, err
	}
	defer g.Close()
	g.Run(ctx, 3*time.Second, nil) // warm up: connections, leases of the first keys
	var m measured
	m.throughput = g.Run(ctx, o.duration, nil)
	g.SetRate(o.rate)
	m.latency = g.Run(ctx, o.duration, nil)
	return m, nil
}
