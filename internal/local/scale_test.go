package local

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestScaleUnderLoad scales 1→3→5→3→1→3 while a client writes; before each scale-down the
// leadership is moved to a member that is about to be removed, so the hand-over is exercised.
// Every acknowledged write must survive on every member.
func TestScaleUnderLoad(t *testing.T) {
	t.Parallel() // its own directory and ports
	dir := t.TempDir()
	r := startClusterWith(t, UpOptions{Dir: dir, Members: 1, BasePort: 22100, Backup: "none"})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	var mu sync.Mutex
	acked := map[string]string{}
	writeCtx, stopWriting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; writeCtx.Err() == nil; i++ {
			spec, _, err := ReadSpec(Dir(dir))
			if err != nil {
				continue
			}
			c, err := clientv3.New(clientv3.Config{Endpoints: spec.ClientURLs(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				continue
			}
			for j := 0; j < 20 && writeCtx.Err() == nil; j++ {
				k, v := fmt.Sprintf("/load/%d-%d", i, j), strconv.Itoa(i*100+j)
				pctx, pcancel := context.WithTimeout(writeCtx, 3*time.Second)
				if _, err := c.Put(pctx, k, v); err == nil {
					mu.Lock()
					acked[k] = v
					mu.Unlock()
				}
				pcancel()
			}
			c.Close()
		}
	}()

	size := 1
	for _, n := range []int{3, 5, 3, 1, 3} {
		if n < size {
			moveLeaderTo(t, ctx, dir, fmt.Sprintf("m%d", size-1))
		}
		start := time.Now()
		if err := Scale(ctx, Dir(dir), n, 4*time.Minute, nil); err != nil {
			t.Fatalf("scale %d→%d: %v", size, n, err)
		}
		t.Logf("scaled %d→%d in %s", size, n, time.Since(start).Round(time.Millisecond))
		size = n
		healthyVoters(t, ctx, dir, time.Minute)
	}
	stopWriting()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 50 {
		t.Fatalf("only %d writes acknowledged during scaling", len(acked))
	}
	spec, _, _ := ReadSpec(Dir(dir))
	everyMemberHas(t, ctx, spec, acked)
	_ = r
}

// moveLeaderTo makes the named member the leader.
func moveLeaderTo(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	rep, err := Status(ctx, Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	var leaderURL string
	var target uint64
	for _, m := range rep.Members {
		if m.Role == "leader" {
			leaderURL = m.ClientURL
		}
		if m.Name == name {
			target, _ = strconv.ParseUint(m.ID, 16, 64)
		}
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{leaderURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.MoveLeader(ctx, target); err != nil {
		t.Fatalf("move leadership to %s: %v", name, err)
	}
}
