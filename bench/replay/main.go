// Command replay measures delta replay speed: restore.Replay on etcd's storage layer against the
// reference of replaying the same events as one client Txn per revision into an embedded etcd
// with fsync off (what a client-side replay such as gardener's does).
//
//	go run ./bench/replay -n 1000000            # full size
//	STEWARD_BENCH_REPLAY_N=100000 go run ./bench/replay
//
// Both start from the same snapshot restored with restore.RestoreSnapshot. Events are generated
// on the fly (constant memory): mostly single puts of -value-size bytes over -keys keys, some
// deletes and some 4-put transactions. With -verify (default when both replay all n revisions)
// the two results are compared with HashKV, which covers every key, value, create_revision,
// mod_revision and version in the history.
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
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"

	"go.uber.org/zap"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/etcd-steward/steward/bench/internal/program"
	"github.com/etcd-steward/steward/internal/restore"
)

func main() {
	defaultN := 1_000_000
	if v := os.Getenv("STEWARD_BENCH_REPLAY_N"); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			defaultN = n
		}
	}
	p := program.New("replay bench")
	n := flag.Int("n", defaultN, "revisions to replay (env STEWARD_BENCH_REPLAY_N)")
	refN := flag.Int("ref-n", -1, "revisions for the client-Txn reference (-1: same as -n; 0: skip); its rate is compared")
	keys := flag.Int("keys", 100_000, "distinct keys")
	valueSize := flag.Int("value-size", 256, "value bytes")
	batchEvents := flag.Int("batch-events", 0, "restore.ReplayOptions.BatchEvents (0: default)")
	batchBytes := flag.Int64("batch-bytes", 0, "restore.ReplayOptions.BatchBytes (0: default)")
	verify := flag.Bool("verify", true, "compare both results with HashKV when both replay all revisions")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the storage replay to this file")
	p.WorkDir(nil, "")
	p.Check(func() error {
		if *refN < 0 {
			*refN = *n
		}
		return nil
	})
	p.Main(func(ctx context.Context, dir string) error {
		return run(ctx, *n, *refN, *keys, *valueSize, *batchEvents, *batchBytes, dir, *verify, *cpuProfile)
	})
}

func run(ctx context.Context, n, refN, keys, valueSize, batchEvents int, batchBytes int64, dir string, verify bool, cpuProfile string) error {
	snap, snapRev, err := baseSnapshot(ctx, dir)
	if err != nil {
		return fmt.Errorf("base snapshot: %w", err)
	}
	fmt.Printf("replay bench: %d revisions (reference %d), %d keys, %d-byte values, %d CPUs\n", n, refN, keys, valueSize, runtime.NumCPU())

	// Storage-layer replay.
	oursDir, oursPeer := filepath.Join(dir, "ours.etcd"), freeURL()
	t0 := time.Now()
	if err := restoreInto(ctx, snap, oursDir, oursPeer); err != nil {
		return err
	}
	restoreTime := time.Since(t0)
	var peakHeap uint64
	sampleHeap := func(int64) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peakHeap = max(peakHeap, ms.HeapInuse)
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	t0 = time.Now()
	res, err := restore.Replay(ctx, oursDir, newGenerator(snapRev, n, keys, valueSize), restore.ReplayOptions{
		ToRevision:  snapRev + int64(n),
		BatchEvents: batchEvents,
		BatchBytes:  batchBytes,
		Progress:    sampleHeap,
	})
	if err != nil {
		return fmt.Errorf("storage replay: %w", err)
	}
	oursTime := time.Since(t0)
	pprof.StopCPUProfile()
	oursRate := float64(res.Revisions) / oursTime.Seconds()
	fmt.Printf("storage replay:  %d revisions, %d events in %v = %.0f rev/s (snapshot restore %v, peak heap %d MiB)\n",
		res.Revisions, res.Events, oursTime.Round(time.Millisecond), oursRate, restoreTime.Round(time.Millisecond), peakHeap>>20)

	if refN == 0 {
		return nil
	}
	refDir, refPeer := filepath.Join(dir, "ref.etcd"), freeURL()
	if err := restoreInto(ctx, snap, refDir, refPeer); err != nil {
		return err
	}
	ref, err := startEtcd(refDir, refPeer, true)
	if err != nil {
		return err
	}
	defer ref.close()
	t0 = time.Now()
	refRevs, err := clientReplay(ctx, ref.cli, newGenerator(snapRev, refN, keys, valueSize), snapRev+int64(refN))
	if err != nil {
		return fmt.Errorf("reference replay: %w", err)
	}
	refTime := time.Since(t0)
	refRate := float64(refRevs) / refTime.Seconds()
	fmt.Printf("client Txn replay (embedded etcd, fsync off): %d revisions in %v = %.0f rev/s\n", refRevs, refTime.Round(time.Millisecond), refRate)
	fmt.Printf("speed-up: %.1fx\n", oursRate/refRate)

	if verify && refN == n {
		ours, err := startEtcd(oursDir, oursPeer, true)
		if err != nil {
			return fmt.Errorf("start etcd on the replayed dir: %w", err)
		}
		defer ours.close()
		rev := snapRev + int64(n)
		a, err := ours.cli.HashKV(ctx, ours.clientURL, rev)
		if err != nil {
			return fmt.Errorf("hash replayed dir: %w", err)
		}
		b, err := ref.cli.HashKV(ctx, ref.clientURL, rev)
		if err != nil {
			return fmt.Errorf("hash reference: %w", err)
		}
		if a.Hash != b.Hash || a.Header.Revision != b.Header.Revision {
			return fmt.Errorf("results differ: storage replay hash %x at revision %d, reference %x at %d", a.Hash, a.Header.Revision, b.Hash, b.Header.Revision)
		}
		fmt.Printf("verified: HashKV at revision %d equal (%x)\n", rev, a.Hash)
	}
	return nil
}

