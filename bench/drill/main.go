// Command drill measures a restore drill, the proof that a backup restores to exactly what
// the cluster holds (issue 11, item 4): Steward's `steward backup verify --restore
// --endpoints LEADER` against proving a snapshot with etcd's own tools (`etcdctl snapshot
// save`, `etcdutl snapshot restore`, `etcdutl hashkv`, `etcdctl endpoint hashkv --rev`), on
// the same 3-member cluster, while writers put at -rate per second.
//
//	go run ./bench/drill -steward bin/steward -etcdctl bin/etcdctl -etcdutl bin/etcdutl -size 64MiB -rounds 2
//
// It starts a real 3-member local cluster (`steward local up`) that backs up into a file://
// store, writes -size of data and waits until the backups hold it. Each round runs both ways
// in alternating order; each way is followed by a window as long with the same writers and
// nothing else (the baseline), so the write p99 a drill causes is read against the machine
// as it is at that moment. Measures: the time the drill took, the peak RSS of the processes
// it ran (the largest one), and the writers' p99 and failed writes during it. Ratios are
// Steward / etcd's tools, medians over the rounds. The last line of output is the JSON
// result (see bench/internal/result).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-steward/steward/bench/internal/load"
	"github.com/etcd-steward/steward/bench/internal/proc"
	"github.com/etcd-steward/steward/bench/internal/program"
	"github.com/etcd-steward/steward/bench/internal/result"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
)

type options struct {
	steward, etcdctl, etcdutl string
	size                      int64
	rate                      float64
	rounds                    int
}

func main() {
	var o options
	p := program.New("drill benchmark")
	p.Binary(&o.steward, "steward", "bin/steward", "steward binary")
	p.Binary(&o.etcdctl, "etcdctl", "bin/etcdctl", "stock etcdctl binary (make tools)")
	p.Binary(&o.etcdutl, "etcdutl", "bin/etcdutl", "stock etcdutl binary (make tools)")
	p.Size(&o.size, "size", "64MiB", "data written before the drills")
	flag.Float64Var(&o.rate, "rate", 200, "writes per second during each drill and baseline")
	flag.IntVar(&o.rounds, "rounds", 2, "rounds; each drills both ways")
	p.WorkDir(nil, "")
	p.Main(func(ctx context.Context, dir string) error { return run(ctx, o, dir) })
}

// measured is one drill: what it cost, and what the writers saw during it and during the
// baseline window after it.
type measured struct {
	took     time.Duration
	peakRSS  int64
	during   load.Disruption
	baseline load.Disruption
}

