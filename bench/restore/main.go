// Command restore measures a full restore: steward's restore.Restore of a large full snapshot
// from a file:// backup store (stream, decompress and verify straight into the member's
// database, write the new member's membership, WAL and raft snapshot, read the revision, fsync,
// rename) against `etcdutl snapshot restore` of the same snapshot file, in the same run,
// alternating, on a warm page cache.
//
//	go run ./bench/restore                 # 1 GiB database
//	go run ./bench/restore -size 256MiB -runs 3
//	STEWARD_BENCH_RESTORE_SIZE=512MiB go run ./bench/restore
//
// The snapshot comes from an embedded etcd filled with -value-size values, half random and
// half repeated text (zstd compresses them about 2:1). The etcdutl binary is bin/etcdutl
// (`make tools`); without it, or with -etcdutl lib, etcdutl's library is timed instead.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/etcd-steward/steward/bench/internal/program"
	"github.com/etcd-steward/steward/bench/internal/result"
	"github.com/etcd-steward/steward/internal/backup"
	"github.com/etcd-steward/steward/internal/restore"
	"github.com/etcd-steward/steward/internal/store"
)

func main() {
	defSize := "1GiB"
	if v := os.Getenv("STEWARD_BENCH_RESTORE_SIZE"); v != "" {
		defSize = v
	}
	var size int64
	p := program.New("restore bench")
	p.Size(&size, "size", defSize, "database size to restore, e.g. 256MiB, 1GiB (env STEWARD_BENCH_RESTORE_SIZE)")
	valueSize := flag.Int("value-size", 32<<10, "value bytes per key")
	runs := flag.Int("runs", 2, "restores of each kind, alternating")
	etcdutl := flag.String("etcdutl", "", "etcdutl binary (default: bin/etcdutl of this repo; \"lib\": time etcdutl's library instead)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of steward's restores to this file")
	p.WorkDir(nil, "")
	p.Check(func() error {
		if *etcdutl == "" {
			*etcdutl = filepath.Join(repoRoot(), "bin", "etcdutl")
			if _, err := os.Stat(*etcdutl); err != nil {
				fmt.Fprintf(os.Stderr, "restore bench: %s missing (run `make tools`); timing etcdutl's library instead\n", *etcdutl)
				*etcdutl = "lib"
			}
		}
		return nil
	})
	p.Main(func(ctx context.Context, dir string) error {
		return run(ctx, size, *valueSize, *runs, *etcdutl, dir, *cpuProfile)
	})
}

func run(ctx context.Context, size int64, valueSize, runs int, etcdutl, dir, cpuProfile string) error {
	fmt.Printf("restore bench: %s database, %d-byte values, %d runs each, %d CPUs, etcdutl %s\n",
		result.Human(size), valueSize, runs, runtime.NumCPU(), etcdutl)

	t0 := time.Now()
	snap, rev, clusterID, err := makeSnapshot(ctx, dir, size, valueSize)
	if err != nil {
		return fmt.Errorf("make snapshot: %w", err)
	}
	st, err := os.Stat(snap)
	if err != nil {
		return err
	}
	fmt.Printf("snapshot: %s at revision %d, made in %v\n", result.Human(st.Size()), rev, time.Since(t0).Round(time.Second))

	storeURL := "file://" + filepath.Join(dir, "store")
	s, err := store.Open(ctx, storeURL, store.Options{Create: true})
	if err != nil {
		return err
	}
	defer s.Close()
	t0 = time.Now()
	stored, err := upload(ctx, s, snap, rev, clusterID)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	fmt.Printf("stored as a full snapshot: %s (zstd) in %v\n", result.Human(stored), time.Since(t0).Round(time.Millisecond))

	const peer = "http://127.0.0.1:2380"
	var ours, ref []time.Duration
	var peakHeap, maxGrowth uint64
	for i := 0; i < runs; i++ {
		out := filepath.Join(dir, "etcdutl.etcd")
		t0 := time.Now()
		if err := etcdutlRestore(ctx, etcdutl, snap, out, peer); err != nil {
			return fmt.Errorf("etcdutl restore: %w", err)
		}
		ref = append(ref, time.Since(t0))
		if err := os.RemoveAll(out); err != nil {
			return err
		}

		out = filepath.Join(dir, "steward.etcd")
		runtime.GC()
		if cpuProfile != "" {
			f, err := os.Create(fmt.Sprintf("%s.%d", cpuProfile, i+1))
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
		}
		base := heapInUse()
		stop := sampleHeap(&peakHeap)
		t0 = time.Now()
		var phases []string
		var phase restore.Phase
		var phaseStart time.Time
		endPhase := func(now time.Time) {
			if phase != "" {
				phases = append(phases, fmt.Sprintf("%s %v", phase, now.Sub(phaseStart).Round(time.Millisecond)))
			}
		}
		res, err := restore.Restore(ctx, restore.Options{
			Store: s, DataDir: out, Name: "bench", InitialCluster: "bench=" + peer, PeerURLs: []string{peer}, InitialClusterToken: "bench",
			Progress: func(p restore.Progress) {
				if p.Phase != phase {
					now := time.Now()
					endPhase(now)
					phase, phaseStart = p.Phase, now
				}
			},
		})
		endPhase(time.Now())
		stop()
		pprof.StopCPUProfile()
		if err != nil {
			return fmt.Errorf("steward restore: %w", err)
		}
		ours = append(ours, time.Since(t0))
		if res.Revision != rev {
			return fmt.Errorf("steward restored revision %d, want %d", res.Revision, rev)
		}
		if err := os.RemoveAll(out); err != nil {
			return err
		}
		growth := max(peakHeap, base) - base
		maxGrowth = max(maxGrowth, growth)
		fmt.Printf("run %d: etcdutl %v, steward %v (%s; heap in use grew by at most %d MiB)\n",
			i+1, ref[i].Round(time.Millisecond), ours[i].Round(time.Millisecond), strings.Join(phases, ", "), growth>>20)
	}
	bo, br := best(ours), best(ref)
	fmt.Printf("best of %d: steward Restore %v (%.0f MiB/s of database), etcdutl snapshot restore %v (%.0f MiB/s); ratio %.2fx; heap growth during steward's restore at most %d MiB\n",
		runs, bo.Round(time.Millisecond), float64(st.Size())/(1<<20)/bo.Seconds(), br.Round(time.Millisecond), float64(st.Size())/(1<<20)/br.Seconds(),
		bo.Seconds()/br.Seconds(), maxGrowth>>20)
	return nil
}