// generator yields n revisions of events after rev, tracking each key's create_revision and
// version as etcd would.
type generator struct {
	rnd       *rand.Rand
	rev, last int64
	valueSize int
	create    []int64 // 0 = key absent
	version   []int64
	pending   []*mvccpb.Event
}

func newGenerator(fromRev int64, n, keys, valueSize int) *generator {
	return &generator{
		rnd:       rand.New(rand.NewPCG(1, 2)),
		rev:       fromRev,
		last:      fromRev + int64(n),
		valueSize: valueSize,
		create:    make([]int64, keys),
		version:   make([]int64, keys),
	}
}

func keyName(i int) []byte { return []byte(fmt.Sprintf("/registry/bench/%08d", i)) }

func (g *generator) Next() (*mvccpb.Event, error) {
	if len(g.pending) == 0 {
		if g.rev >= g.last {
			return nil, io.EOF
		}
		g.rev++
		g.nextRevision()
	}
	ev := g.pending[0]
	g.pending = g.pending[1:]
	return ev, nil
}

func (g *generator) nextRevision() {
	g.pending = g.pending[:0]
	switch p := g.rnd.IntN(100); {
	case p < 3:
		k := g.rnd.IntN(len(g.create))
		if g.create[k] != 0 {
			g.create[k], g.version[k] = 0, 0
			g.pending = append(g.pending, &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: keyName(k), ModRevision: g.rev}})
			return
		}
		g.put(k)
	case p < 5:
		seen := map[int]bool{}
		for len(seen) < 4 {
			k := g.rnd.IntN(len(g.create))
			if !seen[k] {
				seen[k] = true
				g.put(k)
			}
		}
	default:
		g.put(g.rnd.IntN(len(g.create)))
	}
}

func (g *generator) put(k int) {
	if g.create[k] == 0 {
		g.create[k] = g.rev
	}
	g.version[k]++
	v := make([]byte, g.valueSize)
	for i := 0; i < len(v); i += 8 {
		x := g.rnd.Uint64()
		for j := i; j < i+8 && j < len(v); j++ {
			v[j] = byte(x)
			x >>= 8
		}
	}
	g.pending = append(g.pending, &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{
		Key: keyName(k), Value: v, CreateRevision: g.create[k], ModRevision: g.rev, Version: g.version[k],
	}})
}

// clientReplay sends each revision's events as one Txn, as a client-side restore does.
func clientReplay(ctx context.Context, cli *clientv3.Client, src restore.EventSource, last int64) (int64, error) {
	var ops []clientv3.Op
	var rev, revs int64
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		resp, err := cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("txn for revision %d: %w", rev, err)
		}
		if resp.Header.Revision != rev {
			return fmt.Errorf("txn for revision %d landed at %d", rev, resp.Header.Revision)
		}
		ops = ops[:0]
		revs++
		return nil
	}
	for {
		ev, err := src.Next()
		if errors.Is(err, io.EOF) {
			return revs, flush()
		}
		if err != nil {
			return revs, err
		}
		if ev.Kv.ModRevision > last {
			return revs, flush()
		}
		if ev.Kv.ModRevision != rev {
			if err := flush(); err != nil {
				return revs, err
			}
			rev = ev.Kv.ModRevision
		}
		if ev.Type == mvccpb.DELETE {
			ops = append(ops, clientv3.OpDelete(string(ev.Kv.Key)))
		} else {
			ops = append(ops, clientv3.OpPut(string(ev.Kv.Key), string(ev.Kv.Value), clientv3.WithLease(clientv3.LeaseID(ev.Kv.Lease))))
		}
	}
}

// baseSnapshot saves a snapshot of a fresh embedded etcd.
func baseSnapshot(ctx context.Context, dir string) (path string, rev int64, err error) {
	src, err := startEtcd(filepath.Join(dir, "source.etcd"), freeURL(), true)
	if err != nil {
		return "", 0, err
	}
	defer src.close()
	resp, err := src.cli.Get(ctx, "any")
	if err != nil {
		return "", 0, err
	}
	path = filepath.Join(dir, "base.snap")
	rc, err := src.cli.Snapshot(ctx)
	if err != nil {
		return "", 0, err
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return "", 0, err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return "", 0, err
	}
	return path, resp.Header.Revision, f.Close()
}

func restoreInto(ctx context.Context, snap, dataDir, peerURL string) error {
	return restore.RestoreSnapshot(ctx, restore.SnapshotRestoreConfig{
		SnapshotPath:        snap,
		DataDir:             dataDir,
		Name:                "bench",
		InitialCluster:      "bench=" + peerURL,
		InitialClusterToken: "bench",
		PeerURLs:            []string{peerURL},
	})
}

type etcd struct {
	e         *embed.Etcd
	cli       *clientv3.Client
	clientURL string
}

func (e *etcd) close() {
	e.cli.Close()
	e.e.Close()
}

func startEtcd(dir, peerURL string, noFsync bool) (*etcd, error) {
	clientURL := freeURL()
	pu, _ := url.Parse(peerURL)
	cu, _ := url.Parse(clientURL)
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = dir
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.InitialCluster = "bench=" + peerURL
	cfg.InitialClusterToken = "bench"
	cfg.UnsafeNoFsync = noFsync
	cfg.QuotaBackendBytes = 8 << 30
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(time.Minute):
		e.Close()
		return nil, fmt.Errorf("etcd on %s not ready after a minute", dir)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.Close()
		return nil, err
	}
	return &etcd{e: e, cli: cli, clientURL: clientURL}, nil
}

func freeURL() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}