func run(ctx context.Context, o options, dir string) error {
	start := time.Now()
	storeURL := "file://" + filepath.Join(dir, "store")
	c, err := localcluster.Up(ctx, o.steward, filepath.Join(dir, "cluster"), localcluster.Options{Timeout: 3 * time.Minute, Members: 3, Backup: storeURL,
		SidecarArgs: []string{"--defrag-schedule=off", "--drill-schedule=off"}})
	if err != nil {
		return err
	}
	defer c.Purge(context.Background()) //nolint:errcheck
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	eps := st.Endpoints()
	fmt.Printf("writing %s\n", result.Human(o.size))
	fill := load.Config{Endpoints: eps, Conns: 4, Workers: 32, ValueSize: 4096, Seed: 1, Prefix: "data/"}
	if _, err := load.Fill(ctx, fill, eps[0], o.size, 30*time.Minute); err != nil {
		return err
	}
	// A full snapshot that holds the data, so both ways restore about the same database (the
	// writers' deltas follow it).
	if _, err := localcluster.Run(ctx, o.steward, "backup", "save", "--endpoints", eps[0], "--store", storeURL); err != nil {
		return err
	}

	ways := []struct {
		name  string
		drill func(ctx context.Context, leader, scratch string) (int64, error)
	}{
		{"steward backup verify --restore --endpoints (leader)", func(ctx context.Context, leader, scratch string) (int64, error) {
			return runRSS(ctx, o.steward, "backup", "verify", "--store", storeURL, "--restore", "--endpoints", leader, "--scratch-dir", scratch, "-o", "json")
		}},
		{"etcdctl snapshot save + etcdutl snapshot restore + etcdutl hashkv + etcdctl endpoint hashkv --rev", func(ctx context.Context, leader, scratch string) (int64, error) {
			return etcdDrill(ctx, o, leader, scratch)
		}},
	}
	results := make([][]measured, len(ways))
	for r := range o.rounds {
		for k := range ways {
			i := (k + r) % len(ways)
			st, err := c.Status(ctx)
			if err != nil {
				return err
			}
			li := st.LeaderIndex()
			if li < 0 {
				return fmt.Errorf("no leader")
			}
			scratch := filepath.Join(dir, fmt.Sprintf("scratch-%d-%d", r, i))
			if err := os.MkdirAll(scratch, 0o700); err != nil {
				return err
			}
			var m measured
			m.during, err = load.During(ctx, eps, o.rate, func(ctx context.Context) error {
				t0 := time.Now()
				rss, err := ways[i].drill(ctx, st.Members[li].ClientURL, scratch)
				m.took, m.peakRSS = time.Since(t0), rss
				return err
			})
			if err != nil {
				return fmt.Errorf("%s: %w", ways[i].name, err)
			}
			os.RemoveAll(scratch)
			if m.baseline, err = load.During(ctx, eps, o.rate, func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(m.took):
					return nil
				}
			}); err != nil {
				return err
			}
			fmt.Printf("round %d, %s: %s, peak RSS %.0f MiB; writers during: %s; baseline: %s\n", r+1, ways[i].name,
				m.took.Round(time.Millisecond), result.MiB(m.peakRSS), m.during, m.baseline)
			results[i] = append(results[i], m)
		}
	}

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	rounds := result.Rounds[measured]{OursName: ways[0].name, RefName: ways[1].name, Ours: results[0], Ref: results[1]}
	res := result.Result{Benchmark: "restore-drill", Title: fmt.Sprintf("Restore drill of a 3-member cluster holding %s, under %g writes/s", result.Human(o.size), o.rate),
		Params: map[string]any{"size": result.Human(o.size), "rate": o.rate, "rounds": o.rounds}}
	row := func(measure, unit string, f func(measured) float64, goal string, met func(o, r float64) bool) {
		res.Rows = append(res.Rows, rounds.Row(measure, unit, f, goal, met))
	}
	row("drill time", "s", func(m measured) float64 { return m.took.Seconds() }, "no slower than etcd's tools", func(o, r float64) bool { return o <= r })
	row("peak RSS of the largest process", "MiB", func(m measured) float64 { return result.MiB(m.peakRSS) }, "", nil)
	row("write p99 during the drill", "ms", func(m measured) float64 { return ms(m.during.P99) }, "", nil)
	row("write p99 during / baseline right after", "x", func(m measured) float64 { return ms(m.during.P99) / max(ms(m.baseline.P99), 0.001) }, "", nil)
	row("failed writes during the drill", "writes", func(m measured) float64 { return float64(m.during.Failed) }, "", nil)
	res.Notes = append(res.Notes,
		"Both ways prove the same thing: a backup restores to a database whose HashKV at its revision equals the live leader's at that revision. Steward's restores its chain (full snapshot plus deltas) from the store; etcd's tools take a new snapshot from the leader first.",
		"Peak RSS is the kernel's maxrss of each process the way ran; the row shows the largest one.")
	fmt.Printf("the run took %s\n", time.Since(start).Round(time.Second))
	return res.Print(os.Stdout)
}

// runRSS runs a command to its end and returns its peak RSS.
func runRSS(ctx context.Context, bin string, args ...string) (int64, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return proc.MaxRSS(cmd.ProcessState), nil
}

// etcdDrill proves a snapshot with etcd's own tools: a snapshot of the leader, restored into
// a data dir, its HashKV computed offline and compared with the leader's at the snapshot's
// revision. It returns the largest peak RSS of the four.
func etcdDrill(ctx context.Context, o options, leader, scratch string) (int64, error) {
	snap, data := filepath.Join(scratch, "snap.db"), filepath.Join(scratch, "data")
	var peak int64
	step := func(bin string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", filepath.Base(bin), strings.Join(args, " "), err)
		}
		peak = max(peak, proc.MaxRSS(cmd.ProcessState))
		return out, nil
	}
	if _, err := step(o.etcdctl, "--endpoints="+leader, "snapshot", "save", snap); err != nil {
		return 0, err
	}
	if _, err := step(o.etcdutl, "snapshot", "restore", snap, "--data-dir", data); err != nil {
		return 0, err
	}
	out, err := step(o.etcdutl, "hashkv", filepath.Join(data, "member", "snap", "db"), "-w", "json")
	if err != nil {
		return 0, err
	}
	var offline struct {
		Hash            uint32 `json:"hash"`
		HashRevision    int64  `json:"hashRevision"`
		CompactRevision int64  `json:"compactRevision"`
	}
	if err := json.Unmarshal(out, &offline); err != nil {
		return 0, fmt.Errorf("etcdutl hashkv: %w: %s", err, out)
	}
	out, err = step(o.etcdctl, "--endpoints="+leader, "endpoint", "hashkv", "--rev", strconv.FormatInt(offline.HashRevision, 10), "-w", "json")
	if err != nil {
		return 0, err
	}
	var live []struct {
		HashKV struct {
			Hash uint32 `json:"hash"`
		} `json:"HashKV"`
	}
	if err := json.Unmarshal(out, &live); err != nil || len(live) != 1 {
		return 0, fmt.Errorf("etcdctl endpoint hashkv: %v: %s", err, out)
	}
	if live[0].HashKV.Hash != offline.Hash {
		return 0, fmt.Errorf("the snapshot's HashKV %d at revision %d differs from the leader's %d", offline.Hash, offline.HashRevision, live[0].HashKV.Hash)
	}
	return peak, nil
}
