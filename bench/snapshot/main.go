// Command snapshot measures Steward's full snapshot against `etcdctl snapshot save` of the same
// member in the same run.
//
//	go run ./bench/snapshot -steward bin/steward -etcdctl bin/etcdctl -size 1GiB
//
// It starts a real local cluster (`steward local up`, backups on into a file:// store), fills
// it with real clients to -size of database, waits until delta capture has caught up, and
// then, -repeat times in alternating order, snapshots the leader with:
//
//   - etcdctl snapshot save to a file (the reference);
//   - `steward backup save` into a file:// store (zstd), a separate process whose peak RSS is
//     its rusage maxrss (= VmHWM at exit);
//   - POST /v1/snapshots/full on the member's sidecar, whose VmHWM is reset before and read
//     after (the sidecar's peak RSS while snapshotting);
//   - `steward backup save --encryption-keys` (AES-256-GCM after zstd), against the same save
//     without encryption.
//
// Throughput is database bytes per second of wall time. The last line of output is the JSON
// result (see bench/internal/result).
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-steward/steward/bench/internal/load"
	"github.com/etcd-steward/steward/bench/internal/proc"
	"github.com/etcd-steward/steward/bench/internal/program"
	"github.com/etcd-steward/steward/bench/internal/result"
	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/local"
	"github.com/etcd-steward/steward/internal/seal"
	"github.com/etcd-steward/steward/internal/sidecarapi"
	"github.com/etcd-steward/steward/internal/testutil/localcluster"
)

type options struct {
	steward, etcdctl string
	size             int64
	valueSize        int
	workers, conns   int
	members          int
	repeat           int
	sidecar          bool
	sidecarArgs      []string
	keep             bool
}

func main() {
	var o options
	p := program.New("snapshot bench")
	p.Binary(&o.steward, "steward", "bin/steward", "steward binary")
	p.Binary(&o.etcdctl, "etcdctl", "bin/etcdctl", "stock etcdctl binary (make tools)")
	p.Size(&o.size, "size", "1GiB", "database size to build before snapshotting (e.g. 256MiB, 1GiB)")
	flag.IntVar(&o.valueSize, "value-size", 4096, "value bytes of each put while filling (random hex: zstd halves it)")
	flag.IntVar(&o.workers, "workers", 32, "concurrent puts while filling")
	flag.IntVar(&o.conns, "conns", 4, "client connections while filling")
	flag.IntVar(&o.members, "members", 1, "cluster members (the leader is snapshotted)")
	p.Rounds(&o.repeat, "repeat", 3, "measured rounds (each: etcdctl, steward backup save, sidecar)")
	flag.BoolVar(&o.sidecar, "sidecar", true, "also measure the sidecar's full snapshot (POST /v1/snapshots/full)")
	// The sidecar's snapshots are measured back to back, sooner than the default spacing.
	o.sidecarArgs = []string{"--full-snapshot-min-interval=1ms"}
	p.List(&o.sidecarArgs, "sidecar-args", "extra sidecar flags, comma-separated (e.g. --delta-max-bytes=4194304)")
	p.WorkDir(&o.keep, "keep the cluster and work dir at the end")
	p.Main(func(ctx context.Context, dir string) error { return run(ctx, o, dir) })
}

