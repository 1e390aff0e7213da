package maintenance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// fragment writes about size bytes in keys under prefix, deletes them and compacts the
// history away: the databases keep their size, and most of it becomes free pages.
func fragment(t *testing.T, cli *clientv3.Client, prefix string, size int) {
	t.Helper()
	ctx := context.Background()
	value := strings.Repeat("x", 8<<10)
	for i := 0; i < size/len(value); i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("%s/%05d", prefix, i), value); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Delete(ctx, prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
}

func TestDefragmentLeaderLast(t *testing.T) {
	ms := testutil.Cluster(t, 3)
	cli := ms[0].Client
	fragment(t, cli, "bulk", 12<<20)
	ctx := context.Background()
	before, err := Observe(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	leader := leaderOf(before)

	// What each member was when its defragmentation started: who led then.
	var mu sync.Mutex
	var steps []string
	res, err := Defragment(ctx, cli, Options{Policy: Policy{Threshold: 0.3, MinReclaim: 4 << 20}, Progress: func(s Step) {
		mu.Lock()
		defer mu.Unlock()
		switch s.Kind {
		case StepDefrag:
			st, err := cli.Status(ctx, s.Member.Endpoint)
			if err != nil {
				t.Errorf("status of %s: %v", s.Member.Name, err)
				return
			}
			steps = append(steps, fmt.Sprintf("defrag %x leading=%v", s.Member.ID, st.Leader == s.Member.ID))
		case StepMoveLeader:
			steps = append(steps, fmt.Sprintf("move %x", s.Member.ID))
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Members) != 3 {
		t.Fatalf("defragmented %d members, want 3: %+v (skipped %v)", len(res.Members), res.Members, res.Skipped)
	}
	for _, m := range res.Members {
		if m.After >= m.Before/2 {
			t.Errorf("%s: %d bytes before, %d after: not reclaimed", m.Name, m.Before, m.After)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := fmt.Sprintf("move %x", leader)
	if len(steps) != 4 || steps[2] != want || steps[3] != fmt.Sprintf("defrag %x leading=false", leader) {
		t.Fatalf("steps %v: want two followers, then leadership moved from %x, then %x defragmented as a follower", steps, leader, leader)
	}
	for _, s := range steps[:2] {
		if strings.HasSuffix(s, "leading=true") || strings.Contains(s, fmt.Sprintf("%x ", leader)) {
			t.Fatalf("steps %v: a follower step touched the leader", steps)
		}
	}
	if res.Reclaimed() < 3*6<<20 {
		t.Fatalf("reclaimed %d bytes, want most of the 3x12 MiB written", res.Reclaimed())
	}
}

func TestDefragmentWaitsForHealth(t *testing.T) {
	ms := testutil.Cluster(t, 3)
	cli := ms[0].Client
	fragment(t, cli, "bulk", 2<<20)
	ms[2].Stop()
	ctx := context.Background()
	before, err := Observe(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Defragment(ctx, cli, Options{Policy: Policy{All: true}, WaitTimeout: 3 * time.Second})
	if !errors.Is(err, ErrPostponed) || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("Defragment with a member down: %v, want postponed naming the member that does not answer", err)
	}
	if len(res.Members) != 0 {
		t.Fatalf("defragmented %+v on an unhealthy cluster", res.Members)
	}
	after, err := Observe(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	for i := range before {
		if before[i].Answered && after[i].DBSize != before[i].DBSize {
			t.Fatalf("%s changed size %d -> %d on an unhealthy cluster", before[i].Name, before[i].DBSize, after[i].DBSize)
		}
	}
}

func TestRecoverNoSpace(t *testing.T) {
	const quota = 8 << 20
	ms := testutil.Cluster(t, 3, func(c *embed.Config) { c.QuotaBackendBytes = quota })
	cli := ms[0].Client
	ctx := context.Background()
	filled := testutil.FillUntilNoSpace(t, cli)
	res, err := RecoverNoSpace(ctx, cli, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Disarmed || len(res.Defrag.Members) != 3 || res.CompactedAt == 0 {
		t.Fatalf("recovery %+v: want compacted, 3 members defragmented, disarmed", res)
	}
	alarms, err := Alarms(ctx, cli)
	if err != nil || len(alarms) != 0 {
		t.Fatalf("alarms after recovery: %v %v", alarms, err)
	}
	filled.Check(t, cli)
	if _, err := cli.Put(ctx, "after", "ok"); err != nil {
		t.Fatalf("a write after recovery: %v", err)
	}
}
