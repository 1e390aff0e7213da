package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcd-steward/steward/internal/testutil/linearizable"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Traffic shape: a few clients on a small key set, so that operations on a key overlap.
const (
	numClients   = 4
	numKeys      = 8
	opTimeout    = 3 * time.Second
	opsPerSecond = 40 // per client: bounds the history the checker has to search
	keyPrefix    = "/chaos/"
)

// traffic runs numClients clients issuing gets, puts, deletes and compare-and-swaps until
// stopped, and records every operation in a history.
type traffic struct {
	h      *linearizable.History
	counts sync.Map // "op result" → *atomic.Int64
	acked  atomic.Int64
	// lastErr is the newest error an operation failed with: a failure report shows it.
	lastErr atomic.Pointer[string]
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

func startTraffic(cli *clientv3.Client, seed int64) *traffic {
	ctx, cancel := context.WithCancel(context.Background())
	tr := &traffic{h: linearizable.NewHistory(), stop: cancel}
	for i := range numClients {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			tr.client(ctx, cli, i, rand.New(rand.NewSource(seed*100+int64(i))))
		}()
	}
	return tr
}

// lastError is the newest error an operation failed with, "nothing" if none did.
func (tr *traffic) lastError() string {
	if e := tr.lastErr.Load(); e != nil {
		return *e
	}
	return "nothing"
}

// finish stops the clients and waits for their last operations.
func (tr *traffic) finish() {
	tr.stop()
	tr.wg.Wait()
}

func (tr *traffic) count(op, result string) {
	v, _ := tr.counts.LoadOrStore(op+" "+result, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// summary lists the operation counts, e.g. "get ok=812 failed=3, put ok=…".
func (tr *traffic) summary() string {
	byOp := map[string][]string{}
	tr.counts.Range(func(k, v any) bool {
		op, result, _ := strings.Cut(k.(string), " ")
		byOp[op] = append(byOp[op], fmt.Sprintf("%s=%d", result, v.(*atomic.Int64).Load()))
		return true
	})
	var out []string
	for _, op := range []string{"get", "put", "delete", "cas"} {
		sort.Strings(byOp[op])
		out = append(out, op+" "+strings.Join(byOp[op], " "))
	}
	return strings.Join(out, ", ")
}

func (tr *traffic) client(ctx context.Context, cli *clientv3.Client, id int, rng *rand.Rand) {
	lastSeen := map[string]string{} // values this client saw, to compare-and-swap against
	tick := time.NewTicker(time.Second / opsPerSecond)
	defer tick.Stop()
	clientID := id // a new id after an unknown outcome: the call may still be pending
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		key := fmt.Sprintf("%sk%d", keyPrefix, rng.Intn(numKeys))
		in := linearizable.Input{Key: key, Value: fmt.Sprintf("c%d-%d", id, seq)}
		switch r := rng.Intn(100); {
		case r < 40:
			in.Op = "get"
		case r < 65:
			in.Op = "put"
		case r < 75:
			in.Op = "delete"
		default:
			in.Op, in.Expect = "cas", lastSeen[key]
			if in.Expect == "" {
				in.Expect = "never-written"
			}
		}
		octx, cancel := context.WithTimeout(context.Background(), opTimeout)
		out, err := tr.h.Record(octx, cli, clientID, in)
		cancel()
		if err != nil {
			tr.count(in.Op, "failed")
			msg := fmt.Sprintf("%s %s: %v", in.Op, in.Key, err)
			tr.lastErr.Store(&msg)
			if in.Op == "get" {
				continue // a failed read changed nothing: it is left out
			}
		} else {
			tr.count(in.Op, "ok")
			tr.acked.Add(1)
		}
		if out.Unknown {
			clientID += numClients
		}
		switch {
		case in.Op == "get":
			lastSeen[key] = out.Value
		case in.Op == "put" && !out.Unknown, in.Op == "cas" && out.Succeeded:
			lastSeen[key] = in.Value
		}
	}
}
