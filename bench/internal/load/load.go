// Package load generates write load on an etcd cluster with real clients: a fixed number of
// workers, each doing one Put at a time (closed loop), optionally held to a fixed total rate
// (open loop); fixed key and value sizes.
package load

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcd-steward/steward/bench/internal/result"
	"github.com/etcd-steward/steward/internal/etcdutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Config describes a load.
type Config struct {
	Endpoints []string
	// TLSDir is the client certificate directory of a cluster with TLS ("": plain text).
	TLSDir string
	// Conns is the number of clients (gRPC connections); Workers the number of concurrent
	// requests, spread over the clients.
	Conns, Workers int
	// Rate is the total number of puts per second; 0 = as fast as the workers go.
	Rate float64
	// Prefix starts every key; keys are Prefix + a zero-padded number, so all have one size.
	Prefix string
	// Keys is the key space: puts cycle over Keys keys (0: every put writes a new key).
	Keys int
	// ValueSize is the size of every value, random lowercase hex (zstd compresses it to about half).
	ValueSize int
	// Seed makes the values reproducible.
	Seed uint64
}

// Result is what a load phase achieved.
type Result struct {
	Puts, Errors int64
	Bytes        int64 // key+value bytes written
	Elapsed      time.Duration
	// Latency percentiles of successful puts (from the scheduled start under a fixed rate, so a
	// slow server is not hidden by the generator waiting for it).
	P50, P90, P99, Max time.Duration
	FirstError         error
}

// Rate is the achieved puts per second.
func (r Result) Rate() float64 { return float64(r.Puts) / r.Elapsed.Seconds() }

// String summarises r.
func (r Result) String() string {
	s := fmt.Sprintf("%d puts in %v = %.0f/s, latency p50 %v p90 %v p99 %v max %v", r.Puts, r.Elapsed.Round(time.Millisecond),
		r.Rate(), r.P50.Round(10*time.Microsecond), r.P90.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond), r.Max.Round(time.Millisecond))
	if r.Errors > 0 {
		s += fmt.Sprintf(", %d errors (first: %v)", r.Errors, r.FirstError)
	}
	return s
}

// Generator holds the clients of a load; reuse it for several phases.
type Generator struct {
	cfg     Config
	clients []*clientv3.Client
	next    atomic.Int64 // next key number
	keyFmt  string
}

// New connects cfg.Conns clients.
func New(cfg Config) (*Generator, error) {
	if cfg.Conns <= 0 {
		cfg.Conns = 1
	}
	if cfg.Workers <= 0 {
		return nil, errors.New("load: need at least one worker")
	}
	if cfg.ValueSize <= 0 {
		return nil, errors.New("load: value size must be positive")
	}
	g := &Generator{cfg: cfg, keyFmt: cfg.Prefix + "%012d"}
	for i := 0; i < cfg.Conns; i++ {
		cc, err := etcdutil.Dialer{TLSDir: cfg.TLSDir}.Config(cfg.Endpoints, 5*time.Second)
		if err != nil {
			g.Close()
			return nil, err
		}
		cc.MaxCallSendMsgSize = 2*cfg.ValueSize + (1 << 20)
		cli, err := clientv3.New(cc)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("connect to %v: %w", cfg.Endpoints, err)
		}
		g.clients = append(g.clients, cli)
	}
	return g, nil
}

// Close closes the clients.
func (g *Generator) Close() {
	for _, c := range g.clients {
		c.Close()
	}
}

// SetRate changes the rate of the next Run (0: closed loop).
func (g *Generator) SetRate(rate float64) { g.cfg.Rate = rate }

// Client returns the first client (for status calls).
func (g *Generator) Client() *clientv3.Client { return g.clients[0] }

func (g *Generator) key() string {
	n := g.next.Add(1) - 1
	if g.cfg.Keys > 0 {
		n %= int64(g.cfg.Keys)
	}
	return fmt.Sprintf(g.keyFmt, n)
}

const hexDigits = "0123456789abcdef"

func fillHex(rnd *rand.Rand, v []byte) {
	for i := 0; i < len(v); i += 16 {
		x := rnd.Uint64()
		for j := i; j < i+16 && j < len(v); j++ {
			v[j] = hexDigits[x&15]
			x >>= 4
		}
	}
}