func heapInUse() uint64 {
	m := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}

// sampleHeap records the peak of the heap in use (live objects and not yet collected garbage,
// so an upper bound of what the restore holds) every 10ms until stop is called.
func sampleHeap(peak *uint64) (stop func()) {
	*peak = heapInUse()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				*peak = max(*peak, heapInUse())
			}
		}
	}()
	return func() { close(done); <-finished }
}

func best(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[0]
}

// makeSnapshot fills an embedded etcd (fsync off) to about size bytes and saves a snapshot the
// way `etcdctl snapshot save` does: the Maintenance.Snapshot stream, database plus SHA-256.
func makeSnapshot(ctx context.Context, dir string, size int64, valueSize int) (path string, rev int64, clusterID uint64, err error) {
	e, cli, err := startEtcd(filepath.Join(dir, "source.etcd"))
	if err != nil {
		return "", 0, 0, err
	}
	defer func() {
		cli.Close()
		e.Close()
	}()
	perTxn := max(1, (1<<20)/valueSize) // requests stay under etcd's 1.5 MiB limit
	rnd := rand.NewChaCha8([32]byte{1})
	text := []byte(strings.Repeat("/registry/pods/default/bench ", valueSize/29+1))
	var written int64
	for k := 0; written < size; {
		ops := make([]clientv3.Op, 0, perTxn)
		for j := 0; j < perTxn; j++ {
			// Every value differs: a random half and a text half.
			v := make([]byte, valueSize)
			_, _ = rnd.Read(v[:valueSize/2])
			copy(v[valueSize/2:], text)
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/bench/%09d", k), string(v)))
			k++
			written += int64(valueSize)
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return "", 0, 0, err
		}
	}
	resp, err := cli.Get(ctx, "x")
	if err != nil {
		return "", 0, 0, err
	}
	path = filepath.Join(dir, "snapshot.db")
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return "", 0, 0, err
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return "", 0, 0, err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return "", 0, 0, err
	}
	return path, resp.Header.Revision, resp.Header.ClusterId, f.Close()
}

// upload stores the snapshot file as a full-snapshot object, as the full snapshotter would.
func upload(ctx context.Context, s *store.Store, path string, rev int64, clusterID uint64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	hdr := backup.Header{Kind: backup.KindFull, Compression: backup.CompressionZstd, EtcdVersion: "3.6.16", ClusterID: clusterID, Timeline: 1,
		FirstRev: rev, LastRev: rev, Created: time.Now()}
	tr, err := backup.WriteObject(ctx, s, backup.FullKey(1, rev, hdr.Created), hdr, func(w *backup.ObjectWriter) error {
		_, err := io.CopyBuffer(w, f, make([]byte, 1<<20))
		return err
	})
	return tr.PayloadSize, err
}

func etcdutlRestore(ctx context.Context, bin, snap, out, peer string) error {
	if bin == "lib" {
		return snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath: snap, OutputDataDir: out, Name: "bench", InitialCluster: "bench=" + peer, InitialClusterToken: "bench", PeerURLs: []string{peer},
		})
	}
	cmd := exec.CommandContext(ctx, bin, "snapshot", "restore", snap, "--data-dir", out, "--name", "bench",
		"--initial-cluster", "bench="+peer, "--initial-cluster-token", "bench", "--initial-advertise-peer-urls", peer)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, lastLine(string(b)))
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func startEtcd(dir string) (*embed.Etcd, *clientv3.Client, error) {
	cu, pu := freeURL(), freeURL()
	cfg := embed.NewConfig()
	cfg.Name = "source"
	cfg.Dir = dir
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.InitialCluster = "source=" + pu.String()
	cfg.UnsafeNoFsync = true
	cfg.QuotaBackendBytes = 16 << 30
	cfg.MaxRequestBytes = 2 << 20
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, nil, err
	case <-time.After(time.Minute):
		e.Close()
		return nil, nil, errors.New("etcd not ready after a minute")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cu.String()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		MaxCallSendMsgSize: 4 << 20})
	if err != nil {
		e.Close()
		return nil, nil, err
	}
	return e, cli, nil
}

func freeURL() url.URL {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