func run(ctx context.Context, o options, dir string) (err error) {
	clusterDir := filepath.Join(dir, "cluster")
	backupStore := "file://" + filepath.Join(dir, "sidecar-store")
	fmt.Printf("snapshot bench: %d-member cluster in %s, database %s, %d-byte values\n", o.members, clusterDir, result.Human(o.size), o.valueSize)
	c, err := localcluster.Up(ctx, o.steward, clusterDir, localcluster.Options{Timeout: 3 * time.Minute, Members: o.members, Backup: backupStore, SidecarArgs: o.sidecarArgs})
	if err != nil {
		return err
	}
	defer c.PurgeOnReturn(o.keep, &err)
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	li := st.LeaderIndex()
	if li < 0 {
		return errors.New("the cluster has no leader")
	}
	leader := st.Members[li]
	endpoint := leader.ClientURL
	var diag diagnostics
	_, diag.sidecarIdleRSS, _ = proc.Memory(leader.SidecarPID)
	diag.binaryRSS = binaryRSS(ctx, o.steward)

	// Fill.
	fill, err := load.Fill(ctx, load.Config{Endpoints: st.Endpoints(), Conns: o.conns, Workers: o.workers, Prefix: "/bench/snapshot/",
		ValueSize: o.valueSize, Seed: 1}, endpoint, o.size, 2*time.Hour)
	if err != nil {
		return err
	}
	fmt.Printf("filled: %s\n", fill)

	// Let delta capture catch up, so it does not compete with the measurement.
	caughtUp, err := c.WaitBackupCurrent(ctx, 15*time.Minute)
	if err != nil {
		return err
	}
	fmt.Printf("delta capture caught up %v after the fill\n", caughtUp.Round(time.Second))
	st, err = c.Status(ctx)
	if err != nil {
		return err
	}
	dbSize := st.Members[li].DBSize
	sidecarPID := st.Members[li].SidecarPID
	_, diag.sidecarFilledRSS, _ = proc.Memory(sidecarPID)
	sidecarURL, err := c.SidecarURL(leader.Name)
	if err != nil {
		return err
	}
	fmt.Printf("database of %s: %s at revision %d\n", leader.Name, result.Human(dbSize), st.Members[li].Revision)

	// Warm-up (page cache, connections): one unmeasured etcdctl snapshot.
	if _, err := etcdctlSave(ctx, o.etcdctl, endpoint, filepath.Join(dir, "warmup.db")); err != nil {
		return err
	}

	keys := filepath.Join(dir, "backup-keys")
	key := make([]byte, seal.KeySize)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if err := os.WriteFile(keys, []byte("k1 "+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return err
	}
	var ref, save, side, enc []measurement
	for i := 0; i < o.repeat; i++ {
		steps := []func() error{
			func() error {
				m, err := etcdctlSave(ctx, o.etcdctl, endpoint, filepath.Join(dir, "etcdctl.db"))
				ref = append(ref, m)
				return err
			},
			func() error {
				m, err := stewardSave(ctx, o.steward, endpoint, filepath.Join(dir, "save-store"))
				save = append(save, m)
				return err
			},
			func() error {
				m, err := stewardSave(ctx, o.steward, endpoint, filepath.Join(dir, "save-store"), "--encryption-keys", keys)
				enc = append(enc, m)
				return err
			},
		}
		if o.sidecar {
			steps = append(steps, func() error {
				m, err := sidecarSave(ctx, clusterDir, sidecarURL, sidecarPID)
				side = append(side, m)
				return err
			})
		}
		if i%2 == 1 {
			for a, b := 0, len(steps)-1; a < b; a, b = a+1, b-1 {
				steps[a], steps[b] = steps[b], steps[a]
			}
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		fmt.Printf("round %d: etcdctl %s; steward backup save %s; encrypted %s", i+1, ref[i].String(dbSize), save[i].String(dbSize), enc[i].String(dbSize))
		if o.sidecar {
			fmt.Printf("; sidecar %s", side[i].String(dbSize))
		}
		fmt.Println()
	}
	// Steward's object writer alone (zstd and SHA-256, no etcd, no network) on the same bytes:
	// the ceiling of Steward's snapshot throughput on this machine.
	if diag.writerRate, diag.encWriterRate, err = writerCeiling(ctx, o.etcdctl, endpoint, filepath.Join(dir, "ceiling.db")); err != nil {
		return err
	}
	fmt.Printf("object writer alone (zstd + SHA-256 into io.Discard): %.0f MiB/s, encrypted %.0f MiB/s\n", diag.writerRate, diag.encWriterRate)
	res := report(o, fill, caughtUp, dbSize, ref, save, side, enc, diag)
	return res.Print(os.Stdout)
}

type measurement struct {
	took    time.Duration
	peakRSS int64 // bytes
	stored  int64 // bytes written (compressed for steward)
}

func (m measurement) rate(dbSize int64) float64 { return result.MiB(dbSize) / m.took.Seconds() }

func (m measurement) String(dbSize int64) string {
	return fmt.Sprintf("%v = %.0f MiB/s, peak RSS %.0f MiB, stored %s", m.took.Round(time.Millisecond), m.rate(dbSize), result.MiB(m.peakRSS), result.Human(m.stored))
}

func etcdctlSave(ctx context.Context, etcdctl, endpoint, path string) (measurement, error) {
	os.Remove(path)
	defer os.Remove(path)
	cmd := exec.CommandContext(ctx, etcdctl, "--endpoints="+endpoint, "snapshot", "save", path)
	out, took, err := timed(cmd)
	if err != nil {
		return measurement{}, fmt.Errorf("etcdctl snapshot save: %w: %s", err, out)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return measurement{}, fmt.Errorf("etcdctl snapshot save wrote no file: %w: %s", err, out)
	}
	return measurement{took: took, peakRSS: proc.MaxRSS(cmd.ProcessState), stored: fi.Size()}, nil
}

func stewardSave(ctx context.Context, steward, endpoint, storeDir string, extra ...string) (measurement, error) {
	os.RemoveAll(storeDir)
	defer os.RemoveAll(storeDir)
	cmd := exec.CommandContext(ctx, steward, append([]string{"backup", "save", "--endpoints", endpoint, "--store", "file://" + storeDir}, extra...)...)
	out, took, err := timed(cmd)
	if err != nil {
		return measurement{}, fmt.Errorf("steward backup save: %w: %s", err, out)
	}
	stored, err := dirSize(storeDir)
	if err != nil {
		return measurement{}, err
	}
	return measurement{took: took, peakRSS: proc.MaxRSS(cmd.ProcessState), stored: stored}, nil
}

func sidecarSave(ctx context.Context, dir, sidecarURL string, pid int) (measurement, error) {
	if err := proc.ResetPeak(pid); err != nil {
		return measurement{}, err
	}
	t0 := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sidecarURL+"/v1/snapshots/full", nil)
	if err != nil {
		return measurement{}, err
	}
	resp, err := sidecarapi.FileClient(local.Dir(dir).Token(), nil).Do(req)
	if err != nil {
		return measurement{}, fmt.Errorf("POST %s/v1/snapshots/full: %w", sidecarURL, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(t0)
	if resp.StatusCode != http.StatusOK {
		return measurement{}, fmt.Errorf("POST %s/v1/snapshots/full: %s: %s", sidecarURL, resp.Status, strings.TrimSpace(string(body)))
	}
	var fr struct {
		Size int64 `json:"size"`
	}
	if err := json.Unmarshal(body, &fr); err != nil {
		return measurement{}, fmt.Errorf("POST %s/v1/snapshots/full: unexpected answer %q: %w", sidecarURL, body, err)
	}
	hwm, _, err := proc.Memory(pid)
	if err != nil {
		return measurement{}, err
	}
	return measurement{took: took, peakRSS: hwm, stored: fr.Size}, nil
}

// diagnostics explain the figures.
type diagnostics struct {
	binaryRSS                        int64   // `steward version`: the binary's RSS doing nothing
	sidecarIdleRSS, sidecarFilledRSS int64   // the sidecar's RSS on an empty cluster and after the fill
	writerRate                       float64 // MiB/s of backup.ObjectWriter alone
	encWriterRate                    float64 // the same, encrypting
}

func binaryRSS(ctx context.Context, steward string) int64 {
	cmd := exec.CommandContext(ctx, steward, "version")
	if err := cmd.Run(); err != nil {
		return 0
	}
	return proc.MaxRSS(cmd.ProcessState)
}

// writerCeiling saves a snapshot with etcdctl and pushes it through Steward's object writer
// (the same zstd settings and checksums as a full snapshot) into io.Discard, in 32 KiB writes
// like the gRPC stream's: once as it is, once encrypting.
func writerCeiling(ctx context.Context, etcdctl, endpoint, path string) (plain, encrypted float64, err error) {
	os.Remove(path)
	defer os.Remove(path)
	cmd := exec.CommandContext(ctx, etcdctl, "--endpoints="+endpoint, "snapshot", "save", path)
	if out, _, err := timed(cmd); err != nil {
		return 0, 0, fmt.Errorf("etcdctl snapshot save: %w: %s", err, out)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	// Read it once so that the file is in the page cache for the timed pass.
	n, err := io.Copy(io.Discard, f)
	if err != nil {
		return 0, 0, err
	}
	keys, err := seal.NewKeyring("bench", "k1", map[string][]byte{"k1": make([]byte, seal.KeySize)})
	if err != nil {
		return 0, 0, err
	}
	pass := func(keys *seal.Keyring) (float64, error) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
		t0 := time.Now()
		w, err := backup.NewObjectWriter(io.Discard, backup.Header{Kind: backup.KindFull, Timeline: 1, Compression: backup.CompressionZstd, FirstRev: 1, LastRev: 1}, keys)
		if err != nil {
			return 0, err
		}
		if _, err := io.CopyBuffer(w, f, make([]byte, 32<<10)); err != nil {
			return 0, err
		}
		if err := w.Close(); err != nil {
			return 0, err
		}
		return result.MiB(n) / time.Since(t0).Seconds(), nil
	}
	if plain, err = pass(nil); err != nil {
		return 0, 0, err
	}
	encrypted, err = pass(keys)
	return plain, encrypted, err
}

func timed(cmd *exec.Cmd) (string, time.Duration, error) {
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	return strings.TrimSpace(out.String()), time.Since(t0), err
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

func report(o options, fill load.FillResult, caughtUp time.Duration, dbSize int64, ref, save, side, enc []measurement, diag diagnostics) result.Result {
	rates := func(ms []measurement) []float64 {
		var out []float64
		for _, m := range ms {
			out = append(out, m.rate(dbSize))
		}
		return out
	}
	ratios := func(ms []measurement) []float64 {
		var out []float64
		for i, m := range ms {
			out = append(out, m.rate(dbSize)/ref[i].rate(dbSize))
		}
		return out
	}
	rss := func(ms []measurement) result.Stats {
		var xs []float64
		for _, x := range ms {
			xs = append(xs, result.MiB(x.peakRSS))
		}
		return result.Summarise(xs)
	}
	refRate := result.Summarise(rates(ref))
	res := result.Result{
		Benchmark: "full-snapshot",
		Title:     fmt.Sprintf("Full snapshot of a %s database", result.Human(dbSize)),
		Params: map[string]any{
			"dbSize":         result.Human(dbSize),
			"members":        o.members,
			"valueSize":      o.valueSize,
			"keys":           fill.Puts,
			"rounds":         o.repeat,
			"compression":    "zstd (Steward's object writer)",
			"store":          "file://",
			"fillRate":       fmt.Sprintf("%.0f puts/s, %.1f MiB/s with %d workers", fill.Rate(), result.MiB(fill.Bytes)/fill.Elapsed.Seconds(), o.workers),
			"deltaCatchUp":   caughtUp.Round(time.Second).String(),
			"referenceTool":  "etcdctl snapshot save (stock, same etcd version)",
			"throughputUnit": "database MiB per second of wall time",
		},
	}
	addThroughput := func(name string, ms []measurement) {
		rs, rt := result.Summarise(rates(ms)), result.Summarise(ratios(ms))
		row := result.Compare("full snapshot throughput", "MiB/s", name, rs.Median, "etcdctl snapshot save", refRate.Median)
		row.Ratio = rt.Median
		row = row.WithGoal("ratio ≥ 0.9", rt.Median >= 0.9).
			WithSpread("ratio %.2f–%.2f over %d rounds; %s %.0f–%.0f, etcdctl %.0f–%.0f MiB/s", rt.Min, rt.Max, rt.N, name, rs.Min, rs.Max, refRate.Min, refRate.Max)
		res.Rows = append(res.Rows, row)
	}
	addRSS := func(name string, ms []measurement) {
		ours, theirs := rss(ms), rss(ref)
		row := result.Compare("peak RSS while snapshotting", "MiB", name, ours.Max, "etcdctl snapshot save", theirs.Max)
		res.Rows = append(res.Rows, row.WithGoal("< 100 MiB", ours.Max < 100).
			WithSpread("highest of %d rounds; %s %.0f–%.0f MiB, etcdctl %.0f–%.0f MiB", ours.N, name, ours.Min, ours.Max, theirs.Min, theirs.Max))
	}
	addThroughput("steward backup save", save)
	if len(side) > 0 {
		addThroughput("sidecar, POST /v1/snapshots/full", side)
	}
	addRSS("steward backup save", save)
	if len(side) > 0 {
		addRSS("sidecar, POST /v1/snapshots/full", side)
	}
	var stored []float64
	for _, m := range save {
		stored = append(stored, float64(m.stored))
	}
	storedMed := result.Summarise(stored).Median
	res.Rows = append(res.Rows, result.Compare("stored size", "MiB", "steward (zstd)", storedMed/(1<<20), "etcdctl (raw)", result.MiB(ref[0].stored)))
	row := result.Compare("object writer alone (zstd + SHA-256, no etcd)", "MiB/s", "backup.ObjectWriter", diag.writerRate, "etcdctl snapshot save", refRate.Median)
	res.Rows = append(res.Rows, row.WithSpread("one pass over the etcdctl snapshot file from the page cache into io.Discard, in 32 KiB writes: the ceiling of Steward's snapshot throughput here"))
	// Encryption: the same save with and without --encryption-keys, same rounds.
	var encRatios []float64
	for i := range enc {
		encRatios = append(encRatios, enc[i].rate(dbSize)/save[i].rate(dbSize))
	}
	er, es, ps := result.Summarise(encRatios), result.Summarise(rates(enc)), result.Summarise(rates(save))
	row = result.Compare("full snapshot throughput, encrypted", "MiB/s", "steward backup save --encryption-keys", es.Median, "steward backup save (not encrypted)", ps.Median)
	row.Ratio = er.Median
	res.Rows = append(res.Rows, row.WithGoal("ratio ≥ 0.9", er.Median >= 0.9).
		WithSpread("ratio %.2f–%.2f over %d rounds", er.Min, er.Max, er.N))
	encRSS, plainRSS := rss(enc), rss(save)
	res.Rows = append(res.Rows, result.Compare("peak RSS, encrypted", "MiB", "steward backup save --encryption-keys", encRSS.Max, "steward backup save (not encrypted)", plainRSS.Max).
		WithGoal("≤ 1.1×", encRSS.Max <= 1.1*plainRSS.Max).WithSpread("highest of %d rounds", encRSS.N))
	res.Rows = append(res.Rows, result.Compare("object writer alone, encrypted (zstd + AES-256-GCM + SHA-256)", "MiB/s", "encrypting", diag.encWriterRate, "not encrypting", diag.writerRate))
	if len(o.sidecarArgs) > 0 {
		res.Params["sidecarArgs"] = strings.Join(o.sidecarArgs, " ")
	}
	res.Notes = append(res.Notes, fmt.Sprintf("Memory context: the steward binary doing nothing (`steward version`) peaks at %.0f MiB RSS; the sidecar used %.0f MiB RSS on the empty cluster and %.0f MiB after the fill (delta capture of the whole fill).",
		result.MiB(diag.binaryRSS), result.MiB(diag.sidecarIdleRSS), result.MiB(diag.sidecarFilledRSS)))
	res.Notes = append(res.Notes,
		fmt.Sprintf("The database was built with real clients: %d puts of %d-byte values (random hex) under new keys; backups (delta capture) on during the fill; measurements start once the stored deltas reached the leader's revision.", fill.Puts, o.valueSize),
		"Rounds alternate the order of the tools; one unmeasured etcdctl snapshot warms the page cache first. Ratios are the median of the per-round ratios.",
		"steward backup save runs as its own process, like etcdctl; its peak RSS is its rusage maxrss. The sidecar's peak RSS is its VmHWM, reset (/proc/PID/clear_refs) just before the request.")
	return res
}