// Run puts until d has passed or until stop returns true (checked by each worker after each
// put; nil: never), whichever comes first.
func (g *Generator) Run(ctx context.Context, d time.Duration, stop func() bool) Result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var ticks chan time.Time
	if g.cfg.Rate > 0 {
		ticks = make(chan time.Time, g.cfg.Workers)
		go schedule(ctx, g.cfg.Rate, ticks)
	}
	type workerResult struct {
		puts, errs, bytes int64
		lat               []time.Duration
		firstErr          error
	}
	res := make([]workerResult, g.cfg.Workers)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < g.cfg.Workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			cli := g.clients[w%len(g.clients)]
			rnd := rand.New(rand.NewPCG(g.cfg.Seed, uint64(w)+uint64(time.Now().UnixNano())))
			val := make([]byte, g.cfg.ValueSize)
			r := &res[w]
			for ctx.Err() == nil {
				t0 := time.Now()
				if ticks != nil {
					select {
					case t0 = <-ticks:
					case <-ctx.Done():
						return
					}
				}
				k := g.key()
				fillHex(rnd, val)
				_, err := cli.Put(ctx, k, string(val))
				if err != nil {
					if ctx.Err() != nil {
						return // the phase ended during the put: neither success nor failure
					}
					r.errs++
					if r.firstErr == nil {
						r.firstErr = err
					}
					continue
				}
				r.lat = append(r.lat, time.Since(t0))
				r.puts++
				r.bytes += int64(len(k) + len(val))
				if stop != nil && stop() {
					cancel()
				}
			}
		}(w)
	}
	wg.Wait()
	out := Result{Elapsed: time.Since(start)}
	var lat []time.Duration
	for _, r := range res {
		out.Puts += r.puts
		out.Errors += r.errs
		out.Bytes += r.bytes
		lat = append(lat, r.lat...)
		if out.FirstError == nil {
			out.FirstError = r.firstErr
		}
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		out.P50, out.P90, out.P99, out.Max = pct(0.50), pct(0.90), pct(0.99), lat[len(lat)-1]
	}
	return out
}

// schedule sends the scheduled start time of each put at rate per second until ctx ends.
// When the workers fall behind, ticks queue (up to the channel's size) and then the schedule
// waits, so the achieved rate shows the shortfall.
func schedule(ctx context.Context, rate float64, ticks chan<- time.Time) {
	interval := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		now := time.Now()
		for !next.After(now) {
			select {
			case ticks <- next:
			case <-ctx.Done():
				return
			}
			next = next.Add(interval)
		}
		timer.Reset(time.Until(next))
	}
}

// FillResult is what Fill wrote and the database size it reached.
type FillResult struct {
	Result
	DBSize int64
}

func (f FillResult) String() string {
	return fmt.Sprintf("%s of database; %s (%.1f MiB/s of values)", result.Human(f.DBSize), f.Result.String(), result.MiB(f.Bytes)/f.Elapsed.Seconds())
}

// Fill puts values as cfg says until the database of the member at endpoint reaches size
// (polled with Status), or fails after limit.
func Fill(ctx context.Context, cfg Config, endpoint string, size int64, limit time.Duration) (FillResult, error) {
	g, err := New(cfg)
	if err != nil {
		return FillResult{}, err
	}
	defer g.Close()
	var reached atomic.Int64
	var done atomic.Bool
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		lastPrint := time.Now()
		for {
			sctx, c := context.WithTimeout(pctx, 5*time.Second)
			s, err := g.Client().Status(sctx, endpoint)
			c()
			if err == nil {
				reached.Store(s.DbSize)
				if s.DbSize >= size {
					done.Store(true)
					return
				}
				if time.Since(lastPrint) > 10*time.Second {
					fmt.Printf("  filling: %s of %s\n", result.Human(s.DbSize), result.Human(size))
					lastPrint = time.Now()
				}
			}
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	r := g.Run(ctx, limit, done.Load)
	cancel()
	<-polled
	if !done.Load() {
		return FillResult{}, fmt.Errorf("filling stopped at %s of %s: %s", result.Human(reached.Load()), result.Human(size), r)
	}
	if r.Errors > 0 {
		return FillResult{}, fmt.Errorf("filling: %s", r)
	}
	return FillResult{Result: r, DBSize: reached.Load()}, nil
}
