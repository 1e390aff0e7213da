package load

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Disruption is what writers saw while an operation ran on the cluster.
type Disruption struct {
	Took     time.Duration // the operation's duration
	P99, Max time.Duration // write latency from each write's scheduled start
	Failed   int
	Writes   int
	// Gap is the longest one writer waited between two successful writes; Stall the longest
	// no writer succeeded. Both count only time while the operation ran.
	Gap, Stall time.Duration
}

func (d Disruption) String() string {
	return fmt.Sprintf("p99 %s, max %s, no write for %s, one writer waited %s, %d failed of %d writes", d.P99, d.Max, d.Stall, d.Gap, d.Failed, d.Writes)
}

// During runs op while writers put at rate per second (open loop: 16 writers, each bound to
// one of eps in turn, as a client such as a controller is), and reports what they saw. The
// writers start a second before op and stop a second after it.
func During(ctx context.Context, eps []string, rate float64, op func(context.Context) error) (Disruption, error) {
	var clients []*clientv3.Client
	for _, ep := range eps {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return Disruption{}, err
		}
		defer c.Close()
		clients = append(clients, c)
	}
	const writers = 16
	wctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	var lat []time.Duration
	done := make([][]time.Time, writers) // per writer: when each of its writes succeeded
	failed := 0
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	value := strings.Repeat("w", 256)
	begin := time.Now()
	for w := range writers {
		wg.Go(func() {
			cli := clients[w%len(clients)]
			for n := w; ; n += writers {
				at := begin.Add(time.Duration(n) * interval) // this write's scheduled start
				select {
				case <-wctx.Done():
					return
				case <-time.After(time.Until(at)):
				}
				pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := cli.Put(pctx, fmt.Sprintf("w/%d", n%1000), value)
				cancel()
				mu.Lock()
				if err != nil {
					failed++
				} else {
					lat = append(lat, time.Since(at))
					done[w] = append(done[w], time.Now())
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(time.Second) // writers settle before the operation starts
	t0 := time.Now()
	err := op(ctx)
	took := time.Since(t0)
	time.Sleep(time.Second)
	stop()
	wg.Wait()
	if err != nil {
		return Disruption{}, err
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	d := Disruption{Took: took, Failed: failed, Writes: len(lat) + failed}
	if len(lat) > 0 {
		d.P99, d.Max = lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	}
	var all []time.Time
	for _, ts := range done {
		d.Gap = max(d.Gap, longestGap(ts, t0, t0.Add(took)))
		all = append(all, ts...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Before(all[j]) })
	d.Stall = longestGap(all, t0, t0.Add(took))
	d.P99, d.Max = d.P99.Round(time.Millisecond), d.Max.Round(time.Millisecond)
	d.Gap, d.Stall = d.Gap.Round(time.Millisecond), d.Stall.Round(time.Millisecond)
	return d, nil
}

// longestGap is the longest time between two successive times of ts (sorted) that overlaps
// from..to.
func longestGap(ts []time.Time, from, to time.Time) time.Duration {
	var gap time.Duration
	for i := 1; i < len(ts); i++ {
		if ts[i].After(from) && ts[i-1].Before(to) {
			gap = max(gap, ts[i].Sub(ts[i-1]))
		}
	}
	return gap
}
